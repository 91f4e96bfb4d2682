"""Training signals the log prints when the TSDB holds none (#10).

Many trainers export no loss gauge, but their step lines print the loss (`completed step: N, ..., loss: X`).
The triage keeps those losses, timed, as `details["log_loss"]` (`loss_points`); when the training playbook
could not query a loss series, `with_log_loss` gives it one from the log, on the scrape grid a gauge of the
same values would have had (the last loss logged at or before each grid time), so the same rule judges a
divergence whether the loss came from Prometheus or from the log.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .anomaly import step_noise
from .departure import departure

#: at most this many (time, loss) points kept from a log (a 1 GB log prints millions of step lines)
MAX_POINTS = 4000
#: fewer logged losses than this are no series to judge (counted in the steps they stand for: `enough_points`)
MIN_POINTS = 20
#: ... and fewer printed losses than this in any case: the change-point rule's noise scale needs three changes
#: (four values) before the value it judges, which needs one more after it to be more than a single spike
MIN_PRINTS = 6
#: a climb into a non-finite loss stands this many steps' noise above its baseline (the loss_jump rule's z)
CLIMB_Z = 10.0
LOG_QUERY = "log: the loss printed by the step lines"
LOG_STEP_QUERY = "log: the time between the timed step lines"


def loss_points(steps: Mapping[int, tuple[Any, ...]]) -> list[list[float | None]]:
    """Return [time, loss] of the timed steps that logged a loss, in time order, at most MAX_POINTS of them
    (evenly strided; a non-finite loss is None). `steps` is the scan's step -> (seconds, TGS, loss, time, line)."""
    return [[round(t, 3), loss if math.isfinite(loss) else None] for t, loss, _s in _kept(steps)]


def loss_steps(steps: Mapping[int, tuple[Any, ...]]) -> list[int]:
    """Return the steps of `loss_points`, point by point."""
    return [s for _t, _loss, s in _kept(steps)]


def _kept(steps: Mapping[int, tuple[Any, ...]]) -> list[tuple[float, float, int]]:
    rows = sorted(
        (row[3], row[2], s) for s, row in steps.items() if row[3] is not None and row[2] is not None
    )
    stride = max(1, math.ceil(len(rows) / MAX_POINTS))
    kept = rows[::stride]
    if rows and kept[-1] is not rows[-1]:
        kept.append(rows[-1])
    return kept


def gauge_step_times(t: np.ndarray, s: np.ndarray, steps: Sequence[float]) -> list[float | None]:
    """Return when each of `steps` completed by a step gauge sampled at `t` (values `s`, the last completed
    step), or None where it cannot tell (before its first sample, beyond its last value). The one place a
    log's steps are dated by the TSDB's clock.

    After a restart the counter went back: the last run's samples tell (a log's last steps are its). A step
    completed after the last sample below it and no later than the first at or above it; steps complete
    evenly between two samples, the first of them half a step's share after the earlier sample."""
    seen = np.nonzero(np.isfinite(s))[0]
    if len(seen) < 2:
        return [None] * len(steps)
    back = np.nonzero(np.diff(s[seen]) < 0)[0]
    seen = seen[back[-1] + 1 :] if len(back) else seen
    ts, ss = t[seen], s[seen]
    out: list[float | None] = []
    for n in steps:
        j = int(np.searchsorted(ss, n, side="left"))  # the first sample at or above n (non-decreasing)
        if j == 0 or j >= len(ss):
            out.append(None)
            continue
        per = float(ss[j] - ss[j - 1])
        share = (float(n) - float(ss[j - 1]) - 0.5) / per
        out.append(float(ts[j - 1] + share * (ts[j] - ts[j - 1])))
    return out


def with_log_loss(outputs: Sequence[Any], triage: Mapping[str, Any] | None, interval: float) -> list[Any]:
    """Return the outputs with a `loss` result from the log given to the training playbook when it has none."""
    points = ((triage or {}).get("details") or {}).get("log_loss") or []
    if not enough_points(triage, len(points)):
        return list(outputs)
    out = []
    for o in outputs:
        if o.name == "training" and "loss" not in o.results and "loss" not in o.errors:
            o = dataclasses.replace(o, results={**o.results, "loss": _as_result(points, interval)})
        out.append(o)
    return out


