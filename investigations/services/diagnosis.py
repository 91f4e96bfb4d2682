"""Glue for automated diagnosis: a DiagnosisRun is planned, its playbooks executed, then decided.

The engine (`playbooks.diagnose`) does the thinking; this module loads rows, calls it and stores what
it returns, so that findings and their evidence still render once the data source is gone:

1. `diagnosis_start` creates a queued run (the view enqueues `diagnosis_plan_task` after commit).
2. `diagnosis_plan` discovers the source, plans the playbooks and creates one PlaybookExecution each.
3. `playbook_execute` runs one playbook's queries and stores their summaries and the engine's output.
4. `diagnosis_finished_executing` tells the caller whether it is the one to enqueue the decision.
5. `diagnosis_decide` turns the outputs into the diagnosis and upserts the findings.

Services never enqueue tasks and never decide whether to retry: transient Prometheus errors propagate
(`TRANSIENT_ERRORS`), the tasks retry them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fcntl
import importlib
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Case, F, Q, QuerySet, When
from django.utils import timezone

from playbooks.gpus import gpu_model_named
from playbooks.profiles import PROFILES
from playbooks.prometheus import PrometheusClient

from ..models import (
    DataSource,
    DiagnosisRun,
    Finding,
    Investigation,
    InvestigationJob,
    Job,
    PlaybookExecution,
    TaskStatus,
)
from . import TRANSIENT_ERRORS, datasource_client
from .deadruns import dead_runs_reap
from .investigations import TRIAGE_PENDING, triage_stalled

logger = logging.getLogger(__name__)

#: The `playbooks` argument that runs every declared playbook, whatever the triage says.
ALL_PLAYBOOKS = ("all",)
ACTIVE = (TaskStatus.QUEUED, TaskStatus.RUNNING)
FINISHED = (TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.CANCELLED)

#: The `playbooks` of a run that is a multi-job comparison (services/comparison.py), not a diagnosis.
COMPARISON_PLAYBOOKS = ["comparison"]

#: How often a running playbook stores its progress and looks for a cancellation (seconds).
POLL_S = 0.25

# `result["stage"]` while the run works: the conditional UPDATE from "executing" to "deciding" lets
# exactly one of the playbook tasks that finish last enqueue the decision.
STAGE_EXECUTING = "executing"
STAGE_DECIDING = "deciding"

_CONTRACT_FINDING_KEYS = ("playbook", "class", "severity", "hosts", "gpus", "onset", "title", "evidence")
_CONTRACT_JOB_KEYS = ("id", "status", "triage_class", "first_step", "last_step", "crash_time")
#: What a re-run's upsert replaces in a finding that fired again.
FINDING_FIELDS = [
    "run",
    "incident_class",
    "severity",
    "title",
    "hosts",
    "gpus",
    "onset",
    "evidence",
    "updated",
]
_SEVERITIES = {choice.value for choice in Finding.Severity}


def _engine() -> ModuleType:
    """Return playbooks.diagnose, imported on first use: every page loads this module (the investigation
    page shows the diagnosis region), while the engine is needed only by workers running a diagnosis."""
    return importlib.import_module("playbooks.diagnose")


class DiagnosisRunError(Exception):
    """A diagnosis cannot start or go on: no data source, one already running, bad input.

    The message is written for the user who asked for it.
    """


class TriagePending(Exception):
    """The job's log triage is still queued or running: it picks the playbooks, so the plan waits for it."""


# --- Start and cancel ----------------------------------------------------------------------------


def diagnosis_active(job: Job) -> DiagnosisRun | None:
    """Return the job's queued or running diagnosis, in whichever investigation, if any."""
    return (
        DiagnosisRun.objects.filter(job=job, status__in=ACTIVE)
        .exclude(playbooks=COMPARISON_PLAYBOOKS)
        .select_related("investigation")
        .first()
    )


def window_validate(start: float | None, end: float | None) -> dict[str, float]:
    """Return {"start", "end"} (unix seconds) or {} for the job's whole range; ValueError if inverted."""
    if start is None and end is None:
        return {}
    if start is None or end is None:
        raise ValueError("give both the start and the end of the window, or neither")
    if not (math.isfinite(start) and math.isfinite(end)) or end <= start:
        raise ValueError("the window's end must come after its start")
    return {"start": float(start), "end": float(end)}


