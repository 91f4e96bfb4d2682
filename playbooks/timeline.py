"""Step-aligned, cross-domain timeline panels that stay small at 1,024 GPUs.

A timeline is a stack of panels, one semantic signal each (see `PANELS`), grouped by domain (training,
GPU, network, host) and sharing one x-axis: the training step, or the time in UTC or the viewer's zone.

Each panel aggregates in Prometheus, never in Python:

- job-scope signals (training gauges) are one line;
- with few hosts or GPUs (<= `max_lines` series) every series is one line, and the ones that deviate
  most from the median of the others are named as outliers;
- with many, the panel draws a cluster band (min / median / max across hosts or GPUs) and only the
  top-k outlier series, ranked by their largest deviation from the median over the whole window
  (`topk(k, max_over_time(abs(x - scalar(quantile(0.5, x)))[window:step] @ end()))`, one query whose
  selection Prometheus evaluates once), so one hot GPU among 1,024 is drawn and named.

Other jobs of an investigation (a baseline, a run to compare) are drawn over a panel by training step:
one trace per job computed by its own Prometheus (the series for job-scope signals, else
`quantile(0.5, ...)` across hosts/GPUs), placed through its own step axis (`compare_fetch`,
`figure_build(overlays=...)`); on a time axis they are left out and the panel says so.

Points are downsampled on the server to a budget per trace with min/max per bucket (spikes survive),
and the budget shrinks so that a figure stays under its payload budget. Figures are Plotly JSON as
plain dicts (SVG `scatter`, or `scattergl` above GL_MIN_POINTS points), with vertical annotations: checkpoints, warm-up end, restores, crash, hang
start, heartbeat stop and each finding's onset.

Usage::

    ctx = context_build(client, profile, start, end, triage=triage_dict)
    panels = panels_fetch(client, ctx, ["gpu_temp", "loss"], start, end)
    fig = figure_build(panels[0], ctx, xmode="step", annotations=annotations_build(ctx, triage, findings))
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .alignment import StepAxis, step_axis_from_series
from .profiles import DOMAINS, Profile, ProfileError, signal_info
from .prometheus import PrometheusClient, PrometheusError, Series, choose_step

__all__ = [
    "DEFAULT_MAX_LINES",
    "PANELS",
    "XMODES",
    "Annotation",
    "CompareJob",
    "PanelData",
    "PanelSpec",
    "TimelineContext",
    "TimelineError",
    "Trace",
    "annotations_build",
    "compare_fetch",
    "compare_query",
    "compare_range",
    "compare_step_note",
    "compare_trace",
    "context_build",
    "default_panels",
    "figure_build",
    "minmax_downsample",
    "panel_queries",
    "panels_fetch",
    "parse_panels",
    "step_window",
]

XMODES = ("step", "time-utc", "time-local")
#: Above this many series a panel draws a band plus outliers instead of one line per series.
DEFAULT_MAX_LINES = 16
DEFAULT_TOPK = 3
#: Points per trace sent to the browser, and per figure (the payload budget: about 20 bytes a point).
POINTS_PER_TRACE = 800
POINTS_PER_FIGURE = 12_000
#: A figure with fewer points is drawn as SVG (faster to start than WebGL below this, no context limit).
GL_MIN_POINTS = 5_000
#: Points per series asked of Prometheus; zooming in lowers the step down to the scrape interval.
QUERY_POINTS = 720
#: Points of the grid the outlier score is computed on.
SCORE_POINTS = 150
#: An outlier's score (largest deviation from the median) must exceed this many times the typical one:
#: with 16 GPUs a noisy one peaks at about twice the typical deviation.
OUTLIER_FACTOR = 3.0
MAX_CHECKPOINT_MARKS = 60
MAX_CHECKPOINT_LABELS = 10


class TimelineError(Exception):
    """A panel or view cannot be built: unknown panel, bad x-axis mode or range."""


@dataclass(frozen=True)
class PanelSpec:
    """One panel: a semantic signal on its own y-axis.

    Attributes:
        key: the panel's name in URLs, the signal's name ("gpu_temp").
        signal: the semantic signal (`playbooks.profiles.SIGNALS`).
        domain: training, gpu, network or host.
        title, unit: for the chart; counters are shown per second.
        core: part of every timeline (a profile lacking it says so); False for vendor extras, shown only
            when the profile has them.
        fn: the function applied to a counter ("rate", "increase"); None for gauges.
        min_outlier: the smallest deviation from the median worth naming, in the panel's unit. Whole-number
            counts (runnable or blocked processes) tie at the median on most hosts, so the typical score
            is 0 and one process more would otherwise name a host.
    """

    key: str
    signal: str
    domain: str
    title: str
    unit: str
    core: bool = True
    fn: str | None = None
    min_outlier: float = 0.0


def _spec(signal: str, *, core: bool = True, title: str = "", min_outlier: float = 0.0) -> PanelSpec:
    info = signal_info(signal)
    counter = info["kind"] == "counter"
    unit = f"{info['unit']}/s" if counter and info["unit"] else info["unit"]
    return PanelSpec(
        key=signal,
        signal=signal,
        domain=info["domain"],
        title=title or (f"{info['title']} (rate)" if counter else info["title"]),
        unit=unit,
        core=core,
        fn="rate" if counter else None,
        min_outlier=min_outlier,
    )


#: Every panel, in stacking order.
PANELS: dict[str, PanelSpec] = {
    s.key: s
    for s in (
        _spec("loss"),
        _spec("grad_norm"),
        _spec("step_time"),
        _spec("tokens_per_sec"),
        _spec("learning_rate"),
        _spec("gpu_power"),
        _spec("gpu_temp"),
        _spec("gpu_clock"),
        _spec("gpu_util"),
        _spec("gpu_vram_used"),
        _spec("tcp_retransmits"),
        _spec("rdma_retransmits"),
        _spec("rdma_ack_timeouts"),
        _spec("rdma_transmit_wait", core=False, title="InfiniBand transmit wait (rate)"),
        _spec("rdma_link_error_recovery", core=False, title="InfiniBand link error recoveries (rate)"),
        _spec("rdma_link_downed", core=False, title="InfiniBand link downed (rate)"),
        _spec("io_pressure"),
        _spec("mem_used"),
        _spec("procs_running", min_outlier=2.0),
        _spec("procs_blocked", min_outlier=2.0),
        _spec("oom_kills"),
    )
}


#: The training panel every finding's view starts with: how the job paid for what the evidence shows.
FINDING_CONTEXT_PANELS = ("step_time",)
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def finding_panels(playbook: str, rule: str, playbooks: Mapping[str, Any] | None = None) -> list[str]:
    """Return the panels that show a finding's evidence: step time, then the signals its rule reads.

    Read from the playbook's declaration (the rule's queries and their signals, templates' `{signal}`
    placeholders included), in stacking order; a rule or playbook not found gives its whole playbook's
    signals, or only the context panel. `rule` is "<playbook>.<rule id>" as findings store it, or the id.
    """
    if playbooks is None:
        from .loader import load_playbooks  # the loader imports the profiles, not this module

        playbooks = load_playbooks()
    pb = playbooks.get(playbook)
    signals: set[str] = set()
    if pb is not None:
        rid = rule[len(playbook) + 1 :] if rule.startswith(playbook + ".") else rule
        spec = next((r for r in pb.rules if r.id == rid), None)
        names = set(spec.queries) if spec is not None else {q.name for q in pb.queries}
        for q in pb.queries:
            if q.name in names:
                signals |= {q.signal} if q.signal else set(_PLACEHOLDER.findall(q.promql)) - {"window"}
    wanted = set(FINDING_CONTEXT_PANELS) | signals
    return [k for k in PANELS if k in wanted]


def default_panels(profile: Profile) -> list[str]:
    """Return the panels of a timeline for this profile: every core panel plus the extras it exports."""
    return [k for k, s in PANELS.items() if s.core or profile.has(s.signal)]


def parse_panels(text: str | Iterable[str] | None, profile: Profile) -> list[str]:
    """Return panel keys from "a,b,c" (or a list) in stacking order; empty or None gives the defaults."""
    if text is None:
        return default_panels(profile)
    items = [p.strip() for p in (text.split(",") if isinstance(text, str) else text) if p.strip()]
    if not items:
        return default_panels(profile)
    unknown = [p for p in items if p not in PANELS]
    if unknown:
        raise TimelineError(f"unknown panel(s): {', '.join(unknown)}; known: {', '.join(PANELS)}")
    return [k for k in PANELS if k in items]


# --- Context ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimelineContext:
    """What every panel of one job shares, read once per view.

    Attributes:
        profile: the job's metric profile.
        start, end: the job's data range, unix seconds.
        axis: wall time <-> step.
        interval: the scrape interval in seconds (the finest useful step).
        gpu_series, host_series: how many (host, gpu) and host series the job has.
        warmup_end: unix seconds the learning rate reached its peak after a warm-up, or None.
        queries: how many Prometheus queries building it took.
        unique: signals whose raw selector has at most one series per host (and GPU) over the whole
            range: their band queries skip the per-device aggregation (5x cheaper at 1,024 GPUs).
    """

    profile: Profile
    start: float
    end: float
    axis: StepAxis
    interval: float = 15.0
    gpu_series: int = 0
    host_series: int = 0
    warmup_end: float | None = None
    queries: int = 0
    unique: frozenset[str] = frozenset()

    def series_count(self, spec: PanelSpec) -> int:
        scope = signal_info(spec.signal)["scope"]
        return {"gpu": self.gpu_series, "host": self.host_series}.get(scope, 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile.name,
            "start": self.start,
            "end": self.end,
            "interval": self.interval,
            "gpu_series": self.gpu_series,
            "host_series": self.host_series,
            "warmup_end": self.warmup_end,
            "unique": sorted(self.unique),
            "axis": self.axis.to_dict(),
        }


def _count_query(profile: Profile, signal: str, by: str) -> str | None:
    if not profile.has(signal):
        return None
    return f"count(group by ({by}) ({profile.expr(signal, window='5m')}))"


def _bare_ok(profile: Profile, signal: str) -> bool:
    """Return True if a signal can be queried without its per-device aggregation when its series are unique."""
    if not profile.has(signal):
        return False
    sig = profile.signal(signal)
    return sig.scope in ("gpu", "host") and not sig.fill_filter and _is_selector(sig.selector)


def _unique_query(profile: Profile, keys: Iterable[str], span: float) -> str | None:
    """Return one instant query: per signal, the most series any one device had over the whole span.

    present_over_time counts a series replaced during the span (a restarted exporter) as a second one,
    so such a signal keeps its aggregation.
    """
    parts = []
    for key in keys:
        if not _bare_ok(profile, key):
            continue
        sig = profile.signal(key)
        raw = ", ".join(sig.host_from if n == "host" else sig.gpu_from for n in sig.labels)
        parts.append(
            f"label_replace(max(count by ({raw}) (present_over_time({sig.selector}[{_fmt_seconds(span)}]))), "
            f'"stepwise_signal", "{key}", "", "")'
        )
    return " or ".join(parts) or None


def _warmup_end(series: list[Series]) -> float | None:
    """Return when the learning rate first reached 99 % of its peak, if it started below half of it."""
    if not series or not series[0].values:
        return None
    t = np.asarray(series[0].timestamps)
    v = np.asarray(series[0].values)
    ok = np.isfinite(v)
    t, v = t[ok], v[ok]
    if len(v) < 3 or v.max() <= 0 or v[0] >= 0.5 * v.max():
        return None
    return float(t[int(np.argmax(v >= 0.99 * v.max()))])


def context_build(
    client: PrometheusClient, profile: Profile, start: float, end: float, *, max_concurrency: int = 4
) -> TimelineContext:
    """Return the shared context of a job's timeline over its data range [start, end] (5 queries, in parallel).

    1. The step signal at the finest legal step: the step axis.
    2. Series counts of a GPU-scope and a host-scope signal: lines or band.
    3. Samples per 10 minutes of a host gauge: the scrape interval.
    4. The learning rate: the end of the warm-up.
    """
    if not end > start:
        raise TimelineError(f"the data range is empty ({start} .. {end})")
    fine = choose_step(start, end, min_step=1.0, max_points=5000)
    coarse = max((end - start) / 8, 1.0)
    calls: list[Callable[[], Any]] = []
    names: list[str] = []

    def add(name: str, call: Callable[[], Any]) -> None:
        names.append(name)
        calls.append(call)

    if profile.has("step"):
        add("step", lambda: client.query_range(profile.expr("step"), start, end, fine))
    for name, signal, by in (("gpus", "gpu_temp", "host, gpu"), ("hosts", "procs_running", "host")):
        q = _count_query(profile, signal, by)
        if q:
            add(name, lambda q=q: client.query_range(q, start, end, coarse))
    if profile.has("procs_running"):
        sel = profile.signal("procs_running").selector
        add("interval", lambda: client.query(f"max(count_over_time({sel}[10m]))", end))
    if profile.has("learning_rate"):
        add("lr", lambda: client.query_range(profile.expr("learning_rate"), start, end, fine))
    uq = _unique_query(profile, (s.signal for s in PANELS.values()), end - start)
    if uq:
        add("unique", lambda: client.query(uq, end))
    results = dict(zip(names, client.run_parallel(calls, max_concurrency=max_concurrency), strict=True))
    # Without the step axis or the series counts every panel would be drawn wrongly (one line per GPU at
    # 1,024 GPUs): fail the whole timeline instead, with Prometheus's own reason.
    for name in ("step", "gpus", "hosts"):
        if isinstance(results.get(name), PrometheusError):
            raise results[name]
    ok = {k: v for k, v in results.items() if not isinstance(v, PrometheusError)}

    def peak(name: str) -> int:
        series = ok.get(name) or []
        return int(max((max(s.values) for s in series if s.values), default=0))

    interval = 15.0
    samples = ok.get("interval")
    if samples and samples[0].value > 1:
        interval = max(1.0, round(600.0 / (samples[0].value - 1), 1))
    return TimelineContext(
        profile=profile,
        start=start,
        end=end,
        axis=step_axis_from_series(ok.get("step") or []),
        interval=interval,
        gpu_series=peak("gpus"),
        host_series=peak("hosts"),
        warmup_end=_warmup_end(ok.get("lr") or []),
        queries=len(calls),
        unique=frozenset(
            s.labels.get("stepwise_signal", "") for s in ok.get("unique") or () if 0 < s.value <= 1
        ),
    )


# --- Queries and panel data ------------------------------------------------------------------------


@dataclass
class Trace:
    """One drawn series of a panel.

    Attributes:
        name: legend text ("dgx034 GPU 1", "median").
        role: "line" (one series), "min" / "median" / "max" (the band) or "outlier".
        labels: normalised labels ({"host": .., "gpu": ..}).
        t, v: unix seconds and values.
        score: the outlier's largest deviation from the median, in the panel's unit.
        axis: a compared job's own step axis, which maps its times to steps (None: the panel's job's).
        step: the query step of a compared job's trace (0: the panel's).
    """

    name: str
    role: str
    labels: dict[str, str]
    t: np.ndarray
    v: np.ndarray
    score: float | None = None
    axis: StepAxis | None = field(default=None, repr=False)
    step: float = 0.0


@dataclass
class PanelData:
    """A panel's data, ready to be drawn.

    Attributes:
        spec: the panel.
        mode: "single" (job scope), "lines", "band", "unavailable" or "error".
        traces: drawn series.
        outliers: [{host, gpu?, score}] ranked by deviation from the median, largest first.
        message: why the panel is empty (unavailable signal, query error).
        queries: the PromQL sent.
        step: the query step in seconds.
        start, end: the range queried.
    """

    spec: PanelSpec
    mode: str
    traces: list[Trace] = field(default_factory=list)
    outliers: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    queries: list[str] = field(default_factory=list)
    step: float = 0.0
    start: float = 0.0
    end: float = 0.0


def _fmt_seconds(seconds: float) -> str:
    return f"{max(1, int(math.ceil(seconds)))}s"


def query_step(ctx: TimelineContext, start: float, end: float) -> float:
    """Return the query step of a range: at most QUERY_POINTS points, never finer than the scrape interval."""
    return choose_step(start, end, min_step=max(1.0, ctx.interval), max_points=QUERY_POINTS)


@dataclass(frozen=True)
class PanelPlan:
    """How a panel is queried.

    Attributes:
        spec: the panel.
        mode: "single", "lines", "band" or "unavailable".
        queries: role -> PromQL. Range queries: "line" (every series), "band" (min, median and max joined
            by a `stat` label), "hosts" (every series of the selected hosts). Instant query at the range's
            end: "score" (the top-k series by their largest deviation from the median over the range).
        step: the range queries' step in seconds.
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


