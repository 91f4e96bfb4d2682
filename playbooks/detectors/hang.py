"""Detectors of a job that stopped: the step stall, the collective busy-wait, a silent host, accused hosts alive."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from playbooks.anomaly import Grid, nan_median
from playbooks.context import Context, Finding, _int, triage_get
from playbooks.model import Playbook, RuleSpec
from playbooks.report import fmt_time

from ._base import _dur, _ev, _finding, _gkey, _match_host, _steady_level


def _det_step_stall(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    tl = ctx.timeline
    if not tl.stalled or tl.last_advance is None:
        return None
    gap = tl.end - tl.last_advance
    text = (
        f"last step {int(tl.last_step or 0)} at {fmt_time(tl.last_advance)}; no step for {gap / 60:.1f} min "
        f"while data continues (typical step {tl.step_s or 0:.1f} s)"
    )
    q = "last_step_ts" if ctx.grid("last_step_ts") else "step"
    return _finding(pb, rule, [], [], tl.last_advance, [_ev(ctx, q, {}, tl.last_step or 0, text)])


def _det_busy_wait(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    tl = ctx.timeline
    util, power = ctx.grid(rule.queries[0]), ctx.grid(rule.queries[1])
    umin = ctx.grid(rule.queries[2]) if len(rule.queries) > 2 else None
    p = rule.params
    per_gpu = ctx.grid(str(p["gpu_query"])) if p.get("gpu_query") else None
    if not tl.stalled and tl.train_start is None and per_gpu is not None:
        return _pre_step_hang(ctx, pb, rule, per_gpu)
    if not tl.stalled or util is None or power is None or tl.last_advance is None:
        return None
    a = tl.last_advance + max(60.0, 2 * power.step)
    b = (tl.crash_time if tl.crash_time and tl.crash_time > a else tl.end) - power.step
    win_p, win_u = power.mask(a, b), util.mask(a, b)
    if win_p.sum() < 1 or win_u.sum() < 1:
        return None
    active = _steady_level(ctx, power)
    if not math.isfinite(active) or active <= 0:
        return None
    rows = []
    busy = 0
    hosts_seen = 0
    umin_by_host: dict[str, float] = {}
    if umin is not None:
        wm = umin.mask(a, b)
        umin_by_host = {
            lab.get("host", ""): nan_median(v[wm]) for lab, v in zip(umin.labels, umin.values, strict=True)
        }
    silent: set[str] = set()
    for q in p.get("presence", ()):
        pg = ctx.grid(str(q))
        if pg is None:
            continue
        for lab, v in zip(pg.labels, pg.values, strict=True):
            seg = v[pg.mask(a, b)]
            if len(seg) and not (np.nan_to_num(seg, nan=0.0) > 0).all():
                silent.add(lab.get("host", ""))
    # a host spins when its GPUs (or, per GPU, any of them) run at high utilisation at low power
    sets = (
        _busy_sets(per_gpu, per_gpu.mask(a, b), float(p.get("util_min", 70.0)), silent)
        if per_gpu is not None
        else {}
    )
    for lab, pv in zip(power.labels, power.values, strict=True):
        h = lab.get("host", "")
        if h in silent:
            continue
        uv = util.row(host=h)
        pu = nan_median(pv[win_p])
        uu = nan_median(uv[win_u]) if uv is not None else float("nan")
        if not math.isfinite(pu):
            continue
        hosts_seen += 1
        spins = (math.isfinite(uu) and uu >= p.get("util_min", 70.0)) or bool(sets.get(h))
        is_busy = spins and pu <= p.get("power_ratio_max", 0.6) * active
        busy += is_busy
        rows.append((h, uu, pu, is_busy))
    if not hosts_seen or busy < max(1, 0.5 * hosts_seen):
        return None
    odd = []
    for h in silent:
        umin_by_host.pop(h, None)
    if per_gpu is not None:
        odd = _odd_hosts(sets)
        umin_by_host = {h: v for h, v in umin_by_host.items() if h in odd}
    elif umin_by_host:
        typical = nan_median([v for v in umin_by_host.values() if math.isfinite(v)])
        for h, v in umin_by_host.items():
            if math.isfinite(v) and math.isfinite(typical) and v < p.get("idle_util", 20.0) <= typical:
                odd.append(h)
    ev = [
        _ev(
            ctx,
            rule.queries[0],
            {"host": h},
            uu,
            f"utilisation {uu:.0f} % at {pu:.0f} W ({pu / active:.0%} of the job's own training power "
            f"{active:.0f} W){'' if busy_ else ' - not busy-waiting'}",
        )
        for h, uu, pu, busy_ in sorted(rows, key=lambda r: (r[0] not in odd, r[3], r[0]))
    ]
    for h in odd:
        ev.insert(
            0,
            _ev(
                ctx,
                rule.queries[2],
                {"host": h},
                umin_by_host.get(h, float("nan")),
                "some GPUs of this host sit idle while the others spin: they never entered the collective",
            ),
        )
    return _finding(pb, rule, sorted(odd), [], tl.last_advance, ev, busy_hosts=busy, hosts_seen=hosts_seen)


def _det_host_silent(
    ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]
) -> Finding | None:
    samples = ctx.grid(rule.queries[0])
    up, power, util = (ctx.grid(q) for q in rule.queries[1:4])
    ref = samples or power
    if ref is None:
        return None
    p = rule.params
    t = ref.t
    hosts = [lab.get("host", "") for lab in ref.labels]
    if up is not None:
        hosts += [lab.get("host", "") for lab in up.labels if lab.get("host", "") not in hosts]
    if len(hosts) < 2:
        return None

    def row(g: Grid | None, h: str) -> np.ndarray | None:
        if g is None or len(g.t) != len(t):
            return None
        return g.row(host=h)

    with np.errstate(all="ignore"):
        p_med = np.nanmedian(power.values, axis=0) if power is not None and len(power.t) == len(t) else None
    absent: dict[str, np.ndarray] = {}
    via_up: dict[str, np.ndarray] = {}
    dead: dict[str, np.ndarray] = {}
    for h in hosts:
        s = row(samples, h)
        a = np.ones(len(t), bool) if s is None else ~(s > 0)
        u = row(up, h)
        vu = np.zeros(len(t), bool) if u is None else (u < 1)
        if s is None and u is not None:
            a = ~(u >= 1)
        a = a | vu
        z = np.zeros(len(t), bool)
        pw, ut = row(power, h), row(util, h)
        if pw is not None and p_med is not None:
            with np.errstate(all="ignore"):
                z = (pw < float(p.get("zero_ratio", 0.2)) * p_med) & ((ut < 5) if ut is not None else True)
        absent[h], via_up[h], dead[h] = a, vu, a | z
    present_share = np.mean([~absent[h] for h in hosts], axis=0)
    alive_idx = np.nonzero(present_share >= 0.5)[0]
    if not len(alive_idx):
        return None
    e = int(alive_idx[-1])
    length = _dur(rule, "min_duration", 180.0)
    # a host that stops when the steps stop may have little data left after it (a short heartbeat timeout
    # ends the job soon after): then a shorter silence, still several scrapes long, is enough
    tl = ctx.timeline
    short, near = max(60.0, 4 * ref.step), max(120.0, 2 * (tl.step_s or 0.0))
    out_hosts, ev, onset = [], [], None
    for h in hosts:
        d = dead[h]
        if not d[e]:
            continue
        i = e
        while i > 0 and d[i - 1]:
            i -= 1
        at_stall = tl.stalled and tl.last_advance is not None and abs(float(t[i]) - tl.last_advance) <= near
        if i == 0 or t[e] - t[i] < (short if at_stall else length):
            continue
        if via_up[h][i]:
            t_on = float(t[i]) - ref.step / 2
            how = "exporter target down"
        elif absent[h][i]:
            t_on = float(t[i]) - max(ctx.window_s(rule.queries[0]), ref.step)
            how = "no samples any more"
        else:
            t_on = float(t[i]) - ref.step / 2
            how = "GPUs at 0 W / 0 %"
        out_hosts.append(h)
        onset = t_on if onset is None else min(onset, t_on)
        ev.append(
            _ev(
                ctx,
                rule.queries[0],
                {"host": h},
                how,
                f"{how} from {fmt_time(t_on)} while the other hosts still report",
            )
        )
    if not out_hosts or len(out_hosts) > max(1, 0.5 * len(hosts)):
        return None
    return _finding(pb, rule, out_hosts, [], onset, ev)


def _det_accused_alive(
    ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]
) -> Finding | None:
    """The accused hosts trained like the rest of the job around the heartbeat-stop time and up to the kill.

    Their training level is judged only at the instants where the other hosts trained (their median power
    at the job's own training level): a checkpoint save or any other job-wide pause drops every host at
    once and says nothing about the accused. From the heartbeat-stop time to the kill they must also move
    with their peers whatever the job does (a dead task idles while its peers spin in their collectives),
    and the job must have gone on after the heartbeats stopped: a task that really died stops every step
    with it, so without training after the heartbeat-stop time the accusation may be true.
    """
    tr = ctx.triage or {}
    tl = ctx.timeline
    accused = list(tr.get("heartbeat_accused") or [])
    crash = triage_get(tr, "job", "crash_time")
    timeout = _int(triage_get(tr, "config", "jax_distributed_heartbeat_timeout_seconds"))
    power, util = ctx.grid(rule.queries[0]), ctx.grid(rule.queries[1])
    if not accused or crash is None or timeout is None or power is None:
        return None
    if util is not None and len(util.t) != len(power.t):
        util = None
    p = rule.params
    ratio, umin = float(p.get("power_ratio_min", 0.7)), float(p.get("util_min", 60.0))
    crash = float(crash)
    hb_stop = crash - timeout
    active = _steady_level(ctx, power)
    if not math.isfinite(active) or active <= 0:
        return None
    hosts_all = [lab.get("host", "") for lab in power.labels]
    rows: dict[str, str] = {}
    for name in accused:
        matched = _match_host(name, hosts_all)
        if matched is None:
            return None
        rows[name] = matched

    def pack(g: Grid) -> np.ndarray:
        peers = [i for i, lab in enumerate(g.labels) if lab.get("host") not in rows.values()]
        median: np.ndarray = np.nanmedian(g.values[peers or list(range(len(g.labels)))], axis=0)
        return median

    pack_p = pack(power)
    pack_u = pack(util) if util is not None else None
    pack_trains = pack_p >= ratio * active
    tail = (power.t > hb_stop) & (power.t <= crash)
    if not (pack_trains & tail).any() and not (tl.last_advance is not None and tl.last_advance > hb_stop):
        return None  # nothing trained after the heartbeats stopped: the accusation may be true
    margin = _dur(rule, "margin", 120.0)
    need = max(3, int(round(margin / max(power.step, 1e-9) / 2)))
    # widen the window (up to 4x) until enough instants where the job trained are seen
    for k in (1, 2, 4):
        a, b = hb_stop - k * margin, min(hb_stop + k * margin, crash)
        judged = pack_trains & power.mask(a, b)
        if judged.sum() >= need:
            break
    if judged.sum() < need:
        return None
    n_before, n_after = int((judged & (power.t <= hb_stop)).sum()), int((judged & (power.t > hb_stop)).sum())
    ev, alive = [], []
    for name in accused:
        h = rows[name]
        pr = power.row(host=h)
        assert pr is not None, "h is one of power's own hosts"
        ur = util.row(host=h) if util is not None else None
        pw = nan_median(pr[judged])
        uu = nan_median(ur[judged]) if ur is not None else float("nan")
        low = int((np.nan_to_num(pr[judged], nan=0.0) < ratio * active).sum())
        ok = (
            math.isfinite(pw)
            and pw >= ratio * active
            and low <= 0.2 * judged.sum()
            and (not math.isfinite(uu) or uu >= umin)
        )
        # up to the kill it moves with its peers (training, saving a checkpoint, or waiting with them)
        lag = 0
        if tail.any():
            with np.errstate(invalid="ignore"):
                moves = np.nan_to_num(pr[tail], nan=0.0) >= ratio * pack_p[tail]
                if ur is not None and pack_u is not None:
                    moves &= np.nan_to_num(ur[tail], nan=0.0) >= ratio * pack_u[tail]
            lag = int((~moves).sum())
            ok = ok and lag <= 0.2 * tail.sum()
        for q in p.get("presence", ()):
            pg = ctx.grid(str(q))
            if pg is None:
                continue
            prs = pg.row(host=h)
            if prs is not None:
                seg = prs[pg.mask(a, crash + pg.step)]
                if len(seg) and not (np.nan_to_num(seg, nan=0.0) > 0).all():
                    ok = False
        alive.append(ok)
        ev.append(
            _ev(
                ctx,
                rule.queries[0],
                {"host": h},
                pw,
                f"{pw:.0f} W ({pw / active:.0%} of the job's training power) and {uu:.0f} % utilisation at "
                f"the {int(judged.sum())} instants its peers trained between {fmt_time(a)} and {fmt_time(b)} "
                f"({n_before} before, {n_after} after the heartbeat-stop time {fmt_time(hb_stop)}); "
                f"{int(tail.sum()) - lag}/{int(tail.sum())} instants in step with its peers up to the kill: "
                f"{'training' if ok else 'NOT training'}",
            )
        )
        for q in [q for q in rule.queries[2:] if q not in p.get("presence", ())]:
            g = ctx.grid(q)
            if g is None:
                continue
            r = g.row(host=h)
            if r is not None:
                ev.append(
                    _ev(
                        ctx,
                        q,
                        {"host": h},
                        nan_median(r[g.mask(hb_stop - margin, hb_stop)]),
                        "at the heartbeat-stop time",
                    )
                )
    if not all(alive):
        return None
    if tl.last_advance is not None and tl.last_advance > hb_stop and ctx.grid("step") is not None:
        ev.insert(
            0,
            _ev(
                ctx,
                "step",
                {},
                tl.last_step or 0,
                f"training steps went on for {(tl.last_advance - hb_stop) / 60:.1f} min after the "
                f"heartbeat-stop time, up to {fmt_time(tl.last_advance)}: every task was alive",
            ),
        )
    return _finding(pb, rule, list(rows.values()), [], hb_stop, ev, no_culprits=True)


def _busy_sets(g: Grid, cols: np.ndarray, util_min: float, skip: set[str]) -> dict[str, frozenset[str]]:
    """Return each host's set of GPU indices that spin (utilisation >= util_min) over most of `cols`."""
    sets: dict[str, set[str]] = {}
    for lab, v in zip(g.labels, g.values, strict=True):
        h, gpu = lab.get("host", ""), lab.get("gpu", "")
        if h in skip:
            continue
        seg = v[cols]
        seg = seg[~np.isnan(seg)]
        sets.setdefault(h, set())
        if len(seg) and (seg >= util_min).mean() >= 0.8:
            sets[h].add(gpu)
    return {h: frozenset(x) for h, x in sets.items()}


def _odd_hosts(sets: dict[str, frozenset[str]]) -> list[str]:
    """Return the hosts whose busy set differs from the most common one (when one is held by most hosts)."""
    if len(sets) < 3:
        return []
    counts = Counter(sets.values())
    common, n = counts.most_common(1)[0]
    if n < 0.5 * len(sets):
        return []
    return sorted(h for h, x in sets.items() if x != common)


def _pre_step_hang(ctx: Context, pb: Playbook, rule: RuleSpec, g: Grid) -> Finding | None:
    """A hang before the first step: no step ever completed, yet GPUs spin for a sustained time at the end.

    Each host is described by its set of spinning GPU indices (the ranks that entered the first collective);
    the hosts whose set differs from the most common one are where to start. The onset is when the pattern
    settled: the median time at which the spinning GPUs started spinning for good.
    """
    p = rule.params
    util_min = float(p.get("util_min", 70.0))
    busy = np.nan_to_num(g.values, nan=0.0) >= util_min
    any_busy = np.nonzero(busy.any(axis=0))[0]
    if not len(any_busy):
        return None
    e = int(any_busy[-1])
    length = max(2, int(round(_dur(rule, "min_duration", 600.0) / max(g.step, 1e-9))))
    if e + 1 < length:
        return None
    final = np.zeros(len(g.t), bool)
    final[e + 1 - length : e + 1] = True
    spinning = [r for r in range(len(g.labels)) if busy[r, final].mean() >= 0.8]
    if not spinning:
        return None
    starts = []
    for r in spinning:
        i = e
        while i > 0 and busy[r, i - 1]:
            i -= 1
        starts.append(float(g.t[i]) - g.step / 2)
    onset = _refine_settle(ctx.grid(rule.queries[0]), float(np.median(starts)), float(g.t[e]), g.step)
    sets = _busy_sets(g, final, util_min, set())
    odd = _odd_hosts(sets)
    n_hosts = len(sets)
    common = Counter(sets.values()).most_common(1)[0][0] if sets else frozenset()
    ev = [
        _ev(
            ctx,
            rule.queries[0],
            {},
            len(spinning),
            f"no training step ever completed, yet {len(spinning)} GPUs on {n_hosts} hosts spin at >= "
            f"{util_min:.0f} % utilisation from {fmt_time(onset)}; most hosts spin GPUs "
            f"{', '.join(sorted(common, key=_gkey)) or 'none'}",
        )
    ]
    for h in odd:
        ev.append(
            _ev(
                ctx,
                str(p["gpu_query"]),
                {"host": h},
                ", ".join(sorted(sets[h], key=_gkey)) or "none",
                "this host spins another set of GPUs than the others: its ranks are elsewhere",
            )
        )
    return _finding(pb, rule, odd, [], onset, ev, busy_hosts=n_hosts, hosts_seen=n_hosts, pre_step=True)


def _refine_settle(util: Grid | None, coarse: float, end: float, coarse_step: float) -> float:
    """Return the settle time on the fine grid of per-host utilisation: the median over hosts of when the
    host's utilisation last rose to half its final level (searched around the coarse estimate)."""
    if util is None or len(util.t) < 3:
        return coarse
    a, b = coarse - 2 * coarse_step, coarse + 2 * coarse_step
    final = util.mask(end - 3 * coarse_step, end)
    times = []
    for v in util.values:
        level = nan_median(v[final])
        if not math.isfinite(level) or level <= 0:
            continue
        low = np.nonzero(util.mask(a, b) & (np.nan_to_num(v, nan=0.0) < 0.5 * level) & (util.t <= end))[0]
        if len(low) and low[-1] + 1 < len(util.t):
            times.append(float(util.t[low[-1] + 1]) - util.step / 2)
    return float(np.median(times)) if times else coarse
