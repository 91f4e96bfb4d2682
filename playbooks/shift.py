"""How far one sample's distribution lies above another's (a restored run's hosts against a fresh run's): the
comparison's test of a uniform shift of the whole distribution (#10).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Shift", "distribution_shift"]


@dataclass(frozen=True)
class Shift:
    """How far one sample's distribution lies above another's: the Hodges-Lehmann estimate (the median of
    all pairwise differences), its ~90 % interval, and the one-sided Mann-Whitney p-value. The question is
    one-sided (does the other run carry more?): `low` is the one-sided ~95 % lower bound, the bound that
    matches the one-sided test at 5 %."""

    estimate: float
    low: float
    high: float
    p: float


def distribution_shift(base: Sequence[float], other: Sequence[float]) -> Shift | None:
    """Return the shift of `other` over `base` (None with fewer than 3 values on a side)."""
    a = np.asarray([x for x in base if np.isfinite(x)], float)
    b = np.asarray([x for x in other if np.isfinite(x)], float)
    if len(a) < 3 or len(b) < 3:
        return None
    diffs = np.sort((b[:, None] - a[None, :]).ravel())
    n, m = len(b), len(a)
    # the interval's ranks from the normal approximation of the Mann-Whitney statistic (one-sided 95 %)
    k = int(np.floor(n * m / 2 - 1.645 * np.sqrt(n * m * (n + m + 1) / 12.0)))
    k = min(max(k, 0), len(diffs) - 1)
    from scipy import stats  # only the comparison needs it; importing it costs a diagnosis ~1 s of start-up

    p = float(stats.mannwhitneyu(b, a, alternative="greater").pvalue)
    return Shift(float(np.median(diffs)), float(diffs[k]), float(diffs[len(diffs) - 1 - k]), p)