def with_log_step_time(
    outputs: Sequence[Any], triage: Mapping[str, Any] | None, interval: float
) -> list[Any]:
    """Return the outputs with a `step_time` result from the log given to the training playbook when it has
    none: the time between consecutive timed step lines (per step: a log of more than MAX_POINTS steps keeps
    every k-th), so that a slowdown is judged, and an RDMA degradation must overlap one, without a gauge."""
    points = [p for p in ((triage or {}).get("details") or {}).get("log_loss") or [] if p[0] is not None]
    if len(points) < MIN_POINTS + 1:
        return list(outputs)
    stride = steps_per_point(triage, len(points))
    times = [float(p[0]) for p in points]
    # a step's time, dated when it completed; a step line logged again after a restart (time going back) is none.
    # A pause the log names between two prints (an evaluation, a checkpoint save) is no step's time: its length
    # is taken out when the log gives it (HF's eval_runtime), else the span is left out (the last per-step
    # time before it holds until the next print)
    paused = paused_points(triage)
    per_step: list[list[float | None]] = []
    for a, b in zip(times, times[1:], strict=False):
        pause = paused(a, b)
        if pause is not None and b - a - pause > 0:
            per_step.append([b, (b - a - pause) / stride])
        elif b <= a:
            per_step.append([b, None])
    out = []
    for o in outputs:
        if o.name == "training" and "step_time" not in o.results and "step_time" not in o.errors:
            o = dataclasses.replace(
                o, results={**o.results, "step_time": _as_result(per_step, interval, LOG_STEP_QUERY)}
            )
        out.append(o)
    return out


def paused_points(triage: Mapping[str, Any] | None) -> Callable[[float, float], float | None]:
    """Return, for the time between two of the log's points (a, b], the seconds of a pause the log names in
    it (0.0 when none; None when its length is unknown): the triage's `details["pauses"]`, each [start, the
    first point after it, its length or None]."""
    windows = sorted(
        (
            (float(w[0]), float(w[1]), None if w[2] is None else float(w[2]))
            for w in ((triage or {}).get("details") or {}).get("pauses") or []
            if isinstance(w, list | tuple) and len(w) == 3
        ),
        key=lambda w: w[:2],
    )
    starts = [w[0] for w in windows]

    def paused(a: float, b: float) -> float | None:
        total = 0.0
        k = bisect.bisect_right(starts, b - 1e-3) - 1  # the pauses that began in the span, latest first
        while k >= 0 and windows[k][0] >= a - 1e-3:
            if windows[k][1] >= b - 1e-3:
                length = windows[k][2]
                if length is None or total is None:
                    return None
                total += length
            k -= 1
        return total

    return paused


def enough_points(triage: Mapping[str, Any] | None, n_points: int) -> bool:
    """Whether the log's `n_points` losses are a series to judge: MIN_POINTS steps of training, however many
    steps a point stands for (a trainer that prints every 10th step prints a tenth as many lines over the same
    training, as a gauge refreshed every few steps does), and never fewer than MIN_PRINTS points."""
    return n_points >= MIN_PRINTS and n_points * steps_per_point(triage, n_points) >= MIN_POINTS


def print_interval_s(triage: Mapping[str, Any] | None) -> float | None:
    """Return the seconds between two of the log's step lines when it prints every Nth step (N > 1), or None.

    The mean over the run (first to last printed step): an evaluation's or a save's pause between two prints
    makes it a little longer, which only widens the bound it sets."""
    details = (triage or {}).get("details") or {}
    logged, first_t = details.get("steps_logged"), details.get("first_step_time")
    last_t = ((triage or {}).get("progress") or {}).get("last_step_time")
    if not isinstance(logged, int) or logged < 3 or not isinstance(first_t, int | float):
        return None
    if not isinstance(last_t, int | float) or steps_per_point(triage, logged) < 2 or last_t <= first_t:
        return None
    return (float(last_t) - float(first_t)) / (logged - 1)


def steps_per_point(triage: Mapping[str, Any] | None, n_points: int) -> float:
    """How many training steps lie between two of the log's timed points: a trainer that prints every 10th
    step (Megatron's and torchtitan's default log intervals) and the MAX_POINTS thinning both space them.
    From the first and last steps the log names over the points kept; 1 when they say nothing."""
    job = (triage or {}).get("job") or {}
    first, last = job.get("first_step"), job.get("last_step")
    if isinstance(first, int | float) and isinstance(last, int | float) and last > first and n_points > 1:
        return max(1.0, (float(last) - float(first)) / (n_points - 1))
    logged = ((triage or {}).get("details") or {}).get("steps_logged")
    return float(max(1, math.ceil(int(logged) / MAX_POINTS))) if isinstance(logged, int) else 1.0


