"""`change_points` and `climbs` find exactly what their per-point definitions find (medians taken point by point
with numpy), on series with ties, zeros, gaps, level shifts and exponential climbs."""

from __future__ import annotations

import numpy as np
import pytest

from playbooks.anomaly import MAD_SCALE, _median, change_points, climbs


def _jumps(x, t, valid, *, window, z, min_rel, ref_points=8, origin=None):
    """The definition: each point against the median of the ref_points before it and the noise of its window
    (no point judged before the window holds three changes: the noise is unknown until then)."""
    out = []
    idx = np.nonzero(valid & ~np.isnan(x))[0]
    if len(idx) < ref_points + 2:
        return out
    tv, xv = t[idx], x[idx]
    dx = np.diff(xv)
    lo = 0
    for k in range(ref_points, len(idx)):
        while tv[lo] < tv[k] - window:
            lo += 1
        ref = float(np.median(xv[k - ref_points : k]))
        steps = dx[lo : k - 1]
        steps = steps[steps != 0]
        fall = min(0.0, float(np.median(steps))) if len(steps) else 0.0
        if len(steps) < 3:
            continue
        noise = MAD_SCALE * float(np.median(np.abs(steps - fall)))
        level = abs(ref)
        if origin is not None and origin > ref:
            level = min(level, origin - ref)
        scale = max(noise, 0.01 * level, 1e-12)
        if ref == 0 and xv[k] == 0:
            continue
        rel = (xv[k] - ref) / level if level else np.inf
        if (xv[k] - ref) / scale >= z and rel >= min_rel:
            out.append(int(idx[k]))
    return out


def _climbs(x, t, valid, *, window, z, min_rel):
    """The definition: each point against the median and noise of its own level window/2 to window earlier."""
    out, levels = [], {}
    idx = np.nonzero(valid & ~np.isnan(x))[0]
    tv, xv = t[idx], x[idx]
    lo = hi = 0
    for k in range(len(idx)):
        while lo < k and tv[lo] < tv[k] - window:
            lo += 1
        while hi < k and tv[hi] <= tv[k] - window / 2:
            hi += 1
        if hi - lo < 6:
            continue
        earlier = xv[lo:hi]
        ref = float(np.median(earlier))
        steps = np.abs(np.diff(earlier))
        steps = steps[steps > 0]
        scale = max(MAD_SCALE * float(np.median(steps)) if len(steps) >= 3 else 0.0, 0.01 * abs(ref), 1e-12)
        if ref and (xv[k] - ref) / scale >= z and (xv[k] - ref) / abs(ref) >= min_rel:
            out.append(int(idx[k]))
            levels[int(idx[k])] = ref + scale
    return out, levels


def _series(rng, case):
    n = int(rng.integers(5, 300))
    t = np.arange(n) * float(rng.choice([10, 15, 30, 60]))
    kind = case % 5
    if kind == 0:
        x = rng.normal(3.0, 0.05, n)
    elif kind == 1:
        x = np.round(rng.normal(2.0, 0.3, n), 1)  # ties and repeated values
    elif kind == 2:
        x = np.exp(np.linspace(0, rng.uniform(0, 5), n)) * rng.uniform(0.5, 2) + rng.normal(0, 0.05, n)
    elif kind == 3:
        x = np.where(rng.random(n) < 0.1, 0.0, rng.normal(0, 1, n))
    else:
        x = rng.normal(5, 0.2, n)
        x[int(rng.integers(1, n)) :] += rng.uniform(0, 10)
    x[rng.random(n) < 0.05] = np.nan
    return x, t, rng.random(n) < 0.95


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_scans_find_what_their_definitions_find(seed):
    rng = np.random.default_rng(seed)
    fired = 0
    for case in range(300):
        x, t, valid = _series(rng, case)
        kw = {
            "window": float(rng.choice([300, 600, 1200, 2400])),
            "z": float(rng.choice([3, 5, 8])),
            "min_rel": float(rng.choice([0.0, 0.1, 0.3, 1.0])),
        }
        origin = None if case % 3 else float(rng.normal(6, 2))
        found = change_points(x, t, valid, **kw, origin=origin)
        assert found == _jumps(x, t, valid, **kw, origin=origin)
        assert climbs(x, t, valid, **kw) == _climbs(x, t, valid, **kw)
        fired += bool(found)
    assert fired > 30  # the cases exercise the firing branch, not only the quiet one


def test_the_median_is_numpys():
    rng = np.random.default_rng(3)
    for n in range(1, 60):
        values = np.round(rng.normal(0, 1, n), int(rng.integers(0, 4))).tolist()
        assert _median(values) == float(np.median(values))
