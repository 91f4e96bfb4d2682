"""Detectors of counters and levels: rates that leave the pack, counters that grow, limits, priors."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from playbooks.anomaly import (
    Grid,
    background,
    first_sustained,
    nan_median,
    rate_excess,
    rise_start,
    step_noise,
    walk_back,
)
from playbooks.context import Context, Finding
from playbooks.model import Playbook, RuleSpec
from playbooks.report import fmt_time

from ._base import _dur, _ev, _finding, _gkey


def _rate_window(
    ctx: Context, rule: RuleSpec, g: Grid, focus: tuple[float, float]
) -> tuple[float, float] | None:
    tl = ctx.timeline
    if "before_stall" not in rule.params:
        return focus
    if not tl.stalled or tl.last_advance is None:
        return None
    # a burst that began by the stall (or within the slack of `_trigger_late`) is judged on as long as its
    # persistence needs: at a coarse scrape a second host's rate shows the same event only a scrape later
    return (
        tl.last_advance - _dur(rule, "before_stall", 1800.0),
        tl.last_advance + _trigger_late(g) + _dur(rule, "min_duration", 60.0),
    )


def _trigger_late(g: Grid) -> float:
    """How long after the last step a hang's trigger may first show: a minute, or two scrapes (a late scrape
    and a rate window that must fill see one event a scrape apart on two hosts)."""
    return max(60.0, 2.0 * g.step)


def _det_rate_outlier(
    ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]
) -> Finding | None:
    """Hosts whose rate of a counter leaves their own history and the pack's background, persistently.

    Each host is judged first against its own history before its change (where its rate first stays above
    the floor for most of `min_duration`), then against the pack's background: the median of the hosts'
    backgrounds, each taken before its own change, so that degraded hosts cannot raise it even when they are
    most of a small job. A background is a high quantile of a host's non-zero values (a counter that ticks
    now and then has the size of its larger ticks as background, never 0: a tick or two that rate() spreads
    over its window stay within it). A host stands out where its rate exceeds `factor` x the larger of the
    two for most of `min_duration` (a change point, not a few close ticks). Only hosts within an order of
    magnitude of the strongest are named, and an excess on more than `max_share` of the hosts (and more than
    three) is job-wide, not a host's fault: no finding, unless every one of them left its own history at
    the same time (one fabric event: a finding on all of them; never for a hang's trigger). With a traffic query (second), only instants where
    the host's traffic flows are judged. The onset walks back, over the whole data, to where the rate left
    the background. Queries after the traffic corroborate a lone tick (see `_lone_ticks`).
    """
    g = ctx.grid(rule.queries[0])
    win = _rate_window(ctx, rule, g, focus) if g is not None else None
    if g is None or win is None:
        return None
    p = rule.params
    exc, full, own, ref, length = _excess(ctx, rule, g, win)
    found = _sustained(ctx, rule, g, exc, ref, length)
    notes = _lone_ticks(ctx, pb, rule, g, (exc, full, length), found)
    found = [f for f in found if notes.get(f[1], "") is not None]
    if "before_stall" in p and ctx.timeline.last_advance is not None:
        late = ctx.timeline.last_advance + _trigger_late(g)
        found = [f for f in found if f[2] <= late]  # a burst that began later is a consequence of the hang
    if not found:
        return None
    top = max(s for s, *_ in found)
    found = [f for f in found if f[0] >= 0.1 * top]
    common = len(found) > max(3, float(p.get("max_share", 0.25)) * len(g.labels))
    tl = ctx.timeline
    # a host with too short a history for its own background still left a clean stretch of training when
    # its excess starts a judging length (or more) after warm-up
    start = tl.warm_end if tl.warm_end is not None else tl.train_start
    clean_after = start + length * g.step if start is not None else math.inf
    # a hang's trigger is on one or two hosts; a slow fabric may be most of them at once
    fabric = "before_stall" not in p and _common_change(found, own, max(length, 4) * g.step, clean_after)
    if common and not fabric:
        return None
    hosts, ev = [], []
    for strength, r, t_on, level in sorted(found, key=lambda f: -f[0]):
        h = g.labels[r].get("host", "")
        hosts.append(h)
        ev.append(
            _ev(
                ctx,
                rule.queries[0],
                {"host": h},
                level,
                f"{level:.3g}/s sustained from {fmt_time(t_on)}: {_against(ref[r], strength, p)}"
                + (notes.get(r) or ""),
            )
        )
    onset = min(f[2] for f in found)
    extra: dict[str, Any] = {"common_event": True} if common else {}
    return _finding(pb, rule, hosts, [], onset, ev, strength=top, **extra)


def _against(ref: float, strength: float, p: Mapping[str, Any]) -> str:
    """Say what a host's rate stands out against: the background, or the floor where there is none to speak of
    (a background of 0/s: neither the host nor the pack counted any before)."""
    floor, factor = float(p.get("floor", 0.0)), float(p.get("factor", 10.0))
    if factor * ref >= floor:
        return f"{strength:.0f}x the background ({ref:.3g}/s: the pack's over the job, or its own before)"
    return f"{strength:.1f}x the floor of {floor:g}/s; the host and the pack counted " + (
        "none before" if ref <= 0 else f"at most {ref:.3g}/s before"
    )


def _lone_ticks(
    ctx: Context,
    pb: Playbook,
    rule: RuleSpec,
    g: Grid,
    exc: tuple[np.ndarray, np.ndarray, int],
    found: list[tuple[float, int, float, float]],
) -> dict[int, str | None]:
    """Return, for each found host whose excess is one lone tick, what corroborates it (a note for its
    evidence) or None (no network event: drop it). `exc` is (the excess within the judged window, the same
    over the whole data, the judging length). Only for a rule that names corroborating counters (its
    queries after the traffic).

    rate() lifts one increment of a counter for its window and no longer: an excess that lasts no more grid
    points than the window spans (over the whole data, not only the judged window: a hang's trigger goes on
    after the stall) may be one scrape's count, of the size of the trickle every fabric shows now and then.
    It is a network event only where another counter of the link (ACK timeouts, retry exhaustion, link
    errors, ports down) rose on the same host at the time beyond anything it showed before; an excess that
    outlasts the window (increments on several scrapes) stands by itself. A run that reaches the end of the
    data cannot be told from a burst: it stands.
    """
    if len(rule.queries) < 3:
        return {}
    window = ctx.window_s(rule.queries[0])
    smear = max(1, math.ceil(window / max(g.step, 1e-9) - 1e-9))
    judged, full, length = exc
    out: dict[int, str | None] = {}
    for _, r, _, _ in found:
        i = first_sustained(judged[r], length, float(rule.params.get("min_fraction", 0.8)))
        if i is None:
            continue
        lo, hi = _run(full[r], i)
        if hi - lo > smear or hi >= len(g.t):
            continue
        host = g.labels[r].get("host", "")
        by = _rose_with(ctx, rule.queries[2:], host, float(g.t[lo]) - window, float(g.t[hi - 1]) + window)
        what = (pb.query(by).signal or by).replace("_", " ") if by else ""
        out[r] = f"; one tick, but {what} rose on the host at the same time" if by else None
    return out


def _run(mask: np.ndarray, i: int) -> tuple[int, int]:
    """Return [lo, hi): the run of True values in `mask` that holds index i."""
    lo, hi = i, i
    while lo > 0 and mask[lo - 1]:
        lo -= 1
    while hi < len(mask) and mask[hi]:
        hi += 1
    return lo, hi


def _rose_with(ctx: Context, names: tuple[str, ...], host: str, t0: float, t1: float) -> str | None:
    """Return the description of the first of `names` whose value on `host` between t0 and t1 exceeds
    anything it showed before t0 (and 0), or None."""
    for name in names:
        c = ctx.grid(name)
        x = c.row(host=host) if c is not None else None
        if c is None or x is None:
            continue
        during = x[(c.t >= t0) & (c.t <= t1)]
        before = x[c.t < t0]
        if not np.isfinite(during).any():
            continue
        prior = float(np.nanmax(before)) if np.isfinite(before).any() else 0.0
        if float(np.nanmax(during)) > max(prior, 0.0):
            return name
    return None


def _excess(
    ctx: Context, rule: RuleSpec, g: Grid, win: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Return where each host's rate exceeds `factor` x its background within `win` (hosts x instants), the
    same over the whole data, each host's own background, the background it is judged against, and
    `min_duration` in grid steps."""
    tl = ctx.timeline
    p = rule.params
    a, b = win
    floor, factor = float(p.get("floor", 0.0)), float(p.get("factor", 10.0))
    job = tl.training_mask(g.t) if tl.train_start is not None else np.ones(len(g.t), bool)
    length = max(1, int(round(_dur(rule, "min_duration", 300.0) / max(g.step, 1e-9))))
    length = min(length, max(1, int(g.mask(a, b).sum())))
    # each host against its own history before its change first, the pack's (before theirs) second; the
    # history must be training (before it, traffic and its counters had not started): with no step data, the
    # pack's background over the whole data alone. A hang's trigger may start a scrape or two before the
    # stall and go on after it: its change is sought up to the end of the judged window, so that the burst
    # is not taken for the host's own background; but never before training (a short job's judged window
    # reaches back into the idle minutes before its first step, whose zeros are no healthy level: against
    # them every host's training traffic would be the change, and its burst part of its own background)
    cols = job
    if "before_stall" in p and tl.train_start is not None:
        cols = job | (g.mask(a, b) & (g.t >= tl.train_start))
    own, pack = background(
        g.values,
        cols,
        floor=floor,
        length=length if tl.train_start is not None else 0,
        min_points=max(20, 2 * length),
        tick=math.ceil(ctx.window_s(rule.queries[0]) / max(g.step, 1e-9) - 1e-9),
    )
    if tl.train_start is None:
        # no step data: no host has a history before its change, and its whole data holds the change itself
        # (a counter ticking on every host, as transmit waits do, would hide a 27x rise in its own 95th
        # percentile): the pack's background alone
        own = np.full(len(own), np.nan)
    ref = np.fmax(np.nan_to_num(own, nan=0.0), pack if math.isfinite(pack) else 0.0)
    exc = rate_excess(g.values, ref, floor=floor, factor=factor)
    traffic = ctx.grid(rule.queries[1]) if len(rule.queries) > 1 else None
    # once a job hangs no host's traffic flows: a hang's trigger goes on being judged after the stall (a
    # burst that began shortly before it and went on), against the pack, which then sends nothing either
    stalled_after = (
        g.t > tl.last_advance
        if "before_stall" in p and tl.last_advance is not None
        else np.zeros(len(g.t), bool)
    )
    if traffic is not None and len(traffic.t) == len(g.t):
        for r, lab in enumerate(g.labels):
            tx = traffic.row(host=lab.get("host", ""))
            if tx is not None and np.isfinite(tx[job]).any():
                exc[r] &= (np.nan_to_num(tx, nan=0.0) >= 0.1 * nan_median(tx[job])) | stalled_after
    return exc & g.mask(a, b)[None, :], exc, own, ref, length


def _sustained(
    ctx: Context, rule: RuleSpec, g: Grid, exc: np.ndarray, ref: np.ndarray, length: int
) -> list[tuple[float, int, float, float]]:
    """Return (strength, row, onset, level) of every host whose excess lasts most of `length` steps."""
    p = rule.params
    floor = float(p.get("floor", 0.0))
    found = []
    for r in range(len(g.labels)):
        i = first_sustained(exc[r], length, float(p.get("min_fraction", 0.8)))
        if i is None:
            continue
        x = g.values[r]
        level = nan_median(x[exc[r]])
        strength = level / max(ref[r], floor, 1e-12)
        # back to where it clearly left its background (a few points just above a 95th percentile are noise)
        j = walk_back(x, i, max(floor, 3.0 * ref[r]))
        t_on = float(g.t[j]) - min(ctx.window_s(rule.queries[0]), g.step) / 2
        found.append((strength, r, t_on, level))
    return found


def _common_change(
    found: list[tuple[float, int, float, float]], own: np.ndarray, span: float, clean_after: float = math.inf
) -> bool:
    """Whether an excess on many hosts is one fabric event: every host left its own history (it has one,
    or its excess starts after `clean_after`: a clean stretch of training came first), all within `span`
    seconds. Otherwise an excess on most hosts is the job's background, no one's fault."""
    onsets = [t for _, _, t, _ in found]
    return (
        all(np.isfinite(own[r]) or t >= clean_after for _, r, t, _ in found)
        and max(onsets) - min(onsets) <= span
    )


def _det_counter_increase(
    ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]
) -> Finding | None:
    g = ctx.grid(rule.queries[0])
    if g is None:
        return None
    p = rule.params
    m = g.mask(*focus)
    hit = (g.values > float(p.get("min", 0.0))) & m[None, :]
    rows = [r for r in range(len(g.labels)) if hit[r].any()]
    if not rows:
        return None
    with_data = int((~np.isnan(g.values[:, m])).any(axis=1).sum())
    if p.get("peers_clean") and len(rows) > max(1, 0.5 * with_data):
        return None
    hosts, gpus, ev = [], [], []
    onset = None
    detail = ctx.instant(str(p.get("gpu_detail", ""))) if p.get("gpu_detail") else []
    for r in rows:
        h = g.labels[r].get("host", "")
        i = int(np.argmax(hit[r]))
        t_on = float(g.t[i]) - g.step / 2
        src = p.get("onset_from")
        mg = ctx.grid(str(src)) if src else None
        if mg is not None:
            row = mg.row(host=h)
            if row is not None:
                j = _fatal_rise(ctx, mg, row, mg.index(float(g.t[i])))
                if j is not None:
                    t_on = min(t_on, float(mg.t[j]) - mg.step / 2)
        onset = t_on if onset is None else min(onset, t_on)
        hosts.append(h)
        g_here = sorted(
            {s["labels"].get("gpu", "") for s in detail if s["labels"].get("host") == h} - {""}, key=_gkey
        )
        gpus += g_here
        total = float(np.nanmax(g.values[r][m]))
        ev.append(
            _ev(
                ctx,
                rule.queries[0],
                {"host": h, "gpu": ",".join(g_here) or None},
                total,
                f"grew within the job (first at {fmt_time(t_on)}, up to {total:.3g} per interval); "
                "its lifetime value is ignored",
            )
        )
    for s in detail:
        if s["labels"].get("host") in hosts:
            ev.append(
                _ev(ctx, str(p["gpu_detail"]), s["labels"], s["value"], "increase over the whole window")
            )
    return _finding(pb, rule, hosts, gpus, onset, ev)


