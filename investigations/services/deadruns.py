"""Dead runs: a worker killed mid-task must not leave its run "running" forever.

Every task that works on a run (planning, a playbook, the decision, a comparison, a query run) writes a
`RunHeartbeat` row when it starts and every STEPWISE_RUN_HEARTBEAT_SECONDS while it runs (a thread in the
worker process, `heartbeat_start`), and deletes it when it ends, whatever the outcome (`heartbeat_stop`,
from Celery's task_postrun). A row left behind and stale for STEPWISE_RUN_DEAD_AFTER_SECONDS means the
process died mid-task. `dead_runs_reap` then runs the run again once, from its first task (the plan of a
diagnosis, the comparison, the query run), as attempt 2 (`attempt` on the row, the reason in its error
until the new attempt starts); a run whose second attempt dies too is failed with the reason, so the page
says what happened and a new diagnosis of the job is accepted. Re-running is idempotent: findings are
replaced (one per investigation, job, playbook and rule), query results too.

Only a stale row marks a run dead: a run whose next tasks merely wait in the queue, or whose retry
waits out its countdown, has no row at all and is left alone; a run with a dead task and live ones
(other playbooks on other workers) waits until those end.

Who reaps: the watchdog task (started when a worker starts, and again while tasks are in flight), the
diagnosis status poll of the page, and diagnosis_start before it refuses a second run of a job.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from investigations.models import DiagnosisRun, PlaybookExecution, QueryRun, RunHeartbeat, TaskStatus

logger = logging.getLogger(__name__)

#: Task name -> the kind of run its first argument (run_id) names.
TRACKED_TASKS = {
    "investigations.tasks.diagnosis_plan_task": RunHeartbeat.Kind.DIAGNOSIS,
    "investigations.tasks.playbook_execute_task": RunHeartbeat.Kind.DIAGNOSIS,
    "investigations.tasks.diagnosis_decide_task": RunHeartbeat.Kind.DIAGNOSIS,
    "investigations.tasks.comparison_execute_task": RunHeartbeat.Kind.DIAGNOSIS,
    "investigations.tasks.queryrun_execute_task": RunHeartbeat.Kind.QUERY,
}


#: A run whose worker died is run again once; dying on its second attempt fails it.
MAX_ATTEMPTS = 2


def heartbeat_seconds() -> float:
    return float(settings.STEPWISE_RUN_HEARTBEAT_SECONDS)


def dead_after_seconds() -> float:
    return float(settings.STEPWISE_RUN_DEAD_AFTER_SECONDS)


def _beat(task_id: str, kind: str, run_id: int, task_name: str) -> None:
    RunHeartbeat.objects.update_or_create(
        task_id=task_id,
        defaults={"kind": kind, "run_id": run_id, "task_name": task_name, "worker": socket.gethostname()[:255],
                  "pid": os.getpid(), "beat": timezone.now()},
    )  # fmt: skip


@dataclass
class _Beating:
    stop: threading.Event
    thread: threading.Thread


_BEATING: dict[str, _Beating] = {}
_LOCK = threading.Lock()


def _beat_loop(task_id: str, kind: str, run_id: int, task_name: str, stop: threading.Event) -> None:
    try:
        while not stop.wait(heartbeat_seconds()):
            try:
                _beat(task_id, kind, run_id, task_name)
            except Exception:  # a locked database now and then must not end the beating
                logger.warning("heartbeat of %s (run %s) not written", task_name, run_id, exc_info=True)
    finally:
        connection.close()  # this thread's own database connection


def heartbeat_start(task_id: str, task_name: str, args: tuple | list, kwargs: dict) -> bool:
    """Write the first beat of a tracked task and keep beating in a thread; False for untracked tasks."""
    kind = TRACKED_TASKS.get(task_name)
    run_id = kwargs.get("run_id", args[0] if args else None)
    if kind is None or not isinstance(run_id, int) or not task_id:
        return False
    _beat(task_id, kind, run_id, task_name)
    stop = threading.Event()
    thread = threading.Thread(
        target=_beat_loop,
        args=(task_id, kind, run_id, task_name, stop),
        name=f"heartbeat-{task_id}",
        daemon=True,
    )
    with _LOCK:
        _BEATING[task_id] = _Beating(stop, thread)
    thread.start()
    return True


def heartbeat_stop(task_id: str) -> None:
    """Stop beating for a task that ended (returned, raised or retried) and delete its row."""
    with _LOCK:
        beating = _BEATING.pop(task_id, None)
    if beating is not None:
        beating.stop.set()
        beating.thread.join(timeout=heartbeat_seconds() + 5)
    RunHeartbeat.objects.filter(task_id=task_id).delete()


def _dead_reason(beat: RunHeartbeat, now: dt.datetime) -> str:
    return (
        f"The worker running it stopped: {beat.task_name.rsplit('.', 1)[-1]} on {beat.worker or 'a worker'} "
        f"(pid {beat.pid}) gave no sign of life for {int((now - beat.beat).total_seconds())} s "
        "(killed, out of memory, or its machine lost)."
    )


def _fail_diagnosis(run_id: int, reason: str) -> bool:
    with transaction.atomic():
        failed = DiagnosisRun.objects.filter(pk=run_id, status=TaskStatus.RUNNING).update(
            status=TaskStatus.FAILED, finished=timezone.now(), error=reason[:10_000]
        )
        PlaybookExecution.objects.filter(
            run_id=run_id, status__in=(TaskStatus.QUEUED, TaskStatus.RUNNING)
        ).update(status=TaskStatus.FAILED, error=reason[:10_000])
    return failed == 1


def _fail_query(run_id: int, reason: str) -> bool:
    return (
        QueryRun.objects.filter(pk=run_id, status=QueryRun.Status.RUNNING).update(
            status=QueryRun.Status.FAILED, finished=timezone.now(), error=reason[:10_000]
        )
        == 1
    )


def _requeue_diagnosis(run_id: int, note: str) -> bool:
    """Put the running run back in the queue as attempt + 1, from its first task; False if it was not running.

    Its playbook executions go (the plan makes them again); its findings stay until the new decision
    replaces them (one per investigation, job, playbook and rule), so nothing is duplicated.
    """
    with transaction.atomic():
        moved = DiagnosisRun.objects.filter(pk=run_id, status=TaskStatus.RUNNING).update(
            status=TaskStatus.QUEUED, stage=DiagnosisRun.Stage.NONE, progress_done=0,
            attempt=F("attempt") + 1, error=note[:10_000],
        )  # fmt: skip
        if moved:
            PlaybookExecution.objects.filter(run_id=run_id).delete()
    return moved == 1


def _requeue_query(run_id: int, note: str) -> bool:
    moved = QueryRun.objects.filter(pk=run_id, status=QueryRun.Status.RUNNING).update(
        status=QueryRun.Status.QUEUED, progress_done=0, attempt=F("attempt") + 1, error=note[:10_000]
    )
    return moved == 1


def _first_task(kind: str, run_id: int) -> Any:
    """Return the task a run starts with (imported here: the tasks build on the services)."""
    from investigations import tasks

    if kind == RunHeartbeat.Kind.QUERY:
        return tasks.queryrun_execute_task
    is_comparison = DiagnosisRun.objects.filter(pk=run_id, kind=DiagnosisRun.Kind.COMPARISON).exists()
    return tasks.comparison_execute_task if is_comparison else tasks.diagnosis_plan_task


def _attempt_of(kind: str, run_id: int) -> int | None:
    model = QueryRun if kind == RunHeartbeat.Kind.QUERY else DiagnosisRun
    return model.objects.filter(pk=run_id).values_list("attempt", flat=True).first()


def _rerun_or_fail(beat: RunHeartbeat, reason: str) -> str | None:
    """Return "rerun" or "failed" for the run the dead task worked on, None if it no longer runs.

    A first death sends the run's first task again (attempt 2); a second one fails it with the reason.
    """
    attempt = _attempt_of(beat.kind, beat.run_id)
    if attempt is None:
        return None
    if attempt < MAX_ATTEMPTS:
        note = f"{reason} Running it again (attempt {attempt + 1} of {MAX_ATTEMPTS})."
        requeue = _requeue_query if beat.kind == RunHeartbeat.Kind.QUERY else _requeue_diagnosis
        if not requeue(beat.run_id, note):
            return None
        from investigations.tasks.enqueue import enqueue_on_commit

        enqueue_on_commit(_first_task(beat.kind, beat.run_id), beat.run_id, not_sent=partial(_not_sent, beat))
        return "rerun"
    fail = _fail_diagnosis if beat.kind == RunHeartbeat.Kind.DIAGNOSIS else _fail_query
    why = f"{reason} It had already been run again once after a worker died: run it again yourself."
    return "failed" if fail(beat.run_id, why) else None


def _not_sent(beat: RunHeartbeat, message: str) -> None:
    """Fail the requeued run whose task could not be sent, so that it does not wait in the queue forever."""
    model = QueryRun if beat.kind == RunHeartbeat.Kind.QUERY else DiagnosisRun
    model.objects.filter(pk=beat.run_id, status=TaskStatus.QUEUED).update(
        status=TaskStatus.FAILED, finished=timezone.now(), error=message[:10_000]
    )


def dead_runs_reap() -> list[tuple[str, int, str]]:
    """Return (kind, run id, "rerun" | "failed") for each run whose task died; never raises.

    A run still has live tasks (other playbooks beating on other workers) is left until they end, so
    that its re-run starts from a quiet run: its stale row stays and is looked at again next time.
    """
    now = timezone.now()
    cutoff = now - dt.timedelta(seconds=dead_after_seconds())
    handled: list[tuple[str, int, str]] = []
    try:
        for beat in RunHeartbeat.objects.filter(beat__lt=cutoff).order_by("beat"):
            alive = RunHeartbeat.objects.filter(kind=beat.kind, run_id=beat.run_id, beat__gte=cutoff)
            if alive.exists():
                continue
            reason = _dead_reason(beat, now)
            with transaction.atomic():
                # Delete first: of two reapers racing on one row, only the one that deleted it goes on.
                if not RunHeartbeat.objects.filter(pk=beat.pk, beat=beat.beat).delete()[0]:
                    continue
                outcome = _rerun_or_fail(beat, reason)
            if outcome is not None:
                logger.warning("%s run %s %s: %s", beat.kind, beat.run_id, outcome, reason)
                handled.append((beat.kind, beat.run_id, outcome))
    except Exception:
        logger.exception("could not reap dead runs")
    return handled


def tasks_in_flight() -> bool:
    """Return True while any tracked task has a heartbeat row (alive or not yet reaped)."""
    return RunHeartbeat.objects.exists()
