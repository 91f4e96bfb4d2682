"""When a series left its own baseline, dated from the threshold crossing that confirmed it (#10).

A slow ramp crosses any threshold late: a GPU that heats over half an hour is beyond its peers' spread only
minutes after it began to heat, a diverging gradient norm doubles long after it began to climb. A
diagnostician dates the departure from the baseline, and takes the threshold crossing as its
corroboration. Here the departure is the change point of a segmented regression on the stretch before the
crossing: a baseline (a level and a slow trend, such as a falling loss) up to a break, a straight rise
from it up to the crossing. The break that fits best is the last time the baseline still held. A jump
between two samples fits any break between them equally: no break is given, and the caller dates it as
a jump.

A rise may also level off before the crossing (`levels_off`): a GPU that heats by a few degrees settles at
its new temperature, and a faint heat crosses a bar only once it has settled, long after its rise. A
straight rise fitted through that plateau is shallower than the real one and starts earlier; the rise is
then fitted with its end as a second break (a ramp from the departure to where it settled, flat after).

The baseline's noise, against which the rise must stand out, is read at the data's resolution: a GPU's
temperature comes in whole degrees (DCGM, nvidia-smi), and its departure from a pack's median in halves, so
a baseline that wanders by under a degree takes two or three values. Their median absolute deviation is then
0 or 1 (a noise of none at all or of 1.5 degrees) depending on whether half the samples sit on the modal
value: each value is read as the interval of width one step it stands for (`spread`), and no noise is
smaller than the rounding's own (a step over the square root of 12: 0.29 degrees for whole degrees).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from playbooks.anomaly import MAD_SCALE

__all__ = ["departure", "resolution", "spread"]

#: candidate breaks a grid step
_SUBSTEPS = 4


def departure(
    t: np.ndarray,
    y: np.ndarray,
    cross: int,
    latest: int,
    *,
    earliest: float,
    sign: float = 1.0,
    levels_off: bool = False,
    trend: bool = True,
) -> float | None:
    """Return when y left its baseline on the way to the crossing at index `cross`, or None.

    `latest` is the index the threshold-based walk back reached (the departure began no later); `earliest`
    the earliest time the baseline may be taken from (the valid data, a window). The break is sought from
    three baseline samples after `earliest` up to t[latest]. None when there is too little baseline, for a
    jump (every break between its two samples fits alike), or when the fitted rise at the crossing is not
    well above the baseline's own noise (the fit does not explain it). `levels_off`: the rise may end at
    any sample before the crossing and stay level after it.
    """
    keep = np.isfinite(y) & (t >= earliest) & (np.arange(len(t)) <= cross)
    tt, yy = t[keep], sign * y[keep]
    if len(tt) < 8:
        return None
    step = float(np.median(np.diff(tt)))
    lo, hi = float(tt[3]), float(t[min(latest, cross)])
    if hi <= lo or step <= 0:
        return None
    # the baseline's level and trend are projected out: each candidate rise is judged on what they leave
    q, _ = np.linalg.qr(np.column_stack([np.ones_like(tt), tt - tt[-1]]))
    py = yy - q @ (q.T @ yy)
    taus = np.arange(lo, hi + 1e-9, step / _SUBSTEPS)
    # a rise that levels off ends at a sample first, then within a step of the best end, by substeps
    fits = [_fit(py, q, _rises(tt, tau, tt[tt > tau] - tau if levels_off else None)) for tau in taus]
    sse = np.array([float(f[0].min()) for f in fits])
    best = float(sse.min())
    tol = best * (1 + 1e-7) + 1e-12 * float(np.sum(yy**2))
    if sum(int(np.sum(f[0] <= tol)) for f in fits) > 1:
        return None  # a jump: any break between its two samples fits; it is dated as a jump
    k = int(np.argmin(sse))
    tau, rises = float(taus[k]), _rises(tt, float(taus[k]), None)
    if levels_off:
        tau, rises = _settled(tt, py, q, taus, step, float(tt[tt > tau][int(np.argmin(fits[k][0]))]))
    coef = float(_fit(py, q, rises)[1][0])
    resid = py - coef * (rises[0] - q @ (q.T @ rises[0]))
    rise = coef * float(rises[0, -1])
    base = resid[tt <= tau]
    noise = spread(base, resolution(yy)) if len(base) >= 4 else np.inf
    if rise <= 0 or rise < 3 * max(noise, 1e-12):
        return None
    return tau


def _settled(
    tt: np.ndarray, py: np.ndarray, q: np.ndarray, taus: np.ndarray, step: float, top: float
) -> tuple[float, np.ndarray]:
    """Return the best start among `taus` and its rise (one row over `tt`) for a rise that levels off
    within a step of the sample `top` (by substeps), the start within a step of the best for `top`."""
    ends = np.arange(top - step, min(top + step, float(tt[-1])) + 1e-9, step / _SUBSTEPS)
    best: tuple[float, float, np.ndarray] | None = None
    for tau in taus:
        ok = ends > tau
        if not ok.any():
            continue
        rises = _rises(tt, float(tau), ends[ok] - tau)
        sse = _fit(py, q, rises)[0]
        m = int(np.argmin(sse))
        if best is None or sse[m] < best[0]:
            best = (float(sse[m]), float(tau), rises[m : m + 1])
    assert best is not None
    return best[1], best[2]


def _rises(tt: np.ndarray, tau: float, ends: np.ndarray | None) -> np.ndarray:
    """Return the candidate rises from `tau` (rows over `tt`): straight up to the last sample, or up to
    each of `ends` (seconds after `tau`) and level from it."""
    up: np.ndarray = np.maximum(0.0, tt - tau)[None, :]
    return up if ends is None else np.minimum(up, ends[:, None])


def _fit(py: np.ndarray, q: np.ndarray, rises: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return each candidate rise's (sum of squared residuals, coefficient) fitted with the baseline (level
    and trend, whose orthonormal basis is `q`; `py` the series less its projection on it)."""
    pr = rises - (rises @ q) @ q.T
    norm = np.einsum("ij,ij->i", pr, pr)
    dot = pr @ py
    ok = norm > 1e-12 * max(1.0, float(np.max(norm, initial=0.0)))
    # a rise only: a candidate that would fit as a fall (the trend overshooting, a plateau pulling it back)
    # explains nothing of a departure in the direction asked
    coef = np.where(ok & (dot > 0), dot / np.where(ok, norm, 1.0), 0.0)
    return float(py @ py) - coef * dot, coef


