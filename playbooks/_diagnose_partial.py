"""A query Prometheus gives up on: asked again on a coarser grid, and the diagnosis says what it lacks.

On a loaded head node (or a large job) a range query can hit Prometheus's `--query.timeout` or its
`--query.max-samples`. Its detector then had nothing to judge, and a diagnosis that reads the silence as
health names the wrong class. Instead:

- `run_planned` asks again with a step `COARSEN` times larger (up to `TRIES` times): Prometheus evaluates
  every series at every step, so a coarser grid costs it proportionally less. A window that was tied to
  the step (an `increase` over a step and a scrape) grows with it, so that no increment falls between two
  windows. The result records the grid it was asked on (`coarsened`);
- `note_partial` tells the verdict: each finding judged on a coarser grid says so, the summary names the
  coarsened and the failed queries, the confidence drops, and a healthy verdict with a failed query keeps
  a low confidence (what was not looked at may be the fault).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ._diagnose_types import PlannedQuery, PlaybookOutput
from .analysis import Finding
from .prometheus import PrometheusClient, PrometheusError, PrometheusQueryError, PrometheusTimeout

#: How much coarser each new attempt's grid is, and how many coarser attempts a query gets.
COARSEN = 4
TRIES = 2
#: A coarser grid keeps at least this many points over the window (else the query is not asked again).
MIN_POINTS = 12
#: Prometheus's words when it gave up on a query's size or time (its errorType is then "execution").
_GAVE_UP = ("too many samples", "context deadline exceeded", "query timed out")
#: The confidence a healthy verdict keeps at most when a query failed.
HEALTHY_PARTIAL = 0.3


def gave_up(exc: PrometheusError) -> bool:
    """Return whether Prometheus gave up on the query's size (its timeout, its sample limit): a coarser
    grid may succeed where a malformed query or an unreachable server would not."""
    if isinstance(exc, PrometheusTimeout):
        return "queued too long" not in str(exc)
    # Prometheus reports a timeout met while it selects the series as an execution error
    return isinstance(exc, PrometheusQueryError) and any(m in exc.message for m in _GAVE_UP)


def coarser(q: PlannedQuery, factor: float) -> PlannedQuery | None:
    """Return `q` on a grid `factor` times coarser ending at the same time, or None (an instant query, or
    fewer than MIN_POINTS points left)."""
    if q.kind != "range" or not q.step:
        return None
    step = q.step * factor
    n = math.ceil((q.end - q.start) / step - 1e-9)
    if n + 1 < MIN_POINTS:
        return None
    promql, window = q.promql, q.window_s
    old = f"[{int(math.ceil(window))}s]"
    if window and window < step + (window - q.step) and old in promql:
        # a window as long as a step and a scrape (or more) keeps that overlap on the new grid
        window = window + step - q.step
        promql = promql.replace(old, f"[{int(math.ceil(window))}s]")
    return replace(q, promql=promql, start=q.end - n * step, step=step, window_s=window)


def run_planned(client: PrometheusClient, q: PlannedQuery) -> tuple[PlannedQuery, Any, str]:
    """Return (the query as answered, its data, "" or why it was answered on a coarser grid).

    Raises the last PrometheusError when no grid was answered."""
    asked, why = q, ""
    for attempt in range(TRIES + 1):
        try:
            if asked.kind == "instant":
                return asked, client.query(asked.promql, at=asked.end), why
            return asked, client.query_range(asked.promql, asked.start, asked.end, asked.step), why
        except PrometheusError as exc:
            nxt = coarser(asked, COARSEN) if attempt < TRIES and gave_up(exc) else None
            if nxt is None:
                raise
            why = f"Prometheus gave up on its {q.step:g} s grid ({' '.join(str(exc).split())[:160]})"
            asked = nxt
    raise AssertionError("unreachable")  # pragma: no cover


def note_partial(
    diagnosis: dict[str, Any], findings: list[Finding], outputs: Sequence[PlaybookOutput]
) -> None:
    """Say in the verdict what was judged on a coarser grid and what could not be looked at (in place)."""
    coarse = {
        r["promql"]: (name, r["coarsened"])
        for o in outputs
        for name, r in o.results.items()
        if isinstance(r, dict) and r.get("coarsened")
    }
    for f in findings:
        for ev in f.evidence:
            if ev.get("query") in coarse:
                c = coarse[ev["query"]][1]
                ev["interpretation"] = (
                    f"{ev['interpretation']} (judged on a {c['step']:g} s grid: {c['reason']})"
                )
    if coarse:
        names = ", ".join(sorted(n for n, _ in coarse.values()))
        diagnosis["summary"] += (
            f" {len(coarse)} quer{'y' if len(coarse) == 1 else 'ies'} ({names}) timed out or grew too large "
            "on the usual grid and were judged on a coarser one: a short excursion may be missed."
        )
        diagnosis["confidence"] = round(max(0.05, diagnosis["confidence"] - min(0.2, 0.05 * len(coarse))), 2)
    failed = {name: err for o in outputs for name, err in o.errors.items()}
    if not failed:
        return
    # Partial results: say what could not be looked at, and trust the verdict less.
    names = ", ".join(sorted(failed))
    diagnosis["summary"] += (
        f" {len(failed)} quer{'y' if len(failed) == 1 else 'ies'} failed ({names}): "
        "what they would have shown is missing from this diagnosis."
    )
    diagnosis["confidence"] = round(max(0.05, diagnosis["confidence"] - min(0.4, 0.1 * len(failed))), 2)
    if diagnosis.get("class") == "healthy":
        diagnosis["confidence"] = min(diagnosis["confidence"], HEALTHY_PARTIAL)
    findings.append(
        Finding(
            playbook="exporter_health",
            rule="queries_failed",
            klass="healthy",
            severity="info",
            role="context",
            hosts=[],
            gpus=[],
            onset=None,
            title=f"{len(failed)} queries failed: {names}",
            evidence=[
                {"query": name, "labels": {}, "value": "error", "interpretation": err[:300]}
                for name, err in sorted(failed.items())
            ][:12],
        )
    )