def diagnosis_start(
    investigation: Investigation,
    job: Job,
    *,
    playbooks: Sequence[str] | None = None,
    window: dict[str, float] | None = None,
    profile: str = "auto",
    gpu_model: str = "auto",
    user: Any = None,
) -> DiagnosisRun:
    """Return a new queued diagnosis run of `job` (the caller enqueues the plan task after commit).

    `playbooks` None runs what the job's triage calls for; a list runs those playbooks. `profile` and
    `gpu_model` ("auto": recognised from the data) are the user's word for the metric naming and the GPU
    model's priors. Raises DiagnosisRunError for a bad window, profile or GPU model, and when the job is not
    in the investigation, has no data source, or already has a queued or running diagnosis (in any
    investigation: both would query one source).
    """
    try:
        window = window_validate((window or {}).get("start"), (window or {}).get("end"))
    except ValueError as exc:
        raise DiagnosisRunError(f"Bad window: {exc}.") from exc
    if profile != "auto" and profile not in PROFILES:
        raise DiagnosisRunError(f"Unknown metric profile {profile!r}: use auto or one of {', '.join(PROFILES)}.")
    if gpu_model != "auto":
        try:
            gpu_model = gpu_model_named(gpu_model).name
        except ValueError as exc:
            raise DiagnosisRunError(f"{str(exc)[0].upper()}{str(exc)[1:]}.") from exc
    names = list(dict.fromkeys(str(p) for p in playbooks)) if playbooks is not None else None
    if names is not None and not names:
        raise DiagnosisRunError("Choose at least one playbook.")
    dead_runs_reap()  # a run whose worker died is failed first, not a reason to refuse this one
    with transaction.atomic():
        # The job's row lock serialises two starts racing for the same job (PostgreSQL; SQLite
        # serialises writers anyway).
        Job.objects.select_for_update().filter(pk=job.pk).first()
        if not InvestigationJob.objects.filter(investigation=investigation, job=job).exists():
            raise DiagnosisRunError(f"Job {job.job_id} is not part of this investigation.")
        datasource = job.current_datasource()
        if datasource is None:
            raise DiagnosisRunError(
                f"Job {job.job_id} has no data source: add its job directory, a Prometheus URL or an "
                "SSH tunnel first."
            )
        active = diagnosis_active(job)
        if active is not None:
            where = "" if active.investigation_id == investigation.pk else f" in “{active.investigation}”"
            raise DiagnosisRunError(
                f"A diagnosis of job {job.job_id} is already {active.status} (run #{active.pk}{where}); "
                "wait for it or cancel it."
            )
        return DiagnosisRun.objects.create(
            investigation=investigation,
            job=job,
            datasource=datasource,
            created_by=user if getattr(user, "is_authenticated", False) else None,
            playbooks=names or [],
            window=window,
            result={"requested": names, "profile": profile, "gpu_model": gpu_model},
        )


def diagnosis_cancel(run: DiagnosisRun, user: Any = None) -> bool:
    """Return True if the queued or running run was cancelled (by `user`, whom the run's error names).

    Queued playbooks are cancelled at once; a running one stops between queries and keeps what it
    has. False: the run had already finished.
    """
    who = user.get_username() if getattr(user, "is_authenticated", False) else "a user"
    with transaction.atomic():
        updated = DiagnosisRun.objects.filter(pk=run.pk, status__in=ACTIVE).update(
            status=TaskStatus.CANCELLED, finished=timezone.now(), error=f"Cancelled by {who}."
        )
        if updated:
            PlaybookExecution.objects.filter(run_id=run.pk, status=TaskStatus.QUEUED).update(
                status=TaskStatus.CANCELLED, error="Cancelled before it started."
            )
    return updated == 1


def _abandoned_before() -> dt.datetime:
    """Return the time before which a running claim is abandoned: its task would have hit the hard limit.

    With acks_late, a worker that died mid-task has its message delivered again; the row it had claimed
    is still running, and no task can still be working on it after CELERY_TASK_TIME_LIMIT.
    """
    return timezone.now() - dt.timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)


def diagnosis_claim(run_id: int) -> bool:
    """Return True if this caller moved the run from queued to running (False: taken or cancelled).

    A run left running while planning by a worker that died (past the hard time limit) is taken again.
    """
    abandoned = Q(status=TaskStatus.RUNNING, started__lt=_abandoned_before()) & ~Q(result__has_key="stage")
    return (
        DiagnosisRun.objects.filter(Q(status=TaskStatus.QUEUED) | abandoned, pk=run_id).update(
            status=TaskStatus.RUNNING, started=timezone.now(), error=""
        )
        == 1
    )


def diagnosis_requeue(run_id: int, reason: str) -> None:
    """Put a running run back in the queue before a retry of its planning, noting why."""
    DiagnosisRun.objects.filter(pk=run_id, status=TaskStatus.RUNNING).update(
        status=TaskStatus.QUEUED, error=reason[:10_000]
    )


