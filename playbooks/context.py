"""The job's own timeline and what the rules read.

`build_context` turns stored query results into grids and derives the job's own timeline from the data
(training start, when steps stopped, typical step time, warm-up, checkpoint windows, the early steady window
used as the job's own baseline), with the triage as a hint. `Finding` is what a rule produces.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._timeline_steps import (
    _checkpoints,
    _last_advance,
    _placed_by_power,
    _stalled,
    triage_get,
)
from .anomaly import Grid, nan_median
from .gpus import GPU_MODELS, GpuModel
from .log_series import print_interval_s
from .model import Playbook

__all__ = ["Context", "Finding", "Timeline", "build_context", "focus_window", "triage_get"]


@dataclass
class Timeline:
    """The job's own timeline, derived from its training metrics (triage as a hint).

    Attributes:
        start, end: analysed range.
        train_start: first training step seen.
        last_advance: when the step counter last advanced.
        last_step: the last step value.
        stalled: steps stopped well before the data ends, and the job did not complete.
        crash_time: from triage.
        step_s: typical step time (median).
        warm_end: end of warm-up (compile + first steps).
        checkpoints: [(start, end)] windows of checkpoint saves.
        pauses: [(start, end)] of the pauses the log names with their length (its evaluations): training
            stopped, no step was slow (left out as checkpoint saves are).
        paused_spans: [(start, end)] of every pause the log names, with or without its length (its
            evaluations and saves): from the step line before it to the first timed step after, which hold it.
        steady: (start, end) the early steady window: the job's own baseline.
        restored: the job restored from a checkpoint (triage).
        restarts: [(when, warm_end)] of each restart within the data (an elastic restart: the step counter
            went back to a checkpoint): the old run's last sample, and when the new run's warm-up ended.
        gauge_lag_s: how far the step gauge's last advance lags the log's last step.
        stall_unc_s: how far off last_advance may be beyond the steps' own timing (the grid step of the GPU
            power that dated steps the log did not date).
    """

    start: float
    end: float
    train_start: float | None = None
    last_advance: float | None = None
    last_step: float | None = None
    stalled: bool = False
    crash_time: float | None = None
    step_s: float | None = None
    warm_end: float | None = None
    checkpoints: list[tuple[float, float]] = field(default_factory=list)
    pauses: list[tuple[float, float]] = field(default_factory=list)
    paused_spans: list[tuple[float, float]] = field(default_factory=list)
    steady: tuple[float, float] | None = None
    restored: bool = False
    gauge_lag_s: float = 0.0
    stall_unc_s: float = 0.0
    restarts: list[tuple[float, float]] = field(default_factory=list)

    def segment(self, t: np.ndarray) -> np.ndarray:
        """Which run of the job each instant belongs to: 0 before the first restart, k after the k-th."""
        return np.searchsorted(np.array([a for a, _ in self.restarts], float), t, side="right")

    def rewarming(self, t: np.ndarray) -> np.ndarray:
        """Instants from a restart to the end of the new run's warm-up (recompile, first slow steps)."""
        m = np.zeros(len(t), bool)
        for a, b in self.restarts:
            m |= (t > a) & (t < b)
        return m

    def in_checkpoint(self, t: np.ndarray, pad: float = 0.0) -> np.ndarray:
        """Instants within a checkpoint window or a pause the log names, widened by `pad` seconds each side."""
        m = np.zeros(len(t), bool)
        for a, b in [*self.checkpoints, *self.pauses]:
            m |= (t >= a - pad) & (t <= b + pad)
        return m

    def steady_mask(self, t: np.ndarray) -> np.ndarray:
        if self.steady is None:
            return np.zeros(len(t), bool)
        inside = (t >= self.steady[0]) & (t <= self.steady[1])
        clean = inside & ~self.in_checkpoint(t)
        return clean if clean.sum() >= 5 else inside

    def training_mask(self, t: np.ndarray) -> np.ndarray:
        if self.train_start is None:
            return np.ones(len(t), bool)
        end = self.last_advance if self.last_advance is not None else self.end
        return (t >= self.train_start) & (t <= end)

    def valid_training(self, t: np.ndarray) -> np.ndarray:
        """Training, after warm-up, outside checkpoint windows."""
        m: np.ndarray = self.training_mask(t) & ~self.in_checkpoint(t) & ~self.rewarming(t)
        if self.warm_end is not None:
            m &= t >= self.warm_end
        return m

    def to_dict(self) -> dict[str, Any]:
        return {
            "train_start": self.train_start,
            "last_advance": self.last_advance,
            "last_step": self.last_step,
            "stalled": self.stalled,
            "crash_time": self.crash_time,
            "step_s": self.step_s,
            "warm_end": self.warm_end,
            "checkpoints": len(self.checkpoints),
            "pauses": len(self.pauses),
            "steady": self.steady,
            "restored": self.restored,
            "gauge_lag_s": self.gauge_lag_s,
            "restarts": len(self.restarts),
        }


