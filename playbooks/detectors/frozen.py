"""A frozen exporter (ghost data): every value of one host's exporter bit-identical while its peers move.

An exporter whose collection loop hung keeps serving its last values: `up` stays 1, scrapes get fresh
timestamps, and every series it exports repeats the same value. One quiet gauge proves nothing (a pinned
clock, a temperature quantised to 1 °C, memory after allocation); the exporter as a whole does: a window
in which none of the host's series of any family changed, while its peers' changed, is a quiet window. The
job's own noise says how often a live host is quiet while its peers move (DCGM's 30 s collection with a
15 s scrape, coarse scrapes, integer gauges all show in it): a run of quiet windows is a freeze when a live
host would be that quiet that long with a probability below `alpha`, counted over every host and window
tested, and the run lasts at least `min_duration`. A host that read (near) zero is dead, not frozen.

The rule's queries: the change families (as many as given; a window is quiet when none moved), then the
samples per window, then the live level. The GPU exporter is judged on its power, temperature and own
collection time; node_exporter on the counters a live kernel never holds still (context switches,
interrupts: one summed `increase`; both from the default `stat` collector), with its target's `up` as the level.
"""

from __future__ import annotations

import math

import numpy as np

from playbooks.anomaly import Grid
from playbooks.context import Context, Finding
from playbooks.model import Playbook, RuleSpec
from playbooks.report import fmt_time

from ._base import _dur, _ev, _finding


def _det_frozen_exporter(
    ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]
) -> Finding | None:
    p = rule.params
    first = ctx.grid(rule.queries[0])
    samples = ctx.grid(rule.queries[-2])
    if first is None or samples is None or len(first.labels) < 3:
        return None
    t, w = first.t, max(ctx.window_s(rule.queries[0]), first.step)
    hosts = [lab.get("host", "") for lab in first.labels]
    quiet, moving = _quiet_windows(ctx, rule.queries[:-2], hosts, t)
    full = _full_windows(samples, hosts, t) & _live(
        ctx.grid(rule.queries[-1]), hosts, t, float(p.get("level_ratio", 0.5))
    )
    quiet &= full & first.mask(*focus)[None, :]
    # the job's own noise: how often a live host was quiet in a window where its peers moved
    tested = full & moving
    stride = max(1, int(round(w / first.step)))  # grid points per disjoint window
    windows = max(1.0, tested.sum() / stride)
    # where the monitoring itself saw nobody (Prometheus down or restarting: most hosts' windows short of
    # samples) a host can show neither change nor quiet: a freeze on both sides of it is one freeze
    blind = full.mean(axis=0) < 0.5
    runs = {h: _runs(quiet[r], blind) for r, h in enumerate(hosts)}
    alpha = float(p.get("alpha", 1e-3))
    min_span = _dur(rule, "min_duration", 300.0)
    flagged: dict[str, tuple[float, float, float]] = {}
    for r, h in enumerate(hosts):
        others = np.arange(len(hosts)) != r
        p_pack = _rate(quiet[others] & tested[others], tested[others])
        for i, j in runs[h]:
            span = float(t[j - 1] - t[i]) + w
            n_moving = int(moving[r, i:j].sum())  # the run's points where peers moved
            if span < min_span or not n_moving:
                continue
            # a live host's chance of a quiet window: the pack's, or this host's own (outside this run)
            own = tested[r].copy()
            own[i:j] = False
            p0 = max(p_pack, _rate(quiet[r] & own, own))
            k = (n_moving - 1) / stride + 1  # disjoint windows in the run
            chance = math.exp(k * math.log(p0)) * windows
            if chance <= alpha and (h not in flagged or t[i] - w < flagged[h][0]):
                flagged[h] = (float(t[i]) - w, span, chance)
    if not flagged or len(flagged) > max(1, float(p.get("max_share", 0.5)) * len(hosts)):
        return None
    ev = [
        _ev(
            ctx,
            rule.queries[0],
            {"host": h},
            0.0,
            f"every value of its exporter identical for {span / 60:.1f} min from {fmt_time(t0)} while its "
            f"peers' kept changing (a live host is that quiet that long with a chance of {chance:.1g})",
        )
        for h, (t0, span, chance) in sorted(flagged.items())
    ]
    # what froze and whose data it spoils, for the summary
    named = {k: str(p[k]) for k in ("exporter", "data") if k in p}
    return _finding(pb, rule, sorted(flagged), [], min(v[0] for v in flagged.values()), ev, **named)


