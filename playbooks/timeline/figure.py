"""A panel's Plotly figure as plain dicts: traces downsampled to a point budget, marks, x-axis in steps
or time (UTC or the viewer's zone)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt

from playbooks.alignment import StepAxis
from playbooks.hostnames import HostNames
from playbooks.plotly_text import hover_literal, plotly_text

from .annotations import Annotation, _num
from .compare import compare_step_note
from .context import TimelineContext
from .panels import XMODES, TimelineError
from .queries import MIN_POINTS, PX_PER_POINT, QUERY_POINTS
from .traces import PanelData, Trace, panel_named

#: Points per trace sent to the browser, and per figure (the payload budget: about 20 bytes a point).
POINTS_PER_TRACE = 800
POINTS_PER_FIGURE = 12_000
#: A figure with fewer points is drawn as SVG (faster to start than WebGL below this, no context limit):
#: above a figure's budget, so a timeline panel is SVG; WebGL is for a caller that asks for more points.
GL_MIN_POINTS = 20_000
#: Points of the step axis's clock (layout.meta.clock): the hover names the time of the step it shows.
CLOCK_POINTS = 1_200
#: A panel's margins around its plot (the y-axis and its title on the left), in px.
MARGIN = {"l": 60, "r": 10, "t": 62, "b": 30}


def points_for_width(width_px: int) -> int:
    """Return the points a panel `width_px` wide on the page can show (`TimelineContext.points`): its plot,
    less the margins, at one point per PX_PER_POINT pixels; at least MIN_POINTS, at most QUERY_POINTS."""
    plot = width_px - MARGIN["l"] - MARGIN["r"]
    return max(MIN_POINTS, min(QUERY_POINTS, plot // PX_PER_POINT))


_COLORS = {"min": "rgba(90,110,140,0.5)", "median": "#3b4a63", "max": "rgba(90,110,140,0.5)"}
_OUTLIER_COLORS = ("#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2")
_TOP_COLORS = ("#74a9cf", "#8c96c6", "#9ebcda")
_COMPARE_COLORS = ("#17becf", "#bcbd22", "#7f7f7f", "#2ca02c")
_MARK_COLORS = {
    "checkpoint": "#9aa5b1",
    "warmup-end": "#2ca02c",
    "restore": "#1f77b4",
    "crash": "#d62728",
    "hang-start": "#ff7f0e",
    "heartbeat-stop": "#9467bd",
    "finding": "#e6550d",
    "note": "#0b7285",
}


def _round_list(values: np.ndarray, digits: int = 5) -> list[float | None]:
    """Return the values rounded to `digits` significant digits as Python's round() does, None for NaN/inf.

    Vectorised (a figure holds tens of thousands of values): k / 10**d is the double round() returns for
    the same decimal k; the few values within a hair of a tie (where the scaled product's own rounding
    could pick the other decimal) or with d > 22 (10**d inexact) go through round() itself.
    """
    v = np.asarray(values, dtype=float)
    out = np.where(v == 0, 0.0, v)
    ok = np.flatnonzero(np.isfinite(v) & (v != 0))
    a = v[ok]
    d = np.maximum(0, digits - 1 - np.floor(np.log10(np.abs(a))))
    scaled = a * 10.0**d
    out[ok] = np.round(scaled) / 10.0**d
    near_tie = np.abs(scaled - np.floor(scaled) - 0.5) < 1e-6
    for i in ok[near_tie | (d > 22)].tolist():
        x = float(v[i])
        out[i] = round(x, max(0, digits - 1 - int(math.floor(math.log10(abs(x))))))
    return [x if math.isfinite(x) else None for x in out.tolist()]


def zone_name(xmode: str, tz_offset_s: float) -> str:
    """Return how a time on this x-axis names its zone: "UTC", or the local offset ("UTC+09:00", "UTC-05:30")."""
    if xmode != "time-local" or not tz_offset_s:
        return "UTC"
    minutes = int(round(tz_offset_s / 60))
    sign = "+" if minutes >= 0 else "-"
    return f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _x_of(
    t: np.ndarray, ctx: TimelineContext, xmode: str, tz_offset_s: float, axis: StepAxis | None = None
) -> np.ndarray:
    if xmode == "step":
        return np.asarray((axis or ctx.axis).step_at(t), dtype=float)
    shift = tz_offset_s if xmode == "time-local" else 0.0
    return (t + shift) * 1000.0


def _gap_times(t: np.ndarray, max_dt: float) -> np.ndarray:
    """Return the times of the last samples before holes longer than max_dt (on the full-resolution data)."""
    if len(t) < 2:
        return np.empty(0)
    return t[:-1][np.diff(t) > max_dt]


def _break_gaps(
    x: np.ndarray, y: np.ndarray, t: np.ndarray, gap_times: np.ndarray
) -> tuple[list[float | None], list[float | None]]:
    """Return x, y lists with None across holes in the samples and where the x-axis goes back (a restore).

    `t` may be downsampled: a break goes between two kept points when a hole of the full data lies
    between them.
    """
    ok = np.isfinite(x)
    x, y, t = x[ok], y[ok], t[ok]
    if len(x) < 2:
        return x.tolist(), _round_list(y)
    holes = np.searchsorted(gap_times, t, side="left")
    cut = np.flatnonzero((np.diff(holes) > 0) | (np.diff(x) < 0)) + 1
    xs = np.insert(x, cut, np.nan)
    ys = np.insert(y, cut, np.nan)
    return _round_list(xs, 7), _round_list(ys)


def _x_value(a: Annotation, ctx: TimelineContext, xmode: str, tz_offset_s: float) -> float | None:
    if xmode == "step":
        if a.step is not None:
            return a.step
        if a.time is None or ctx.axis.empty:
            return None
        # On a step axis, whatever happens after the last step (a crash during a hang) sits on it.
        if a.time > ctx.axis.end:
            return ctx.axis.last_step
        if a.time < ctx.axis.start:
            return ctx.axis.first_step
        return _num(ctx.axis.step_at(a.time))
    t = a.time if a.time is not None else (_num(ctx.axis.time_at(a.step)) if a.step is not None else None)
    if t is None:
        return None
    return (t + (tz_offset_s if xmode == "time-local" else 0.0)) * 1000.0


def figure_build(
    panel: PanelData,
    ctx: TimelineContext,
    *,
    xmode: str = "step",
    annotations: Sequence[Annotation] = (),
    tz_offset_s: float = 0.0,
    points_per_trace: int = POINTS_PER_TRACE,
    points_per_figure: int = POINTS_PER_FIGURE,
    x_range: tuple[float, float] | None = None,
    overlays: Sequence[Trace] = (),
    notes: Sequence[str] = (),
    names: HostNames | None = None,
) -> dict[str, Any]:
    """Return the Plotly figure of one panel as plain dicts (data, layout), with meta for the page.

    The x-axis is the step ("step") or the time in ms ("time-utc"; "time-local" shifted by
    tz_offset_s). Each trace is downsampled to min(points_per_trace, points_per_figure / traces).
    `overlays` are compared jobs' traces (`compare_trace`): on the step axis each is placed through its
    own job's step axis, dashed; on a time axis they are left out and the panel says they need the step
    axis. layout.meta holds the panel key, mode, outliers, the labelled marks (in the order of
    layout.annotations, so a clicked annotation finds its finding), the range and `notes` for the page.
    `names` (`TimelineContext.host_names`) names each host as the diagnosis does in legends, hover text,
    the traces' meta (which a selected finding's hosts are matched against) and the outliers.
    """
    if xmode not in XMODES:
        raise TimelineError(f"x-axis mode must be one of {', '.join(XMODES)}, not {xmode!r}")
    if names is not None:
        panel = panel_named(panel, names)
    notes = [*panel.notes, *notes]
    if overlays and xmode != "step":
        notes.append(compare_step_note([tr.name.removesuffix(" median") for tr in overlays]))
        overlays = ()
    clock: list[tuple[np.ndarray, np.ndarray]] = []
    data = _traces_data(
        panel, ctx, [*panel.traces, *overlays], xmode, tz_offset_s, points_per_trace, points_per_figure, clock
    )
    shapes, texts, marks = _marks_layout(annotations, ctx, xmode, tz_offset_s)
    layout = _layout(panel, xmode, tz_offset_s, x_range)
    layout["shapes"], layout["annotations"] = shapes, texts
    layout["meta"].update(notes=notes, marks=marks)
    if xmode == "step":
        layout["meta"]["clock"] = _step_clock(clock, ctx.axis)
    figure = {"data": data, "layout": layout}
    if xmode != "step":
        _dates_as_text(figure)
    return figure


def _traces_data(
    panel: PanelData,
    ctx: TimelineContext,
    traces: Sequence[Trace],
    xmode: str,
    tz_offset_s: float,
    points_per_trace: int,
    points_per_figure: int,
    clock: list[tuple[np.ndarray, np.ndarray]] | None = None,
) -> list[dict[str, Any]]:
    """Return the Plotly traces of a panel: downsampled, broken across holes, styled by role.

    `clock` receives (x, t) of every drawn point of the job's own traces (not a compared job's).
    """
    budget = max(8, min(points_per_trace, points_per_figure // max(1, len(traces))))
    data: list[dict[str, Any]] = []
    counts = {"outlier": 0, "top": 0, "compare": 0}
    for tr in traces:
        max_dt = max(2.5 * max(tr.step or panel.step, ctx.interval), 3 * ctx.interval)
        holes = _gap_times(tr.t, max_dt)
        t, v = minmax_downsample(tr.t, tr.v, budget)
        xt = _x_of(t, ctx, xmode, tz_offset_s, tr.axis)
        if clock is not None and tr.axis is None:
            clock.append((xt, t))
        x, y = _break_gaps(xt, v, t, holes)
        trace: dict[str, Any] = {
            "type": "scattergl",
            "mode": "lines",
            "name": plotly_text(tr.name),  # TSDB labels are data: never markup Plotly would draw
            "x": x,
            "y": y,
            "meta": {"role": tr.role, **tr.labels},
            "hovertemplate": f"{hover_literal(tr.name)}: %{{y}}<extra></extra>",
        }
        _style(trace, tr, counts.get(tr.role, 0), len(panel.traces))
        if tr.role in counts:
            counts[tr.role] += 1
        data.append(trace)
    # Each WebGL plot costs a context (browsers keep about 16 alive, fewer than a page's 18 panels) and
    # 150-400 ms to start: lines mode at its budget (16 lines, 8,640 points at 128 GPUs) draws in 60-100 ms
    # as SVG in headless Chromium, 150-440 ms as WebGL; only far more points use WebGL.
    if sum(len(d["x"]) for d in data) < GL_MIN_POINTS:
        for d in data:
            d["type"] = "scatter"
    # The band is drawn min first, then max filled down to the previous trace: keep min, max adjacent.
    band = [d for d in data if d["meta"]["role"] in ("min", "max")]
    rest = [d for d in data if d["meta"]["role"] not in ("min", "max")]
    return band + rest


def _style(trace: dict[str, Any], tr: Trace, nth: int, panel_traces: int) -> None:
    """Set a trace's line, name and legend by its role; `nth` counts earlier traces of the same role."""
    if tr.role in ("min", "max", "median"):
        trace["line"] = {"color": _COLORS[tr.role], "width": 2 if tr.role == "median" else 0.5}
        trace["showlegend"] = tr.role == "median"
        if tr.role in ("min", "max"):
            # WebGL traces do not fill between two traces: the band's two edges (a few hundred
            # points each) are SVG, the many-point lines stay WebGL.
            trace["type"] = "scatter"
        if tr.role == "max":
            trace["fill"] = "tonexty"
            trace["fillcolor"] = "rgba(90,110,140,0.28)"
            trace["name"] = "max"
        if tr.role == "median":
            trace["name"] = "median (band: min..max)"
    elif tr.role == "outlier":
        trace["line"] = {"color": _OUTLIER_COLORS[nth % len(_OUTLIER_COLORS)], "width": 2.5}
        trace["name"] = f"{plotly_text(tr.name)} (outlier)"
    elif tr.role == "top":
        # Among the k most deviating but within the outlier bar: drawn for context, not called out.
        trace["line"] = {"color": _TOP_COLORS[nth % len(_TOP_COLORS)], "width": 1.2}
        trace["name"] = f"{plotly_text(tr.name)} (top deviation)"
    elif tr.role == "host":
        trace["line"] = {"width": 1.5, "dash": "dot"}
    elif tr.role == "compare":
        trace["line"] = {"color": _COMPARE_COLORS[nth % len(_COMPARE_COLORS)], "width": 2, "dash": "dash"}
        trace["showlegend"] = True
    else:
        trace["line"] = {"width": 1.2}
        # Many plain lines make a legend taller than the chart: hovering names them instead.
        trace["showlegend"] = panel_traces <= 6


