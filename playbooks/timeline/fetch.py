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
from .queries import DEFAULT_MAX_LINES, DEFAULT_TOPK, PanelPlan, budget_note, panel_queries, score_grid
from .traces import PanelData, Trace, _device_scores, _panel_from_results, _scored, _unavailable_message


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

    Every panel's range queries and outlier scores run in parallel, the costliest first; a band panel's
    top-k outlier series are fetched by label as soon as its scores are in, in the same worker.
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
    jobs: list[tuple[int, str, Callable[[], Any]]] = []
    for i, plan in enumerate(plans):
        for role, promql in plan.queries.items():
            call: Callable[[], Any]
            if role == "score":
                # the top-k by label follow their panel's score in the same worker: no round waits for all
                call = partial(_score_and_outliers, client, ctx, plan, promql, start, end, topk)
            else:
                call = partial(client.query_range, promql, start, end, plan.step)
            jobs.append((i, role, call))
    # Costliest first (the most samples a query reads): the cheap ones fill the cores at the end, so the
    # view does not wait on one long query started last.
    jobs.sort(key=lambda job: -_cost(plans[job[0]], job[1], ctx))
    results = client.run_parallel([call for _, _, call in jobs], max_concurrency=max_concurrency)
    for (i, role, _), result in zip(jobs, results, strict=True):
        if role == "score" and not isinstance(result, PrometheusError):
            result, per_panel[i]["median"], outliers = result
            if outliers is not None:
                per_panel[i]["outliers_query"], per_panel[i]["outliers"] = outliers
        per_panel[i][role] = result
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


def _cost(plan: PanelPlan, role: str, ctx: TimelineContext) -> float:
    """Return a query's relative cost: the series it reads times its points (a band query aggregates twice,
    its min and max, a score reads the series raw on a coarser grid), to start the costliest first."""
    series = max(1, ctx.series_count(plan.spec))
    step = plan.score_step if role == "score" else plan.step
    return (2.0 if role == "band" else 1.0) * series / max(step, 1.0)


def _score_and_outliers(
    client: PrometheusClient,
    ctx: TimelineContext,
    plan: PanelPlan,
    score: str,
    start: float,
    end: float,
    topk: int,
) -> tuple[Any, Trace | None, tuple[str, Any] | None]:
    """Return (every series' score, the band's median trace or None, (the query, the series) of the top-k
    fetched by label or None).

    The scores and the median are taken from every device's series on the score's grid (`_device_scores`).
    The score query raising PrometheusError raises it (the panel shows the error); the top-k's error is
    returned in their place, as any other query's."""
    first, last = score_grid(start, end, plan.score_step)
    scored, median = _device_scores(
        client.query_range(score, first, last, plan.score_step), first, plan.score_step, end
    )
    top = _scored(scored, 0.0, topk)[0]
    if not top:
        return scored, median, None
    rows = [{n: s.labels.get(n, "") for n in plan.labels} for s in top]
    if plan.bare:
        sig = ctx.profile.signal(plan.spec.signal)
        fn = plan.spec.fn if sig.is_counter else None
        window = _fmt_seconds(max(4 * ctx.interval, plan.step))
        q = " or ".join(_bare_expr(replace(sig, selector=_select(sig.selector, r)), fn, window) for r in rows)
    else:
        q = f"{plan.expr} and on ({', '.join(plan.labels)}) ({_label_vector(rows)})"
    try:
        return scored, median, (q, client.query_range(q, start, end, plan.step))
    except PrometheusError as exc:
        return scored, median, (q, exc)
