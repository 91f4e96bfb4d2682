"""The diagnosis workflow: plan, then one task per playbook (in parallel), then the decision.

There is no result backend, so no chord: the playbook task that finishes last (decided in the database
by `diagnosis_finished_executing`) enqueues the decision. Every task takes ids, claims its row with a
conditional UPDATE, and is safe to run twice.
"""

from __future__ import annotations

import logging

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

from playbooks.prometheus import PrometheusError

from .. import services
from ..models import TaskStatus
from ..services import diagnosis as dx
from ._housekeeping import prune_idle
from .queryruns import _retry_delay

logger = logging.getLogger(__name__)

#: A plan that finds the log triage still running looks again every TRIAGE_WAIT_S, at most this many
#: times (a stalled triage is not waited for: see `triage_stalled`).
TRIAGE_WAIT_S = 2
TRIAGE_WAIT_RETRIES = 300

_PERMANENT = (services.DataSourceError, dx.DiagnosisRunError, PrometheusError)


def triage_wait(task, run_id: int, exc: Exception) -> None:
    """Put the run back in the queue, saying why, and retry in TRIAGE_WAIT_S; fail it once that is exhausted."""
    if task.request.retries >= TRIAGE_WAIT_RETRIES:
        dx.diagnosis_finish(
            run_id,
            TaskStatus.FAILED,
            f"The log triage did not finish within {TRIAGE_WAIT_S * TRIAGE_WAIT_RETRIES} s; run it again once it has.",
        )
        return
    dx.diagnosis_requeue(run_id, str(exc))
    raise task.retry(exc=exc, countdown=TRIAGE_WAIT_S, max_retries=TRIAGE_WAIT_RETRIES) from exc


def transient_retry(task, run_id: int, exc: Exception) -> None:
    """Requeue the run and retry with capped backoff after a transient error; fail it once retries run out."""
    if task.request.retries >= task.max_retries:
        dx.diagnosis_finish(run_id, TaskStatus.FAILED, f"Gave up after {task.request.retries + 1} attempts: {exc}")
        return
    delay = _retry_delay(task.request.retries)
    dx.diagnosis_requeue(run_id, f"Attempt {task.request.retries + 1} failed: {exc} (retrying in {delay} s)")
    raise task.retry(exc=exc, countdown=delay) from exc


def timed_out() -> str:
    return f"Timed out after {settings.CELERY_TASK_SOFT_TIME_LIMIT} s"


@shared_task(
    bind=True, name="investigations.tasks.diagnosis_plan_task", max_retries=settings.STEPWISE_TASK_MAX_RETRIES
)
def diagnosis_plan_task(self, run_id: int) -> None:
    """Claim a queued diagnosis, plan its playbooks, and fan out one playbook task each."""
    if not dx.diagnosis_claim(run_id):
        logger.info("diagnosis %s is not queued: another worker got there first, or it was cancelled", run_id)
        return
    prune_idle()
    try:
        # An eager task (no worker) cannot wait: it would retry in place.
        run = dx.diagnosis_plan(run_id, wait_for_triage=not self.request.is_eager)
    except dx.TriagePending as exc:
        triage_wait(self, run_id, exc)
        return
    except services.TRANSIENT_ERRORS as exc:
        transient_retry(self, run_id, exc)
        return
    except _PERMANENT as exc:
        dx.diagnosis_finish(run_id, TaskStatus.FAILED, str(exc))
        return
    except SoftTimeLimitExceeded:
        dx.diagnosis_finish(run_id, TaskStatus.FAILED, timed_out())
        return
    except Exception:
        dx.diagnosis_finish(
            run_id, TaskStatus.FAILED, "Internal error while planning; the worker log has the details"
        )
        raise
    for playbook in run.playbooks:
        playbook_execute_task.delay(run_id, playbook)
    if not run.playbooks and dx.diagnosis_finished_executing(run_id):
        diagnosis_decide_task.delay(run_id)


@shared_task(
    bind=True,
    name="investigations.tasks.playbook_execute_task",
    max_retries=settings.STEPWISE_TASK_MAX_RETRIES,
)
def playbook_execute_task(self, run_id: int, playbook: str) -> None:
    """Run one playbook of a diagnosis; the last playbook to finish enqueues the decision."""
    if not dx.diagnosis_is_running(run_id):
        # Cancelled (or failed) while this task waited in the queue: nothing to do.
        dx.playbook_finish(run_id, playbook, TaskStatus.CANCELLED, "The diagnosis was no longer running.")
        return
    if not dx.playbook_claim(run_id, playbook):
        logger.info("playbook %s of diagnosis %s is not queued: already taken or finished", playbook, run_id)
        return
    try:
        dx.playbook_execute(run_id, playbook)
    except services.TRANSIENT_ERRORS as exc:
        if self.request.retries >= self.max_retries:
            dx.playbook_finish(
                run_id,
                playbook,
                TaskStatus.FAILED,
                f"Gave up after {self.request.retries + 1} attempts: {exc}",
            )
        else:
            delay = _retry_delay(self.request.retries)
            dx.playbook_requeue(
                run_id, playbook, f"Attempt {self.request.retries + 1} failed: {exc} (retrying in {delay} s)"
            )
            raise self.retry(exc=exc, countdown=delay) from exc
    except _PERMANENT as exc:
        dx.playbook_finish(run_id, playbook, TaskStatus.FAILED, str(exc))
    except SoftTimeLimitExceeded:
        dx.playbook_finish(run_id, playbook, TaskStatus.FAILED, timed_out())
    except Exception:
        dx.playbook_finish(
            run_id, playbook, TaskStatus.FAILED, "Internal error; the worker log has the details"
        )
        _decide_if_last(run_id)
        raise
    _decide_if_last(run_id)


def _decide_if_last(run_id: int) -> None:
    if dx.diagnosis_finished_executing(run_id):
        diagnosis_decide_task.delay(run_id)


@shared_task(name="investigations.tasks.diagnosis_decide_task")
def diagnosis_decide_task(run_id: int) -> None:
    """Decide a diagnosis whose playbooks have all finished; store findings and mark the run done."""
    if not dx.diagnosis_is_running(run_id):
        logger.info("diagnosis %s is not running: already decided, or cancelled", run_id)
        return
    try:
        dx.diagnosis_decide(run_id)
    except dx.DiagnosisRunError as exc:
        dx.diagnosis_finish(run_id, TaskStatus.FAILED, str(exc))
    except SoftTimeLimitExceeded:
        dx.diagnosis_finish(run_id, TaskStatus.FAILED, timed_out())
    except Exception:
        dx.diagnosis_finish(
            run_id, TaskStatus.FAILED, "Internal error while deciding; the worker log has the details"
        )
        raise
