"""Sending a task once the rows it works on are committed, and saying so when it cannot be sent.

Every view that queues work writes a row (a run, a triage, a discovery) and sends its task after
commit. If the broker cannot be reached the row is committed but its task never left: the caller's
`not_sent` marks it failed with the reason, instead of leaving it queued forever.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from celery import Task
from django.db import transaction
from kombu.exceptions import OperationalError as BrokerError

logger = logging.getLogger(__name__)


def enqueue_on_commit(task: Task, *args: Any, not_sent: Callable[[str], Any]) -> None:
    """Send `task(*args)` once the current transaction commits (at once outside one).

    When the broker cannot be reached, log it and call `not_sent(message)` with a message for the page.
    """
    transaction.on_commit(partial(_send, task, args, not_sent))


def _send(task: Task, args: tuple[Any, ...], not_sent: Callable[[str], Any]) -> None:
    try:
        task.delay(*args)
    except BrokerError as exc:
        logger.error("could not enqueue %s%s: %s", task.name, args, exc)
        not_sent(f"Could not reach the task broker: {exc}")
