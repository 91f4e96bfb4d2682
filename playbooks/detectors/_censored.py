"""A departure the data's end cuts short, and scrapes that failed outright, for the peer detector (#10).

A stretch beyond the pack that is still going on when the data ends is censored, not short: it lasted at
least as long as the data shows, and what was observable is judged as a whole window is (the same share of
its instants beyond the pack), provided it covers half the window at least and holds in both its halves (a
stretch that ended before the data did is a short one, not a censored one). A rule judges a censored stretch
only where its finding needs another rule's corroboration to become a warning (`needs`).

A scrape of a host's GPU exporter that failed (its target's `up` 0) while the host's node_exporter answered
is a collection that timed out or was refused: whatever duration Prometheus stored for it (the timeout, a
refused connection's few milliseconds, nothing), it is a departure of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from playbooks.anomaly import Grid
from playbooks.context import Context


def censored_start(mask: np.ndarray, length: int, fraction: float) -> int | None:
    """Return the first index i (on a True) of a stretch of `mask` that the end of the data cuts short:
    fewer than `length` points from i to the end, at least half `length`, and `fraction` of them True in
    each half of them (still going on at the end); None if there is none."""
    n = len(mask)
    least = max(2, length // 2)
    for i in np.nonzero(mask)[0]:
        rest = n - int(i)
        if rest >= length:
            continue  # a whole window fits: first_sustained judged it
        if rest < least:
            return None
        half = int(i) + rest // 2
        if mask[i:half].mean() >= fraction and mask[half:].mean() >= fraction:
            return int(i)
    return None


def failed_scrapes(ctx: Context, g: Grid, p: Mapping[str, Any]) -> np.ndarray:
    """Return (rows x instants of `g`) where each row's host's GPU exporter target was down (`failed`: the
    query of its `up`) while its node_exporter answered (`mask`: the query of the host's `up`)."""
    out = np.zeros(g.values.shape, bool)
    failed = ctx.grid(str(p["failed"])) if p.get("failed") else None
    up = ctx.grid(str(p["mask"])) if p.get("mask") else None
    if failed is None or up is None:
        return out
    n = g.values.shape[1]
    for r, lab in enumerate(g.labels):
        h = lab.get("host", "")
        f, u = failed.row(host=h), up.row(host=h)
        if f is not None and u is not None and len(f) == n and len(u) == n:
            out[r] = (f < 1) & (u >= 1)
    return out