def _is_selector(text: str) -> bool:
    """Return True for `name` or `name{...}`: a *_over_time function applies without a subquery."""
    head, _, rest = text.strip().partition("{")
    return head.replace("_", "").replace(":", "").isalnum() and (not rest or rest.endswith("}"))


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
    coarser grid (about SCORE_POINTS points): a sustained deviation is what it looks for.
    """
    profile = ctx.profile
    if not profile.has(spec.signal):
        return PanelPlan(spec, "unavailable", {}, 0.0)
    step = query_step(ctx, start, end)
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

    def _x(f: str | None, w: str) -> str:
        return _device_expr(sig, f, w, bare)

    x = _x(fn, window)
    lo, hi = x, x
    if not sig.is_counter and _is_selector(sig.selector) and step > ctx.interval:
        lo = _x("min_over_time", _fmt_seconds(step))
        hi = _x("max_over_time", _fmt_seconds(step))
    band = (
        f'label_replace(min({lo}), "stat", "min", "", "") or '
        f'label_replace(quantile(0.5, {x}), "stat", "median", "", "") or '
        f'label_replace(max({hi}), "stat", "max", "", "")'
    )
    res = choose_step(start, end, min_step=step, max_points=SCORE_POINTS)
    span = _fmt_seconds(end - start)
    dev = f"max_over_time((abs({x} - scalar(quantile(0.5, {x}))))[{span}:{_fmt_seconds(res)}])"
    # The typical series' score comes along, labelled stat="median": an outlier must stand out from it.
    score = f'topk({int(topk)}, {dev}) or label_replace(quantile(0.5, {dev}), "stat", "median", "", "")'
    queries = {"band": band, "score": score}
    if hosts:
        normalised = profile.expr(spec.signal, fn, window=window)
        queries["hosts"] = f"{normalised} and on (host) ({_label_vector([{'host': h} for h in hosts])})"
    rename = tuple((r, n) for r, n in zip(raw, sig.labels, strict=True) if r != n)
    return PanelPlan(spec, "band", queries, step, x, raw, rename, bare)


def _device_expr(sig: Any, fn: str | None, window: str, bare: bool) -> str:
    """Return one series per device (host, or host and GPU) under the exporter's own labels.

    One series per device already (`bare`): the raw selector is the per-device value, no aggregation.
    """
    if bare:
        return _bare_expr(sig, fn, window)
    plain = replace(sig, host_from="host", gpu_from="gpu" if sig.scope == "gpu" else "")
    raw = tuple(sig.host_from if n == "host" else sig.gpu_from for n in sig.labels)
    return plain.expr(fn, window=window, by=raw)


def _bare_expr(sig: Any, fn: str | None, window: str) -> str:
    """Return a signal's per-series PromQL without aggregation (a counter rated, a gauge as is), scaled."""
    if sig.is_counter:
        inner = f"{fn or 'rate'}({sig.selector}[{window}])"
    elif fn:
        inner = f"{fn}({sig.selector}[{window}])"
    else:
        inner = sig.selector
    return f"({inner}) * {sig.scale:g}" if sig.scale != 1.0 else inner


