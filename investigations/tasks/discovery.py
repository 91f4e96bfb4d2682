"""Discovery as a task: claim the data source's queued discovery, run it, mark the outcome; a discovered
source's default timeline is then computed ahead (`timeline_warm_task`)."""

from __future__ import annotations

from functools import partial

from celery import shared_task
from django.conf import settings

from investigations.services import discovery

from .shell import Row, run_claimed
from .timeline import timeline_warm_task


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
    row = Row(
        name=f"discovery of data source {datasource_id}",
        claim=partial(discovery.discovery_claim, datasource_id),
        requeue=partial(discovery.discovery_requeue, datasource_id),
        finish=partial(discovery.discovery_finish, datasource_id),
    )
    if run_claimed(self, row, partial(discovery.discovery_execute, datasource_id)) is not None:
        # Discovered: compute its default timeline ahead, so that the first view is a cache hit.
        timeline_warm_task.delay_on_commit(datasource_id)