def _as_result(
    points: Sequence[Sequence[float | None]], interval: float, query: str = LOG_QUERY
) -> dict[str, Any]:
    """Return a range result of the losses on a grid of `interval` (the source's scrape interval): at each grid
    time the last loss logged at or before it, as a scraped gauge would read; None before the first."""
    step = max(1.0, float(interval or 15.0))
    start = float(points[0][0] or 0.0)
    n = int((float(points[-1][0] or start) - start) // step) + 1
    values: list[float | None] = [None] * n
    j, last = 0, None
    for k in range(n):
        t = start + k * step
        while j < len(points) and float(points[j][0] or 0.0) <= t + 1e-6:
            last = points[j][1]
            j += 1
        values[k] = last
    return {
        "kind": "range",
        "promql": query,
        "window_s": 0.0,
        "start": start,
        "step": step,
        "n": n,
        "series": [{"labels": {}, "values": values}],
    }


def log_loss_departure(
    points: Sequence[Sequence[float | None]], cross_t: float, window: float, per_point: float = 1.0
) -> float | None:
    """Return when the log's per-step loss left its level on the way to a rise seen at `cross_t`, or None.

    The steps printed in the `window` seconds up to `cross_t` are taken in step order (a save's pause
    between two steps is no part of a divergence, which grows step by step), on a log scale (a divergence
    grows by factors). A jump (one step makes most of the rise, far beyond the steps' noise) is dated at
    the step before it; a climb at the break of a baseline-then-rise fit (`departure`). Either is dated when
    the first diverging step began (`_began`). `per_point`: the steps between two printed points
    (`steps_per_point`); the points must stand for MIN_POINTS steps, and be at least MIN_PRINTS.
    """
    pts = [(float(t), float(v)) for t, v in points if t is not None and v is not None and v > 0]
    pts = [p for p in pts if cross_t - window <= p[0] <= cross_t]
    if len(pts) < MIN_PRINTS or len(pts) * max(1.0, per_point) < MIN_POINTS:
        return None
    t = np.array([p[0] for p in pts])
    y = np.log(np.array([p[1] for p in pts]))
    d = np.diff(y)
    k = int(np.argmax(d))  # the largest step up: between points k and k + 1
    base = float(np.median(y[: k + 1][-30:]))
    if d[k] > 3 * step_noise(y[: k + 1]) and d[k] >= 0.5 * (float(np.max(y[k + 1 :])) - base):
        return _began(t, k, per_point)
    tau = departure(np.arange(len(y), dtype=float), y, len(y) - 1, len(y) - 1, earliest=0.0)
    return _began(t, int(math.floor(tau)), per_point) if tau is not None else None


def _began(t: np.ndarray, k: int, per_point: float) -> float:
    """Return when the first diverging step began, the last point of the baseline being `k`: when that
    point's step completed, if every step is printed. A log that prints every Nth step trained N - 1 steps
    unseen before the point that shows the move: any of them began it, none more likely (the move is
    interval-censored between the two prints), so the middle of the span from the last normal print to
    the start of the printed step that shows it."""
    if per_point <= 1.0 or k + 1 >= len(t):
        return float(t[k])
    step = (float(t[k + 1]) - float(t[k])) / per_point
    return (float(t[k]) + float(t[k + 1]) - step) / 2


def judged_window(triage: Mapping[str, Any] | None, window: float) -> float:
    """Return the seconds of losses a departure is judged on: `window`, or, for a log that prints every Nth
    step, long enough to hold twice MIN_PRINTS of its prints (the noise scale needs them, however sparse)."""
    every = print_interval_s(triage)
    return window if every is None else max(window, 2 * MIN_PRINTS * every)


def climb_into_nonfinite(
    points: Sequence[Sequence[float | None]], bad_t: float, window: float, per_point: float = 1.0
) -> float | None:
    """Return when the log's per-step loss left its level on its way to the non-finite loss logged at
    `bad_t`, or None when the steps before it stayed at their level (a NaN out of the blue).

    A divergence often ends in NaN within a few steps: too few for a scraped series to confirm a jump, yet
    the log printed every one of them. The departure of the finite losses before `bad_t`
    (`log_loss_departure`) counts only when the last of them stands far above the baseline before it
    (CLIMB_Z times the steps' noise, on a log scale): the climb is then the instability's start. `per_point`
    as for `log_loss_departure`."""
    pts = [(float(t), float(v)) for t, v in points if t is not None and v is not None and v > 0]
    pts = [p for p in pts if bad_t - window <= p[0] < bad_t]
    t_on = log_loss_departure(pts, pts[-1][0], window, per_point) if pts else None
    if t_on is None:
        return None
    t = np.array([p[0] for p in pts])
    y = np.log(np.array([p[1] for p in pts]))
    base = y[t <= t_on]
    if len(base) < MIN_PRINTS - 2 or len(base) * max(1.0, per_point) < MIN_POINTS // 2:
        return None  # too short a baseline to judge the climb against (step_noise needs four values)
    rise = float(y[-1]) - float(np.median(base[-30:]))
    return t_on if rise > CLIMB_Z * max(step_noise(base), 1e-9) else None
