"""Fetch a job's panels from its Prometheus: every panel's queries in parallel, then its outliers by label."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from playbooks.prometheus import PrometheusClient, PrometheusError

from .context import TimelineContext
from .panels import PANELS, TimelineError
from .promql import _bare_expr, _fmt_seconds, _label_vector, _select
from .queries import DEFAULT_MAX_LINES, DEFAULT_TOPK, budget_note, panel_queries
from .traces import PanelData, _panel_from_results, _scored, _unavailable_message


def panels_fetch(
    client: PrometheusClient,
    ctx: TimelineContext,
    keys: Sequence[str],
    start: float,
    end: float,
    *,
    max_lines: int = DEFAULT_MAX_LINES,
    topk: int = DEFAULT_TOPK,
    hosts: Sequence[str] = (),
    max_concurrency: int = 4,
) -> list[PanelData]:
    """Return the data of each panel over [start, end].

    1. Every panel's range queries and outlier scores, all in parallel.
    2. The top-k outlier series of the band panels, fetched by label, all in parallel.
    """
    if not end > start:
        raise TimelineError(f"empty range: start {start} is not before end {end}")
    plans = []
    for key in keys:
        spec = PANELS.get(key)
        if spec is None:
            raise TimelineError(f"unknown panel {key!r}")
        plans.append(panel_queries(spec, ctx, start, end, max_lines=max_lines, topk=topk, hosts=hosts))
    per_panel: list[dict[str, Any]] = [{} for _ in plans]

    def run(jobs: list[tuple[int, str, Callable[[], Any]]]) -> None:
        results = client.run_parallel([call for _, _, call in jobs], max_concurrency=max_concurrency)
        for (i, role, _), result in zip(jobs, results, strict=True):
            per_panel[i][role] = result

    first: list[tuple[int, str, Callable[[], Any]]] = []
    for i, plan in enumerate(plans):
        for role, promql in plan.queries.items():
            if role == "score":
                first.append((i, role, partial(client.query, promql, end)))
            else:
                first.append((i, role, partial(client.query_range, promql, start, end, plan.step)))
    run(first)
    second: list[tuple[int, str, Callable[[], Any]]] = []
    for i, plan in enumerate(plans):
        scored = per_panel[i].get("score")
        top = (
            []
            if plan.mode != "band" or isinstance(scored, PrometheusError)
            else _scored(scored or [], 0.0, topk)[0]
        )
        if not top:
            continue
        rows = [{n: s.labels.get(n, "") for n in plan.labels} for s in top]
        if plan.bare:
            sig = ctx.profile.signal(plan.spec.signal)
            fn = plan.spec.fn if sig.is_counter else None
            window = _fmt_seconds(max(4 * ctx.interval, plan.step))
            q = " or ".join(
                _bare_expr(replace(sig, selector=_select(sig.selector, r)), fn, window) for r in rows
            )
        else:
            q = f"{plan.expr} and on ({', '.join(plan.labels)}) ({_label_vector(rows)})"
        per_panel[i]["outliers_query"] = q
        second.append((i, "outliers", partial(client.query_range, q, start, end, plan.step)))
    run(second)
    out = []
    for plan, res in zip(plans, per_panel, strict=True):
        if plan.mode == "unavailable":
            panel = PanelData(plan.spec, plan.mode, message=_unavailable_message(ctx.profile, plan.spec))
        else:
            panel = _panel_from_results(plan, res, topk)
        panel.step, panel.start, panel.end = plan.step, start, end
        note = budget_note(ctx, start, end, ctx.series_count(plan.spec)) if plan.mode != "unavailable" else ""
        panel.notes = [note] if note else []
        out.append(panel)
    return out
