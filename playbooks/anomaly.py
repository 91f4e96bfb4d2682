"""Generic anomaly detectors on small aligned arrays (one row per host or GPU, one column per grid time).

Everything here is numpy on values already aggregated by PromQL. The detectors judge a series against
its own earlier behaviour and against its peers at the same instant (median / MAD across the pack)
before any fixed number; fixed numbers only enter as floors ("any sustained RDMA retransmit") or as
GPU-model priors passed in by the caller.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._diagnose_bits import LABEL as BITS_LABEL
from ._diagnose_bits import expand as expand_bits

__all__ = [
    "Grid",
    "background",
    "change_points",
    "first_sustained",
    "stretch_start",
    "nan_median",
    "peer_deviation",
    "rate_excess",
    "rise_start",
    "robust_spread",
    "step_noise",
    "walk_back",
]

MAD_SCALE = 1.4826


@dataclass
class Grid:
    """A range-query result on a regular grid.

    Attributes:
        t: grid times (unix seconds), shape (N,).
        labels: one label dict per row.
        values: shape (S, N), NaN where the series had no value.
        pack: statistics of the whole pack when Prometheus computed them and returned only some of its
            series (`playbooks._diagnose_peers`): "median", "mad", "count", each of shape (N,); else empty.
    """

    t: np.ndarray
    labels: list[dict[str, str]]
    values: np.ndarray
    pack: dict[str, np.ndarray] = field(default_factory=dict)
    #: first row index by the values of a tuple of label names (built by `row` on first use of those names)
    _rows: dict[tuple[str, ...], dict[tuple[str | None, ...], int]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def from_result(cls, data: Mapping[str, Any]) -> Grid:
        """Return the grid of a stored range result ({"start", "step", "n", "series": [...]})."""
        n = int(data["n"])
        t = float(data["start"]) + float(data["step"]) * np.arange(n)
        rows, pack = [], {}
        series = data.get("series", [])
        if any(BITS_LABEL in s["labels"] for s in series):
            series = [{"labels": lab, "values": v} for lab, v in expand_bits(series)]
        for s in series:
            v = np.array(s["values"], dtype=float)  # None (a missing point) becomes NaN
            stat = s["labels"].get("stepwise_stat")
            if stat:
                pack[str(stat)] = v
            else:
                rows.append((dict(s["labels"]), v))
        vals = np.array([v for _, v in rows]) if rows else np.full((0, n), np.nan)
        return cls(t=t, labels=[lab for lab, _ in rows], values=vals, pack=pack)

    @property
    def step(self) -> float:
        return float(self.t[1] - self.t[0]) if len(self.t) > 1 else 0.0

    def row(self, **labels: str) -> np.ndarray | None:
        """Return the first row whose labels include `labels`, or None.

        Detectors ask for every host's row of the same grids: an index per set of label names makes each
        look-up one dict access instead of a scan of the rows (128 hosts x 12 grids: 0.1 s of the decision).
        """
        names = tuple(sorted(labels))
        index = self._rows.get(names)
        if index is None:
            index = {}
            for i, lab in enumerate(self.labels):
                index.setdefault(tuple(lab.get(k) for k in names), i)
            self._rows[names] = index
        found = index.get(tuple(labels[k] for k in names))
        if found is None:
            return None
        row: np.ndarray = self.values[found]  # a row of the 2-D values array
        return row

    def single(self) -> np.ndarray | None:
        """Return the only row of a job-scope result (the first if several), or None when empty."""
        return self.values[0] if len(self.values) else None

    def key(self, i: int) -> tuple[str, str | None]:
        lab = self.labels[i]
        return lab.get("host", ""), lab.get("gpu")

    def index(self, when: float) -> int:
        """Return the index of the grid time nearest `when` (clipped to the grid)."""
        if not len(self.t):
            return 0
        return int(np.clip(round((when - self.t[0]) / max(self.step, 1e-9)), 0, len(self.t) - 1))

    def mask(self, start: float | None, end: float | None) -> np.ndarray:
        m = np.ones(len(self.t), bool)
        if start is not None:
            m &= self.t >= start
        if end is not None:
            m &= self.t <= end
        return m


def robust_spread(x: np.ndarray, axis: int = 0) -> np.ndarray:
    """Return MAD x 1.4826 along `axis` (a standard deviation that outliers cannot inflate)."""
    with np.errstate(all="ignore"):
        med = np.nanmedian(x, axis=axis, keepdims=True)
        spread: np.ndarray = MAD_SCALE * np.nanmedian(np.abs(x - med), axis=axis)
        return spread


def first_sustained(mask: np.ndarray, length: int, fraction: float = 0.8) -> int | None:
    """Return the first index i where at least `fraction` of mask[i:i+length] is True, starting on a True."""
    n = len(mask)
    if n == 0:
        return None
    length = max(1, min(length, n))
    c = np.concatenate([[0], np.cumsum(mask.astype(int))])
    need = fraction * length
    for i in np.nonzero(mask)[0]:
        j = min(n, i + length)
        # near the end of the data a shorter tail counts if it is all True and at least half the length
        if j - i < length:
            if (c[j] - c[i]) == (j - i) and (j - i) >= max(1, length // 2):
                return int(i)
            continue
        if c[j] - c[i] >= need:
            return int(i)
    return None


def stretch_start(
    mask: np.ndarray, i: int, length: int, fraction: float, alpha: float, per: float = 1.0
) -> int:
    """Return where the sustained stretch that first_sustained found at `i` really begins: a leading hit
    (a lone timeout, a missed scrape) followed by more clean points than the stretch's own rate allows
    (chance below `alpha`) is the background every host shows now and then, not the stretch's start, as
    long as the stretch still holds (`fraction` of `length`) from the next hit on. `per`: grid points a
    scrape spans (a held sample is one)."""
    n = len(mask)
    c = np.concatenate([[0], np.cumsum(mask.astype(int))])
    while True:
        later = np.nonzero(mask[i + 1 :])[0]
        if not len(later):
            return i
        k = i + 1 + int(later[0])
        j = min(n, k + length)
        if j - k < length or c[j] - c[k] < fraction * length:
            return i
        gap = (k - i - 1) / per
        rate = (c[j] - c[k]) / (j - k)
        if gap <= 0 or (rate < 1.0 and (1.0 - rate) ** gap >= alpha):
            return i
        i = k


def burst_chance(hits: float, n: float, pack_hits: float, pack_n: float, tests: float) -> float:
    """Return the chance that a pack whose members fail (miss a scrape, time out) as often as the others
    do, `pack_hits` of `pack_n`, shows `hits` of `n` on one of `tests` hosts or windows by chance alone.

    The pack's rate counts one more failure than it saw (a pack that never failed still may); counts are
    in scrapes, so a sample held over several grid points is counted once.
    """
    from scipy.stats import binom

    rate = min(1.0, (pack_hits + 1.0) / (pack_n + 1.0))
    k, m = int(np.ceil(hits - 1e-9)), max(1, int(round(n)))
    return float(min(1.0, binom.sf(k - 1, m, rate) * max(1.0, tests)))


def walk_back(x: np.ndarray, i: int, level: float, *, up: bool = True) -> int:
    """Return the earliest index <= i such that x stays beyond `level` from it up to i (NaNs are skipped)."""
    j = i
    while j > 0:
        v = x[j - 1]
        if np.isnan(v):
            j -= 1
            continue
        if (v > level) if up else (v < level):
            j -= 1
        else:
            break
    while j < i and np.isnan(x[j]):
        j += 1
    return j


def rise_start(x: np.ndarray, i: int, noise: float) -> int:
    """Return the first index of the rise that reached x[i]: walking back, the series keeps falling by more
    than `noise` a step (NaNs skipped). A staircase (plateaus left by earlier rises) stops the walk at the
    last plateau, so the onset is the start of the final rise, not of the first step of the stairs. A value
    repeated exactly is one sample that the grid met twice (its step finer than the scrapes): skipped."""
    j = i
    k = i - 1
    while k >= 0:
        if np.isnan(x[k]) or x[k] == x[j]:
            k -= 1
            continue
        if x[j] - x[k] > noise:
            j = k
            k -= 1
        else:
            break
    # j is the lowest point reached; the rise starts just after it unless the walk never moved
    nxt = j + 1
    while nxt < i and np.isnan(x[nxt]):
        nxt += 1
    return i if j == i else nxt


def step_noise(x: np.ndarray) -> float:
    """Return the typical point-to-point change of a series (MAD-scaled): what a step of noise looks like."""
    d = np.diff(x[~np.isnan(x)])
    return float(MAD_SCALE * np.median(np.abs(d - np.median(d)))) if len(d) >= 3 else 0.0


def peer_deviation(
    values: np.ndarray, baseline_cols: np.ndarray, pack: Mapping[str, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (deviation, spread, median) of each row against the pack at each instant.

    deviation[s, t] = x[s, t] - level[t] - offset[s], where offset is the row's own median deviation over
    `baseline_cols` (its habitual place in the pack: a GPU that always runs 4 degC warmer is not anomalous).
    The pack's level at each instant is the median of the rows' moves from their own usual levels (each
    row's median over the window), plus the median usual level; spread is the typical (median over time)
    robust spread of those moves. A pack made of two packs (a rack power-capped by design runs cooler and
    slower) has no meaningful median of raw values (it flips from one group to the other when one row
    moves) and its raw spread is the gap between the groups, not how far a member wanders from its own
    place. `pack` (a `Grid.pack`): the rows are only some of the pack, whose level (`median`) and median
    absolute deviation of the moves (`mad`) Prometheus computed over all of it the same way.
    """
    if pack and "median" in pack and "mad" in pack:
        med = pack["median"]
        with np.errstate(all="ignore"):
            mad = pack["mad"][np.isfinite(pack["mad"])]
        spread = MAD_SCALE * float(np.median(mad)) if len(mad) else 0.0
        return _offset(values - med[None, :], baseline_cols), np.full(values.shape[1], spread), med
    with np.errstate(all="ignore"):
        usual = np.nanmedian(values, axis=1) if values.size else np.zeros(len(values))
        usual = np.where(np.isnan(usual), np.nanmedian(usual) if np.isfinite(usual).any() else 0.0, usual)
        moves = values - usual[:, None]
        med = np.nanmedian(moves, axis=0) + (float(np.median(usual)) if len(usual) else 0.0)
        spread_t = robust_spread(moves, axis=0)
        spread = float(np.nanmedian(spread_t)) if np.isfinite(spread_t).any() else 0.0
    return _offset(values - med[None, :], baseline_cols), np.full(values.shape[1], spread), med


