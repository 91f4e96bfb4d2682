"""The diagnosis workflow: plan, then one task per playbook (in parallel), then the decision.

There is no result backend, so no chord: the playbook task that finishes last (decided in the database
by `diagnosis_finished_executing`) enqueues the decision. Every task takes ids, claims its row with a
conditional UPDATE, and is safe to run twice; the outcomes are recorded by the one task shell
(tasks/shell.py).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from celery import shared_task
from django.conf import settings

from investigations.models import TaskStatus
from investigations.services import decision, runs
from investigations.services import diagnosis as dx
from investigations.services import playbook_runs as pbr

from .shell import Row, run_claimed


def _run_row(run_id: int, doing: str, **kw: Any) -> Row:
    return Row(
        name=f"diagnosis {run_id}",
        claim=kw.pop("claim", partial(runs.run_claim, run_id)),
        requeue=partial(runs.run_requeue, run_id),
        finish=partial(runs.run_finish, run_id),
        permanent=(dx.DiagnosisRunError,),
        finish_done=False,
        doing=doing,
        **kw,
    )


@shared_task(
    bind=True, name="investigations.tasks.diagnosis_plan_task", max_retries=settings.STEPWISE_TASK_MAX_RETRIES
)
def diagnosis_plan_task(self, run_id: int) -> None:
    """Claim a queued diagnosis, plan its playbooks, and fan out one playbook task each."""
    run = run_claimed(self, _run_row(run_id, "while planning"), partial(dx.diagnosis_plan, run_id))
    if run is None:
        return
    for playbook in run.playbooks:
        playbook_execute_task.delay(run_id, playbook)
    if not run.playbooks:
        _decide_if_last(run_id)


def _playbook_claim(run_id: int, playbook: str) -> bool:
    if not runs.run_is_running(run_id):
        # Cancelled (or failed) while this task waited in the queue: nothing to do.
        pbr.playbook_finish(run_id, playbook, TaskStatus.CANCELLED, "The diagnosis was no longer running.")
        return False
    return pbr.playbook_claim(run_id, playbook)


@shared_task(
    bind=True,
    name="investigations.tasks.playbook_execute_task",
    max_retries=settings.STEPWISE_TASK_MAX_RETRIES,
)
def playbook_execute_task(self, run_id: int, playbook: str) -> None:
    """Run one playbook of a diagnosis; the last playbook to finish enqueues the decision."""
    row = Row(
        name=f"playbook {playbook} of diagnosis {run_id}",
        claim=partial(_playbook_claim, run_id, playbook),
        requeue=partial(pbr.playbook_requeue, run_id, playbook),
        finish=lambda status, error: pbr.playbook_finish(run_id, playbook, status, error or ""),
        permanent=(dx.DiagnosisRunError,),
        finish_done=False,
    )
    try:
        run_claimed(self, row, partial(pbr.playbook_execute, run_id, playbook))
    finally:
        # A playbook that is retried is queued again, so it is not the last one to finish.
        _decide_if_last(run_id)


def _decide_if_last(run_id: int) -> None:
    if decision.diagnosis_finished_executing(run_id):
        diagnosis_decide_task.delay(run_id)


@shared_task(bind=True, name="investigations.tasks.diagnosis_decide_task")
def diagnosis_decide_task(self, run_id: int) -> None:
    """Decide a diagnosis whose playbooks have all finished; store findings and mark the run done."""
    # The run is already claimed (running, deciding): this task goes on only while it still runs.
    row = _run_row(run_id, "while deciding", claim=partial(runs.run_is_running, run_id), prune=False)
    run_claimed(self, row, partial(decision.diagnosis_decide, run_id))