def _fatal_rise(ctx: Context, g: Grid, x: np.ndarray, k: int) -> int | None:
    """Return where the rise that ended in the kill near index k began (None without data before k).

    The kill frees the killed process's memory. Walking back from k: over level samples (after the kill,
    or a hold at the top before it), then up what the kill freed, to the last sample before the kill: the
    top of the fatal rise as far as the scrapes saw it. Its start is where the walk down that rise meets
    the plateau that earlier saves left (`_final_rise`). With coarse scrapes an earlier save's peak may
    stand higher than anything seen of the fatal rise: it lies beyond that plateau and is never reached.
    A rise seen by one sample only is dated between that sample and the plateau's last."""
    seen = np.nonzero(np.isfinite(x[: k + 1]))[0]
    if not len(seen):
        return None
    sm = ctx.timeline.steady_mask(g.t)
    base = x[sm] if sm.sum() >= 5 else x
    noise = max(3 * step_noise(base), 0.005 * abs(nan_median(base))) if np.isfinite(base).any() else 0.0
    pos = len(seen) - 1
    while pos > 0 and abs(x[seen[pos - 1]] - x[seen[pos]]) <= noise:
        pos -= 1  # level: after the kill, or held at the top before it
    while pos > 0 and x[seen[pos - 1]] > x[seen[pos]] + noise:
        pos -= 1  # up what the kill freed, to the last sample before it
    return _final_rise(ctx, g, x, int(seen[pos]))