def _select(selector: str, labels: Mapping[str, str]) -> str:
    """Return a simple selector with exact label matchers added: `m{a="1"}` + {b: 2} -> `m{a="1", b="2"}`."""
    extra = ", ".join(f'{k}="{_escape_matcher(v)}"' for k, v in labels.items())
    head, brace, rest = selector.strip().partition("{")
    if not brace:
        return f"{head}{{{extra}}}"
    body = rest[:-1].strip()
    return f"{head}{{{body + ', ' if body else ''}{extra}}}"


def _escape_matcher(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _label_vector(rows: Sequence[Mapping[str, str]]) -> str:
    """Return PromQL for a vector with one sample per label set: `x and on (...) (it)` keeps those series."""
    parts = []
    for row in rows:
        expr = "vector(1)"
        for name, value in row.items():
            expr = f'label_replace({expr}, "{name}", "{_escape(value)}", "", "")'
        parts.append(expr)
    return " or ".join(parts)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$")


def _series_name(labels: Mapping[str, str]) -> str:
    host, gpu = labels.get("host", ""), labels.get("gpu")
    if gpu is not None and host:
        return f"{host} GPU {gpu}"
    return host or "value"


def _rank_outliers(traces: list[Trace], topk: int, floor: float = 0.0) -> list[Trace]:
    """Return the traces deviating most from the per-timestamp median of all of them (largest first)."""
    if len(traces) < 3:
        return []
    times = np.unique(np.concatenate([tr.t for tr in traces]))
    grid = np.full((len(traces), len(times)), np.nan)
    for i, tr in enumerate(traces):
        grid[i, np.searchsorted(times, tr.t)] = tr.v
    with np.errstate(all="ignore"):
        median = np.nanmedian(grid, axis=0)
        dev = np.abs(grid - median)
        scores = np.where(
            np.isnan(dev).all(axis=1), -np.inf, np.nanmax(np.where(np.isnan(dev), -np.inf, dev), axis=1)
        )
    finite = scores[np.isfinite(scores)]
    bar = _outlier_bar(float(np.median(finite)), floor) if len(finite) else math.inf
    order = np.argsort(-scores, kind="stable")
    out = []
    for i in order[:topk]:
        if scores[i] > bar:
            traces[i].score = float(scores[i])
            out.append(traces[i])
    return out


def _outlier_bar(typical: float, floor: float = 0.0) -> float:
    """Return the score an outlier must exceed: OUTLIER_FACTOR x the typical (median) series' score.

    Series that differ only by noise score alike, so none clears the bar; when most series are flat
    (a counter that only one host increments), the typical score is 0 and any deviation above the
    panel's floor (`PanelSpec.min_outlier`) counts.
    """
    return max(0.0, OUTLIER_FACTOR * typical, floor)


_PORT = re.compile(r"^(.+?)(?::[0-9]+)?$")


def _normalise(labels: Mapping[str, str], rename: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Return labels with the exporter's host/GPU labels renamed to host/gpu (an instance loses its port)."""
    out = dict(labels)
    for raw, norm in rename:
        value = out.pop(raw, "")
        out[norm] = _PORT.sub(r"\1", value) if raw == "instance" else value
    return out


def _to_trace(s: Series, role: str, rename: Sequence[tuple[str, str]] = ()) -> Trace:
    labels = {k: v for k, v in _normalise(s.labels, rename).items() if k in ("host", "gpu")}
    return Trace(
        _series_name(labels), role, labels, np.asarray(s.timestamps), np.asarray(s.values, dtype=float)
    )


def _outlier_dict(tr: Trace) -> dict[str, Any]:
    return {**tr.labels, "name": tr.name, "score": tr.score}


def _unavailable_message(profile: Profile, spec: PanelSpec) -> str:
    try:
        profile.signal(spec.signal)
    except ProfileError as exc:
        return f"Not available: {exc}."
    return "Not available."


def _panel_from_results(plan: PanelPlan, results: dict[str, Any], topk: int) -> PanelData:
    spec, mode = plan.spec, plan.mode
    queries = list(plan.queries.values()) + (
        [results["outliers_query"]] if "outliers_query" in results else []
    )
    errors = [r for r in results.values() if isinstance(r, PrometheusError)]
    if errors:
        return PanelData(spec, "error", message=str(errors[0]), queries=queries)
    panel = PanelData(spec, mode, queries=queries)
    if mode in ("single", "lines"):
        traces = [_to_trace(s, "line") for s in results["line"] if s.timestamps]
        traces.sort(key=lambda tr: (tr.labels.get("host", ""), int(tr.labels.get("gpu", "0") or 0)))
        if mode == "single":
            for tr in traces:
                tr.name = spec.title
        else:
            for tr in _rank_outliers(traces, topk, plan.spec.min_outlier):
                tr.role = "outlier"
                panel.outliers.append(_outlier_dict(tr))
        panel.traces = traces
    else:
        by_stat = {s.labels.get("stat"): s for s in results["band"]}
        for stat in ("min", "median", "max"):
            if stat in by_stat:
                tr = _to_trace(by_stat[stat], stat)
                tr.name = stat
                panel.traces.append(tr)
        scored, bar = _scored(results.get("score") or [], plan.spec.min_outlier)
        scores = {_key(s.labels, plan.labels): s.value for s in scored}
        outliers = []
        for s in results.get("outliers") or []:
            if not s.timestamps:
                continue
            tr = _to_trace(s, "top", plan.rename)
            tr.score = scores.get(_key(s.labels, plan.labels), 0.0)
            if tr.score > bar:
                tr.role = "outlier"
            outliers.append(tr)
        outliers.sort(key=lambda tr: -(tr.score or 0.0))
        panel.traces += outliers[:topk]
        panel.outliers = [_outlier_dict(tr) for tr in outliers[:topk] if tr.role == "outlier"]
        seen = {(tr.labels.get("host"), tr.labels.get("gpu")) for tr in outliers}
        for s in results.get("hosts") or []:
            tr = _to_trace(s, "host")
            if s.timestamps and (tr.labels.get("host"), tr.labels.get("gpu")) not in seen:
                panel.traces.append(tr)
    if not panel.traces:
        panel.message = "no data in this range"
    return panel


def _key(labels: Mapping[str, str], names: Sequence[str]) -> tuple[str, ...]:
    return tuple(labels.get(n, "") for n in names)


def _scored(samples: Sequence[Any], floor: float = 0.0) -> tuple[list[Any], float]:
    """Return (the top-k scored series that deviate at all, the outlier bar from the typical score).

    The score query returns the top-k series and the typical (stat="median") score: the top-k are
    drawn, and those above the bar are named as outliers.
    """
    typical = [s.value for s in samples if s.labels.get("stat") == "median" and math.isfinite(s.value)]
    bar = _outlier_bar(typical[0] if typical else 0.0, floor)
    return [s for s in samples if "stat" not in s.labels and math.isfinite(s.value) and s.value > 0], bar


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
                first.append((i, role, lambda q=promql: client.query(q, end)))
            else:
                first.append((i, role, lambda q=promql, st=plan.step: client.query_range(q, start, end, st)))
    run(first)
    second: list[tuple[int, str, Callable[[], Any]]] = []
    for i, plan in enumerate(plans):
        scored = per_panel[i].get("score")
        if plan.mode != "band" or isinstance(scored, PrometheusError) or not _scored(scored or [])[0]:
            continue
        rows = [{n: s.labels.get(n, "") for n in plan.labels} for s in _scored(scored)[0]]
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
        second.append((i, "outliers", lambda q=q, st=plan.step: client.query_range(q, start, end, st)))
    run(second)
    out = []
    for plan, res in zip(plans, per_panel, strict=True):
        if plan.mode == "unavailable":
            panel = PanelData(plan.spec, plan.mode, message=_unavailable_message(ctx.profile, plan.spec))
        else:
            panel = _panel_from_results(plan, res, topk)
        panel.step, panel.start, panel.end = plan.step, start, end
        out.append(panel)
    return out


# --- Compared jobs: other runs drawn over the panel, aligned by training step ------------------------


@dataclass(frozen=True)
class CompareJob:
    """Another job drawn over a timeline's panels (a baseline, a run to compare).

    Attributes:
        job_id: its id, for the legend.
        role: its role in the investigation ("baseline", "compare").
        ctx: its own timeline context (profile, data range, step axis), on its own data source.
    """

    job_id: str
    role: str
    ctx: TimelineContext

    @property
    def label(self) -> str:
        return f"{self.job_id} ({self.role})"


def compare_step_note(labels: Sequence[str]) -> str:
    """Return what a panel says when compared jobs are asked for on a time axis: they align by step only."""
    return (
        f"The overlay of {', '.join(labels)} needs the step axis: runs are compared by training step, "
        "not by clock. Switch the x-axis to step to draw it."
    )


def step_window(axis: StepAxis, start: float, end: float) -> tuple[float, float] | None:
    """Return the smallest and largest step a job reaches over [start, end], or None when it has none there."""
    if axis.empty or not end > start:
        return None
    steps = np.asarray(axis.step_at(np.linspace(start, end, 257)))
    steps = steps[np.isfinite(steps)]
    if not len(steps):
        return None
    return float(steps.min()), float(steps.max())


def compare_range(ctx: TimelineContext, steps: tuple[float, float] | None) -> tuple[float, float] | None:
    """Return the time range of a compared job holding `steps` (lo, hi) through its own step axis.

    None for `steps` gives its whole data range; None is returned when it reaches none of those steps.
    A step below its first (a restored run's) starts at its first step, one above its last ends there.
    """
    if steps is None:
        return ctx.start, ctx.end
    axis = ctx.axis
    lo, hi = sorted(steps)
    if axis.empty or hi < axis.first_step or lo > axis.last_step:
        return None
    t0 = axis.start if lo <= axis.first_step else float(axis.time_at(lo, occurrence="earliest"))
    t1 = axis.end if hi >= axis.last_step else float(axis.time_at(hi))
    t0, t1 = max(ctx.start, t0), min(ctx.end, t1)
    if not (math.isfinite(t0) and math.isfinite(t1) and t1 > t0):
        return None
    return t0, t1


def compare_query(
    spec: PanelSpec, ctx: TimelineContext, start: float, end: float
) -> tuple[str, float] | None:
    """Return (PromQL, step) of a compared job's one trace on a panel, or None when its profile lacks the signal.

    A job-scope signal (loss, step time) is the series itself; a host or GPU signal is the median across
    hosts or GPUs, computed by Prometheus (`quantile(0.5, ...)`) on the compared job's data source.
    """
    profile = ctx.profile
    if not profile.has(spec.signal):
        return None
    step = query_step(ctx, start, end)
    window = _fmt_seconds(max(4 * ctx.interval, step))
    sig = profile.signal(spec.signal)
    fn = spec.fn if sig.is_counter else None
    if sig.scope == "job":
        return profile.expr(spec.signal, fn, window=window), step
    bare = spec.signal in ctx.unique and _bare_ok(profile, spec.signal)
    return f"quantile(0.5, {_device_expr(sig, fn, window, bare)})", step


def compare_trace(
    spec: PanelSpec, job: CompareJob, series: Sequence[Series], step: float = 0.0
) -> Trace | None:
    """Return a compared job's trace from its query's result (role "compare", its own step axis), or None if empty."""
    found = next((s for s in series if s.timestamps), None)
    if found is None:
        return None
    single = signal_info(spec.signal)["scope"] == "job"
    return Trace(
        job.label if single else f"{job.label} median",
        "compare",
        {"job": job.job_id, "job_role": job.role},
        np.asarray(found.timestamps, dtype=float),
        np.asarray(found.values, dtype=float),
        axis=job.ctx.axis,
        step=step,
    )


def compare_fetch(
    client: PrometheusClient,
    job: CompareJob,
    keys: Sequence[str],
    steps: tuple[float, float] | None,
    *,
    max_concurrency: int = 4,
) -> tuple[dict[str, Trace | str], int]:
    """Return ({panel key: a compared job's trace over `steps` (None: its whole run) or why not}, queries sent).

    One range query per panel on the compared job's own Prometheus, all in parallel (bounded).
    """
    rng = compare_range(job.ctx, steps)
    if rng is None:
        return {k: f"{job.label} has no steps in this range." for k in keys}, 0
    start, end = rng
    out: dict[str, Trace | str] = {}
    plans: dict[str, tuple[str, float]] = {}
    for key in keys:
        spec = PANELS[key]
        plan = compare_query(spec, job.ctx, start, end)
        if plan is None:
            out[key] = f"{job.label}: {_unavailable_message(job.ctx.profile, spec)}"
        else:
            plans[key] = plan
    calls = [lambda q=q, st=st: client.query_range(q, start, end, st) for q, st in plans.values()]
    for (key, (_, st)), result in zip(
        plans.items(), client.run_parallel(calls, max_concurrency=max_concurrency), strict=True
    ):
        spec = PANELS[key]
        if isinstance(result, PrometheusError):
            out[key] = f"{job.label}: its Prometheus did not answer ({result})."
            continue
        trace = compare_trace(spec, job, result, st)
        out[key] = (
            trace if trace is not None else f"{job.label} has no {spec.title.lower()} data in this range."
        )
    return out, len(calls)


# --- Downsampling ----------------------------------------------------------------------------------


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


# --- Annotations -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Annotation:
    """A vertical mark on every panel.

    Attributes:
        kind: checkpoint, warmup-end, restore, crash, hang-start, heartbeat-stop or finding.
        label: short text.
        time: unix seconds, or None when only the step is known.
        step: the training step, or None when only the time is known.
        finding_id: the finding's id, for kind "finding".
        hosts: hosts the finding names.
    """

    kind: str
    label: str
    time: float | None = None
    step: float | None = None
    finding_id: int | None = None
    hosts: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "label": self.label,
            "time": self.time,
            "step": self.step,
            "finding_id": self.finding_id,
            "hosts": list(self.hosts),
        }


def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def annotations_build(
    ctx: TimelineContext,
    triage: Mapping[str, Any] | None = None,
    findings: Iterable[Mapping[str, Any]] = (),
) -> list[Annotation]:
    """Return the marks of a job: from the triage JSON (contract shape), the step axis and findings.

    findings: mappings with id, title, onset (unix s), hosts.
    """
    triage = triage or {}
    job = triage.get("job") or {}
    config = triage.get("config") or {}
    progress = triage.get("progress") or {}
    details = triage.get("details") or {}
    classes = {m.get("class") for m in triage.get("matches") or ()} | {job.get("triage_class")}
    axis = ctx.axis
    marks: list[Annotation] = []

    period = _num(config.get("checkpoint_period"))
    enabled = str(config.get("enable_checkpointing", "true")).lower() not in ("false", "0", "")
    if period and period > 0 and enabled and not axis.empty:
        first = math.ceil(axis.first_step / period) * period
        steps = np.arange(first, axis.last_step + 1, period)
        if 0 < len(steps) <= MAX_CHECKPOINT_MARKS:
            times = np.atleast_1d(axis.time_at(steps))
            # Every checkpoint gets its line; with many, only every n-th its label, so labels stay legible.
            every = max(1, math.ceil(len(steps) / MAX_CHECKPOINT_LABELS))
            for i, (s, t) in enumerate(zip(steps, times, strict=True)):
                label = f"ckpt {int(s)}" if i % every == 0 else ""
                marks.append(Annotation("checkpoint", label, _num(t), float(s)))
    if ctx.warmup_end is not None:
        marks.append(
            Annotation("warmup-end", "warm-up end", ctx.warmup_end, _num(axis.step_at(ctx.warmup_end)))
        )
    restored_from = _num(progress.get("restored_from"))
    if restored_from is not None and not axis.empty:
        marks.append(
            Annotation("restore", f"restored from {int(restored_from)}", axis.start, axis.first_step)
        )
    for r in axis.restores:
        marks.append(Annotation("restore", f"restore {int(r.from_step)}→{int(r.to_step)}", r.time, r.to_step))
    crash = _num(job.get("crash_time"))
    if crash is not None:
        marks.append(Annotation("crash", "crash", crash, _num(axis.step_at(crash))))
    stall = _num(details.get("stall_after_last_step_s"))
    step_time = _num(progress.get("step_time_s")) or 0.0
    hung = (
        "hang" in classes
        or job.get("status") == "hanging"
        or (stall is not None and stall > max(5 * step_time, 600.0))
    )
    if hung and not axis.empty:
        t = axis.last_advance()
        marks.append(Annotation("hang-start", f"hang (step {int(axis.last_step)})", t, axis.last_step))
    timeout = _num(config.get("jax_distributed_heartbeat_timeout_seconds"))
    if "heartbeat-timeout" in classes and crash is not None and timeout:
        t = crash - timeout
        marks.append(Annotation("heartbeat-stop", "heartbeats stop", t, _num(axis.step_at(t))))
    for f in findings:
        onset = _num(f.get("onset"))
        if onset is None:
            continue
        marks.append(
            Annotation(
                "finding",
                str(f.get("title") or "finding")[:40],
                onset,
                _num(axis.step_at(onset)),
                finding_id=f.get("id"),
                hosts=tuple(f.get("hosts") or ()),
            )
        )
    return marks


# --- Figures ---------------------------------------------------------------------------------------

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
}


