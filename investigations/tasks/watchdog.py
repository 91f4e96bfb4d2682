"""Heartbeats of the tasks that work on runs, and the watchdog that fails the runs of dead workers.

Celery's task_prerun/task_postrun signals (sent in the process that runs the task) start and stop the
heartbeat of every tracked task (investigations.services.deadruns); eager calls (tests, shells) are not
tracked. When a worker starts, it schedules the watchdog, which reaps dead runs and comes back while
tasks are in flight: a worker killed mid-run is noticed by the next worker within
STEPWISE_RUN_DEAD_AFTER_SECONDS plus one heartbeat.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import task_postrun, task_prerun, worker_ready

from investigations.services import deadruns

logger = logging.getLogger(__name__)


@task_prerun.connect
def _heartbeat_start(
    sender: Any = None, task_id: str = "", task: Any = None, args: Any = (), kwargs: Any = None, **_: Any
) -> None:
    if task is None or getattr(task.request, "is_eager", False):
        return
    try:
        deadruns.heartbeat_start(task_id, task.name, tuple(args or ()), dict(kwargs or {}))
    except Exception:  # never stop a task because its heartbeat could not start
        logger.exception("heartbeat of %s not started", getattr(task, "name", "?"))


@task_postrun.connect
def _heartbeat_stop(sender: Any = None, task_id: str = "", task: Any = None, **_: Any) -> None:
    if task is None or getattr(task.request, "is_eager", False):
        return
    try:
        deadruns.heartbeat_stop(task_id)
    except Exception:
        logger.exception("heartbeat of %s not stopped", getattr(task, "name", "?"))


@worker_ready.connect
def _watch_on_start(**_: Any) -> None:
    dead_runs_watchdog_task.apply_async(
        countdown=deadruns.dead_after_seconds() + deadruns.heartbeat_seconds()
    )


@shared_task(name="investigations.tasks.dead_runs_watchdog_task", ignore_result=True)
def dead_runs_watchdog_task() -> None:
    """Fail the runs whose worker died; look again later while tasks are in flight."""
    deadruns.dead_runs_reap()
    if deadruns.tasks_in_flight():
        dead_runs_watchdog_task.apply_async(countdown=deadruns.dead_after_seconds())