def _final_rise(ctx: Context, g: Grid, x: np.ndarray, i: int) -> int:
    """Return where the rise that reached x[i] began, judged against the series' own noise in the job's
    steady window (at least 0.5 % of its level a step)."""
    sm = ctx.timeline.steady_mask(g.t)
    base = x[sm] if sm.sum() >= 5 else x
    level = abs(nan_median(base)) if np.isfinite(base).any() else 0.0
    return rise_start(x, i, max(3 * step_noise(base), 0.005 * level))


def _det_near_limit(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    g = ctx.grid(rule.queries[0])
    if g is None:
        return None
    limit = float(rule.params.get("limit", 0.95))
    m = g.mask(*focus)
    hosts, ev, onset = [], [], None
    sm = ctx.timeline.steady_mask(g.t)
    for r, lab in enumerate(g.labels):
        x = g.values[r]
        hit = (x >= limit) & m
        if not hit.any():
            continue
        i = int(np.argmax(hit))
        base = x[sm] if sm.any() else x
        own = nan_median(base)
        j = _final_rise(ctx, g, x, i)
        t_on = float(g.t[j]) - g.step / 2
        h = lab.get("host", "")
        hosts.append(h)
        onset = t_on if onset is None else min(onset, t_on)
        ev.append(
            _ev(
                ctx,
                rule.queries[0],
                {"host": h},
                float(np.nanmax(x[m])),
                f"from its usual {own:.0%} to {np.nanmax(x[m]):.1%} of the total between {fmt_time(t_on)} and "
                f"{fmt_time(float(g.t[i]))}",
            )
        )
    return _finding(pb, rule, hosts, [], onset, ev) if hosts else None


def _det_threshold_prior(
    ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]
) -> Finding | None:
    g = ctx.grid(rule.queries[0])
    if g is None:
        return None
    p = rule.params
    m = g.mask(*focus)
    codes = p.get("codes")
    if codes is not None:
        hit = np.isin(g.values, [float(c) for c in codes]) & m[None, :]
        length = 1
    else:
        above = p.get("above")
        if above is None:
            prior = p.get("above_prior")
            if ctx.gpu is None or not prior or not hasattr(ctx.gpu, str(prior)):
                return None
            above = getattr(ctx.gpu, str(prior))
        hit = (g.values > float(above)) & m[None, :]
        length = max(1, int(round(_dur(rule, "min_duration", 60.0) / max(g.step, 1e-9))))
    hosts, gpus, ev, onset, vals = [], [], [], None, []
    detail = ctx.instant(str(p.get("gpu_detail", ""))) if p.get("gpu_detail") else []
    for r, lab in enumerate(g.labels):
        i = first_sustained(hit[r], length, 0.8)
        if i is None:
            continue
        h = lab.get("host", "")
        t_on = float(g.t[i]) - g.step / 2
        if h not in hosts:
            hosts.append(h)
        onset = t_on if onset is None else min(onset, t_on)
        v = float(g.values[r][i])
        vals.append(v)
        g_here = sorted(
            {
                s["labels"].get("gpu", "")
                for s in detail
                if s["labels"].get("host") == h and (codes is None or s["value"] in [float(c) for c in codes])
            }
            - {""},
            key=_gkey,
        )
        if lab.get("gpu") is not None and lab["gpu"] not in g_here:
            g_here.append(lab["gpu"])
        gpus += [x for x in g_here if x not in gpus]
        ev.append(
            _ev(
                ctx,
                rule.queries[0],
                {"host": h, "gpu": ",".join(g_here) or None},
                v,
                f"from {fmt_time(t_on)}"
                + (
                    f" (prior for {ctx.gpu.name}: {above})"
                    if codes is None and p.get("above_prior") and ctx.gpu
                    else ""
                ),
            )
        )
    if not hosts:
        return None
    value = ", ".join(sorted({f"{v:g}" for v in vals}))
    return _finding(pb, rule, hosts, gpus, onset, ev, value=value)
