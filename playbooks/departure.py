"""When a series left its own baseline, dated from the threshold crossing that confirmed it (#10).

A slow ramp crosses any threshold late: a GPU that heats over half an hour is beyond its peers' spread only
minutes after it began to heat, a diverging gradient norm doubles long after it began to climb. A
diagnostician dates the departure from the baseline, and takes the threshold crossing as its
corroboration. Here the departure is the change point of a segmented regression on the stretch before the
crossing: a baseline (a level and a slow trend, such as a falling loss) up to a break, a straight rise
from it up to the crossing. The break that fits best is the last time the baseline still held. A jump
between two samples fits any break between them equally: no break is given, and the caller dates it as
a jump.
"""

from __future__ import annotations

import numpy as np

from playbooks.anomaly import MAD_SCALE

__all__ = ["departure"]

#: candidate breaks a grid step
_SUBSTEPS = 4


def departure(
    t: np.ndarray, y: np.ndarray, cross: int, latest: int, *, earliest: float, sign: float = 1.0
) -> float | None:
    """Return when y left its baseline on the way to the crossing at index `cross`, or None.

    `latest` is the index the threshold-based walk back reached (the departure began no later); `earliest`
    the earliest time the baseline may be taken from (the valid data, a window). The break is sought from
    three baseline samples after `earliest` up to t[latest]. None when there is too little baseline, for a
    jump (every break between its two samples fits alike), or when the fitted rise at the crossing is not
    well above the baseline's own noise (the fit does not explain it).
    """
    keep = np.isfinite(y) & (t >= earliest) & (np.arange(len(t)) <= cross)
    tt, yy = t[keep], sign * y[keep]
    if len(tt) < 8:
        return None
    step = float(np.median(np.diff(tt)))
    lo, hi = float(tt[3]), float(t[min(latest, cross)])
    if hi <= lo or step <= 0:
        return None
    taus = np.arange(lo, hi + 1e-9, step / _SUBSTEPS)
    x = tt - tt[-1]
    fits = [_fit(tt, x, yy, tau) for tau in taus]
    sse = np.array([f[0] for f in fits])
    best = float(sse.min())
    tied = np.nonzero(sse <= best * (1 + 1e-7) + 1e-12 * float(np.sum(yy**2)))[0]
    if len(tied) > 1:
        return None  # a jump: any break between its two samples fits; it is dated as a jump
    k = int(tied[0])
    tau, (_, rise, resid) = float(taus[k]), fits[k]
    base = resid[tt <= tau]
    noise = MAD_SCALE * float(np.median(np.abs(base - np.median(base)))) if len(base) >= 4 else np.inf
    if rise <= 0 or rise < 3 * max(noise, 1e-12):
        return None
    return tau


def _fit(tt: np.ndarray, x: np.ndarray, yy: np.ndarray, tau: float) -> tuple[float, float, np.ndarray]:
    """Return (sum of squared residuals, the rise above the baseline at the end, the residuals) of the
    baseline (level and trend) with a straight rise from `tau`."""
    hinge = np.maximum(0.0, tt - tau)
    design = np.column_stack([np.ones_like(tt), x, hinge])
    coef, *_ = np.linalg.lstsq(design, yy, rcond=None)
    resid = yy - design @ coef
    return float(np.sum(resid**2)), float(coef[2] * hinge[-1]), resid
