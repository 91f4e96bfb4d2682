"""The pack's own moves (#10): where one member's place in the pack is not its own doing.

The pack is in disarray (its members wander far beyond their habit), it moves as a whole (a cooling change,
a restart), a member reads it a scrape late (`lag_move`), or the log names a pause: the peer detector
(`peers.py`) neither dates a departure nor judges excess at such instants.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from playbooks.anomaly import MAD_SCALE, robust_spread

#: The pack is in disarray at an instant where its members wander this many times their typical spread.
DISARRAY = 3.0


def disarray(dev: np.ndarray, pack: Mapping[str, np.ndarray] | None, scale: np.ndarray) -> np.ndarray:
    """Return the instants where the pack's spread (of the rows' deviations from their own habitual place,
    or Prometheus's median absolute deviation of the whole pack) exceeds DISARRAY times its typical `scale`."""
    with np.errstate(all="ignore"):
        spread_t = MAD_SCALE * pack["mad"] if pack and "mad" in pack else robust_spread(dev, axis=0)
        out = spread_t > DISARRAY * scale
    return np.where(np.isnan(out), False, out).astype(bool)


#: The pack's usual level at an instant is its median level within this many seconds either side.
USUAL_LEVEL_S = 1800.0


def usual_level(t: np.ndarray, level: np.ndarray, judged: np.ndarray) -> np.ndarray:
    """Return the pack's usual level at each instant: the median of its `level` over the `judged` instants
    within USUAL_LEVEL_S either side (a dip or a spike leaves it; a slow drift of the whole pack moves it
    along); NaN where there is none."""
    out = np.full(len(level), np.nan)
    ok = judged & np.isfinite(level)
    if not ok.any():
        return out
    tj, lj = t[ok], level[ok]
    lo = np.searchsorted(tj, t - USUAL_LEVEL_S, side="left")
    hi = np.searchsorted(tj, t + USUAL_LEVEL_S, side="right")
    for k in np.nonzero(hi > lo)[0]:
        out[k] = float(np.median(lj[lo[k] : hi[k]]))
    return out


def lag_move(level: np.ndarray, judged: np.ndarray, sign: float, per: float) -> np.ndarray:
    """Return, at each instant, how far the pack's `level` stood in the direction `sign` beyond its level
    then at the `judged` instants within a scrape either side (`per`: grid points a scrape spans, at least
    one point): a member read a scrape late (its exporter's collection lags the scrape, the last value
    Prometheus holds at a grid point is a scrape old) stands where the pack stood a scrape before, apart
    from it by the pack's own move wherever the pack cools or warms together (a slowdown, a stall, a phase
    change), for as long as the move takes: that much of its place is the timing of its readings."""
    out = np.zeros(len(level))
    ok = judged & np.isfinite(level)
    with np.errstate(all="ignore"):
        for k in range(1, int(np.ceil(per - 1e-9)) + 1):
            for a, b in ((slice(k, None), slice(None, -k)), (slice(None, -k), slice(k, None))):
                move = sign * (level[b] - level[a])
                out[a] = np.where(ok[a] & ok[b] & (move > out[a]), move, out[a])
    return out


def fleet_move(level: np.ndarray, scale: np.ndarray, judged: np.ndarray) -> np.ndarray:
    """Return the instants on either side of a step of the pack's `level` larger than DISARRAY times both
    the members' typical wander (`scale`) and the level's own large steps while `judged` (the 90th
    percentile: a pack that dips at every checkpoint makes such moves its rhythm, not an event)."""
    with np.errstate(all="ignore"):
        step = np.abs(np.diff(level))
        usual = step[judged[1:] & judged[:-1] & np.isfinite(step)]
        typical = float(np.quantile(usual, 0.9)) if len(usual) else 0.0
        big = step > DISARRAY * np.maximum(scale[1:], typical)
    big = np.where(np.isnan(big), False, big).astype(bool)
    out = np.zeros(len(level), bool)
    out[1:] |= big
    out[:-1] |= big
    return out


def in_spans(t: np.ndarray, spans: Sequence[tuple[float, float]]) -> np.ndarray:
    """Return the instants within any of `spans` ([start, end] each)."""
    out = np.zeros(len(t), bool)
    for a, b in spans:
        out |= (t >= a) & (t <= b)
    return out