def diagnosis_finish(run_id: int, status: str, error: str | None = None) -> bool:
    """Return True if the still running run was marked `status` (False: cancelled or finished meanwhile)."""
    fields: dict[str, Any] = {"status": status, "finished": timezone.now()}
    if error is not None:
        fields["error"] = error[:10_000]
    return DiagnosisRun.objects.filter(pk=run_id, status=TaskStatus.RUNNING).update(**fields) == 1


def diagnosis_is_running(run_id: int) -> bool:
    return DiagnosisRun.objects.filter(pk=run_id, status=TaskStatus.RUNNING).exists()


# --- Plan ----------------------------------------------------------------------------------------


def triage_wait_check(jobs: Sequence[Job], why: str) -> None:
    """Raise TriagePending if a job's log triage is queued or running (and not stalled).

    A run started right after the investigation opened would otherwise go without what only the log
    tells (the playbooks it calls for, heartbeat-accused hosts, a restore, the config).
    """
    for job in jobs:
        triage = job.triage or {}
        if triage.get("state") in TRIAGE_PENDING and not triage_stalled(triage):
            raise TriagePending(f"Waiting for the log triage of job {job.job_id}: {why}.")


def diagnosis_plan(run_id: int, *, wait_for_triage: bool = True) -> DiagnosisRun:
    """Return the running run with its source discovered, its playbooks planned and one execution each.

    1. Open a client (serving the job TSDB if needed) and discover the source: profile, hosts, range.
    2. Plan the requested playbooks (or what the triage calls for) over the run's window.
    3. Give each query to the first playbook that plans it: the decision reads every playbook's
       results by query name, so a query several playbooks share runs once.
    4. Store the source in `result`, one queued PlaybookExecution per plan (its own queries; the plan
       in `output["plan"]`, the shared queries and their owners in `output["shared"]`), the planned
       names in `playbooks` and the query count in progress_total.

    A job whose log triage is still queued or running (and not stalled) raises TriagePending before
    anything is stored, unless `wait_for_triage` is False: the task tries again shortly.
    DataSourceError and Prometheus errors propagate, and a source the engine cannot diagnose (no
    samples, no known metric profile, an unknown playbook) raises DiagnosisRunError: nothing was stored.
    """
    run = DiagnosisRun.objects.select_related("job", "datasource").get(pk=run_id)
    if run.datasource is None:
        raise DiagnosisRunError("The job's data source was deleted; add it again and re-run.")
    if wait_for_triage:
        triage_wait_check([run.job], "it picks the playbooks")
    triage = run.job.finished_triage()
    requested = (run.result or {}).get("requested")
    chosen = {k: (run.result or {}).get(k) or "auto" for k in ("profile", "gpu_model")}
    engine = _engine()
    with datasource_client(run.datasource) as client:
        try:
            source = engine.discover_source(client, profile=chosen["profile"], gpu_model=chosen["gpu_model"])
            plans = engine.plan(
                source,
                triage=triage,
                playbooks=requested,
                start=run.window.get("start"),
                end=run.window.get("end"),
            )
        except engine.DiagnosisError as exc:
            raise DiagnosisRunError(f"Cannot diagnose this source: {exc}.") from exc
    plans_shared = _plans_share_queries(plans)
    plans = [p for p, _ in plans_shared]
    with transaction.atomic():
        for p, shared in plans_shared:
            PlaybookExecution.objects.update_or_create(
                run=run,
                playbook=p.name,
                defaults={
                    "status": TaskStatus.QUEUED,
                    "queries": [_planned_query(q) for q in p.queries],
                    "output": {"plan": p.to_dict(), "shared": shared, "total": len(p.queries)},
                    "error": "",
                    "duration_s": 0.0,
                },
            )
        run.executions.exclude(playbook__in=[p.name for p in plans]).delete()
        run.playbooks = [p.name for p in plans]
        run.progress_total = sum(len(p.queries) for p in plans)
        run.progress_done = 0
        run.result = {
            "stage": STAGE_EXECUTING,
            "requested": requested,
            **chosen,
            "source": source.to_dict(),
            "triage": triage,
        }
        run.save(update_fields=["playbooks", "progress_total", "progress_done", "result"])
    return run


