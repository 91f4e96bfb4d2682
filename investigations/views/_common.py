"""What every view module shares: the typed request, and sending a run's first task."""

from __future__ import annotations

import logging

from celery import Task
from django.http import HttpRequest
from django.utils import timezone
from django_htmx.middleware import HtmxDetails
from kombu.exceptions import OperationalError as BrokerError

from ..models import DiagnosisRun, TaskStatus

logger = logging.getLogger(__name__)


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def run_send(task: Task, run_id: int) -> None:
    """Send `task(run_id)` for a queued DiagnosisRun; if the broker cannot be reached, mark the run failed."""
    try:
        task.delay(run_id)
    except BrokerError as exc:
        # The run is committed but its task never left: say so instead of leaving it queued forever.
        logger.error("could not enqueue %s for run %s: %s", task.name, run_id, exc)
        DiagnosisRun.objects.filter(pk=run_id, status=TaskStatus.QUEUED).update(
            status=TaskStatus.FAILED, error=f"Could not reach the task broker: {exc}", finished=timezone.now()
        )
