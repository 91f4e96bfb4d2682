"""The multi-job comparison of an investigation: one task connects to every job's source and compares them.

The task claims the run (queued -> running) and is safe to run twice; transient Prometheus errors are
retried with backoff, and every failure is recorded on the run (tasks/shell.py). A comparison cancelled
while it works stops at the service's next checkpoint; the task then leaves the run as the cancel wrote it.
"""

from __future__ import annotations

from functools import partial

from celery import shared_task
from django.conf import settings

from investigations.services import comparison as cmp
from investigations.services import runs
from investigations.services.diagnosis import DiagnosisRunError

from .shell import Row, run_claimed


@shared_task(
    bind=True,
    name="investigations.tasks.comparison_execute_task",
    max_retries=settings.STEPWISE_TASK_MAX_RETRIES,
)
def comparison_execute_task(self, run_id: int) -> None:
    """Claim a queued comparison, compare its jobs, and store the result and findings."""
    row = Row(
        name=f"comparison {run_id}",
        claim=partial(runs.run_claim, run_id),
        requeue=partial(runs.run_requeue, run_id),
        finish=partial(runs.run_finish, run_id),
        permanent=(cmp.ComparisonError, DiagnosisRunError),
        cancelled=(cmp.ComparisonCancelled,),
        finish_done=False,  # the service marks it done with its result, in one transaction
        doing="while comparing",
    )
    run_claimed(self, row, partial(cmp.comparison_execute, run_id))