def _step_clock(pairs: Sequence[tuple[np.ndarray, np.ndarray]], axis: StepAxis) -> dict[str, list[Any]]:
    """Return {"x": steps as drawn, "t": unix s of the whole step each rounds to} for the hover.

    On the step axis the hover names the whole step under the pointer and when the job reached it
    (static/timeline.js draws an invisible trace of these points). After a restore a step was reached
    twice: the time kept is the one of the piece the drawn point belongs to.
    """
    if not pairs:
        return {"x": [], "t": []}
    x = np.concatenate([p[0] for p in pairs])
    t = np.concatenate([p[1] for p in pairs])
    ok = np.isfinite(x) & np.isfinite(t)
    x, t = x[ok], t[ok]
    x, first = np.unique(x, return_index=True)
    t = t[first]
    if len(x) > CLOCK_POINTS:
        keep = np.unique(np.linspace(0, len(x) - 1, CLOCK_POINTS).round().astype(int))
        x, t = x[keep], t[keep]
    whole = np.floor(x + 0.5)  # as the hover's ",.0f" rounds
    late = np.asarray(axis.time_at(whole, occurrence="latest"), dtype=float)
    early = np.asarray(axis.time_at(whole, occurrence="earliest"), dtype=float)
    at = np.where(np.abs(late - t) <= np.abs(early - t), late, early)
    at = np.where(np.isfinite(at), at, t)
    return {"x": _round_list(x, 7), "t": [int(round(float(v))) for v in at]}


