"""Detectors of one host or GPU against its peers: outliers (gaps: gaps.py; frozen values: frozen.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from playbooks.anomaly import (
    Grid,
    burst_chance,
    first_sustained,
    peer_deviation,
    stretch_start,
    walk_back,
)
from playbooks.context import Context, Finding, Timeline
from playbooks.departure import departure
from playbooks.model import Playbook, RuleSpec
from playbooks.report import fmt_time

from ._base import _dur, _ev, _finding
from ._censored import censored_start, failed_scrapes
from ._pack import disarray, fleet_move, in_spans, lag_move, place_before_leaving, usual_level
from ._tenant import job_rows


@dataclasses.dataclass(frozen=True)
class _Standing:
    """Where each row (GPU or host) of a pack stands against it at each instant, and what judges it."""

    vals: np.ndarray  # the rows' values, NaN where the mask says the exporter was down
    m: np.ndarray  # instants of the focus that may be judged (under load, after warm-up, pack big enough)
    sign: float  # +1: the rule looks up, -1: down
    d: np.ndarray  # signed distance from the pack's median (positive: the rule's direction)
    zz: np.ndarray  # d in units of the pack's scale
    scale: np.ndarray
    med: np.ndarray
    spread: np.ndarray
    moving: np.ndarray  # instants that do not date a departure (the pack's own move, a pause)
    judged: np.ndarray  # instants excess is judged at (no disarray)
    bar: np.ndarray  # 1, or CORROBORATED where the rule's corroborating signal stood out too
    cond: np.ndarray  # beyond the bar (or a refused scrape) at a judged instant
    refused: np.ndarray  # scrapes of the GPU exporter that failed while the host answered


def _det_peer_outlier(
    ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]
) -> Finding | None:
    g = ctx.grid(rule.queries[0])
    p = rule.params
    if g is not None and p.get("job_gpus"):
        g = _only_job(ctx, g, str(p["job_gpus"]))
    # the pack: every row, or (Prometheus judged the whole pack and sent its stand-outs) its statistics
    size = _pack_size(g)
    if g is None or size < 3:
        return None
    st = _standing(ctx, pb, g, p, focus)
    if st is None:
        return None
    length = max(1, int(round(_dur(rule, "min_duration", 300.0) / max(g.step, 1e-9))))
    cut: set[int] = set()
    flagged = _flag(ctx, g, st.cond, st.judged, length, p, cut)
    # a host whose GPUs stand out together is judged against itself: what its GPUs share is its own
    least = float(p.get("min_rel", 0.0)) * np.abs(st.med)
    warm = _host_wide(g, flagged, (st.d, st.zz, st.cond), st.scale, (float(p.get("z", 6.0)), least))
    if warm:
        cut.clear()
        flagged = _flag(ctx, g, st.cond, st.judged, length, p, cut)
    if not flagged and warm:
        return _host_note(ctx, pb, rule, g, warm, st.sign)
    if not flagged or len(flagged) > max(1, float(p.get("max_share", 0.25)) * size):
        return None
    return _outlier_finding(ctx, pb, rule, g, st, flagged, length, cut)


def _masked_values(ctx: Context, g: Grid, p: Mapping[str, Any]) -> np.ndarray:
    """Return the grid's values, NaN where the rule's mask (an `up` series) says the host was down."""
    vals = g.values.copy()
    up = ctx.grid(str(p["mask"])) if p.get("mask") else None
    if up is not None:
        for r, lab in enumerate(g.labels):
            u = up.row(host=lab.get("host", ""))
            if u is not None and len(u) == vals.shape[1]:
                vals[r, ~(u >= 1)] = np.nan
    return vals


def _standing(
    ctx: Context, pb: Playbook, g: Grid, p: Mapping[str, Any], focus: tuple[float, float]
) -> _Standing | None:
    """Return each row's distance from the pack and where it is beyond the bar (None: nothing to judge)."""
    tl = ctx.timeline
    sign = 1.0 if p.get("direction", "up") == "up" else -1.0
    vals = _masked_values(ctx, g, p)
    m = g.mask(*focus)
    under_load = bool(p.get("during_training", pb.name != "exporter_health"))
    if under_load:
        m &= tl.training_mask(g.t)
        if tl.warm_end is not None:
            m &= g.t >= tl.warm_end
    enough = (~np.isnan(vals)).sum(axis=0) >= 3 if not g.pack else np.isfinite(g.pack["median"])
    m &= enough
    if not m.any():
        return None
    base = tl.steady_mask(g.t) & enough
    dev, spread, med = peer_deviation(vals, base, g.pack)
    scale = _scale(spread, med)
    if p.get("ramp_window"):
        # a departure (a GPU that heats) may begin within the baseline window: its place is where it stood
        dev = place_before_leaving(dev, base, _earlier(tl, g.t), scale, sign, p)
    d = sign * dev
    with np.errstate(all="ignore"):
        zz = d / scale[None, :]
    # while the pack makes a move of its own (a cooling change, a restart: a fleet-wide move) or is in
    # disarray (its members follow a move each with its own timing and share), one member's place in it is
    # not its own doing: such instants do not date a departure, nor is excess judged in a disarray
    unrest = disarray(dev, g.pack, scale)
    # and within a pause the log names (an evaluation, a save) the GPUs idle: a fault that shows under load
    # (a hot GPU cools with the idle pack) cannot show, so those instants do not date a departure either
    # (the monitoring's own signals, scrape times, do not idle with the job: for them a pause is evidence)
    moving = unrest | fleet_move(med, scale, m)
    if under_load:
        moving |= in_spans(g.t, tl.paused_spans)
    judged = m & ~unrest
    # a GPU's other sign of the same story (a hot GPU's throttled clock) at the same instant corroborates
    bar = np.where(_corroborated(ctx, g, p), CORROBORATED, 1.0)
    away = np.maximum(np.abs(med - usual_level(g.t, med, m)), lag_move(med, m, sign, _per(ctx, g)))
    cond = _beyond(d, scale, med, away, p, bar)
    cond &= judged[None, :]
    cond &= ~np.isnan(vals)
    # a scrape that failed while the host answered timed out or was refused, whatever duration it stored
    refused = failed_scrapes(ctx, g, p) & judged[None, :]
    cond |= refused
    return _Standing(vals, m, sign, d, zz, scale, med, spread, moving, judged, bar, cond, refused)


