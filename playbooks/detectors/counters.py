"""Detectors of counters and levels: rates that leave the pack, counters that grow, limits, priors."""

from __future__ import annotations

import math

import numpy as np

from ..anomaly import first_sustained, nan_median, rate_excess, walk_back
from ..context import Context, Finding
from ..model import Playbook, RuleSpec
from ..report import fmt_time
from ._base import _dur, _ev, _finding, _gkey


def _det_rate_outlier(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    g = ctx.grid(rule.queries[0])
    tl = ctx.timeline
    if g is None:
        return None
    p = rule.params
    a, b = focus
    if "before_stall" in p:
        if not tl.stalled or tl.last_advance is None:
            return None
        a, b = tl.last_advance - _dur(rule, "before_stall", 1800.0), tl.last_advance + 60.0
    base = tl.steady_mask(g.t) & ~g.mask(a, b)
    if base.sum() < 5:
        base = tl.training_mask(g.t) & (g.t < a) & ~tl.in_checkpoint(g.t)
    if base.sum() < 5:
        base = tl.steady_mask(g.t)
    exc = rate_excess(g.values, base, floor=float(p.get("floor", 0.0)), factor=float(p.get("factor", 10.0)))
    exc &= g.mask(a, b)[None, :]
    if p.get("exclude_checkpoints"):
        exc &= ~tl.in_checkpoint(g.t)[None, :]
    length = max(1, int(round(_dur(rule, "min_duration", 300.0) / max(g.step, 1e-9))))
    if g.mask(a, b).sum() < length:
        length = max(1, int(g.mask(a, b).sum()))
    hosts, onset, ev = [], None, []
    for r in range(len(g.labels)):
        i = first_sustained(exc[r], length, float(p.get("min_fraction", 0.8)))
        if i is None:
            continue
        x = g.values[r]
        own = nan_median(x[base]) if base.any() else 0.0
        pack = nan_median(g.values[:, base].ravel()) if base.any() else 0.0
        usual = max(v for v in (own, pack, 0.0) if math.isfinite(v))
        j = walk_back(x, i, max(float(p.get("floor", 0.0)), 0.3 * float(p.get("factor", 10.0)) * usual))
        j = max(j, int(np.argmax(g.mask(a, b))))
        t_on = float(g.t[j]) - min(ctx.window_s(rule.queries[0]), g.step) / 2
        h = g.labels[r].get("host", "")
        hosts.append(h)
        onset = t_on if onset is None else min(onset, t_on)
        level = nan_median(x[exc[r]])
        peer = nan_median(np.delete(g.values, r, axis=0)[:, exc[r]].ravel()) if len(g.labels) > 1 else float("nan")
        ev.append(_ev(ctx, rule.queries[0], {"host": h}, level,
                      f"{level:.3g}/s sustained from {fmt_time(t_on)} (peers {peer:.3g}/s at the same times)"))
    if not hosts:
        return None
    return _finding(pb, rule, hosts, [], onset, ev)


def _det_counter_increase(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
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
        if src and ctx.grid(str(src)) is not None:
            mg = ctx.grid(str(src))
            row = mg.row(host=h)
            if row is not None:
                k = mg.index(float(g.t[i]))
                seg = row[: k + 1]
                if np.isfinite(seg).any():
                    peak = int(np.nanargmax(seg))
                    own = nan_median(row[ctx.timeline.steady_mask(mg.t)]) if ctx.timeline.steady_mask(mg.t).any() \
                        else nan_median(row)
                    spread = float(np.nanstd(row[ctx.timeline.steady_mask(mg.t)])) if \
                        ctx.timeline.steady_mask(mg.t).any() else 0.0
                    j = walk_back(row, peak, own + max(0.02 * abs(own), 3 * spread))
                    t_on = min(t_on, float(mg.t[j]) - mg.step / 2)
        onset = t_on if onset is None else min(onset, t_on)
        hosts.append(h)
        g_here = sorted({s["labels"].get("gpu", "") for s in detail if s["labels"].get("host") == h} - {""}, key=_gkey)
        gpus += g_here
        total = float(np.nanmax(g.values[r][m]))
        ev.append(_ev(ctx, rule.queries[0], {"host": h, "gpu": ",".join(g_here) or None}, total,
                      f"grew within the job (first at {fmt_time(t_on)}, up to {total:.3g} per interval); "
                      "its lifetime value is ignored"))
    for s in detail:
        if s["labels"].get("host") in hosts:
            ev.append(_ev(ctx, str(p["gpu_detail"]), s["labels"], s["value"], "increase over the whole window"))
    return _finding(pb, rule, hosts, gpus, onset, ev)



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
        spread = float(np.nanstd(base)) if np.isfinite(base).any() else 0.0
        j = walk_back(x, i, own + max(0.02 * abs(own), 3 * spread))
        t_on = float(g.t[j]) - g.step / 2
        h = lab.get("host", "")
        hosts.append(h)
        onset = t_on if onset is None else min(onset, t_on)
        ev.append(_ev(ctx, rule.queries[0], {"host": h}, float(np.nanmax(x[m])),
                      f"from its usual {own:.0%} to {np.nanmax(x[m]):.1%} of the total between {fmt_time(t_on)} and "
                      f"{fmt_time(float(g.t[i]))}"))
    return _finding(pb, rule, hosts, [], onset, ev) if hosts else None


def _det_threshold_prior(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
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
        g_here = sorted({s["labels"].get("gpu", "") for s in detail if s["labels"].get("host") == h
                         and (codes is None or s["value"] in [float(c) for c in codes])} - {""}, key=_gkey)
        if lab.get("gpu") is not None and lab["gpu"] not in g_here:
            g_here.append(lab["gpu"])
        gpus += [x for x in g_here if x not in gpus]
        ev.append(_ev(ctx, rule.queries[0], {"host": h, "gpu": ",".join(g_here) or None}, v,
                      f"from {fmt_time(t_on)}" + (f" (prior for {ctx.gpu.name}: {above})" if codes is None and
                                                   p.get("above_prior") and ctx.gpu else "")))
    if not hosts:
        return None
    value = ", ".join(sorted({f"{v:g}" for v in vals}))
    return _finding(pb, rule, hosts, gpus, onset, ev, value=value)
