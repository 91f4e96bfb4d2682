"""Diagnosis step three: execute the planned queries, in parallel, each distinct PromQL once.

`execute` runs one playbook's queries (a task queue's unit); `_run_unique` runs every plan's at once for
`run_diagnosis`, sharing the answer of a query several playbooks ask under their own names.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np

from ._diagnose_partial import run_planned
from ._diagnose_peers import ask_in_two
from ._diagnose_types import PlannedQuery, PlaybookOutput, PlaybookPlan
from .prometheus import PrometheusClient, PrometheusError, PrometheusUnreachable, Series


def _to_result(q: PlannedQuery, data: Any) -> dict[str, Any]:
    """Return a query's answer as stored: its series on the query's grid (None where absent), renamed by the
    query's `relabel` when it has one, with the PromQL that answers them so (the evidence's query)."""
    promql = q.relabel.promql(q.promql) if q.relabel else q.promql
    if q.kind == "instant":
        rows = [(s.labels, np.array([s.value], dtype=float)) for s in data]
        if q.relabel:
            rows = q.relabel.apply(rows)
        return {
            "kind": "instant",
            "promql": promql,
            "window_s": q.window_s,
            "at": q.end,
            "samples": [
                {"labels": labels, "value": float(v[0]) if math.isfinite(v[0]) else None}
                for labels, v in rows
            ],
        }
    step = float(q.step or 1.0)
    n = int(round((q.end - q.start) / step)) + 1
    grids = _on_grid(data, q.start, step, n)
    if q.relabel:
        grids = q.relabel.apply(grids)
    series = [{"labels": labels, "values": _json_values(g)} for labels, g in grids]
    return {
        "kind": "range",
        "promql": promql,
        "window_s": q.window_s,
        "start": q.start,
        "step": step,
        "n": n,
        "series": series,
    }


def _on_grid(
    data: Sequence[Series], start: float, step: float, n: int
) -> list[tuple[dict[str, str], np.ndarray]]:
    """Return each series' (labels, values on the grid of `n` points from `start`, NaN where absent or not
    finite). Series with the same timestamps (most answers: every series at every step) are placed at once,
    as one array (8,192 series: one conversion, not 8,192)."""
    first = data[0].timestamps if data else ()
    idx = np.rint((np.asarray(first, dtype=float) - start) / step).astype(np.int64)
    inside = (idx >= 0) & (idx < n)
    if first and len(set(idx.tolist())) == len(idx) and all(s.timestamps == first for s in data):
        values = np.array([s.values for s in data], dtype=float)[:, inside]
        values[~np.isfinite(values)] = np.nan
        block = np.full((len(data), n), np.nan)
        block[:, idx[inside]] = values
        return [(s.labels, row) for s, row in zip(data, block, strict=True)]
    grids = []
    for s in data:
        assert isinstance(s, Series)
        grid = np.full(n, np.nan)
        if s.timestamps:
            idx = np.rint((np.asarray(s.timestamps) - start) / step).astype(np.int64)
            v = np.asarray(s.values, dtype=float)
            ok = (idx >= 0) & (idx < n) & np.isfinite(v)
            grid[idx[ok]] = v[ok]
        grids.append((s.labels, grid))
    return grids


def _json_values(grid: np.ndarray) -> list[float | None]:
    """Return a grid's values for JSON: a missing point is None (x != x only for NaN); a row without any
    (most of them) goes as it is, without a test of each of its points in Python."""
    values: list[float | None] = grid.tolist()
    return [x if x == x else None for x in values] if np.isnan(grid).any() else values


def _ask(client: PrometheusClient, q: PlannedQuery) -> tuple[PlannedQuery, list[Series], str]:
    """Return (the query as asked, its answer, why it was coarsened or ""): a query with a follow-up is asked
    in two on the same grid, the second from the first's answer, and answers as its one `promql` would; a
    query with a gate is not asked when its gate answers nothing (its answer is then empty)."""
    if q.gate and not _moved(client, q):
        return q, [], ""
    if q.follow_up is None:
        return run_planned(client, q)
    asked, first, why = run_planned(client, replace(q, promql=q.follow_up.first))
    grid = (asked.start, asked.end, float(asked.step or 1.0))
    return replace(asked, promql=q.promql), ask_in_two(client, q.follow_up, q.promql, first, grid), why


def _moved(client: PrometheusClient, q: PlannedQuery) -> bool:
    """Return whether the query's gate finds what it reads moved (or could not tell: the query answers)."""
    try:
        return bool(client.query(q.gate, at=q.end))
    except PrometheusError:
        return True


