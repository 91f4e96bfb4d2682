"""The multi-job comparison of an investigation: one task connects to every job's source and compares them.

The task takes the run's id, claims the run with a conditional UPDATE (queued -> running), and is safe to
run twice; transient Prometheus errors are retried with backoff, and every failure is recorded on the run.
A comparison cancelled while it works stops at the service's next checkpoint; the task then leaves the run
as the cancel wrote it.
"""

from __future__ import annotations

import logging

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

from playbooks.prometheus import PrometheusError

from .. import services
from ..models import TaskStatus
from ..services import comparison as cmp
from ..services import diagnosis as dx
from ._housekeeping import prune_idle
from .diagnosis import timed_out, transient_retry, triage_wait

logger = logging.getLogger(__name__)

_PERMANENT = (services.DataSourceError, cmp.ComparisonError, dx.DiagnosisRunError, PrometheusError)


@shared_task(
    bind=True,
    name="investigations.tasks.comparison_execute_task",
    max_retries=settings.STEPWISE_TASK_MAX_RETRIES,
)
def comparison_execute_task(self, run_id: int) -> None:
    """Claim a queued comparison, compare its jobs, and store the result and findings."""
    if not dx.diagnosis_claim(run_id):
        logger.info(
            "comparison %s is not queued: another worker got there first, or it was cancelled", run_id
        )
        return
    prune_idle()
    try:
        cmp.comparison_execute(run_id, wait_for_triage=not self.request.is_eager)
    except dx.TriagePending as exc:
        triage_wait(self, run_id, exc)
    except cmp.ComparisonCancelled as exc:
        logger.info("comparison %s was cancelled: %s", run_id, exc)
    except services.TRANSIENT_ERRORS as exc:
        transient_retry(self, run_id, exc)
    except _PERMANENT as exc:
        dx.diagnosis_finish(run_id, TaskStatus.FAILED, str(exc))
    except SoftTimeLimitExceeded:
        dx.diagnosis_finish(run_id, TaskStatus.FAILED, timed_out())
    except Exception:
        dx.diagnosis_finish(
            run_id, TaskStatus.FAILED, "Internal error while comparing; the worker log has the details"
        )
        raise