def _round_list(values: np.ndarray, digits: int = 5) -> list[float | None]:
    out: list[float | None] = []
    for x in values.tolist():
        if x != x or x in (math.inf, -math.inf):
            out.append(None)
        elif x == 0:
            out.append(0.0)
        else:
            out.append(round(x, max(0, digits - 1 - int(math.floor(math.log10(abs(x)))))))
    return out


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


def _break_gaps(x: np.ndarray, y: np.ndarray, t: np.ndarray, gap_times: np.ndarray) -> tuple[list, list]:
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
) -> dict[str, Any]:
    """Return the Plotly figure of one panel as plain dicts (data, layout), with meta for the page.

    The x-axis is the step ("step") or the time in ms ("time-utc"; "time-local" shifted by
    tz_offset_s). Each trace is downsampled to min(points_per_trace, points_per_figure / traces).
    `overlays` are compared jobs' traces (`compare_trace`): on the step axis each is placed through its
    own job's step axis, dashed; on a time axis they are left out and the panel says they need the step
    axis. layout.meta holds the panel key, mode, outliers, the labelled marks (in the order of
    layout.annotations, so a clicked annotation finds its finding), the range and `notes` for the page.
    """
    if xmode not in XMODES:
        raise TimelineError(f"x-axis mode must be one of {', '.join(XMODES)}, not {xmode!r}")
    spec = panel.spec
    notes = list(notes)
    if overlays and xmode != "step":
        notes.append(compare_step_note([tr.name.removesuffix(" median") for tr in overlays]))
        overlays = ()
    traces = [*panel.traces, *overlays]
    budget = max(8, min(points_per_trace, points_per_figure // max(1, len(traces))))
    data: list[dict[str, Any]] = []
    outlier_i = top_i = compare_i = 0
    for tr in traces:
        max_dt = max(2.5 * max(tr.step or panel.step, ctx.interval), 3 * ctx.interval)
        holes = _gap_times(tr.t, max_dt)
        t, v = minmax_downsample(tr.t, tr.v, budget)
        x, y = _break_gaps(_x_of(t, ctx, xmode, tz_offset_s, tr.axis), v, t, holes)
        trace: dict[str, Any] = {
            "type": "scattergl",
            "mode": "lines",
            "name": tr.name,
            "x": x,
            "y": y,
            "meta": {"role": tr.role, **tr.labels},
            "hovertemplate": f"{tr.name}: %{{y}}<extra></extra>",
        }
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
            color = _OUTLIER_COLORS[outlier_i % len(_OUTLIER_COLORS)]
            outlier_i += 1
            trace["line"] = {"color": color, "width": 2.5}
            trace["name"] = f"{tr.name} (outlier)"
        elif tr.role == "top":
            # Among the k most deviating but within the outlier bar: drawn for context, not called out.
            trace["line"] = {"color": _TOP_COLORS[top_i % len(_TOP_COLORS)], "width": 1.2}
            trace["name"] = f"{tr.name} (top deviation)"
            top_i += 1
        elif tr.role == "host":
            trace["line"] = {"width": 1.5, "dash": "dot"}
        elif tr.role == "compare":
            trace["line"] = {
                "color": _COMPARE_COLORS[compare_i % len(_COMPARE_COLORS)],
                "width": 2,
                "dash": "dash",
            }
            trace["showlegend"] = True
            compare_i += 1
        else:
            trace["line"] = {"width": 1.2}
            # Many plain lines make a legend taller than the chart: hovering names them instead.
            trace["showlegend"] = len(panel.traces) <= 6
        data.append(trace)
    # Each WebGL plot costs a context (browsers keep about 16 alive) and ~150 ms to start: a figure of a
    # few thousand points draws faster as SVG; only many points (lines mode at its budget) use WebGL.
    if sum(len(d["x"]) for d in data) < GL_MIN_POINTS:
        for d in data:
            d["type"] = "scatter"
    # The band is drawn min first, then max filled down to the previous trace: keep min, max adjacent.
    band = [d for d in data if d["meta"]["role"] in ("min", "max")]
    rest = [d for d in data if d["meta"]["role"] not in ("min", "max")]
    data = band + rest

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
                "text": a.label,
                "showarrow": False,
                "font": {"size": 9, "color": color},
                "captureevents": a.kind == "finding",
                "textangle": -30 if a.kind == "checkpoint" else 0,
            }
        )
        marks.append(a.to_dict())

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
    layout = {
        "title": {"text": title, "font": {"size": 12}, "x": 0.01, "y": 0.98, "yanchor": "top"},
        "height": 270,
        "margin": {"l": 60, "r": 10, "t": 62, "b": 30},
        "xaxis": xaxis,
        "yaxis": {"title": {"text": spec.unit}, "zeroline": False},
        "hovermode": "x unified",
        "legend": {"orientation": "h", "y": -0.12, "yanchor": "top", "font": {"size": 10}},
        "shapes": shapes,
        "annotations": texts,
        "meta": {
            "panel": spec.key,
            "domain": spec.domain,
            "mode": panel.mode,
            "message": panel.message,
            "notes": notes,
            "outliers": panel.outliers,
            "marks": marks,
            "start": panel.start,
            "end": panel.end,
            "step": panel.step,
            "xmode": xmode,
        },
    }
    figure = {"data": data, "layout": layout}
    if is_time:
        _dates_as_text(figure)
    return figure


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
        unit = "s" if not (whole % 1000).any() else "ms"
        out[ok] = np.datetime_as_string(whole.astype("datetime64[ms]"), unit=unit)
    return out.tolist()


def domains_of(keys: Iterable[str]) -> list[tuple[str, list[str]]]:
    """Return [(domain, [panel keys])] in stacking order."""
    keys = list(keys)
    return [
        (d, [k for k in keys if PANELS[k].domain == d])
        for d in DOMAINS
        if any(PANELS[k].domain == d for k in keys)
    ]
