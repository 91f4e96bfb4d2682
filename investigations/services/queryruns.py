"""Query runs: a batch of PromQL queries against one data source, executed by a worker.

Services never enqueue tasks (views and tasks do) and never decide a run's final status on their
own behalf: `queryrun_execute` fills results and progress, the task marks the run done or failed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import batched
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from investigations.models import DataSource, Investigation, QueryResult, QueryRun
from playbooks.prometheus import PrometheusClient, PrometheusError, choose_step

from .datasources import TRANSIENT_ERRORS, DataSourceError, _datasource_connect, _datasource_mark

QUERY_KINDS = ("instant", "range", "buildinfo")

#: The "Run sample queries" batch: is the server there, what does it hold, is anyone scraped,
#: how far did training get.
SAMPLE_QUERIES: tuple[dict[str, Any], ...] = (
    {"name": "buildinfo", "kind": "buildinfo", "promql": ""},
    {"name": "metric-families", "kind": "instant", "promql": 'count by (__name__)({__name__=~".+"})'},
    {"name": "up", "kind": "instant", "promql": "up"},
    {"name": "training-step", "kind": "range", "promql": "tb_step or training_step"},
)


# --- Query runs --------------------------------------------------------------------------------


def queries_validate(queries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the query specs normalised to {name, promql, kind, start, end, step}.

    Raises ValueError for a missing name or PromQL, a duplicate name, an unknown kind or a window
    whose end precedes its start.
    """
    specs: list[dict[str, Any]] = []
    seen: set[str] = set()
    for raw in queries:
        name = str(raw.get("name", "")).strip()
        kind = raw.get("kind", "instant")
        promql = str(raw.get("promql", "")).strip()
        if not name or name in seen:
            raise ValueError(f"query name {name!r} is empty or repeated")
        if kind not in QUERY_KINDS:
            raise ValueError(f"query {name!r}: kind {kind!r} is not one of {', '.join(QUERY_KINDS)}")
        if kind != "buildinfo" and not promql:
            raise ValueError(f"query {name!r} has no PromQL")
        start, end, step = (_seconds(raw.get(key)) for key in ("start", "end", "step"))
        if start is not None and end is not None and end < start:
            raise ValueError(f"query {name!r}: end {end} is before start {start}")
        seen.add(name)
        specs.append({"name": name, "promql": promql, "kind": kind, "start": start, "end": end, "step": step})
    if not specs:
        raise ValueError("a query run needs at least one query")
    return specs


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


def queryrun_create(
    ds: DataSource,
    queries: Iterable[dict[str, Any]],
    *,
    investigation: Investigation | None = None,
    created_by: Any = None,
) -> QueryRun:
    """Return a new queued run of `queries` against `ds` (the caller enqueues it after commit)."""
    specs = queries_validate(queries)
    return QueryRun.objects.create(
        datasource=ds,
        investigation=investigation,
        created_by=created_by if getattr(created_by, "is_authenticated", False) else None,
        queries=specs,
        progress_total=len(specs),
    )


@dataclass
class _Outcome:
    """What one query gave.

    Attributes:
        summary: the JSON stored on QueryResult.summary.
        series_count: uncapped number of series.
        error: the Prometheus error (or the reason no query could be made), or None on success.
        duration_s: wall time of the call.
    """

    summary: dict[str, Any] = field(default_factory=dict)
    series_count: int = 0
    error: Exception | None = None
    duration_s: float = 0.0


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _series_summary(
    labels: dict[str, str], timestamps: Sequence[float], values: Sequence[float]
) -> dict[str, Any]:
    finite = [v for v in values if math.isfinite(v)]
    cap = settings.STEPWISE_RESULT_MAX_POINTS
    picks: Sequence[int]
    if len(values) > cap:
        # Evenly spaced picks that always include the first and the last point.
        picks = sorted({round(i * (len(values) - 1) / (cap - 1)) for i in range(cap)})
    else:
        picks = range(len(values))
    return {
        "labels": dict(labels),
        "min": min(finite) if finite else None,
        "max": max(finite) if finite else None,
        "last": _finite(values[-1]) if values else None,
        "points": [[timestamps[i], _finite(values[i])] for i in picks],
    }


