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
"""

from __future__ import annotations

import numpy as np

from playbooks.anomaly import MAD_SCALE

__all__ = ["departure"]

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
    noise = MAD_SCALE * float(np.median(np.abs(base - np.median(base)))) if len(base) >= 4 else np.inf
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
    coef = np.where(ok, dot / np.where(ok, norm, 1.0), 0.0)
    return float(py @ py) - coef * dot, coef