def _plans_share_queries(plans: list[Any]) -> list[tuple[Any, dict[str, str]]]:
    """Return each plan keeping only the queries no earlier plan has, with {query name: owner playbook}."""
    owners: dict[tuple[Any, ...], str] = {}
    out = []
    for p in plans:
        own, shared = [], {}
        for q in p.queries:
            key = (q.name, q.promql, q.kind, q.start, q.end, q.step)
            if key in owners:
                shared[q.name] = owners[key]
            else:
                owners[key] = p.name
                own.append(q)
        out.append((dataclasses.replace(p, queries=tuple(own)), shared))
    return out


def _planned_query(q: Any) -> dict[str, Any]:
    return {
        "name": q.name,
        "promql": q.promql,
        "kind": q.kind,
        "ok": None,
        "error": "",
        "summary": {},
    }


# --- Execute -------------------------------------------------------------------------------------


class _Progress:
    """Queries finished by the engine's threads, counted without touching the database.

    The engine calls `done()` from its worker threads; the task's own thread stores the count (an
    F() increment) and answers `cancelled()` from the flag it sets after reading the run row. Only
    that thread opens a database connection, so the engine's threads never hold one open.
    """

    def __init__(self, run_id: int, execution: PlaybookExecution) -> None:
        self.run_id = run_id
        self.execution_id = execution.pk
        self.base = {k: v for k, v in execution.output.items() if k in ("plan", "shared", "total")}
        self._lock = threading.Lock()
        self.finished = 0
        self.stored = 0
        self.cancel = threading.Event()

    def done(self, name: str, ok: bool) -> None:
        if not ok and self.cancel.is_set():
            return  # skipped because of the cancellation, not run
        with self._lock:
            self.finished += 1

    def cancelled(self) -> bool:
        return self.cancel.is_set()

    def flush(self) -> None:
        """Store the queries finished since the last flush: the run's count and the playbook's own."""
        with self._lock:
            delta = self.finished - self.stored
            self.stored = total = self.finished
        if delta:
            DiagnosisRun.objects.filter(pk=self.run_id).update(progress_done=F("progress_done") + delta)
            PlaybookExecution.objects.filter(pk=self.execution_id, status=TaskStatus.RUNNING).update(
                output={**self.base, "done": total}, updated=timezone.now()
            )

    def undo(self) -> None:
        """Take this attempt's queries out of the run's progress (a retry counts them again)."""
        with self._lock:
            stored, self.stored, self.finished = self.stored, 0, 0
        if stored:
            DiagnosisRun.objects.filter(pk=self.run_id, progress_done__gte=stored).update(
                progress_done=F("progress_done") - stored
            )
            PlaybookExecution.objects.filter(pk=self.execution_id).update(output=self.base)


def _execute_watched(client: Any, plan: Any, progress: _Progress) -> Any:
    """Return the engine's output for `plan`, storing progress and watching for a cancellation meanwhile."""
    return run_watched(
        progress.run_id,
        f"diagnosis {progress.run_id} ({plan.name})",
        lambda: _engine().execute(
            client,
            plan,
            concurrency=settings.STEPWISE_QUERY_CONCURRENCY,
            should_cancel=progress.cancelled,
            on_query_done=progress.done,
        ),
        progress.cancel,
        on_tick=progress.flush,
    )


