"""The gaps detector: a host whose exporter answers but whose samples go missing, in a recurring regime."""

from __future__ import annotations

import numpy as np

from playbooks.anomaly import Grid, burst_chance
from playbooks.context import Context, Finding
from playbooks.model import Playbook, RuleSpec
from playbooks.report import fmt_time

from ._base import _ev, _finding


def _det_gaps(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    g = ctx.grid(rule.queries[0])
    if g is None or len(g.labels) < 2:
        return None
    p = rule.params
    up = ctx.grid(str(p["mask"])) if p.get("mask") else None
    w = max(ctx.window_s(rule.queries[0]), g.step)
    # a count_over_time window that is not yet full at the start of the data is no gap
    m = g.mask(*focus) & (g.t >= float(g.t[0]) + w)
    with np.errstate(all="ignore"):
        peer = np.nanmedian(g.values, axis=0)
    rows = _gap_rows(g, up, m, peer, w, float(p.get("ratio", 0.75)))
    # windows of one scrape interval's length overlap: a missed scrape is short in w / step of them
    per = max(1.0, w / max(g.step, 1e-9))
    total_miss = sum(float(miss.sum()) for _, miss, _ in rows)
    total_n = sum(float(mine.sum()) for _, _, mine in rows)
    hosts, ev, onset = [], [], None
    for h, miss, mine in rows:
        idx = np.nonzero(miss)[0]
        if not len(idx):
            continue
        k, n = float(miss.sum()), float(mine.sum())
        # a host that misses no more often than the pack (the monitoring fails everyone now and then) is
        # not where the GPU plugin hangs
        chance = burst_chance(k / per, n / per, (total_miss - k) / per, (total_n - n) / per, len(rows))
        if chance > float(p.get("alpha", 1e-3)):
            continue
        events = 1 + int((np.diff(idx) > 1).sum())
        tail = miss[int(0.8 * len(miss)) :]
        share = miss[idx[0] :].sum() / max(1, mine[idx[0] :].sum())
        if (
            events < int(p.get("min_events", 3))
            or (len(tail) and tail.all())
            or share < float(p.get("min_share", 0.05))
        ):
            continue
        t_on = _gap_start(g, h, peer, _regime_start(idx), w)
        hosts.append(h)
        onset = t_on if onset is None else min(onset, t_on)
        ev.append(
            _ev(
                ctx,
                rule.queries[0],
                {"host": h},
                float(miss.sum() / max(1, m.sum())),
                f"{events} gaps from {fmt_time(t_on)}: {miss.sum() / max(1, m.sum()):.0%} of intervals "
                f"short of samples while the exporter answered (peers complete)",
            )
        )
    if not hosts or len(hosts) > max(1, 0.5 * len(g.labels)):
        return None
    return _finding(pb, rule, hosts, [], onset, ev)


def _gap_rows(
    g: Grid, up: Grid | None, m: np.ndarray, peer: np.ndarray, w: float, ratio: float
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Return (host, intervals short of samples while the target was up, intervals judged) per host."""
    rows = []
    for r, lab in enumerate(g.labels):
        h = str(lab.get("host", ""))
        seen = np.nonzero(~np.isnan(g.values[r]))[0]
        if not len(seen):
            continue
        x = np.where(np.isnan(g.values[r]), 0.0, g.values[r])
        # nor is its first window on a host whose exporter came up late
        mine = m & (g.t >= float(g.t[seen[0]]) + w)
        miss = (x < ratio * peer) & (peer > 0) & mine
        if up is not None:
            u = up.row(host=h)
            if u is not None and len(u) == len(miss):
                miss &= u >= 1
        rows.append((h, miss, mine))
    return rows


def _gap_start(g: Grid, host: str, peer: np.ndarray, i: int, w: float) -> float:
    """Return when the samples that a host's count first lacks at index `i` went missing: its count over
    the last `w` seconds fell short of its peers' there, or earlier within that window (a count that lacks
    one sample is not yet a gap by `ratio`); the first short count's sample went missing after the grid
    point before it, whose window still held it (at most `w` earlier), so the middle of that span."""
    x = g.row(host=host)
    if x is None or len(x) != len(g.t):
        return float(g.t[i]) - w
    j = i
    while j > 0 and float(g.t[i] - g.t[j - 1]) < w and x[j - 1] < peer[j - 1]:
        j -= 1
    earliest = float(g.t[j]) - w
    if j > 0 and np.isfinite(x[j - 1]):
        earliest = max(earliest, float(g.t[j - 1]))
    return (earliest + float(g.t[j])) / 2


def _regime_start(idx: np.ndarray) -> int:
    """Return the first index of the recurring-gap regime among gap indices `idx`: the first gap event
    followed by the next one within three typical spacings (an isolated early gap is not the regime)."""
    starts = [int(idx[0])] + [int(b) for a, b in zip(idx[:-1], idx[1:], strict=True) if b - a > 1]
    if len(starts) < 3:
        return starts[0]
    spacing = np.diff(starts)
    typical = float(np.median(spacing))
    for k, d in enumerate(spacing):
        if d <= 3 * typical:
            return starts[k]
    return starts[0]