def _offset(dev: np.ndarray, baseline_cols: np.ndarray) -> np.ndarray:
    """Return each row's deviation less its own median deviation over `baseline_cols` (0 without any)."""
    with np.errstate(all="ignore"):
        if baseline_cols.any() and len(dev):
            offset = np.nanmedian(dev[:, baseline_cols], axis=1)
            offset = np.where(np.isnan(offset), 0.0, offset)
        else:
            offset = np.zeros(len(dev))
        out: np.ndarray = dev - offset[:, None]
    return out


def background(
    rates: np.ndarray,
    cols: np.ndarray,
    *,
    floor: float = 0.0,
    length: int = 0,
    q: float = 95.0,
    min_points: int = 5,
    tick: int = 0,
) -> tuple[np.ndarray, float]:
    """Return (each row's own background before its change, the pack's background) of a sparse or steady rate.

    A row's background is a high quantile (`q`) of its own non-zero values over `cols` (see `_level`). With
    `length`, a row whose rate stays above `floor` for most of `length` points has changed there, and its
    background is taken from its own history before that change (NaN when it has fewer than `min_points` of
    history: nothing to judge it against but the pack). Without a change, it spans all of `cols`.

    The pack's background is the median of the rows' backgrounds, each taken before its own change (the
    whole of `cols` for a row without history): hosts in trouble cannot raise it even when they are most of a
    small job (their history comes before it), a host whose larger ticks fell outside a short job still
    meets the pack's, and a counter that ticks on every host (transmit waits) raises it for all. For the pack,
    a stretch no longer than `tick` (the grid points rate() spreads one increment over) is a tick, not a
    change: the trickle every host shows is its background, never the silence before a host's first tick.
    """
    n_rows = len(rates)
    own, for_pack = np.full(n_rows, np.nan), np.full(n_rows, np.nan)
    idx = np.arange(rates.shape[1]) if rates.ndim == 2 else np.zeros(0, int)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for r in range(n_rows):
            x = np.where(cols, rates[r], np.nan)
            if not np.isfinite(x).any():
                continue
            whole = _level(x, q)
            above = cols & (rates[r] > floor)
            i = first_sustained(above, length) if length else None
            own[r] = whole if i is None else _before(x, idx < i, min_points, q)
            if tick and i is not None:
                i = first_sustained(_without_ticks(above, cols, tick), length)
            for_pack[r] = whole if i is None else np.nan_to_num(_before(x, idx < i, min_points, q), nan=whole)
        pack = float(np.nanmedian(for_pack)) if np.isfinite(for_pack).any() else float("nan")
    return own, pack


