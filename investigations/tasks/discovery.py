"""Discovery as a task: claim the data source's queued discovery, run it, mark the outcome."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

from playbooks.prometheus import PrometheusError

from .. import services
from ..models import TaskStatus
from ..services import discovery
from ._housekeeping import prune_idle
from .queryruns import _retry_delay

logger = logging.getLogger(__name__)


@shared_task(
    bind=True,
    name="investigations.tasks.datasource_discover_task",
    max_retries=settings.STEPWISE_TASK_MAX_RETRIES,
)
def datasource_discover_task(self, datasource_id: int) -> None:
    """Discover what a data source holds; transient Prometheus errors are retried with backoff.

    Safe to run twice: only the worker that moves the discovery from queued to running works on it, and a
    rerun replaces the stored discovery.
    """
    if not discovery.discovery_claim(datasource_id):
        logger.info(
            "discovery of data source %s is not queued: another worker got there first", datasource_id
        )
        return
    prune_idle()
    try:
        discovery.discovery_execute(datasource_id)
    except services.TRANSIENT_ERRORS as exc:
        if self.request.retries >= self.max_retries:
            discovery.discovery_finish(
                datasource_id, TaskStatus.FAILED, f"Gave up after {self.request.retries + 1} attempts: {exc}"
            )
            return
        delay = _retry_delay(self.request.retries)
        discovery.discovery_requeue(datasource_id, f"{exc} (retrying in {delay} s)")
        raise self.retry(exc=exc, countdown=delay) from exc
    except (services.DataSourceError, PrometheusError) as exc:
        discovery.discovery_finish(datasource_id, TaskStatus.FAILED, str(exc))
    except SoftTimeLimitExceeded:
        discovery.discovery_finish(
            datasource_id, TaskStatus.FAILED, f"Timed out after {settings.CELERY_TASK_SOFT_TIME_LIMIT} s"
        )
    except Exception:
        # A bug, not a data problem: say so on the row, and let Celery log the traceback.
        discovery.discovery_finish(
            datasource_id, TaskStatus.FAILED, "Internal error; the worker log has the details"
        )
        raise
    else:
        discovery.discovery_finish(datasource_id, TaskStatus.DONE)