@dataclass
class Context:
    """What the rules read: results by query name, the timeline, the triage and the source."""

    results: dict[str, Any]
    meta: dict[str, dict[str, Any]]
    timeline: Timeline
    triage: dict[str, Any] | None
    source: Any
    gpu: GpuModel | None
    #: what one detector worked out from the results for the others that need it too (keyed by its module)
    memo: dict[Any, Any] = field(default_factory=dict)

    def grid(self, name: str) -> Grid | None:
        r = self.results.get(name)
        return r if isinstance(r, Grid) and len(r.labels) else None

    def instant(self, name: str) -> list[dict[str, Any]]:
        r = self.results.get(name)
        return r if isinstance(r, list) else []

    def promql(self, name: str) -> str:
        return str(self.meta.get(name, {}).get("promql", name))

    def window_s(self, name: str) -> float:
        return float(self.meta.get(name, {}).get("window_s") or 0.0)


@dataclass
class Finding:
    """One finding of one rule (all the hosts/GPUs it flagged)."""

    playbook: str
    rule: str
    klass: str
    severity: str
    role: str
    hosts: list[str]
    gpus: list[str]
    onset: float | None
    title: str
    evidence: list[dict[str, Any]]
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "playbook": self.playbook,
            "class": self.klass,
            "severity": self.severity,
            "hosts": list(self.hosts),
            "gpus": list(self.gpus),
            "onset": _r(self.onset),
            "title": self.title,
            "evidence": self.evidence,
            "rule": f"{self.playbook}.{self.rule}",
        }


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), nd)


def _num(x: float) -> float | str:
    if x is None or not math.isfinite(float(x)):
        return "NaN"
    ax = abs(float(x))
    return round(float(x), 4 if ax < 1 else 2 if ax < 1000 else 0)


# ----------------------------------------------------------------------------------------- context


def build_context(source: Any, outputs: Sequence[Any], triage: Mapping[str, Any] | None) -> Context:
    """Return the rules' context: every output's results as grids/instant samples plus the job timeline."""
    results: dict[str, Any] = {}
    meta: dict[str, dict[str, Any]] = {}
    for out in outputs:
        for name, data in out.results.items():
            if not isinstance(data, Mapping):
                continue
            meta[name] = {"promql": data.get("promql", name), "window_s": data.get("window_s")}
            if data.get("kind") == "range":
                results[name] = Grid.from_result(data)
            else:
                results[name] = list(data.get("samples", []))
    gpu = GPU_MODELS.get(getattr(source, "gpu_model", None) or "")
    tl = _timeline(source, results, triage)
    return Context(
        results=results,
        meta=meta,
        timeline=tl,
        triage=dict(triage) if triage else None,
        source=source,
        gpu=gpu,
    )


def _timeline(source: Any, results: Mapping[str, Any], triage: Mapping[str, Any] | None) -> Timeline:
    tl = Timeline(*_analysed_range(source, results))
    tl.crash_time = triage_get(triage, "job", "crash_time")
    tl.pauses = _pauses(triage)
    tl.paused_spans = _paused_spans(triage)
    tl.restored = triage_get(triage, "progress", "restored_from") is not None
    step = results.get("step")
    st = results.get("step_time")
    if isinstance(st, Grid) and len(st.labels):
        st_row = st.single()
        assert st_row is not None, "a grid with labels has a row"
        tl.step_s = nan_median(st_row)
    if not isinstance(step, Grid) or not len(step.labels):
        tl.step_s = tl.step_s or triage_get(triage, "progress", "step_time_s")
        return _log_timeline(tl, results, triage)
    t, s = step.t, step.single()
    assert s is not None, "a grid with labels has a row"
    have = ~np.isnan(s)
    if not have.any():
        return tl
    i0 = int(np.argmax(have))
    tl.train_start = float(t[i0])
    tl.restarts = _restarts(t, s)
    smax = float(np.nanmax(s))
    _last_advance(tl, step, s, results, triage)
    if tl.step_s is None or not math.isfinite(tl.step_s):
        smin = float(s[i0])
        span = (tl.last_advance or tl.train_start) - tl.train_start
        tl.step_s = (
            span / (smax - smin)
            if smax > smin and span > 0
            else triage_get(triage, "progress", "step_time_s")
        )
    step_s = float(tl.step_s or 30.0)
    # warm-up: the compile step and the first few steps run slow
    first = float(s[i0])
    warm = np.nonzero(have & (s >= first + 8))[0]
    tl.warm_end = float(t[warm[0]]) if len(warm) else tl.train_start + 10 * step_s
    tl.checkpoints += _checkpoints(step, s, st if isinstance(st, Grid) else None, triage, step_s)
    tl.stalled = _stalled(tl, results, triage, step_s)
    _set_steady(tl, tl.warm_end)
    return tl


