"""Celery tasks. They take ids, claim their row before working, and are safe to run twice."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.utils import timezone

from playbooks.prometheus import PrometheusError

from .. import services
from ..models import QueryRun
from ._housekeeping import prune_idle

logger = logging.getLogger(__name__)

RETRY_BACKOFF_CAP_S = 60


def _retry_delay(retries: int) -> int:
    """Return the wait before retry number `retries` + 1: 2, 4, 8, … seconds, capped."""
    return min(2 ** (retries + 1), RETRY_BACKOFF_CAP_S)


@shared_task(
    bind=True, name="investigations.tasks.queryrun_execute_task", max_retries=settings.STEPWISE_TASK_MAX_RETRIES
)
def queryrun_execute_task(self, run_id: int) -> None:
    """Execute a queued QueryRun and mark it done or failed; transient Prometheus errors are retried."""
    claimed = QueryRun.objects.filter(pk=run_id, status=QueryRun.Status.QUEUED).update(
        status=QueryRun.Status.RUNNING, started=timezone.now(), error=""
    )
    if claimed != 1:
        logger.info("query run %s is not queued: another worker got there first, or it was cancelled", run_id)
        return
    prune_idle()
    try:
        services.queryrun_execute(run_id)
    except services.TRANSIENT_ERRORS as exc:
        if self.request.retries >= self.max_retries:
            services.queryrun_finish(
                run_id, QueryRun.Status.FAILED, f"Gave up after {self.request.retries + 1} attempts: {exc}"
            )
            return
        delay = _retry_delay(self.request.retries)
        services.queryrun_requeue(run_id, f"{exc} (retrying in {delay} s)")
        raise self.retry(exc=exc, countdown=delay) from exc
    except (services.DataSourceError, PrometheusError) as exc:
        services.queryrun_finish(run_id, QueryRun.Status.FAILED, str(exc))
    except SoftTimeLimitExceeded:
        services.queryrun_finish(
            run_id, QueryRun.Status.FAILED, f"Timed out after {settings.CELERY_TASK_SOFT_TIME_LIMIT} s"
        )
    except Exception:
        # A bug, not a data problem: say so on the row, and let Celery log the traceback.
        services.queryrun_finish(
            run_id, QueryRun.Status.FAILED, "Internal error; the worker log has the details"
        )
        raise
    else:
        services.queryrun_finish(run_id, QueryRun.Status.DONE)