def _before(x: np.ndarray, pre: np.ndarray, min_points: int, q: float) -> float:
    """Return the background of x over `pre` (NaN with fewer than `min_points` values there)."""
    kept = np.where(pre, x, np.nan)
    return _level(kept, q) if int(np.isfinite(kept).sum()) >= min_points else float("nan")


def _without_ticks(above: np.ndarray, cols: np.ndarray, tick: int) -> np.ndarray:
    """Return `above` less its runs of at most `tick` points that end before `cols` does (one that reaches
    its end may be a change cut short there)."""
    out, last = above.copy(), int(np.nonzero(cols)[0][-1]) if cols.any() else -1
    edges = np.diff(np.concatenate([[0], above.astype(np.int8), [0]]))
    for lo, hi in zip(np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0], strict=True):
        out[lo:hi] &= hi - lo > tick or hi - 1 >= last
    return out


def _level(x: np.ndarray, q: float) -> float:
    """Return a row's background: the `q` quantile of its non-zero values (0 without any): a counter that ticks
    now and then has the size of its larger ticks, not the 0 of a median over mostly idle scrapes."""
    ticks = x[np.isfinite(x) & (x > 0)]
    return float(np.percentile(ticks, q)) if len(ticks) else 0.0


def rate_excess(rates: np.ndarray, reference: np.ndarray, *, floor: float, factor: float) -> np.ndarray:
    """Return a mask of where each row's rate exceeds the floor and `factor` x its reference (one per row:
    the larger of the pack's background over the job and the row's own history)."""
    with np.errstate(all="ignore"):
        ref = np.where(np.isnan(reference), 0.0, reference)
        return (rates > floor) & (rates > factor * ref[:, None]) & ~np.isnan(rates)