def run_watched[T](
    run_id: int, name: str, work: Callable[[], T], stop: threading.Event, *, on_tick: Callable[[], None] = lambda: None
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
            if not stop.is_set() and not diagnosis_is_running(run_id):
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


def playbook_claim(run_id: int, playbook: str) -> bool:
    """Return True if this caller moved the playbook from queued to running (False: taken or cancelled).

    A playbook left running by a worker that died (no progress past the hard time limit) is taken again.
    """
    abandoned = Q(status=TaskStatus.RUNNING, updated__lt=_abandoned_before())
    return (
        PlaybookExecution.objects.filter(
            Q(status=TaskStatus.QUEUED) | abandoned, run_id=run_id, playbook=playbook
        ).update(status=TaskStatus.RUNNING, error="", updated=timezone.now())
        == 1
    )


def playbook_requeue(run_id: int, playbook: str, reason: str) -> None:
    """Put a running playbook back in the queue before a retry, noting why."""
    PlaybookExecution.objects.filter(run_id=run_id, playbook=playbook, status=TaskStatus.RUNNING).update(
        status=TaskStatus.QUEUED, error=reason[:10_000]
    )


def playbook_finish(run_id: int, playbook: str, status: str, error: str = "") -> bool:
    """Return True if the running (or still queued) playbook was marked `status`."""
    return (
        PlaybookExecution.objects.filter(run_id=run_id, playbook=playbook, status__in=ACTIVE).update(
            status=status, error=error[:10_000]
        )
        == 1
    )


class QuerySlots:
    """At most `size` queries in flight against one data source, across threads and worker processes.

    Playbooks of a run execute in parallel on as many workers as exist, so a per-task thread pool does
    not bound the load on the job's Prometheus. Each query holds one of `size` slot files, locked with
    flock(2) (a lock belongs to its open file, so threads contend as processes do); the slot files live
    in STEPWISE_DATA_DIR, shared by the workers of one host.
    """

    def __init__(self, key: str, size: int, root: Path, *, poll_s: float = 0.02) -> None:
        self.paths = [root / f"{key}.{i}.lock" for i in range(max(1, size))]
        self.poll_s = poll_s
        root.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def hold(self) -> Iterator[int]:
        """Hold a free slot for the duration of the block; yield its index."""
        start = random.randrange(len(self.paths))  # spread the first tries over the slots
        while True:
            for i in range(len(self.paths)):
                index = (start + i) % len(self.paths)
                fd = os.open(self.paths[index], os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                try:
                    yield index
                finally:
                    os.close(fd)  # closing the file releases its lock
                return
            time.sleep(self.poll_s)


class _BoundedClient:
    """A PrometheusClient whose queries each hold one of the data source's query slots."""

    def __init__(self, client: PrometheusClient, slots: QuerySlots) -> None:
        self._client = client
        self._slots = slots

    def query(self, *args: Any, **kwargs: Any) -> Any:
        with self._slots.hold():
            return self._client.query(*args, **kwargs)

    def query_range(self, *args: Any, **kwargs: Any) -> Any:
        with self._slots.hold():
            return self._client.query_range(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def datasource_slots(datasource: DataSource) -> QuerySlots:
    """Return the query slots of a data source: STEPWISE_QUERY_CONCURRENCY of them."""
    return QuerySlots(
        f"datasource-{datasource.pk}",
        settings.STEPWISE_QUERY_CONCURRENCY,
        Path(settings.STEPWISE_DATA_DIR) / "query-slots",
    )


def playbook_execute(run_id: int, playbook: str) -> PlaybookExecution:
    """Return the claimed execution after running its plan and storing queries, summaries and output.

    1. Rebuild the plan stored at planning time and open a client (per-query timeout and retries
       are the client's, from STEPWISE_PROMETHEUS_TIMEOUT).
    2. Let the engine run the queries, at most STEPWISE_QUERY_CONCURRENCY at a time against this data
       source over all the playbooks running (QuerySlots), counting each finished query into the run's
       progress and stopping between queries once the run is cancelled.
    3. If queries failed and the server no longer answers, the outage is what failed them: undo this
       attempt's progress and raise the transient error, so the task retries the playbook.
    4. Store per query {name, promql, kind, ok, error, summary}, the output (partial results kept,
       failed queries named in `errors`), the duration; mark it done, or cancelled if the run was.
    """
    execution = PlaybookExecution.objects.select_related("run__datasource").get(
        run_id=run_id, playbook=playbook
    )
    run = execution.run
    if run.datasource is None:
        raise DiagnosisRunError("The job's data source was deleted; add it again and re-run.")
    plan = _engine().PlaybookPlan.from_dict(execution.output["plan"])
    progress = _Progress(run_id, execution)
    began = time.monotonic()
    with datasource_client(run.datasource) as client:
        try:
            output = _execute_watched(
                _BoundedClient(client, datasource_slots(run.datasource)), plan, progress
            )
            if output.errors and not progress.cancelled():
                client.buildinfo()  # raises the transient error if the server went away meanwhile
        except TRANSIENT_ERRORS:
            progress.undo()
            raise
    execution.queries = _query_rows(plan, output)
    execution.output = {**progress.base, "result": output.to_dict(), "done": progress.finished}
    execution.duration_s = round(time.monotonic() - began, 3)
    cancelled = progress.cancelled()
    failed = len(output.errors)
    if cancelled:
        execution.status = TaskStatus.CANCELLED
        execution.error = f"Cancelled after {len(output.results)} of {len(plan.queries)} queries."
    else:
        execution.status = TaskStatus.DONE
        execution.error = f"{failed} of {len(plan.queries)} queries failed." if failed else ""
    with transaction.atomic():
        # Only a running execution is written: a second delivery of the task must not overwrite it.
        stored = PlaybookExecution.objects.filter(pk=execution.pk, status=TaskStatus.RUNNING).update(
            queries=execution.queries,
            output=execution.output,
            duration_s=execution.duration_s,
            status=execution.status,
            error=execution.error,
            updated=timezone.now(),
        )
    if not stored:
        logger.info(
            "playbook %s of run %s was no longer running; its output was not stored", playbook, run_id
        )
    return execution


def _query_rows(plan: Any, output: Any) -> list[dict[str, Any]]:
    """Return one row per planned query: what it asked, whether it answered, and a small summary."""
    rows = []
    for q in plan.queries:
        error = output.errors.get(q.name, "")
        answered = q.name in output.results
        if error == "cancelled" or not (answered or error):
            error = "not run: the diagnosis was cancelled"
        rows.append(
            {
                "name": q.name,
                "promql": q.promql,
                "kind": q.kind,
                "ok": answered and not error,
                "error": error,
                "summary": result_summary(output.results.get(q.name)) if answered else {},
            }
        )
    return rows


def _series_stats(labels: Any, values: list[Any]) -> dict[str, Any]:
    finite = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    return {
        "labels": {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
        "min": min(finite) if finite else None,
        "max": max(finite) if finite else None,
        "last": finite[-1] if finite else None,
    }


def result_summary(result: Any) -> dict[str, Any]:
    """Return {series, min, max, last, top: [{labels, min, max, last}], omitted_series} for one result.

    `result` is the engine's: {"kind": "range", "series": [{labels, values}]} or {"kind": "instant",
    "samples": [{labels, value}]}. `top` keeps the STEPWISE_RESULT_MAX_SERIES series with the largest
    maxima; `last` is given for a single series.
    """
    if not isinstance(result, dict):
        return {"series": 0, "min": None, "max": None, "last": None, "top": [], "omitted_series": 0}
    if result.get("kind") == "instant":
        rows = [_series_stats(s.get("labels"), [s.get("value")]) for s in result.get("samples") or []]
    else:
        rows = [
            _series_stats(s.get("labels"), list(s.get("values") or [])) for s in result.get("series") or []
        ]
    rows.sort(key=lambda r: (r["max"] is None, -(r["max"] or 0.0)))
    mins = [r["min"] for r in rows if r["min"] is not None]
    maxes = [r["max"] for r in rows if r["max"] is not None]
    cap = settings.STEPWISE_RESULT_MAX_SERIES
    return {
        "series": len(rows),
        "min": min(mins) if mins else None,
        "max": max(maxes) if maxes else None,
        "last": rows[0]["last"] if len(rows) == 1 else None,
        "top": rows[:cap],
        "omitted_series": max(len(rows) - cap, 0),
    }


def diagnosis_finished_executing(run_id: int) -> bool:
    """Return True if every playbook of the running run has finished and this caller is the one to decide.

    Several playbook tasks can finish at once on different workers. The run row is locked while the
    executions are counted, and the conditional UPDATE of `result["stage"]` from executing to
    deciding lets exactly one caller through even where row locks do not exist (SQLite).
    """
    with transaction.atomic():
        run = DiagnosisRun.objects.select_for_update().filter(pk=run_id, status=TaskStatus.RUNNING).first()
        if run is None or (run.result or {}).get("stage") != STAGE_EXECUTING:
            return False
        if run.executions.exclude(status__in=FINISHED).exists():
            return False
        won = DiagnosisRun.objects.filter(
            pk=run_id, status=TaskStatus.RUNNING, result__stage=STAGE_EXECUTING
        ).update(result={**run.result, "stage": STAGE_DECIDING})
    return won == 1


# --- Decide --------------------------------------------------------------------------------------


def _rule_keys(findings: list[dict[str, Any]]) -> list[str]:
    """Return a (playbook, rule)-unique key per finding: a rule that fires twice is told apart by host."""
    seen: dict[tuple[str, str], int] = {}
    keys = []
    for f in findings:
        rule = str(f.get("rule") or f.get("title") or "finding")[:100]
        key = (str(f.get("playbook", "")), rule)
        if key in seen:
            seen[key] += 1
            where = ",".join(str(h) for h in f.get("hosts") or []) or str(seen[key])
            rule = f"{rule[: 100 - len(where) - 2]}[{where}]"[:100]
        else:
            seen[key] = 1
        keys.append(rule)
    return keys


def _onset(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _contract_job(job: Job, triage: dict[str, Any] | None) -> dict[str, Any]:
    found = (triage or {}).get("job") or {}
    out = {key: found.get(key) for key in _CONTRACT_JOB_KEYS}
    out["id"] = out["id"] or job.job_id
    return out


def _contract_source(source: dict[str, Any]) -> dict[str, Any]:
    return {
        "url": source.get("url"),
        "profile": source.get("profile"),
        "hosts": list(source.get("hosts") or []),
        "gpus_per_host": source.get("gpus_per_host"),
        "time_range": list(source.get("time_range") or []),
    }


def diagnosis_decide(run_id: int) -> DiagnosisRun:
    """Return the run, done, after deciding from its playbooks' outputs and storing the findings.

    `run.result` becomes the contract's object (job, source, diagnosis, findings without their rule,
    timings) plus the engine's `timeline` of the job.

    1. Load the outputs of the playbooks that finished (failed ones are named in run.error).
    2. Let the engine decide: the diagnosis and the findings, each with the rule that produced it.
    3. In one transaction, and only while the run is still running: upsert the findings by
       (investigation, job, playbook, rule); when the run is complete (every playbook done, no query
       failed), delete this job's diagnosis findings of those playbooks whose rule no longer fires;
       store the contract object in run.result; set the investigation's incident class if the job
       is its primary job; mark the run done.

    Raises DiagnosisRunError when no playbook produced an output.
    """
    run = DiagnosisRun.objects.select_related("job", "investigation").get(pk=run_id)
    state = run.result or {}
    executions = list(run.executions.order_by("pk"))
    done = [e for e in executions if e.status == TaskStatus.DONE and e.output.get("result")]
    failed = [e for e in executions if e.status != TaskStatus.DONE]
    if executions and not done:
        reasons = "; ".join(f"{e.playbook}: {e.error or e.status}" for e in failed)
        raise DiagnosisRunError(f"Every playbook failed, so there is nothing to decide from ({reasons}).")
    outputs = [_engine().PlaybookOutput.from_dict(e.output["result"]) for e in done]
    source = _engine().SourceInfo.from_dict(state["source"])
    triage = state.get("triage")
    decision = _engine().decide(source, outputs, triage=triage)
    findings = list(decision.get("findings") or [])
    complete = not failed and not any(o.errors for o in outputs)
    with transaction.atomic():
        if not DiagnosisRun.objects.select_for_update().filter(pk=run_id, status=TaskStatus.RUNNING).exists():
            logger.info("diagnosis %s is no longer running (cancelled?); its decision is dropped", run_id)
            run.refresh_from_db()
            return run
        keys = findings_record(run, findings)
        if complete:
            _findings_prune(run, keys, playbooks=[e.playbook for e in executions])
        finished = timezone.now()
        run.result = {
            "job": _contract_job(run.job, triage),
            "source": _contract_source(state["source"]),
            "diagnosis": decision.get("diagnosis") or {},
            "findings": [{k: f.get(k) for k in _CONTRACT_FINDING_KEYS} for f in findings],
            "timings": {
                "total_s": round((finished - (run.started or run.created)).total_seconds(), 3),
                "queries": sum(o.queries for o in outputs),
                "prometheus_s": round(sum(o.prometheus_s for o in outputs), 3),
            },
            # Not part of the contract: the job's own timeline as the engine read it from the data
            # (training start, last step advance, crash time...), and the GPU model whose priors were
            # used (set by the user, or recognised from the data), for the page.
            "timeline": decision.get("timeline") or {},
            "gpu_model": {
                "name": state["source"].get("gpu_model"),
                "set_by_user": state.get("gpu_model", "auto") != "auto",
            },
        }
        run.status = TaskStatus.DONE
        run.finished = finished
        run.error = (
            f"{len(failed)} of {len(executions)} playbooks failed: "
            + "; ".join(f"{e.playbook}: {e.error or e.status}" for e in failed)
            if failed
            else ""
        )[:10_000]
        run.save(update_fields=["result", "status", "finished", "error"])
        diagnosis_class = run.result["diagnosis"].get("class")
        if (
            diagnosis_class
            and InvestigationJob.objects.filter(
                investigation=run.investigation, job=run.job, role=InvestigationJob.Role.PRIMARY
            ).exists()
        ):
            Investigation.objects.filter(pk=run.investigation_id).update(
                incident_class=str(diagnosis_class)[:40], updated=timezone.now()
            )
    return run


def findings_record(run: DiagnosisRun, findings: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """Upsert the engine's findings of `run`; return their (playbook, rule) keys."""
    keys = _rule_keys(findings)
    now = timezone.now()
    rows = []
    for f, rule in zip(findings, keys, strict=True):
        severity = str(f.get("severity") or "info")
        rows.append(
            Finding(
                investigation_id=run.investigation_id,
                job_id=run.job_id,
                run=run,
                playbook=str(f.get("playbook") or "")[:64],
                rule=rule,
                incident_class=str(f.get("class") or "")[:40],
                severity=severity if severity in _SEVERITIES else Finding.Severity.INFO,
                title=str(f.get("title") or rule)[:300],
                hosts=[str(h) for h in f.get("hosts") or []],
                gpus=[str(g) for g in f.get("gpus") or []],
                onset=_onset(f.get("onset")),
                evidence=list(f.get("evidence") or []),
                updated=now,
            )
        )
    if rows:
        Finding.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["investigation", "job", "playbook", "rule"],
            update_fields=FINDING_FIELDS,
        )
    return {(row.playbook, row.rule) for row in rows}


def _findings_prune(run: DiagnosisRun, fired: set[tuple[str, str]], *, playbooks: list[str]) -> int:
    """Delete this job's diagnosis findings of `playbooks` (and of the decision itself) that did not fire.

    Findings a person recorded (no run) are kept; so are those of playbooks this run did not cover.
    """
    covered = set(playbooks) | {p for p, _ in fired}
    stale = Finding.objects.filter(
        investigation_id=run.investigation_id, job_id=run.job_id, run__isnull=False, playbook__in=covered
    )
    keep = Q()
    for playbook, rule in fired:
        keep |= Q(playbook=playbook, rule=rule)
    if fired:
        stale = stale.exclude(keep)
    deleted, _ = stale.delete()
    return deleted


# --- Reading -------------------------------------------------------------------------------------


def diagnosis_overview(investigation: Investigation, job: Job | None) -> dict[str, Any]:
    """Return what the diagnosis region shows for one job of an investigation.

    Keys: run (latest, any state), executions (of that run), decided (the latest done run, whose
    `result` holds the diagnosis), diagnosis (its diagnosis object or None), findings (this job's,
    by onset, unknown onsets last), crash_time (from the triage).
    """
    if job is None:
        return {
            "run": None,
            "executions": [],
            "decided": None,
            "diagnosis": None,
            "findings": [],
            "crash_time": None,
        }
    runs = (
        DiagnosisRun.objects.filter(investigation=investigation, job=job)
        .exclude(playbooks=COMPARISON_PLAYBOOKS)
        .order_by("-created", "-pk")
    )
    run = runs.first()
    decided = (
        run
        if run is not None and run.status == TaskStatus.DONE
        else runs.filter(status=TaskStatus.DONE).first()
    )
    # Evidence is fetched when a row expands (finding_detail), not for the table. Comparison findings
    # are shown by the comparison region, not twice. The causal story first (critical and warning by
    # onset, the earliest anomaly on top), then the informational notes and red herrings.
    findings = (
        Finding.objects.filter(investigation=investigation, job=job)
        .exclude(playbook__in=COMPARISON_PLAYBOOKS)
        .defer("evidence")
        .annotate(_notes_last=Case(When(severity=Finding.Severity.INFO, then=1), default=0))
        .order_by("_notes_last", F("onset").asc(nulls_last=True), "pk")
    )
    return {
        "run": run,
        "executions": list(execution_progress(run)) if run else [],
        "decided": decided,
        "diagnosis": (decided.result or {}).get("diagnosis") if decided else None,
        "findings": list(findings),
        "crash_time": crash_time(job, decided),
    }


def execution_progress(run: DiagnosisRun) -> QuerySet[PlaybookExecution]:
    """Return the run's executions with what the progress shows, read out of `output` by the database.

    Annotations: done (queries finished), total, unavailable (signals the source lacks), shared
    ({query: owner playbook}). `output` and `queries` hold results and are not loaded: the status
    polls every second.
    """
    return (
        run.executions.order_by("pk")
        .defer("output", "queries")
        .annotate(
            done=F("output__done"),
            total=F("output__total"),
            unavailable=F("output__plan__unavailable"),
            shared=F("output__shared"),
        )
    )


def crash_time(job: Job, run: DiagnosisRun | None = None) -> float | None:
    """Return the job's crash time (unix seconds): the triage's (in the run's result or on the job), else
    the one the engine read from the data, else None."""
    result = (run.result or {}) if run else {}
    for found in (result.get("job"), job.triage.get("job") if job.triage else None, result.get("timeline")):
        value = _onset((found or {}).get("crash_time"))
        if value is not None:
            return value
    return None


__all__ = [
    "DiagnosisRunError",
    "diagnosis_active",
    "diagnosis_cancel",
    "diagnosis_claim",
    "diagnosis_decide",
    "diagnosis_finish",
    "diagnosis_finished_executing",
    "diagnosis_overview",
    "diagnosis_plan",
    "diagnosis_requeue",
    "diagnosis_start",
    "playbook_claim",
    "playbook_execute",
    "playbook_finish",
    "playbook_requeue",
]