def _run_queries(
    client: PrometheusClient,
    queries: Sequence[PlannedQuery],
    *,
    concurrency: int,
    should_cancel: Callable[[], bool] | None,
    on_query_done: Callable[[str, bool], None] | None,
) -> tuple[dict[str, Any], dict[str, str], float]:
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    spans: list[tuple[float, float]] = []

    def one(q: PlannedQuery) -> None:
        if should_cancel is not None and should_cancel():
            errors[q.name] = "cancelled"
            if on_query_done:
                on_query_done(q.name, False)
            return
        t0 = time.monotonic()
        try:
            asked, data, why = _ask(client, q)
            results[q.name] = _to_result(asked, data)
            if why:
                results[q.name]["coarsened"] = {"step": asked.step, "asked_step": q.step, "reason": why}
            ok = True
        except PrometheusError as exc:
            errors[q.name] = str(exc) or type(exc).__name__
            ok = False
        finally:
            spans.append((t0, time.monotonic()))
        if on_query_done:
            on_query_done(q.name, ok)

    with ThreadPoolExecutor(
        max_workers=max(1, min(concurrency, len(queries) or 1)), thread_name_prefix="diagnose"
    ) as pool:
        list(pool.map(one, queries))
    return results, errors, _busy(spans)


#: GPUs' series Prometheus may hold at once over the diagnosis queries in flight. A query over every GPU of a
#: large job keeps its matrices (and Go's heap about twice that) until it is answered; on 2 cores the queries
#: are CPU-bound, so fewer in flight cost no time. 8,192 GPUs over 2 h: 8 in flight peaked Prometheus at
#: 2.28 GB, 4 at 1.81 GB, 2 at 1.32 GB (44-47 s either way at load 6; its CPU 24.5-26.5 s).
IN_FLIGHT_GPUS = 16_384


def in_flight(concurrency: int, gpus: int) -> int:
    """Return how many queries to run at once on a source of `gpus` GPUs: `concurrency`, fewer (at least 2)
    when that many queries over every GPU would hold more than IN_FLIGHT_GPUS GPUs' series."""
    return max(min(2, concurrency), min(concurrency, IN_FLIGHT_GPUS // max(gpus, 1)))


#: what one distinct query returned: {(promql, kind, start, end, step): ("ok", result) or ("error", text)}
_Answers = dict[tuple[object, ...], tuple[str, Any]]


def _run_unique(
    client: PrometheusClient,
    plans: Sequence[PlaybookPlan],
    *,
    concurrency: int,
    answers: _Answers | None = None,
) -> tuple[dict[str, Any], dict[str, str], float]:
    """Run every plan's queries, each distinct PromQL (over the same grid) once, whatever its names.

    Playbooks share queries under their own names (`runnable` and `procs_running` read the same series):
    the result of one run is given to every name. `answers` (filled in) keeps what earlier calls ran, which
    is not run again. Returns (results, errors, busy seconds) by query name; raises PrometheusUnreachable
    when every query of this call failed.
    """
    answers = {} if answers is None else answers
    unique: dict[tuple[object, ...], PlannedQuery] = {}
    names: dict[str, tuple[object, ...]] = {}
    for p in plans:
        for q in p.queries:
            key: tuple[object, ...] = (q.promql, q.kind, q.start, q.end, q.step, q.relabel)
            if key not in answers:
                unique.setdefault(key, q)
            names[q.name] = key
    ran, failed, busy_s = _run_queries(
        client, list(unique.values()), concurrency=concurrency, should_cancel=None, on_query_done=None
    )
    for k, q in unique.items():
        answers[k] = ("ok", ran[q.name]) if q.name in ran else ("error", failed[q.name])
    if names and all(answers[k][0] == "error" for k in names.values()):
        raise PrometheusUnreachable(
            f"every diagnosis query failed, e.g. {answers[next(iter(names.values()))][1]}"
        )
    results = {n: answers[k][1] for n, k in names.items() if answers[k][0] == "ok"}
    errors = {n: answers[k][1] for n, k in names.items() if answers[k][0] == "error"}
    return results, errors, busy_s


def _busy(spans: Sequence[tuple[float, float]]) -> float:
    """Return the wall time during which at least one request was in flight (the union of the spans)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def execute(
    client: PrometheusClient,
    plan: PlaybookPlan,
    *,
    concurrency: int = 4,
    should_cancel: Callable[[], bool] | None = None,
    on_query_done: Callable[[str, bool], None] | None = None,
) -> PlaybookOutput:
    """Return the output of one playbook's queries, run in parallel (at most `concurrency` at a time).

    A query that fails keeps its error in `.errors` and the others still run (partial results). When
    `should_cancel()` turns true, queries not yet started are recorded as "cancelled".
    """
    results, errors, spent = _run_queries(
        client,
        plan.queries,
        concurrency=concurrency,
        should_cancel=should_cancel,
        on_query_done=on_query_done,
    )
    return PlaybookOutput(
        name=plan.name,
        results=results,
        errors=errors,
        prometheus_s=round(spent, 4),
        queries=len(plan.queries),
    )
