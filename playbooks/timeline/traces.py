"""A panel's data: the drawn traces, built from its queries' results, and the outliers named in them."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any

import numpy as np

from playbooks.alignment import StepAxis
from playbooks.hostnames import HostNames, without_port
from playbooks.profiles import Profile, ProfileError
from playbooks.prometheus import InstantSample, PrometheusError, Series

from .panels import PanelSpec
from .queries import PanelPlan

#: An outlier's score (largest deviation from the median) must exceed this many times the typical one:
#: with 16 GPUs a noisy one peaks at about twice the typical deviation.
OUTLIER_FACTOR = 3.0


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
        step: the step of a trace on a grid of its own (a compared job's, a band's median on the score's
            grid), which its holes are judged by; 0: the panel's.
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
        notes: what the page should say about how it was drawn (a step coarsened by the budget).
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
    notes: list[str] = field(default_factory=list)


def _series_name(labels: Mapping[str, str]) -> str:
    host, gpu = labels.get("host", ""), labels.get("gpu")
    if gpu is not None and host:
        return f"{host} GPU {gpu}"
    return host or "value"


def _grid(traces: Sequence[Trace]) -> tuple[np.ndarray, np.ndarray]:
    """Return (every timestamp of the traces, sorted; one row of values per trace on them, NaN where absent)."""
    times = np.unique(np.concatenate([tr.t for tr in traces]))
    grid = np.full((len(traces), len(times)), np.nan)
    for i, tr in enumerate(traces):
        grid[i, np.searchsorted(times, tr.t)] = tr.v
    return times, grid


def _deviations(grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (the median across rows at each timestamp; each row's largest deviation from it, -inf for an
    empty row): the score a band's query computes in PromQL, on the grid given."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column has no median: NaN
        median = np.nanmedian(grid, axis=0)
        dev = np.abs(grid - median)
        scores = np.where(
            np.isnan(dev).all(axis=1), -np.inf, np.nanmax(np.where(np.isnan(dev), -np.inf, dev), axis=1)
        )
    return median, scores


def _device_scores(
    found: Sequence[Series], first: float, step: float, at: float
) -> tuple[list[InstantSample], Trace | None]:
    """Return (every device's score, the band's median trace or None) from every device's series on the score
    grid (`first` + k x `step`).

    A device's score is its largest deviation from the median of all devices at each grid time, what
    `max_over_time(abs(x - scalar(quantile(0.5, x)))[..:step])` returns at `at`, one sample a device with
    any value. The median at each grid time some device has a value is the band's median line, as
    `quantile(0.5, x)` evaluated on that grid gives it: Prometheus need not compute it again at the band's
    finer step."""
    rows = [s for s in found if s.timestamps]
    if not rows:
        return [], None
    counts = [len(s.timestamps) for s in rows]
    t = np.fromiter(chain.from_iterable(s.timestamps for s in rows), float, sum(counts))
    v = np.fromiter(chain.from_iterable(s.values for s in rows), float, sum(counts))
    col = np.rint((t - first) / step).astype(np.int64)  # a range query's times sit on its grid
    grid = np.full((len(rows), int(col.max()) + 1), np.nan)
    grid[np.repeat(np.arange(len(rows)), counts), col] = v
    median, scores = _deviations(grid)
    has = ~np.isnan(grid).all(axis=0)
    times = first + step * np.arange(grid.shape[1])
    scored = [
        InstantSample(dict(s.labels), at, float(x))
        for s, x in zip(rows, scores, strict=True)
        if np.isfinite(x)
    ]
    return scored, Trace("median", "median", {}, times[has], median[has], step=step)


def _rank_outliers(traces: list[Trace], topk: int, floor: float = 0.0) -> list[Trace]:
    """Return the traces deviating most from the per-timestamp median of all of them (largest first)."""
    if len(traces) < 3:
        return []
    _, scores = _deviations(_grid(traces)[1])
    finite = scores[np.isfinite(scores)]
    bar = _outlier_bar(float(np.median(finite)), floor) if len(finite) else math.inf
    order = np.argsort(-scores, kind="stable")
    out = []
    for i in order[:topk]:
        if scores[i] > bar:
            traces[i].score = float(scores[i])
            out.append(traces[i])
    return out


def _band_split(devices: list[Trace], topk: int, floor: float) -> tuple[list[Trace], list[Trace]]:
    """Return (the min / median / max traces, the top-k deviating devices) of every device's series, as
    the band and score queries would: the statistics at each timestamp some device has a value, the
    devices that deviate at all ranked by score, the role "outlier" for those above the bar."""
    if not devices:
        return [], []
    times, grid = _grid(devices)
    median, scores = _deviations(grid)
    has = ~np.isnan(grid).all(axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        stats = {"min": np.nanmin(grid, axis=0), "median": median, "max": np.nanmax(grid, axis=0)}
    band = [Trace(name, name, {}, times[has], v[has]) for name, v in stats.items()]
    finite = scores[np.isfinite(scores)]
    bar = _outlier_bar(float(np.median(finite)), floor) if len(finite) else math.inf
    top = []
    for i in np.argsort(-scores, kind="stable")[: max(0, int(topk))]:
        if scores[i] > 0:
            devices[i].score = float(scores[i])
            devices[i].role = "outlier" if scores[i] > bar else "top"
            top.append(devices[i])
    return band, top


def _outlier_bar(typical: float, floor: float = 0.0) -> float:
    """Return the score an outlier must exceed: OUTLIER_FACTOR x the typical (median) series' score.

    Series that differ only by noise score alike, so none clears the bar; when most series are flat
    (a counter that only one host increments), the typical score is 0 and any deviation above the
    panel's floor (`PanelSpec.min_outlier`) counts.
    """
    return max(0.0, OUTLIER_FACTOR * typical, floor)


def _normalise(labels: Mapping[str, str], rename: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Return labels with the exporter's host/GPU labels renamed to host/gpu (an instance loses its port)."""
    out = dict(labels)
    for raw, norm in rename:
        value = out.pop(raw, "")
        out[norm] = without_port(value) if raw == "instance" else value
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
        traces.sort(key=_trace_order)
        if mode == "single":
            for tr in traces:
                tr.name = spec.title
        else:
            for tr in _rank_outliers(traces, topk, plan.spec.min_outlier):
                tr.role = "outlier"
                panel.outliers.append(_outlier_dict(tr))
        panel.traces = traces
    else:
        panel.traces, outliers = _band_traces(plan, results, topk)
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


