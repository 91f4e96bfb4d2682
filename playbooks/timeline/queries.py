"""How a panel is queried over a range: one line per series, or a cluster band plus outlier scores."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from playbooks.prometheus import choose_step

from .context import TimelineContext
from .panels import PanelSpec
from .promql import _bare_ok, _device_expr, _fmt_seconds, _is_selector, _label_vector

#: Above this many series a panel draws a band plus outliers instead of one line per series.
DEFAULT_MAX_LINES = 16
DEFAULT_TOPK = 3
#: Points per series asked of Prometheus, matched to the pixels drawn: a panel's plot is about 1,080 px
#: wide (the page's 1,200 px column less its padding and the y-axis), one point per 2 px; zooming in
#: lowers the step down to the scrape interval. A page that says how wide its plots are (`w`, a narrower
#: window) asks for fewer (`points_for_width`), never more.
QUERY_POINTS = 540
#: Pixels a point: a band or a line drawn at one point per 2 px shows all that the screen can.
PX_PER_POINT = 2
#: Fewest points a panel is asked for, however narrow.
MIN_POINTS = 50
#: Points of the grid the outlier score is computed on: every device's value there is fetched raw (one
#: selector pass, 1,024 GPUs x 121 points is 124,000 samples) and each device's largest deviation from the
#: median is taken on the server, instead of a PromQL subquery evaluating a quantile over every series at
#: every grid point (as costly as the band itself at 1,024 GPUs).
SCORE_POINTS = 150
#: A band whose per-device expression is computed (a counter's rate, a per-device aggregation) is fetched
#: once, one series per device, and split on the server into its min / median / max, the outlier scores and
#: the top-k series, when that is at most this many samples (128 hosts at QUERY_POINTS is 69,000; a JSON
#: sample is about 30 bytes). PromQL would evaluate the expression once per band line and twice per score
#: step; above this, decoding the answer would cost more than that.
SPLIT_MAX_SAMPLES = 150_000


def query_step(
    ctx: TimelineContext, start: float, end: float, series: int = 1, points: int = QUERY_POINTS
) -> float:
    """Return the query step of a range: at most `points` points, never finer than the scrape interval,
    and at most `ctx.max_samples` samples over `series` series (the source's budget per query); never more
    than the view's plots can show (`ctx.points`)."""
    points = min(points, ctx.points) if ctx.points else points
    if ctx.max_samples and series > 0:
        points = max(2, min(points, ctx.max_samples // series))
    return choose_step(start, end, min_step=max(1.0, ctx.interval), max_points=points)


def budget_note(ctx: TimelineContext, start: float, end: float, series: int) -> str:
    """Return what a panel says when the samples budget made its step coarser, else ""."""
    step = query_step(ctx, start, end, series)
    free = query_step(replace(ctx, max_samples=0), start, end, series)
    if step <= free:
        return ""
    return (
        f"Drawn at a {step:g} s step instead of {free:g} s: {series:,} series at the finer step would exceed "
        f"this source's budget of {ctx.max_samples:,} samples a query. Zoom in for detail."
    )


@dataclass(frozen=True)
class PanelPlan:
    """How a panel is queried.

    Attributes:
        spec: the panel.
        mode: "single", "lines", "band" or "unavailable".
        queries: role -> PromQL. Range queries: "line" (every series), "band" (min and max joined by a
            `stat` label; the median comes from the score's grid), "devices" (a band's every device, split on the server instead of "band" and
            "score"), "hosts" (every series of the selected hosts), "score" (every device's series raw on
            the score's coarser grid, `score_grid`: each one's largest deviation from the median there, the
            top-k, the typical score and the band's median line are taken from it in Python).
        step: the range queries' step in seconds.
        score_step: the step of the score's grid (`score_grid`), coarser than `step`.
        expr: the PromQL the outliers are fetched from, by label.
        labels: the labels of its series: normalised ("host", "gpu"), or in band mode the exporter's own
            labels when normalising them would cost a label_replace per series and step.
        rename: (exporter label, normalised label) pairs that turn `labels` into host/gpu.
        bare: the signal has one series per device, so `expr` is the raw selector (rated, scaled) and the
            outliers are fetched by exact label matchers, never evaluating the other series.
    """

    spec: PanelSpec
    mode: str
    queries: dict[str, str]
    step: float
    expr: str = ""
    labels: tuple[str, ...] = ()
    rename: tuple[tuple[str, str], ...] = ()
    bare: bool = False
    score_step: float = 0.0


def score_grid(start: float, end: float, step: float) -> tuple[float, float]:
    """Return (first, last) time of the score's grid: the multiples of `step` in [start, end], where a PromQL
    subquery `[end - start:step]` evaluated at `end` would put them (one time, `end`, for a shorter range)."""
    first, last = math.ceil(start / step) * step, math.floor(end / step) * step
    return (first, last) if first <= last else (end, end)


def panel_queries(
    spec: PanelSpec,
    ctx: TimelineContext,
    start: float,
    end: float,
    *,
    max_lines: int = DEFAULT_MAX_LINES,
    topk: int = DEFAULT_TOPK,
    hosts: Sequence[str] = (),
) -> PanelPlan:
    """Return how to query a panel over [start, end].

    With many series the band's min and max lines come from min_over_time / max_over_time over each
    step (for gauges read straight from a metric), so a spike between two steps still shows; counters
    are rated over at least a step, which covers every sample anyway. The outlier score runs on a
    coarser grid (about SCORE_POINTS points): a sustained deviation is what it looks for; the band's median
    line is drawn on that grid, from the same series. A band whose
    per-device expression is computed (rated or aggregated) and small enough (SPLIT_MAX_SAMPLES) is one
    query of every device instead, split on the server: Prometheus evaluates the expression once.
    """
    profile = ctx.profile
    if not profile.has(spec.signal):
        return PanelPlan(spec, "unavailable", {}, 0.0)
    step = query_step(ctx, start, end, ctx.series_count(spec))
    window = _fmt_seconds(max(4 * ctx.interval, step))
    sig = profile.signal(spec.signal)
    x = profile.expr(spec.signal, spec.fn if sig.is_counter else None, window=window)
    if sig.scope == "job":
        return PanelPlan(spec, "single", {"line": x}, step, x)
    if ctx.series_count(spec) <= max_lines:
        return PanelPlan(spec, "lines", {"line": x}, step, x, sig.labels)
    # Band statistics and scores need one value per device, not normalised labels: group by the
    # exporter's own labels and skip label_replace, which Prometheus runs per series and step (most of
    # the cost at 1,024 GPUs). The few outliers are renamed in Python.
    raw = tuple(sig.host_from if n == "host" else sig.gpu_from for n in sig.labels)
    fn = spec.fn if sig.is_counter else None
    bare = spec.signal in ctx.unique and _bare_ok(profile, spec.signal)

    mapped = sig.renamed
    if mapped:
        # the host's name comes from node_uname_info, an alias or one of several labels: only the
        # profile's own expression (aggregated by address first) names it
        raw, bare = sig.labels, False

    def _x(f: str | None, w: str) -> str:
        return sig.expr(f, window=w) if mapped else _device_expr(sig, f, w, bare)

    x = _x(fn, window)
    rename = tuple((r, n) for r, n in zip(raw, sig.labels, strict=True) if r != n)
    queries = {}
    if hosts:
        normalised = profile.expr(spec.signal, fn, window=window)
        queries["hosts"] = f"{normalised} and on (host) ({_label_vector([{'host': h} for h in hosts])})"
    edges = not sig.is_counter and _is_selector(sig.selector) and step > ctx.interval
    computed = sig.is_counter or not bare  # rated or aggregated per device: costly to evaluate again
    points = int((end - start) // step) + 1
    if computed and not edges and ctx.series_count(spec) * points <= SPLIT_MAX_SAMPLES:
        return PanelPlan(spec, "band", {"devices": x, **queries}, step, x, raw, rename, bare)
    lo, hi = x, x
    if edges:
        lo = _x("min_over_time", _fmt_seconds(step))
        hi = _x("max_over_time", _fmt_seconds(step))
    band = (
        f'label_replace(min({lo}), "stat", "min", "", "") or label_replace(max({hi}), "stat", "max", "", "")'
    )
    # Every device raw on a coarser grid: the median, each device's largest deviation from it, the top-k and
    # the typical score (which an outlier must stand out from) are taken in Python, so Prometheus reads the
    # series once and runs no quantile per grid point. That median is the band's median line: a quantile
    # across 1,024 GPUs at each of the band's steps was 40 % of the band query's cost, and the pack's median
    # moves slowly (the edges, min and max over each step, keep every spike).
    res = max(step, query_step(ctx, start, end, ctx.series_count(spec), SCORE_POINTS))
    queries = {"band": band, "score": x, **queries}
    return PanelPlan(spec, "band", queries, step, x, raw, rename, bare, score_step=res)