def _earlier(tl: Timeline, t: np.ndarray) -> list[np.ndarray]:
    """Return the instants before the baseline window where a device's place may be read: the idle before
    training and the warm-up."""
    if tl.train_start is None or tl.steady is None:
        return []
    start = min(tl.steady[0], tl.warm_end if tl.warm_end is not None else tl.steady[0])
    return [t < tl.train_start, (t >= tl.train_start) & (t < start)]


def _outlier_finding(
    ctx: Context,
    pb: Playbook,
    rule: RuleSpec,
    g: Grid,
    st: _Standing,
    flagged: list[tuple[int, int]],
    length: int,
    cut: set[int],
) -> Finding:
    """Return the finding on the flagged rows: each dated where it left the pack, with its peak as evidence."""
    hosts, gpus, ev, onset = [], [], [], None
    # values the mask took out (a silent exporter's, held by the lookback) are unknown, not in the pack: a
    # row in its place before such a silence and beyond it after left during it, as across a disarray
    held = np.isnan(st.vals) & ~np.isnan(g.values)
    d, med, sign = st.d, st.med, st.sign
    for r, i in flagged:
        y = np.where(st.m & ~np.isnan(st.vals[r]), d[r], np.nan)
        t_on = _left_pack(g, rule, st.zz[r], y, st.moving | held[r], i, length)
        h, gpu = g.key(r)
        onset = t_on if onset is None else min(onset, t_on)
        if h not in hosts:
            hosts.append(h)
        if gpu is not None:
            gpus.append(gpu)
        # the peak of what it stored (a failed scrape's duration tells nothing), else of the failures
        slow = st.cond[r] & ~st.refused[r]
        peak_i = int(np.nanargmax(np.where(slow if slow.any() else st.cond[r], d[r], -np.inf)))
        ev.append(
            _ev(
                ctx,
                rule.queries[0],
                {"host": h, "gpu": gpu},
                st.vals[r, peak_i],
                f"{'above' if sign > 0 else 'below'} the pack's median {med[peak_i]:.4g} by "
                f"{abs(d[r, peak_i]):.3g} (beyond its own usual offset; pack spread {st.spread[peak_i]:.2g}) "
                f"at {fmt_time(float(g.t[peak_i]))}; left the pack at {fmt_time(t_on)}"
                + (
                    f"; {rule.params['corroborate']} stood out with it (half the bar)"
                    if st.bar[r, peak_i] < 1
                    else ""
                )
                + _stretch_note(g, st.refused[r, i:], r in cut),
            )
        )
    return _finding(pb, rule, hosts, gpus, onset, ev, censored=bool(cut))