def _marks_layout(
    annotations: Sequence[Annotation], ctx: TimelineContext, xmode: str, tz_offset_s: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Return (line shapes, label annotations, the labelled marks in the order of the labels)."""
    shapes, texts, marks = [], [], []
    row = 0
    for a in annotations:
        xv = _x_value(a, ctx, xmode, tz_offset_s)
        if xv is None:
            continue
        # Checkpoint labels sit on the first row; the others alternate between two rows above it, so
        # that marks close together (a finding's onset next to the warm-up end) stay readable.
        y = 1.0 if a.kind == "checkpoint" else 1.0 + 0.1 * (1 + row % 2)
        row += a.kind != "checkpoint"
        color = _MARK_COLORS.get(a.kind, "#666")
        dash = "dot" if a.kind == "checkpoint" else "dash"
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": xv,
                "x1": xv,
                "y0": 0,
                "y1": 1,
                "line": {"color": color, "width": 1 if a.kind == "checkpoint" else 1.5, "dash": dash},
            }
        )
        if not a.label:
            continue  # a line without a label (one checkpoint among many); marks[i] stays annotations[i]
        texts.append(
            {
                "x": xv,
                "y": y,
                "xref": "x",
                "yref": "paper",
                "xanchor": "left",
                "yanchor": "bottom",
                "text": plotly_text(a.label),
                "showarrow": False,
                "font": {"size": 9, "color": color},
                "captureevents": a.kind == "finding",
                "textangle": -30 if a.kind == "checkpoint" else 0,
            }
        )
        marks.append(a.to_dict())
    return shapes, texts, marks


def _layout(
    panel: PanelData, xmode: str, tz_offset_s: float, x_range: tuple[float, float] | None
) -> dict[str, Any]:
    """Return a panel's layout (title, axes, legend) with its meta for the page; marks and notes are added after."""
    spec = panel.spec
    is_time = xmode != "step"
    xaxis: dict[str, Any] = {
        "type": "date" if is_time else "linear",
        # No axis title: the toolbar (or a pinned chart's caption) names the x-axis; hover says "step", and
        # a time names its zone (a screenshot pasted into a ticket must say which clock it shows).
        "hoverformat": ".1f" if not is_time else f"%Y-%m-%d %H:%M:%S {zone_name(xmode, tz_offset_s)}",
        "showspikes": True,
        "spikemode": "across",
    }
    if x_range is not None:
        xaxis["range"] = list(x_range)
    title = spec.title + (f" [{spec.unit}]" if spec.unit else "")
    return {
        "title": {"text": plotly_text(title), "font": {"size": 12}, "x": 0.01, "y": 0.98, "yanchor": "top"},
        "height": 270,
        "margin": dict(MARGIN),
        "xaxis": xaxis,
        "yaxis": {"title": {"text": spec.unit}, "zeroline": False},
        "hovermode": "x unified",
        "legend": {"orientation": "h", "y": -0.12, "yanchor": "top", "font": {"size": 10}},
        "shapes": [],
        "annotations": [],
        "meta": {
            "panel": spec.key,
            "domain": spec.domain,
            "mode": panel.mode,
            "message": panel.message,
            "notes": [],
            "outliers": panel.outliers,
            "marks": [],
            "start": panel.start,
            "end": panel.end,
            "step": panel.step,
            "xmode": xmode,
        },
    }


def axis_range(
    ctx: TimelineContext, xmode: str, start: float, end: float, tz_offset_s: float = 0.0
) -> tuple[float, float] | None:
    """Return [start, end] (unix s) in the x-axis's units: steps, or ms (shifted for time-local).

    A zoomed view pins its axis to this: otherwise Plotly's autorange takes in every mark (checkpoints
    and findings of the whole job) and the window shows as a sliver of the job.
    """
    x = _x_of(np.asarray([start, end], dtype=float), ctx, xmode, tz_offset_s)
    if not np.isfinite(x).all() or x[1] <= x[0]:
        return None
    return float(x[0]), float(x[1])


def _dates_as_text(figure: dict[str, Any]) -> None:
    """Write a time axis's x values (ms) as zone-less date strings, in place.

    Plotly shows a number on a date axis as the *browser's* local time of those milliseconds, but a date
    string as written. The strings are the wall time we mean (UTC, or already shifted to the viewer's
    zone for time-local), so every browser shows the same clock, and a pinned chart opened in another
    zone shows what was pinned.
    """
    for trace in figure["data"]:
        trace["x"] = _iso_dates(trace["x"])
    layout = figure["layout"]
    for shape in layout.get("shapes") or ():
        shape["x0"], shape["x1"] = _iso_dates([shape["x0"], shape["x1"]])
    for note in layout.get("annotations") or ():
        note["x"] = _iso_dates([note["x"]])[0]
    if "range" in layout["xaxis"]:
        layout["xaxis"]["range"] = _iso_dates(layout["xaxis"]["range"])


def _iso_dates(values: Sequence[float | None]) -> list[str | None]:
    """Return ms since the epoch as "YYYY-MM-DDTHH:MM:SS[.mmm]" (whole seconds when all are), None kept."""
    ms = np.array([np.nan if v is None else v for v in values], dtype=float)
    ok = np.isfinite(ms)
    out = np.full(len(ms), None, dtype=object)
    if ok.any():
        whole = np.round(ms[ok]).astype(np.int64)
        unit: Literal["s", "ms"] = "s" if not (whole % 1000).any() else "ms"
        stamps = cast("npt.NDArray[np.datetime64]", whole.astype("datetime64[ms]"))
        out[ok] = np.datetime_as_string(stamps, unit=unit)
    return out.tolist()


def minmax_downsample(t: np.ndarray, v: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """Return (t, v) thinned to at most about `budget` points, keeping each bucket's min and max.

    The points are split into budget/2 buckets of equal count; each bucket keeps the indices of its
    smallest and largest value (in time order), so every spike up or down survives. The first and last
    points are always kept.
    """
    n = len(t)
    if n <= budget or budget < 4:
        return t, v
    buckets = max(1, (budget - 2) // 2)
    width = int(math.ceil(n / buckets))
    padded = np.full(buckets * width, np.nan)
    padded[:n] = v
    grid = padded.reshape(buckets, width)
    lo = np.where(np.isnan(grid), np.inf, grid).argmin(axis=1)
    hi = np.where(np.isnan(grid), -np.inf, grid).argmax(axis=1)
    base = np.arange(buckets) * width
    keep = np.unique(np.concatenate([[0, n - 1], base + lo, base + hi]))
    keep = keep[keep < n]
    return t[keep], v[keep]
