"""Whether a host's departures recur beyond the fleet's own lost scrapes (#10, decision._recurs).

A GPU driver fault's scrape timeouts come and go on its host: many separate episodes. One hung exporter that
timed out for a few minutes once is one episode. And where the network drops a scrape now and then, every
target of the fleet, the GPU exporter's and node_exporter's on every host, times out once here and there at
random: a few isolated timeouts on one host at the fleet's own rate (with or without one outage beside them)
are the network's, not its GPU driver's. So a host's episodes recur only when there are at least `want` of
them and more than the fleet's own rate of such episodes gives one host of the pack by chance; a timeout at
an instant the host's node_exporter failed too is the network's (both targets lost at once), no episode.
"""

from __future__ import annotations

import numpy as np

from playbooks.anomaly import Grid, burst_chance
from playbooks.context import Context


def recurs(ctx: Context, hosts: list[str], want: int, query: str, mask: str, alpha: float) -> bool:
    """Return True if one of `hosts` shows at least `want` separate stretches where its value of `query`
    stands above the midpoint between the pack's level and its own peak, at instants its node_exporter
    answered (`mask`: the query of the host's `up`), and more of them than the fleet's own rate of lost
    scrapes (the other hosts' stretches above the same bar, or the node_exporters' failed scrapes, whichever
    is higher) gives one of the pack's hosts with a chance below `alpha`."""
    g = ctx.grid(query)
    if g is None:
        return False
    up = ctx.grid(mask) if mask else None
    with np.errstate(all="ignore"):
        level = g.pack["median"] if "median" in g.pack else np.nanmedian(g.values, axis=0)
    per = max(1.0, float(getattr(ctx.source, "interval", g.step) or g.step) / max(g.step, 1e-9))
    for h in hosts:
        x = g.row(host=h)
        if x is None or len(x) != len(level):
            continue
        seen = np.isfinite(x) & np.isfinite(level)
        if not seen.any():
            continue
        with np.errstate(invalid="ignore"):
            bar = (level + np.nanmax(x[seen])) / 2
            mine = _episodes(x > bar, seen & _answered(up, h, len(x)))
            # the fleet's background: the other hosts' stretches above the same bar, or node_exporter's failures
            others = [r for r in range(len(g.labels)) if g.labels[r].get("host") != h]
            pack = (
                float(sum(_episodes(g.values[r] > bar, np.isfinite(g.values[r])) for r in others)),
                float(np.isfinite(g.values[others]).sum()) / per,
            )
        if mine < want:
            continue
        hits, total = max(pack, _node_failures(up, per), key=_rate)
        if burst_chance(mine, float(seen.sum()) / per, hits, total, max(1, len(g.labels))) <= alpha:
            return True
    return False


def _episodes(above: np.ndarray, seen: np.ndarray) -> int:
    """Return how many separate stretches of `above` the `seen` instants hold (instants not seen are left
    out: a stretch across them is one)."""
    a = above[seen]
    return int(np.sum(a[1:] & ~a[:-1])) + int(a[0]) if len(a) else 0


def _answered(up: Grid | None, host: str, n: int) -> np.ndarray:
    """Return where `host`'s node_exporter answered (everywhere when its `up` is unknown)."""
    u = up.row(host=host) if up is not None else None
    if u is None or len(u) != n:
        return np.ones(n, bool)
    return ~(u < 1)


def _node_failures(up: Grid | None, per: float) -> tuple[float, float]:
    """Return (episodes of failed scrapes, scrapes) of every host's node_exporter (`up` 0 while its series
    has samples): the network's own rate of lost scrapes, which the GPU exporters' shares."""
    if up is None or not len(up.labels):
        return 0.0, 0.0
    hits = total = 0.0
    for row in up.values:
        ok = np.isfinite(row)
        hits += _episodes(row < 1, ok)
        total += float(ok.sum()) / per
    return hits, total


def _rate(counts: tuple[float, float]) -> float:
    hits, total = counts
    return hits / total if total > 0 else 0.0