def _stretch_note(g: Grid, refused: np.ndarray, censored: bool) -> str:
    """Return what the evidence adds of a stretch's failed scrapes and of the data's end cutting it short."""
    out = ""
    if refused.any():
        out += f"; {int(refused.sum())} scrapes of its GPU exporter failed while its node_exporter answered"
    if censored:
        out += (
            f"; still beyond the pack when the data ends, {g.step * len(refused) / 60:.1f} min after it left: "
            "a stretch cut short, judged over what was observed"
        )
    return out


def _scale(spread: np.ndarray, med: np.ndarray) -> np.ndarray:
    """Return the pack's spread, at least 1 % of its level `med` (NaN where neither is positive)."""
    scale = np.maximum(spread, 0.01 * np.abs(med))
    return np.where(scale > 0, scale, np.nan)


def _beyond(
    d: np.ndarray,
    scale: np.ndarray,
    med: np.ndarray,
    away: np.ndarray,
    p: Mapping[str, Any],
    bar: np.ndarray | float = 1.0,
) -> np.ndarray:
    """Return where each row's deviation `d` stands beyond the pack (`z` times its `scale`, and `min_rel`
    of its level `med`, both times `bar`) by more than the pack's own excursion from its usual level
    (`away`): while the pack dips (an evaluation, a checkpoint, a cooling change), a member sampled a little
    before or after the others, or one whose host the dip missed, holds its place apart by as much as the
    dip, which is not its own doing."""
    with np.errstate(all="ignore"):
        own = d - np.where(np.isfinite(away), away, 0.0)[None, :]
        out: np.ndarray = (own >= bar * float(p.get("z", 6.0)) * scale[None, :]) & (
            own >= bar * float(p.get("min_rel", 0.0)) * np.abs(med)[None, :]
        )
    return out


#: Share of the bar a row's excess must reach where its corroborating signal stands beyond its own pack.
CORROBORATED = 0.5


def _corroborated(ctx: Context, g: Grid, p: Mapping[str, Any]) -> np.ndarray:
    """Return (rows x instants of `g`) where each row's device stands beyond its pack at the same instant
    on the corroborating signal (`corroborate`: a grid of the same devices, judged in its own direction
    `corroborate_direction` against the same `z` and `min_rel`): two signs of one story on one device at
    once (a GPU's heat and its clock throttle) are far less likely by chance than either alone."""
    out = np.zeros(g.values.shape, bool)
    c = ctx.grid(str(p["corroborate"])) if p.get("corroborate") else None
    if c is not None and p.get("job_gpus"):
        c = _only_job(ctx, c, str(p["job_gpus"]))
    if c is None or _pack_size(c) < 3 or not len(c.t):
        return out
    enough = (~np.isnan(c.values)).sum(axis=0) >= 3 if not c.pack else np.isfinite(c.pack["median"])
    base = ctx.timeline.steady_mask(c.t) & enough
    dev, spread, med = peer_deviation(c.values, base, c.pack)
    scale = _scale(spread, med)
    sign = 1.0 if p.get("corroborate_direction", "down") == "up" else -1.0
    if p.get("ramp_window"):
        # the same departure's other sign (the hot GPU's throttle) may begin within the baseline window too
        dev = place_before_leaving(dev, base, _earlier(ctx.timeline, c.t), scale, sign, p)
    beyond = _beyond(sign * dev, scale, med, np.zeros(len(med)), p)
    beyond &= ~disarray(dev, c.pack, scale)[None, :] & ~np.isnan(c.values)
    # the same instant: the corroborating grid's nearest point, no further than half its step away
    cols = np.array([c.index(float(x)) for x in g.t])
    near = np.abs(c.t[cols] - g.t) <= c.step / 2 + 1e-6
    rows = {c.key(i): i for i in range(len(c.labels))}
    for r in range(len(g.labels)):
        k = rows.get(g.key(r))
        if k is not None:
            out[r] = beyond[k, cols] & near
    return out