def _summarise(series: list[dict[str, Any]], window: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Return the capped summary (largest maxima first) and the uncapped series count.

    The top-level min and max span every series, capped or not; last is given for a single series.
    """
    series.sort(key=lambda s: (s["max"] is None, -(s["max"] or 0.0)))
    cap = settings.STEPWISE_RESULT_MAX_SERIES
    mins = [s["min"] for s in series if s["min"] is not None]
    maxes = [s["max"] for s in series if s["max"] is not None]
    summary = {
        "window": window,
        "min": min(mins) if mins else None,
        "max": max(maxes) if maxes else None,
        "last": series[0]["last"] if len(series) == 1 else None,
        "series": series[:cap],
        "omitted_series": max(len(series) - cap, 0),
    }
    return summary, len(series)


def _query_window(spec: dict[str, Any], data_range: tuple[float, float] | None) -> dict[str, Any]:
    """Return the spec's window with gaps filled from the data's own time range."""
    start, end = spec["start"], spec["end"]
    if data_range is not None:
        start = data_range[0] if start is None else start
        end = data_range[1] if end is None else end
    if spec["kind"] == "instant":
        return {"at": end}
    if start is None or end is None:
        raise DataSourceError("the data source holds no samples, so a range query has no window")
    step = spec["step"] or choose_step(start, end, max_points=settings.STEPWISE_RESULT_MAX_POINTS)
    return {"start": start, "end": end, "step": step}


def _open_window(spec: dict[str, Any]) -> bool:
    """Return True if the spec leaves part of its window to the data's time range."""
    if spec["kind"] == "instant":
        return spec["end"] is None
    return spec["kind"] == "range" and (spec["start"] is None or spec["end"] is None)


def _query_one(
    client: PrometheusClient, spec: dict[str, Any], data_range: tuple[float, float] | None
) -> _Outcome:
    """Return the outcome of one spec; Prometheus errors are returned, not raised."""
    began = time.monotonic()
    outcome = _Outcome()
    try:
        if spec["kind"] == "buildinfo":
            outcome.summary = {"build": client.buildinfo()}
        elif spec["kind"] == "instant":
            window = _query_window(spec, data_range)
            samples = client.query(spec["promql"], at=window["at"])
            rows = [_series_summary(s.labels, [s.timestamp], [s.value]) for s in samples]
            outcome.summary, outcome.series_count = _summarise(rows, window)
        else:
            window = _query_window(spec, data_range)
            found = client.query_range(spec["promql"], window["start"], window["end"], step=window["step"])
            rows = [_series_summary(s.labels, s.timestamps, s.values) for s in found]
            outcome.summary, outcome.series_count = _summarise(rows, window)
    except (PrometheusError, DataSourceError) as exc:
        outcome.error = exc
    outcome.duration_s = time.monotonic() - began
    return outcome


def queryresults_record(rows: list[QueryResult]) -> None:
    """Store results, replacing any earlier result of the same run and name (an upsert)."""
    QueryResult.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["run", "name"],
        update_fields=["kind", "promql", "ok", "error", "series_count", "summary", "duration_s", "updated"],
    )


def _result_row(run: QueryRun, spec: dict[str, Any], outcome: _Outcome | PrometheusError) -> QueryResult:
    if isinstance(outcome, PrometheusError):  # run_parallel reports a failed call by returning its error
        outcome = _Outcome(error=outcome)
    return QueryResult(
        run=run,
        name=spec["name"],
        kind=spec["kind"],
        promql=spec["promql"],
        ok=outcome.error is None,
        error="" if outcome.error is None else f"{type(outcome.error).__name__}: {outcome.error}",
        series_count=outcome.series_count,
        summary=outcome.summary,
        duration_s=round(outcome.duration_s, 4),
    )


def _queryrun_cancelled(run_id: int) -> bool:
    return QueryRun.objects.filter(pk=run_id, status=QueryRun.Status.CANCELLED).exists()