def _pauses(triage: Mapping[str, Any] | None) -> list[tuple[float, float]]:
    """Return the pauses the log names with their length (`details["pauses"]`: its evaluations)."""
    got = triage_get(triage, "details", "pauses") or []
    # the pause itself when the log tells its length; a save's (no length) is the checkpoint windows' to find
    return [
        (float(w[0]), float(w[0]) + float(w[2]))
        for w in got
        if isinstance(w, list | tuple)
        and len(w) == 3
        and isinstance(w[0], int | float)
        and isinstance(w[2], int | float)
    ]


def _paused_spans(triage: Mapping[str, Any] | None) -> list[tuple[float, float]]:
    """Return the spans that hold a pause the log names (`details["pauses"]`: [start, end, length])."""
    got = triage_get(triage, "details", "pauses") or []
    return [
        (float(w[0]), float(w[1]))
        for w in got
        if isinstance(w, list | tuple) and len(w) == 3 and all(isinstance(v, int | float) for v in w[:2])
    ]


def _restarts(t: np.ndarray, s: np.ndarray) -> list[tuple[float, float]]:
    """Return [(when, warm_end)] of the restarts the step counter shows: each time it went back (an elastic
    restart resumes from the last checkpoint, or from step 0 without one). The new run warms up again, until
    its step counter is 8 past where it resumed (as at the job's start)."""
    at = np.nonzero(~np.isnan(s))[0]
    out = []
    for k in np.nonzero(np.diff(s[at]) < 0)[0]:
        i, j = int(at[k]), int(at[k + 1])
        later = at[(at >= j) & (s[at] >= s[j] + 8)]
        out.append((float(t[i]), float(t[later[0]]) if len(later) else float(t[-1])))
    return out


def _set_steady(tl: Timeline, warm_end: float) -> None:
    """The early steady window after warm-up: the job's own baseline."""
    train_end = tl.last_advance or tl.end
    length = max(600.0, 0.25 * max(0.0, train_end - warm_end))
    tl.steady = (warm_end, min(train_end, warm_end + length))


def _log_timeline(tl: Timeline, results: Mapping[str, Any], triage: Mapping[str, Any] | None) -> Timeline:
    """No step series in the TSDB (many trainers export none): the log's timed steps stand in for it.

    The first and last logged steps' times bound training; warm-up is the first ten typical steps. Without
    timed steps in the log the timeline stays unknown (no training start), as before.
    """
    first_t = triage_get(triage, "details", "first_step_time")
    last_t = triage_get(triage, "progress", "last_step_time")
    last = triage_get(triage, "job", "last_step")
    if not all(isinstance(x, int | float) for x in (first_t, last_t, last)):
        return tl
    if not (tl.start - 60 <= float(first_t) <= float(last_t) <= tl.end + 60):
        return tl
    step_s = float(tl.step_s or 30.0)
    tl.train_start, tl.last_advance, tl.last_step = float(first_t), float(last_t), float(last)
    if triage_get(triage, "details", "last_step_time_estimated"):
        tl.train_start, tl.last_advance = _placed_by_power(tl, results)
    elif (every := print_interval_s(triage)) is not None:
        # a log that prints every Nth step trained quietly after its last print: that print is a lower bound
        tl.last_advance = _placed_by_power(tl, results, cap=tl.last_advance + every)[1]
    tl.warm_end = min(tl.train_start + 10 * step_s, tl.last_advance)
    # the log's restarts: from just before the new run's first step, which warms up again
    again = triage_get(triage, "details", "restarts") or []
    tl.restarts = [
        (float(r[0]) - 1e-3, float(r[0]) + 8 * step_s) for r in again if isinstance(r[0], int | float)
    ]
    tl.stalled = _stalled(tl, results, triage, step_s)
    _set_steady(tl, tl.warm_end)
    return tl


def _analysed_range(source: Any, results: Mapping[str, Any]) -> tuple[float, float]:
    """Return the analysed window: the source's time range within the data (--start/--end may cut the data:
    a job is not "stalled" at a window's edge)."""
    tr = source.time_range or (0.0, 0.0)
    grids = [r for r in results.values() if isinstance(r, Grid) and len(r.t)]
    if grids:
        a, b = min(float(g.t[0]) for g in grids), max(float(g.t[-1]) for g in grids)
        tr = (max(float(tr[0]), a), min(float(tr[1]), b)) if source.time_range else (a, b)
    return float(tr[0]), float(tr[1])


def focus_window(pb: Playbook, tl: Timeline) -> tuple[float, float]:
    w = pb.window
    if w.anchor == "crash":
        anchor = tl.crash_time or tl.last_advance or tl.end
    elif w.anchor == "stall":
        anchor = tl.last_advance if tl.stalled and tl.last_advance else tl.end
    else:
        return tl.start, tl.end
    a = tl.start if w.before is None else max(tl.start, anchor - w.before)
    b = tl.end if w.after is None else min(tl.end, anchor + w.after)
    return a, b