def _flag(
    ctx: Context,
    g: Grid,
    cond: np.ndarray,
    judged: np.ndarray,
    length: int,
    p: Mapping[str, Any],
    cut: set[int],
) -> list[tuple[int, int]]:
    """Return (row, first index of its sustained stretch) of the rows beyond the pack long enough: for
    `length` of the `judged` instants (those between are no evidence either way). Where the rule's finding
    needs corroboration (`needs`), a stretch the data's end cuts short is judged over what was observed
    (`censored_start`, or first_sustained's tail that holds throughout); its rows are added to `cut`."""
    cols = np.nonzero(judged)[0]
    kept = cond[:, cols]
    flagged = []
    for r in range(len(g.labels)):
        frac = float(p.get("min_fraction", 0.8))
        i = first_sustained(kept[r], length, frac)
        if i is None and p.get("needs"):
            i = censored_start(kept[r], length, frac)
        # a stretch found in the data's last minutes (shorter than the window) is one the end cut short
        seen = min(length, len(cols) - i) if i is not None and p.get("needs") else length
        if i is not None and _rare(ctx, g, kept, np.ones(len(cols), bool), r, i, seen, p):
            if seen < length:
                cut.add(r)
            elif "alpha" in p:
                # a lone failure like the pack's own ahead of the stretch is not its start
                i = stretch_start(kept[r], i, length, frac, float(p["alpha"]), _per(ctx, g))
            flagged.append((r, int(cols[i])))
    return flagged


def _host_wide(
    g: Grid,
    flagged: list[tuple[int, int]],
    judged: tuple[np.ndarray, np.ndarray, np.ndarray],
    scale: np.ndarray,
    bar: tuple[float, np.ndarray],
) -> dict[str, tuple[list[int], float]]:
    """Judge the GPUs of a host where most of its (job's) GPUs stand out together against their own host's
    other GPUs instead of the pack: a shared offset is the host's environment (its rack's inlet air, its
    fans), and only a GPU beyond its siblings stands out on its own. `judged` (deviation, standing, the
    condition) is rewritten in place for those hosts' rows, against `scale` and `bar` (z, least deviation
    at each instant). Return, per such host, its rows
    and the median of its GPUs' offset from the pack where they stood out."""
    d, zz, cond = judged
    rows: dict[str, list[int]] = {}
    for r, lab in enumerate(g.labels):
        rows.setdefault(str(lab.get("host", "")), []).append(r)
    hot: dict[str, int] = {}
    for r, _ in flagged:
        h = str(g.labels[r].get("host", ""))
        hot[h] = hot.get(h, 0) + 1
    out = {}
    for h, n in hot.items():
        mine = rows[h]
        if len(mine) < 3 or (2 * n <= len(mine) and not _siblings_warm(mine, flagged, judged, scale, bar)):
            continue
        with np.errstate(all="ignore"):
            shared = np.nanmedian(np.where(cond[mine], d[mine], np.nan))
        out[h] = (mine, float(shared))
        own = np.empty((len(mine), d.shape[1]))
        for k, r in enumerate(mine):
            with np.errstate(all="ignore"):
                own[k] = d[r] - np.nanmedian(d[[o for o in mine if o != r]], axis=0)
        with np.errstate(all="ignore"):
            cond[mine] &= (own / scale[None, :] >= bar[0]) & (own >= bar[1][None, :])
            zz[mine] = own / scale[None, :]
        d[mine] = own
    return out


def _siblings_warm(
    mine: list[int],
    flagged: list[tuple[int, int]],
    judged: tuple[np.ndarray, np.ndarray, np.ndarray],
    scale: np.ndarray,
    bar: tuple[float, np.ndarray],
) -> bool:
    """Return True if, from where a host's flagged GPU stood out, its host's other GPUs stood above the pack
    together by half the bar at least at most instants, or at most of the instants it stood out: a warm
    host where only some GPUs crossed the bar, or a host whose GPUs left the pack together for a while (its
    exporter read them a scrape late as the pack moved: the host's timing, not some GPUs' heat)."""
    d, cond = judged[0], judged[2]
    for r, i in flagged:
        if r not in mine:
            continue
        others = [o for o in mine if o != r]
        with np.errstate(all="ignore"):
            shared = np.nanmedian(d[others, i:], axis=0)
            up = (shared >= 0.5 * bar[0] * scale[i:]) & (shared >= 0.5 * bar[1][i:])
        out = cond[r, i:]
        if up.mean() > 0.5 or (out.any() and up[out].mean() > 0.5):
            return True
    return False


def _host_note(
    ctx: Context,
    pb: Playbook,
    rule: RuleSpec,
    g: Grid,
    warm: Mapping[str, tuple[list[int], float]],
    sign: float,
) -> Finding:
    """Return a note (context, not a fault) of the hosts whose GPUs stand out from the pack only together."""
    parts, ev = [], []
    for h, (rows, shared) in warm.items():
        way = "above" if sign > 0 else "below"
        parts.append(f"host {h} runs {shared:.3g} {way} its peers on all its GPUs")
        text = f"{len(rows)} GPUs {way} the pack together by {shared:.3g}; none beyond its own host's others"
        ev.append(_ev(ctx, rule.queries[0], {"host": h}, shared, text))
    f = _finding(pb, rule, list(warm), [], None, ev)
    title = "; ".join(parts)
    return dataclasses.replace(f, severity="info", role="context", title=title[0].upper() + title[1:])


