"""The life of a DiagnosisRun, whatever its kind (diagnosis or comparison): claim, requeue, finish, cancel.

A task claims a queued run with a conditional UPDATE (queued -> running), so a second delivery does
nothing; `run_finish` writes the outcome only while the run still runs, so a user's cancel is never
overwritten; `run_watched` runs the work in a helper thread while this one watches the row for a
cancellation. A run waits for its jobs' log triage (`triage_wait_check`): the triage picks the
playbooks and gives the restore points and configs a comparison reads.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from investigations.models import DiagnosisRun, Job, PlaybookExecution, TaskStatus

logger = logging.getLogger(__name__)

ACTIVE = (TaskStatus.QUEUED, TaskStatus.RUNNING)
FINISHED = (TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.CANCELLED)

#: How often a watched run's row is read for a cancellation (and progress stored), in seconds.
POLL_S = 0.25


def run_not_sent(run_id: int, error: str) -> None:
    """Mark a queued run failed because its first task could not be sent (the page shows `error`)."""
    DiagnosisRun.objects.filter(pk=run_id, status=TaskStatus.QUEUED).update(
        status=TaskStatus.FAILED, error=error[:10_000], finished=timezone.now()
    )


def run_cancel(run: DiagnosisRun, user: Any = None, *, reason: str = "") -> bool:
    """Return True if the queued or running run was cancelled (by `user`, whom the run's error names, or
    for `reason`, the error's sentence when given).

    Queued playbooks are cancelled at once; a running one stops between queries and keeps what it
    has. False: the run had already finished.
    """
    who = user.get_username() if getattr(user, "is_authenticated", False) else "a user"
    with transaction.atomic():
        updated = DiagnosisRun.objects.filter(pk=run.pk, status__in=ACTIVE).update(
            status=TaskStatus.CANCELLED, finished=timezone.now(), error=reason or f"Cancelled by {who}."
        )
        if updated:
            PlaybookExecution.objects.filter(run_id=run.pk, status=TaskStatus.QUEUED).update(
                status=TaskStatus.CANCELLED, error="Cancelled before it started."
            )
    return updated == 1


def abandoned_before() -> dt.datetime:
    """Return the time before which a running claim is abandoned: its task would have hit the hard limit.

    With acks_late, a worker that died mid-task has its message delivered again; the row it had claimed
    is still running, and no task can still be working on it after CELERY_TASK_TIME_LIMIT.
    """
    return timezone.now() - dt.timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)


def run_claim(run_id: int) -> bool:
    """Return True if this caller moved the run from queued to running (False: taken or cancelled).

    A run left running before it reached a stage (a diagnosis while planning, a comparison) by a worker
    that died (past the hard time limit) is taken again.
    """
    abandoned = Q(status=TaskStatus.RUNNING, started__lt=abandoned_before(), stage=DiagnosisRun.Stage.NONE)
    return (
        DiagnosisRun.objects.filter(Q(status=TaskStatus.QUEUED) | abandoned, pk=run_id).update(
            status=TaskStatus.RUNNING, started=timezone.now(), error=""
        )
        == 1
    )


def run_requeue(run_id: int, reason: str) -> None:
    """Put a running run back in the queue before a retry, noting why."""
    DiagnosisRun.objects.filter(pk=run_id, status=TaskStatus.RUNNING).update(
        status=TaskStatus.QUEUED, error=reason[:10_000]
    )


def run_finish(run_id: int, status: str, error: str | None = None) -> bool:
    """Return True if the still running run was marked `status` (False: cancelled or finished meanwhile)."""
    fields: dict[str, Any] = {"status": status, "finished": timezone.now()}
    if error is not None:
        fields["error"] = error[:10_000]
    return DiagnosisRun.objects.filter(pk=run_id, status=TaskStatus.RUNNING).update(**fields) == 1


def run_is_running(run_id: int) -> bool:
    """Return True while the run is running (not queued, cancelled or finished)."""
    return DiagnosisRun.objects.filter(pk=run_id, status=TaskStatus.RUNNING).exists()


def run_gone_refusal(run_id: int) -> Callable[[], str | None]:
    """Return a `refuse_start` for the run's SSH tunnel: once the run is no longer running (it was cancelled
    when its investigation was resolved and the tunnel closed), no ssh is started for it again."""

    def refusal() -> str | None:
        if run_is_running(run_id):
            return None
        return f"Diagnosis #{run_id} is no longer running: its SSH tunnel is not opened again for it."

    return refusal


def triage_wait_check(jobs: Sequence[Job], why: str) -> None:
    """Raise TriagePending if a job's log triage is queued or running (and not stalled).

    A run started right after the investigation opened would otherwise go without what only the log
    tells (the playbooks it calls for, heartbeat-accused hosts, a restore, the config).
    """
    for job in jobs:
        if job.triage_in_progress():
            raise TriagePending(f"Waiting for the log triage of job {job.job_id}: {why}.")


class TriagePending(Exception):
    """The job's log triage is still queued or running: it picks the playbooks, so the plan waits for it."""


def run_watched[T](
    run_id: int,
    name: str,
    work: Callable[[], T],
    stop: threading.Event,
    *,
    on_tick: Callable[[], None] = lambda: None,
) -> T:
    """Return work(), run in a helper thread while this one reads the run row every POLL_S.

    `name` ("comparison 12") names the thread and the log line of a cancellation.

    Only this thread uses the database, so the engine's threads never hold a connection open. Once the
    run is no longer running (cancelled), `stop` is set: the engine checks it between queries. `on_tick`
    runs after every poll and once at the end (progress flushing). A soft time limit (raised here by
    Celery) sets `stop`, waits for the engine, and propagates.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["output"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread below
            box["error"] = exc

    worker = threading.Thread(target=target, name=name.replace(" ", "-"), daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(POLL_S)
            on_tick()
            if not stop.is_set() and not run_is_running(run_id):
                logger.info("%s is no longer running: it stops before its next query", name)
                stop.set()
    except BaseException:
        stop.set()
        worker.join()
        on_tick()
        raise
    on_tick()
    if "error" in box:
        raise box["error"]
    return box["output"]
