"""One playbook of a diagnosis run: claim it, run its queries through the engine while watching for a
cancellation, and store each query's summary and the engine's output (step 3 of services/diagnosis.py).

Transient Prometheus errors propagate (`TRANSIENT_ERRORS`): the task retries the playbook.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from investigations.models import DiagnosisRun, PlaybookExecution, TaskStatus
from playbooks import diagnose as engine

from .datasources import TRANSIENT_ERRORS, datasource_client
from .diagnosis import DiagnosisRunError
from .query_slots import BoundedClient, datasource_slots
from .runs import ACTIVE, abandoned_before, run_gone_refusal, run_watched

logger = logging.getLogger(__name__)


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
        lambda: engine.execute(
            client,
            plan,
            concurrency=settings.STEPWISE_QUERY_CONCURRENCY,
            should_cancel=progress.cancelled,
            on_query_done=progress.done,
        ),
        progress.cancel,
        on_tick=progress.flush,
    )


def playbook_claim(run_id: int, playbook: str) -> bool:
    """Return True if this caller moved the playbook from queued to running (False: taken or cancelled).

    A playbook left running by a worker that died (no progress past the hard time limit) is taken again.
    """
    abandoned = Q(status=TaskStatus.RUNNING, updated__lt=abandoned_before())
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
    plan = engine.PlaybookPlan.from_dict(execution.output["plan"])
    progress = _Progress(run_id, execution)
    began = time.monotonic()
    with datasource_client(run.datasource, refuse_start=run_gone_refusal(run_id)) as client:
        try:
            output = _execute_watched(BoundedClient(client, datasource_slots(run.datasource)), plan, progress)
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
