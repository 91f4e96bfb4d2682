"""The job's own timeline and what the rules read.

`build_context` turns stored query results into grids and derives the job's own timeline from the data
(training start, when steps stopped, typical step time, warm-up, checkpoint windows, the early steady window
used as the job's own baseline), with the triage as a hint. `Finding` is what a rule produces.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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
        """Instants within a checkpoint window, widened by `pad` seconds on each side."""
        m = np.zeros(len(t), bool)
        for a, b in self.checkpoints:
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


def triage_get(triage: Mapping[str, Any] | None, *path: str) -> Any:
    cur: Any = triage
    for p in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


def _timeline(source: Any, results: Mapping[str, Any], triage: Mapping[str, Any] | None) -> Timeline:
    tl = Timeline(*_analysed_range(source, results))
    tl.crash_time = triage_get(triage, "job", "crash_time")
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


def _placed_by_power(
    tl: Timeline, results: Mapping[str, Any], cap: float | None = None
) -> tuple[float, float]:
    """Return (first, last) step times no earlier than the GPUs say, for steps the log did not date or did
    not print (a log that prints every Nth step: then beyond the blur of either's timing and no later than
    `cap`, one print after the last).

    Undated step lines are placed their own durations after the last dated line: the earliest they can have
    ended, early by whatever setup ran between (data loaders, compilation). The job's GPUs tell when it
    trained (the pack's median power near its high level, the 90th percentile over the data): the first
    step ended no earlier than they first trained from its placed time on, and the steps ran as long as they
    trained, up to the crash (a checkpoint's dip between is part of training): until between their last
    instant at that level and the grid's next one (the middle; `stall_unc_s` holds the grid's step).
    """
    first, last = float(tl.train_start or 0.0), float(tl.last_advance or 0.0)
    power = results.get("power_by_host")
    if not isinstance(power, Grid) or not len(power.labels) or len(power.t) < 5:
        return first, last
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        pack = np.nanmedian(power.values, axis=0)
        level = float(np.nanpercentile(pack, 90)) if np.isfinite(pack).any() else 0.0
    t = power.t
    on = np.nonzero((np.nan_to_num(pack, nan=0.0) >= 0.85 * level) & (t >= first - power.step))[0]
    on = on[t[on] <= (tl.crash_time or tl.end)]
    if level <= 0 or not len(on):
        return first, last
    end = float(t[on[-1]]) + (power.step / 2 if on[-1] + 1 < len(t) else 0.0)
    if cap is not None:  # the last print is exact: the GPUs move it only beyond their own timing's blur
        end = min(end, cap) if end > last + _timing_tolerance(tl, power.step) else last
    if end > last:
        last, tl.stall_unc_s = end, power.step
    return min(last, max(first, float(t[on[0]]) - power.step)), last


def _timing_tolerance(tl: Timeline, grid_step: float) -> float:
    """Return how much later one source must date the last step than another to be believed over it: a grid
    step or two (a gauge's sampling, a power reading's averaging and its fall) or two training steps, at
    least a minute."""
    return max(60.0, 2 * grid_step, 2 * float(tl.step_s or 0.0))


def _analysed_range(source: Any, results: Mapping[str, Any]) -> tuple[float, float]:
    """Return the analysed window: the source's time range within the data (--start/--end may cut the data:
    a job is not "stalled" at a window's edge)."""
    tr = source.time_range or (0.0, 0.0)
    grids = [r for r in results.values() if isinstance(r, Grid) and len(r.t)]
    if grids:
        a, b = min(float(g.t[0]) for g in grids), max(float(g.t[-1]) for g in grids)
        tr = (max(float(tr[0]), a), min(float(tr[1]), b)) if source.time_range else (a, b)
    return float(tr[0]), float(tr[1])


def _last_advance(
    tl: Timeline, step: Grid, s: np.ndarray, results: Mapping[str, Any], triage: Mapping[str, Any] | None
) -> None:
    """Set the last step, when the step counter last advanced and how far the step gauge lags the log."""
    t = step.t
    # after a restart the step counter went back: the last run's own steps tell when it last advanced
    have = ~np.isnan(s) & (tl.segment(t) == len(tl.restarts))
    if not have.any():
        have = ~np.isnan(s)
    i0 = int(np.argmax(have))
    smax = float(np.max(s[have]))
    i_last = int(np.argmax(have & (s >= smax)))
    tl.last_step = smax
    tl.last_advance = float(t[i_last]) - step.step / 2 if i_last > i0 else float(t[i_last])
    lst = results.get("last_step_ts")
    if isinstance(lst, Grid) and len(lst.labels):
        v = lst.single()
        assert v is not None, "a grid with labels has a row"
        if np.isfinite(v).any():
            tl.last_advance = float(np.nanmax(v))
    # the most advanced source wins: a step gauge polled less often than steps complete lags the log
    # (beyond a grid step or two, where the log's own timing is no better than the gauge's)
    logged = triage_get(triage, "progress", "last_step_time")
    if (
        isinstance(logged, int | float)
        and tl.last_advance is not None
        and tl.start <= logged <= tl.end + 60
        and logged > tl.last_advance + _timing_tolerance(tl, step.step)
    ):
        tl.gauge_lag_s = float(logged) - tl.last_advance
        tl.last_advance = float(logged)


def _checkpoints(
    step: Grid, s: np.ndarray, st: Grid | None, triage: Mapping[str, Any] | None, step_s: float
) -> list[tuple[float, float]]:
    """Return the checkpoint windows: steps at multiples of checkpoint_period, and step-time spikes."""
    out: list[tuple[float, float]] = []
    t, have = step.t, ~np.isnan(s)
    period = _int(triage_get(triage, "config", "checkpoint_period"))
    # the save's I/O tail; never so long that checkpoint windows cover the whole job
    after = max(120.0, 3 * step_s)
    if period:
        after = min(after, 0.5 * period * step_s)
        prev = np.concatenate([[np.nan], s[:-1]])
        # a gauge sampled less often than steps complete skips most steps: a save is where the samples
        # cross a multiple of the period, not only where one lands on it. The save then lies anywhere in the
        # hold since the gauge's last change: the crossing dates it only when that hold is no longer than
        # the save's own window (a gauge the trainer refreshes every 10 min crosses at each refresh)
        moved = have & (s != prev)
        hold = np.full(len(s), np.inf)
        at = np.nonzero(moved)[0]
        hold[at[1:]] = t[at[1:]] - t[at[:-1]]
        with np.errstate(invalid="ignore"):
            crossed = (np.floor(s / period) > np.floor(prev / period)) & (hold <= after)
        hit = moved & ((np.mod(s, period) == 0) | crossed)
        out += [(float(t[i]) - step.step, float(t[i]) + after) for i in np.nonzero(hit)[0]]
    if st is not None and len(st.labels):
        x = st.single()
        assert x is not None, "a grid with labels has a row"
        med = nan_median(x)
        if math.isfinite(med):
            spikes = np.nonzero(x > 1.5 * med)[0]
            out += [(float(st.t[i]) - float(x[i]) - st.step, float(st.t[i]) + after) for i in spikes]
    return out


def _stalled(
    tl: Timeline, results: Mapping[str, Any], triage: Mapping[str, Any] | None, step_s: float
) -> bool:
    """Whether the step counter stopped well before the data ends and the job did not complete."""
    status = triage_get(triage, "job", "status")
    gap = tl.end - (tl.last_advance or tl.end)
    if status == "completed" or status == "soft-success":
        stalled = False
    elif status is not None:
        stalled = gap >= max(120.0, 4 * step_s)
    else:
        stalled = gap >= max(300.0, 5 * step_s)
    if stalled and _still_training(results, tl, step_s):
        stalled = False  # the gauge stopped, the GPUs did not: no stall without corroboration
    return stalled


def _int(x: Any) -> int | None:
    try:
        v = int(str(x).strip())
        return v if v > 0 else None
    except (TypeError, ValueError):
        return None


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


def _still_training(results: Mapping[str, Any], tl: Timeline, step_s: float) -> bool:
    """Return True when the pack's GPU power after the last step stays at its training level (steps did not
    stop; the step source lags): a stall needs GPUs that busy-wait or idle."""
    power = results.get("power_by_host")
    if (
        not isinstance(power, Grid)
        or not len(power.labels)
        or tl.last_advance is None
        or tl.train_start is None
    ):
        return False
    with np.errstate(all="ignore"):
        pack = np.nanmedian(power.values, axis=0)
    before = power.mask(tl.train_start + 10 * step_s, tl.last_advance) & np.isfinite(pack)
    after = power.mask(
        tl.last_advance + max(120.0, 2 * step_s), (tl.crash_time or tl.end) - power.step
    ) & np.isfinite(pack)
    if before.sum() < 5 or after.sum() < 3:
        return False
    level = float(np.median(pack[before]))
    return level > 0 and float(np.mean(pack[after] >= 0.85 * level)) >= 0.8