def queryrun_execute(run_id: int) -> QueryRun:
    """Return the run after executing its queries and storing one QueryResult per query.

    1. Open a client for the data source (serving the job TSDB if needed). DataSourceError and
       Prometheus errors raised here propagate: nothing was queried.
    2. Fill windows the specs leave open from the data's own time range (for a served job TSDB,
       the range its files record; otherwise asked of the server).
    3. Run the queries in batches of STEPWISE_QUERY_CONCURRENCY through client.run_parallel,
       upserting results and progress after each batch, and stop if the run was cancelled.
    4. If every query failed with a transient error, raise the first so the caller can retry; a
       retry replaces these results. Otherwise record how many failed in run.error.

    The caller owns the run's status.
    """
    run = QueryRun.objects.select_related("datasource").get(pk=run_id)
    specs: list[dict[str, Any]] = run.queries
    outcomes: list[_Outcome] = []
    client, data_range = _datasource_connect(run.datasource)
    with client:
        if data_range is None and any(_open_window(s) for s in specs):
            data_range = client.data_time_range()
        for batch in batched(specs, settings.STEPWISE_QUERY_CONCURRENCY):
            if _queryrun_cancelled(run.pk):
                break
            calls = [partial(_query_one, client, spec, data_range) for spec in batch]
            results = client.run_parallel(calls, max_concurrency=len(calls))
            rows = [_result_row(run, spec, result) for spec, result in zip(batch, results, strict=True)]
            queryresults_record(rows)
            outcomes.extend(
                result if isinstance(result, _Outcome) else _Outcome(error=result) for result in results
            )
            QueryRun.objects.filter(pk=run.pk).update(progress_done=len(outcomes))

    errors = [o.error for o in outcomes if o.error is not None]
    if errors and all(isinstance(e, TRANSIENT_ERRORS) for e in errors) and len(errors) == len(outcomes):
        _datasource_mark(run.datasource, DataSource.State.DOWN, str(errors[0]))
        raise errors[0]
    if len(errors) < len(outcomes) and run.datasource.state != DataSource.State.UP:
        _datasource_mark(run.datasource, DataSource.State.UP, run.datasource.state_detail)
    error = f"{len(errors)} of {len(outcomes)} queries failed" if errors else ""
    QueryRun.objects.filter(pk=run.pk).update(error=error)
    run.refresh_from_db()
    return run


def queryrun_claim(run_id: int) -> bool:
    """Return True if this caller moved the run from queued to running (False: taken or cancelled)."""
    claimed = QueryRun.objects.filter(pk=run_id, status=QueryRun.Status.QUEUED).update(
        status=QueryRun.Status.RUNNING, started=timezone.now(), error=""
    )
    return claimed == 1


def queryrun_requeue(run_id: int, reason: str) -> None:
    """Put a running run back in the queue (before a retry), noting why."""
    QueryRun.objects.filter(pk=run_id, status=QueryRun.Status.RUNNING).update(
        status=QueryRun.Status.QUEUED, error=reason
    )


def queryrun_finish(
    run_id: int, status: str, error: str | None = None, *, from_status: str = QueryRun.Status.RUNNING
) -> bool:
    """Return True if the run, still in `from_status`, was marked `status` (False: cancelled meanwhile)."""
    fields: dict[str, Any] = {"status": status, "finished": timezone.now()}
    if error is not None:
        fields["error"] = error[:10_000]
    return QueryRun.objects.filter(pk=run_id, status=from_status).update(**fields) == 1


def queryrun_not_sent(run_id: int, error: str) -> None:
    """Mark a queued run failed because its task could not be sent (the page shows `error`)."""
    queryrun_finish(run_id, QueryRun.Status.FAILED, error, from_status=QueryRun.Status.QUEUED)


def queryrun_cancel(run: QueryRun) -> bool:
    """Return True if the queued or running run was cancelled; a worker stops at its next batch."""
    updated = QueryRun.objects.filter(
        Q(status=QueryRun.Status.QUEUED) | Q(status=QueryRun.Status.RUNNING), pk=run.pk
    ).update(status=QueryRun.Status.CANCELLED, finished=timezone.now())
    return updated == 1