def change_points(
    x: np.ndarray,
    t: np.ndarray,
    valid: np.ndarray,
    *,
    window: float,
    z: float,
    min_rel: float,
    ref_points: int = 8,
    origin: float | None = None,
) -> list[int]:
    """Return indices where x jumps upward against its own recent history.

    The reference is the median of the `ref_points` previous valid points; the noise scale comes from the
    point-to-point changes over the preceding `window` seconds (robust to a slow trend such as a falling
    loss, which a plain median/MAD of the window would mistake for noise), taken about their typical fall:
    a loss falls by what every step learned, and a series whose points lie several steps apart (a log that
    prints every 10th step, a gauge refreshed every few steps) falls as much between every two of them, a
    steady fall that is no noise. (A steady rise stays in the scale: a climb is `climbs`' to judge.) Only
    `valid` points (warm-up and checkpoint windows excluded) enter baselines or may fire.

    No point is judged before the window holds three changes: until then the noise is unknown (a gauge refreshed
    every fourth scrape just after warm-up repeats its few values, and 1 % of the level is no noise scale).

    The rise must also be `min_rel` of the reference level (whose 1 % also floors the noise scale), or, given
    the series' `origin` (its level when training began) above the reference, of the progress made since
    (origin - reference) when that is smaller: a loss's level is mostly what no training removes, so early in
    a run a jump that undoes most of what the run has learned is small against the level yet large against
    the progress.
    """
    out: list[int] = []
    idx = np.nonzero(valid & ~np.isnan(x))[0]
    if len(idx) < ref_points + 2:
        return out
    tv, xv = t[idx], x[idx]
    dx = np.diff(xv)
    # every point's reference at once (refs[k - ref_points]: the median of the ref_points before k); the noise
    # scale, a median over a time window, only where the rise is large enough against the level to fire
    refs = np.median(np.lib.stride_tricks.sliding_window_view(xv, ref_points)[:-1], axis=1).tolist()
    times, values = tv.tolist(), xv.tolist()
    lo = 0
    for k in range(ref_points, len(idx)):
        while times[lo] < times[k] - window:
            lo += 1
        ref, xk = refs[k - ref_points], values[k]
        level = abs(ref)
        if origin is not None and origin > ref:
            level = min(level, origin - ref)
        if ref == 0 and xk == 0:
            continue
        rel = (xk - ref) / level if level else np.inf
        if not rel >= min_rel:
            continue
        steps = dx[lo : k - 1]
        steps = steps[steps != 0]
        if len(steps) < 3:
            continue
        scale = max(_fall_noise(steps), 0.01 * level, 1e-12)
        if (xk - ref) / scale >= z:
            out.append(int(idx[k]))
    return out