def _on(g: Grid, host: str, t: np.ndarray) -> np.ndarray | None:
    """Return a host's row of g at the times t (the nearest point of g's own grid), or None."""
    row = g.row(host=host)
    if row is None:
        return None
    idx = np.clip(np.rint((t - g.t[0]) / max(g.step, 1e-9)).astype(int), 0, len(g.t) - 1)
    out: np.ndarray = row[idx]
    return out


def _quiet_windows(
    ctx: Context, names: tuple[str, ...], hosts: list[str], t: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Return (quiet, moving) per host and time: no series of any family changed in the window; the
    host's peers (their median, in some family) changed.

    The changes are counts (never negative), so the peers' median is above zero exactly when at least half
    of the peers that reported changed: counted once for the pack, minus the host itself (one pass, not a
    median of the others per host)."""
    quiet = np.ones((len(hosts), len(t)), bool)
    moving = np.zeros((len(hosts), len(t)), bool)
    for q in names:
        g = ctx.grid(q)
        if g is None:
            continue
        rows = [_on(g, h, t) for h in hosts]
        vals = np.array([r if r is not None else np.full(len(t), np.nan) for r in rows])
        changed = np.nan_to_num(vals, nan=0.0) > 0
        reported = np.isfinite(vals)
        peers = reported.sum(axis=0) - reported
        peers_changed = changed.sum(axis=0) - changed
        moving |= (peers > 0) & (2 * peers_changed >= peers)
        quiet &= ~changed
    return quiet, moving


def _full_windows(samples: Grid, hosts: list[str], t: np.ndarray) -> np.ndarray:
    """Return per host and time whether the window held (nearly) all its scrapes: a window of an exporter
    that came up late, or of a gap, has too few samples to show a change."""
    rows = [_on(samples, h, t) for h in hosts]
    vals = np.array([r if r is not None else np.full(len(t), np.nan) for r in rows])
    with np.errstate(all="ignore"):
        typical = float(np.nanmedian(vals)) if np.isfinite(vals).any() else 0.0
    full: np.ndarray = np.nan_to_num(vals) >= max(3.0, 0.75 * typical)
    return full


def _live(level: Grid | None, hosts: list[str], t: np.ndarray, ratio: float) -> np.ndarray:
    """Return per host and time whether it reads a live level: at least `level_ratio` of the pack's lowest
    level in the job (its idle level); a host reading (near) zero is dead, not frozen (the node playbook's)."""
    out = np.ones((len(hosts), len(t)), bool)
    if level is None or not np.isfinite(level.values).any():
        return out
    with np.errstate(all="ignore"):
        floor = ratio * float(np.nanmin(np.nanmedian(level.values, axis=0)))
    for r, h in enumerate(hosts):
        lv = _on(level, h, t)
        if lv is not None:
            out[r] = ~(lv < floor)
    return out


def _runs(x: np.ndarray, bridge: np.ndarray | None = None) -> list[tuple[int, int]]:
    """Return the [start, end) index ranges of the True runs of x; points where `bridge` holds join the runs
    on either side of them (a run neither starts nor ends on one)."""
    y = x if bridge is None else x | bridge
    d = np.diff(np.r_[0, y.astype(np.int8), 0])
    out = []
    for i, j in zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist(), strict=True):
        hit = np.flatnonzero(x[i:j])
        if len(hit):
            out.append((i + int(hit[0]), i + int(hit[-1]) + 1))
    return out


def _rate(hit: np.ndarray, of: np.ndarray) -> float:
    """Return the share of `of` that is `hit`, with one pseudo-count each way (never 0 or 1)."""
    return (float(hit.sum()) + 1.0) / (float(of.sum()) + 2.0)
