"""Query runs as a task: claim the queued run, execute its queries, mark it done or failed."""

from __future__ import annotations

from functools import partial

from celery import shared_task
from django.conf import settings

from investigations import services
from investigations.models import QueryRun

from .shell import Row, run_claimed


@shared_task(
    bind=True,
    name="investigations.tasks.queryrun_execute_task",
    max_retries=settings.STEPWISE_TASK_MAX_RETRIES,
)
def queryrun_execute_task(self, run_id: int) -> None:
    """Execute a queued QueryRun and mark it done or failed; transient Prometheus errors are retried."""
    row = Row(
        name=f"query run {run_id}",
        claim=partial(services.queryrun_claim, run_id),
        requeue=partial(services.queryrun_requeue, run_id),
        finish=partial(_finish, run_id),
    )
    run_claimed(self, row, partial(services.queryrun_execute, run_id))


def _finish(run_id: int, status: str, error: str | None) -> None:
    services.queryrun_finish(run_id, QueryRun.Status(status), error)
