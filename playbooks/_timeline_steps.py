"""How the job's timeline is read from its steps: the last advance, checkpoints, a stall and its
corroboration by GPU power, the placing of steps a log did not date or print (used by `context`)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .anomaly import Grid, nan_median
from .log_series import steps_per_point

if TYPE_CHECKING:
    from .context import Timeline


def triage_get(triage: Mapping[str, Any] | None, *path: str) -> Any:
    cur: Any = triage
    for p in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


def _print_interval_s(triage: Mapping[str, Any] | None) -> float | None:
    """Return the seconds between two of the log's step lines when it prints every Nth step (N > 1), or None.

    The mean over the run (first to last printed step): an evaluation's or a save's pause between two prints
    makes it a little longer, which only widens the bound it sets."""
    logged = triage_get(triage, "details", "steps_logged")
    first_t = triage_get(triage, "details", "first_step_time")
    last_t = triage_get(triage, "progress", "last_step_time")
    if not isinstance(logged, int) or logged < 3 or not isinstance(first_t, int | float):
        return None
    if not isinstance(last_t, int | float) or steps_per_point(triage, logged) < 2 or last_t <= first_t:
        return None
    return (float(last_t) - float(first_t)) / (logged - 1)


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
        end = min(end, cap) if end > last + _fall_blur(tl, power.step) else last
    if end > last:
        last, tl.stall_unc_s = end, power.step
    return min(last, max(first, float(t[on[0]]) - power.step)), last


def _fall_blur(tl: Timeline, grid_step: float) -> float:
    """Return how much later than an exactly dated step the GPUs' power may fall without the job having
    trained on: a grid step or two (the reading's sampling and averaging, the grid point's placing) or two
    training steps (the step that hung computed before it waited). Not the minute a step gauge's refresh
    may lag by (`_timing_tolerance`): no gauge is read here, and a log that prints every few dozen seconds
    leaves its stall anywhere between two prints, which the GPUs tell to their grid step."""
    return max(2 * grid_step, 2 * float(tl.step_s or 0.0))


def _timing_tolerance(tl: Timeline, grid_step: float) -> float:
    """Return how much later one source must date the last step than another to be believed over it: a grid
    step or two (a gauge's sampling, a power reading's averaging and its fall) or two training steps, at
    least a minute."""
    return max(60.0, 2 * grid_step, 2 * float(tl.step_s or 0.0))


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
