"""Log triage as a task: claim the job's queued triage, run it, then discover the job's data sources."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

from investigations.models import DataSource, TaskStatus
from investigations.services import discovery
from investigations.services import investigations as inv
from playbooks.triage import TriageError

from .discovery import datasource_discover_task

logger = logging.getLogger(__name__)


@shared_task(name="investigations.tasks.job_triage_task")
def job_triage_task(job_id: int) -> None:
    """Triage a job whose Job.triage is {"state": "queued"}, then enqueue discovery of its data sources.

    Discovery follows whatever the triage's outcome (its identity check uses the log's figures when
    there are some).

    Safe to run twice: only the worker that moves the state from queued to running works on it.
    """
    if not inv.job_triage_claim(job_id):
        logger.info("triage of job %s is not queued: another worker got there first", job_id)
        return
    try:
        _triage(job_id)
    finally:
        _discover(job_id)


def _triage(job_id: int) -> None:
    try:
        inv.job_triage(job_id)
    except TriageError as exc:
        inv.job_triage_fail(job_id, f"The log could not be read: {exc}")
    except SoftTimeLimitExceeded:
        inv.job_triage_fail(job_id, f"Timed out after {settings.CELERY_TASK_SOFT_TIME_LIMIT} s")
    except Exception:
        # A bug, not a data problem: say so on the row, and let Celery log the traceback.
        inv.job_triage_fail(job_id, "Internal error; the worker log has the details")
        raise


def _discover(job_id: int) -> None:
    """Enqueue the discovery of the job's data sources marked queued (or not requested yet), after commit."""
    for ds in DataSource.objects.filter(job_id=job_id):
        if ds.discovery_status == TaskStatus.QUEUED or discovery.discovery_request(ds):
            datasource_discover_task.delay_on_commit(ds.pk)