def resolution(y: np.ndarray) -> float:
    """Return the step of the lattice the finite values of `y` lie on (whole degrees: 1; their difference
    from a median of whole degrees: 0.5), or 0 when they lie on none (continuous readings)."""
    u = np.unique(np.round(y[np.isfinite(y)], 6))
    if len(u) < 2:
        return 0.0
    q = float(np.min(np.diff(u)))
    k = (u - u[0]) / q
    return q if q > 1e-6 and bool(np.all(np.abs(k - np.round(k)) < 1e-3)) else 0.0


def spread(x: np.ndarray, step: float = 0.0) -> float:
    """Return a robust standard deviation of `x` (MAD x 1.4826) read at the resolution `step`: each value
    stands for the interval of width `step` around it (read uniformly), whose median and median absolute
    deviation vary smoothly where the plain ones jump between lattice values; never under the rounding's
    own noise, `step` / sqrt(12)."""
    x = x[np.isfinite(x)]
    if step <= 0:
        return MAD_SCALE * float(np.median(np.abs(x - np.median(x))))
    mid = _smeared_quantile(x, step, lambda c: float(np.mean(np.clip((c - x) / step + 0.5, 0.0, 1.0))))
    dist = np.abs(x - mid)

    def inside(a: float) -> float:
        # the share of each value's interval within `a` of the median
        lo, hi = np.maximum(x - step / 2, mid - a), np.minimum(x + step / 2, mid + a)
        return float(np.mean(np.clip(hi - lo, 0.0, None)) / step)

    mad = _smeared_quantile(dist, step, inside, low=0.0)
    return max(MAD_SCALE * mad, step / float(np.sqrt(12.0)))


def _smeared_quantile(
    x: np.ndarray, step: float, share: Callable[[float], float], low: float | None = None
) -> float:
    """Return where the nondecreasing `share` (0..1) of the smeared values reaches one half (bisection)."""
    lo = float(np.min(x)) - step if low is None else low
    hi = float(np.max(x)) + step
    for _ in range(40):
        c = (lo + hi) / 2
        lo, hi = (c, hi) if share(c) < 0.5 else (lo, c)
    return float((lo + hi) / 2)