def _left_pack(
    g: Grid, rule: RuleSpec, z: np.ndarray, y: np.ndarray, moving: np.ndarray, i: int, length: int
) -> float:
    """Return when a row left the pack on its way to the crossing at index `i` (`z` its standing against
    the pack, `y` its deviation where judged). Instants of the pack's disarray tell nothing: the crossing
    is taken where the pack is orderly; a row in its place before a disarray and beyond it after left
    during it. A slow ramp (`ramp_window`) is dated where it left its own level, the rise's shape read up to
    the end of the sustained stretch (`length` points) that confirmed the crossing: a rise that may have
    levelled off before it (a faint heat crosses half the bar only once settled at its new temperature)."""
    p = rule.params
    orderly = np.nonzero(~moving[i:] & np.isfinite(z[i:]))[0]
    cross = i + int(orderly[0]) if len(orderly) else i
    onset_z = float(p.get("onset_z", 2.0))
    with np.errstate(all="ignore"):
        before = (
            np.nanmedian(np.where(moving[:cross] | np.isnan(y[:cross]), np.nan, z[:cross]))
            if cross
            else np.nan
        )
    z = np.where(np.isnan(z), -np.inf, z)
    j = walk_back(np.where(moving, np.nan, z), cross, onset_z)
    if np.isfinite(before) and before < -float(p.get("z", 6.0)):
        # before the crossing the row stood below its usual place by as much as it must stand out to be
        # flagged: the stretch itself (most of the data) made that place, so the row left the pack where it
        # left the place it held before
        j = min(j, walk_back(np.where(moving, np.nan, z - before), cross, onset_z))
    while j > 0 and moving[j - 1]:
        j -= 1
    t_on = float(g.t[j]) - g.step / 2
    if p.get("ramp_window"):
        # a slow ramp is beyond the pack's spread long after it left its own level: date that departure
        y = np.where(moving, np.nan, y)
        end = min(len(y) - 1, cross + length - 1)
        earliest = float(g.t[j]) - _dur(rule, "ramp_window", 3600.0)
        tau = departure(g.t, y, end, j, earliest=earliest, levels_off=True)
        t_on = min(t_on, tau) if tau is not None else t_on
    return t_on


def _rare(
    ctx: Context, g: Grid, cond: np.ndarray, m: np.ndarray, r: int, i: int, length: int, p: Mapping[str, Any]
) -> bool:
    """Return True unless the rule asks (`alpha`) whether a host's stretch beyond the pack is rarer than
    the pack's own departures make it: scrapes that time out now and then on every host are the
    monitoring's, and a few of them close together on one host are chance, not a fault of that host."""
    if "alpha" not in p:
        return True
    per = _per(ctx, g)
    hits = float(cond[r, i : i + length].sum())
    pack = float(cond.sum()) - float(cond[r].sum())
    pack_n = float(m.sum()) * (cond.shape[0] - 1)
    tests = cond.shape[0] * max(1.0, float(m.sum()) / length)
    return burst_chance(hits / per, length / per, pack / per, pack_n / per, tests) <= float(p["alpha"])


def _per(ctx: Context, g: Grid) -> float:
    """Return how many grid points one scrape spans (a sample held over a finer grid counts once)."""
    return max(1.0, float(getattr(ctx.source, "interval", g.step) or g.step) / max(g.step, 1e-9))


def _only_job(ctx: Context, g: Grid, power_query: str) -> Grid:
    """Return `g` without the GPUs that are not the job's (another tenant's on a shared node: they follow
    another job's phases, so their place among the job's tells nothing of the job's GPUs)."""
    keep = job_rows(ctx, g, power_query)
    if keep is None:
        return g
    labels = [lab for lab, k in zip(g.labels, keep, strict=True) if k]
    # where Prometheus judged the pack (a large job), its statistics still hold every GPU; only the
    # candidates it sent are left out
    return Grid(t=g.t, labels=labels, values=g.values[keep], pack=g.pack)


def _pack_size(g: Grid | None) -> int:
    """Return how many series the pack holds: the grid's rows, or the count Prometheus sent with them."""
    if g is None:
        return 0
    if g.pack:
        count = g.pack.get("count")
        return int(np.nanmax(count)) if count is not None and np.isfinite(count).any() else 0
    return len(g.labels)