def _band_traces(plan: PanelPlan, results: dict[str, Any], topk: int) -> tuple[list[Trace], list[Trace]]:
    """Return (the band's min / median / max traces, its top series largest score first, role "outlier" above
    the bar): split from every device's series, or from the band query, the scores and the top-k by label."""
    floor = plan.spec.min_outlier
    if "devices" in results:
        devices = [_to_trace(s, "top", plan.rename) for s in results["devices"] if s.timestamps]
        devices.sort(key=_trace_order)  # ties ranked by name, as lines are
        return _band_split(devices, topk, floor)
    band = []
    by_stat: dict[Any, Any] = {s.labels.get("stat"): s for s in results["band"]}
    for stat in ("min", "median", "max"):
        if stat in by_stat:
            tr = _to_trace(by_stat[stat], stat)
            tr.name = stat
            band.append(tr)
        elif stat == "median" and results.get("median") is not None:
            band.append(results["median"])  # on the score's grid (`_device_scores`)
    scored, bar = _scored(results.get("score") or [], floor, topk)
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
    return band, outliers


def _key(labels: Mapping[str, str], names: Sequence[str]) -> tuple[str, ...]:
    return tuple(labels.get(n, "") for n in names)


def _scored(samples: Sequence[Any], floor: float = 0.0, topk: int = 3) -> tuple[list[Any], float]:
    """Return (the top-k scored series that deviate at all, largest first; the outlier bar).

    The score query returns every series' score: the top-k are drawn, and those above the bar (from the
    typical score, the median of all, as Prometheus's quantile(0.5) takes it) are named as outliers.
    """
    finite = [s for s in samples if math.isfinite(s.value)]
    typical = float(np.median([s.value for s in finite])) if finite else 0.0
    # Ties (whole-number counts often tie) are broken by the labels, not by the order Prometheus answered in.
    top = sorted((s for s in finite if s.value > 0), key=lambda s: (-s.value, sorted(s.labels.items())))
    top = top[: max(0, int(topk))]
    return top, _outlier_bar(typical, floor)


def panel_named(panel: PanelData, names: HostNames) -> PanelData:
    """Return a copy of the panel whose traces and outliers name each host by its one name (the diagnosis's,
    `TimelineContext.host_names`); the panel itself (maybe the shared cache's) is left as it is.

    Its data keeps the names the TSDB gives (a panel is cached by its source and queries alone). A trace
    named after its labels is named again; one named otherwise (a band's statistic, a PromQL series' own
    text) keeps its name. A trace without a host label whose `instance` the source names (a free PromQL
    series, an exporter scraped by address) gets that host, so that a selected finding highlights it.
    """
    traces = [_trace_named(tr, names) for tr in panel.traces]
    if panel.mode == "lines" and panel.spec.signal:  # a signal's lines by host (a free PromQL's by its text)
        traces.sort(key=_trace_order)
    outliers = [
        {**o, "host": names.name(o["host"]), "name": _series_name({**o, "host": names.name(o["host"])})}
        if isinstance(o.get("host"), str)
        else dict(o)
        for o in panel.outliers
    ]
    return replace(panel, traces=traces, outliers=outliers)


def _trace_named(tr: Trace, names: HostNames) -> Trace:
    host = tr.labels.get("host")
    if host is None:
        instance = tr.labels.get("instance")
        if instance is None or not names.knows(instance):
            return tr
        return replace(tr, labels={**tr.labels, "host": names.name(instance)})
    labels = {**tr.labels, "host": names.name(host)}
    name = _series_name(labels) if tr.name == _series_name(tr.labels) else tr.name
    return replace(tr, labels=labels, name=name)


def _trace_order(tr: Trace) -> tuple[str, tuple[int, int, str]]:
    """Sort key of a host or GPU trace: by host, then GPU number."""
    return tr.labels.get("host", ""), _gpu_order(tr.labels.get("gpu", ""))


def _gpu_order(gpu: str) -> tuple[int, int, str]:
    """Sort key of a gpu label: numbers in numeric order first, then any other value a TSDB holds (a UUID)."""
    return (0, int(gpu), "") if gpu.isdigit() else (1, 0, gpu)