def _fall_noise(steps: np.ndarray) -> float:
    """Return the noise scale of a series' point-to-point changes (repeats left out): their MAD-scaled typical
    size about their typical fall (a steady fall is the training's progress, no noise); 0 with fewer than 3."""
    if len(steps) < 3:
        return 0.0
    fall = min(0.0, float(np.median(steps)))
    return MAD_SCALE * float(np.median(np.abs(steps - fall)))


def climbs(
    x: np.ndarray, t: np.ndarray, valid: np.ndarray, *, window: float, z: float, min_rel: float
) -> tuple[list[int], dict[int, float]]:
    """Return indices where x stands far above its own level of `window` to `window`/2 earlier, and for each
    the level (that reference plus one noise scale) it climbed from.

    A divergence climbs: each point is only a little above the last few (a jump against them never fires),
    yet within minutes it is many times its earlier level. The noise scale comes from the point-to-point
    changes of that earlier stretch, as in `change_points`.
    """
    out: list[int] = []
    levels: dict[int, float] = {}
    idx = np.nonzero(valid & ~np.isnan(x))[0]
    times, values = t[idx].tolist(), x[idx].tolist()
    lo = hi = 0
    for k in range(len(idx)):
        while lo < k and times[lo] < times[k] - window:
            lo += 1
        while hi < k and times[hi] <= times[k] - window / 2:
            hi += 1
        if hi - lo < 6:
            continue
        earlier = values[lo:hi]
        ref, xk = _median(earlier), values[k]
        # the rise against the level first: the noise scale is only needed where it is large enough
        if not (ref and (xk - ref) / abs(ref) >= min_rel):
            continue
        steps = [d for d in (abs(b - a) for a, b in zip(earlier, earlier[1:], strict=False)) if d > 0]
        scale = max(MAD_SCALE * _median(steps) if len(steps) >= 3 else 0.0, 0.01 * abs(ref), 1e-12)
        if (xk - ref) / scale >= z:
            out.append(int(idx[k]))
            levels[int(idx[k])] = ref + scale
    return out, levels


def _median(values: list[float]) -> float:
    """Return the median of a short list of finite floats, as np.median computes it (the mean of the two
    middle values of an even count), without numpy's per-call cost in a per-point loop."""
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def nan_median(x: Sequence[float] | np.ndarray) -> float:
    arr = np.asarray(x, dtype=float)
    arr = arr[~np.isnan(arr)]
    return float(np.median(arr)) if len(arr) else float("nan")
