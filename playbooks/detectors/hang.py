"""Detectors of a job that stopped: the step stall, the collective busy-wait (a silent host: `silent.py`;
accused hosts alive: `accused.py`)."""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping

import numpy as np

from playbooks.anomaly import Grid, nan_median
from playbooks.context import Context, Finding, triage_get
from playbooks.model import Playbook, RuleSpec
from playbooks.report import fmt_time

from ._base import _blind, _dur, _ev, _finding, _gaps, _gkey, _steady_level
from ._tenant import job_gpus, job_gpus_before_steps, local_ordinals


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
    idle = _gpus_idle_after(ctx, rule)
    if idle:
        text += "; the job's GPUs then went idle (no spinning in a collective)"
    ev = [_ev(ctx, q, {}, tl.last_step or 0, text)]
    return _finding(pb, rule, [], [], tl.last_advance, ev, job_gpus_idle=idle)


def _gpus_idle_after(ctx: Context, rule: RuleSpec) -> bool:
    """Whether the job's GPUs went idle after its last step: nearly every one of them (those that trained,
    when another tenant shares the hosts) below `idle_util` from a couple of scrapes after it to the end."""
    tl = ctx.timeline
    util = ctx.grid(rule.queries[2]) if len(rule.queries) > 2 else None
    if util is None or tl.last_advance is None:
        return False
    cols = util.mask(tl.last_advance + max(60.0, 2 * util.step), tl.end)
    if cols.sum() < 2:
        return False
    job = _trained_gpus(ctx, rule, 3)
    levels = [
        nan_median(v[cols])
        for lab, v in zip(util.labels, util.values, strict=True)
        if job is None or (lab.get("host", ""), lab.get("gpu", "")) in job
    ]
    levels = [x for x in levels if math.isfinite(x)]
    idle_util = float(rule.params.get("idle_util", 20.0))
    return bool(levels) and sum(x < idle_util for x in levels) >= 0.9 * len(levels)


def _det_busy_wait(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    """Most hosts spin (high utilisation at low power) after the steps stopped: a collective busy-waits.

    The hosts whose GPUs do otherwise (per GPU, another set of spinning GPUs than most hosts; per host, GPUs
    left idle while the others spin) never entered the collective: they are where to start.
    """
    tl = ctx.timeline
    util, power = ctx.grid(rule.queries[0]), ctx.grid(rule.queries[1])
    umin = ctx.grid(rule.queries[2]) if len(rule.queries) > 2 else None
    p = rule.params
    per_gpu = ctx.grid(str(p["gpu_query"])) if p.get("gpu_query") else None
    # a hang before the first step: no step completed, neither in the TSDB nor in the log (a log whose step
    # lines carry no time leaves the training's start unknown, not its steps)
    no_step = triage_get(ctx.triage, "job", "last_step") is None
    if not tl.stalled and tl.train_start is None and per_gpu is not None and no_step:
        return _pre_step_hang(ctx, pb, rule, per_gpu)
    if not tl.stalled or util is None or power is None or tl.last_advance is None:
        return None
    a = tl.last_advance + max(60.0, 2 * power.step)
    b = (tl.crash_time if tl.crash_time and tl.crash_time > a else tl.end) - power.step
    b = _spin_end(util, a, b, float(p.get("util_min", 70.0)))
    if power.mask(a, b).sum() < 1 or util.mask(a, b).sum() < 1:
        return None
    active = _steady_level(ctx, power)
    if not math.isfinite(active) or active <= 0:
        return None
    silent = _silent_hosts(ctx, p.get("presence", ()), a, b)
    # a host spins when its GPUs (or, per GPU, any of them) run at high utilisation at low power; only the
    # job's GPUs count: another tenant's on the same hosts never trained for this job
    job_gpus = _trained_gpus(ctx, rule)
    sets = (
        _busy_sets(per_gpu, per_gpu.mask(a, b), float(p.get("util_min", 70.0)), silent, job_gpus)
        if per_gpu is not None
        else None
    )
    rows = _busy_rows(rule, util, power, (a, b), active, silent, sets or {})
    busy = sum(r[3] for r in rows)
    if not rows or busy < max(1, 0.5 * len(rows)):
        return None
    odd, umin_by_host = _idle_hosts(rule, umin, (a, b), silent, sets)
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
    return _finding(pb, rule, sorted(odd), [], tl.last_advance, ev, busy_hosts=busy, hosts_seen=len(rows))


def _spin_end(util: Grid, a: float, b: float, util_min: float) -> float:
    """Return when the job's spinning ended between a and b: the last instant the typical host (the hosts'
    median) still ran at `util_min` or more; b when it never did. A collective's watchdog (or anyone) may kill
    the ranks long before the data ends; the GPUs idle after that are the kill's effect, not part of the
    pattern of which GPUs spin."""
    cols = np.nonzero(util.mask(a, b))[0]
    if not len(cols):
        return b
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        typical = np.nanmedian(util.values[:, cols], axis=0)
    spun = cols[np.nan_to_num(typical, nan=0.0) >= util_min]
    return float(util.t[spun[-1]]) if len(spun) else b


def _silent_hosts(ctx: Context, presence: Iterable[object], a: float, b: float) -> set[str]:
    """Return the hosts whose presence series (samples or `up`) miss an instant between a and b."""
    silent: set[str] = set()
    for q in presence:
        pg = ctx.grid(str(q))
        if pg is None:
            continue
        m = pg.mask(a, b)
        blind = _blind(pg)[m]
        for lab, v in zip(pg.labels, pg.values, strict=True):
            if _gaps(v[m], blind):
                silent.add(lab.get("host", ""))
    return silent


def _busy_rows(
    rule: RuleSpec,
    util: Grid,
    power: Grid,
    win: tuple[float, float],
    active: float,
    silent: set[str],
    sets: Mapping[str, frozenset[str]],
) -> list[tuple[str, float, float, bool]]:
    """Return (host, utilisation, power, busy-waits) for every reporting host over `win`."""
    p = rule.params
    win_p, win_u = power.mask(*win), util.mask(*win)
    rows = []
    for lab, pv in zip(power.labels, power.values, strict=True):
        h = lab.get("host", "")
        if h in silent:
            continue
        uv = util.row(host=h)
        pu = nan_median(pv[win_p])
        uu = nan_median(uv[win_u]) if uv is not None else float("nan")
        if not math.isfinite(pu):
            continue
        spins = (math.isfinite(uu) and uu >= p.get("util_min", 70.0)) or bool(sets.get(h))
        is_busy = spins and pu <= p.get("power_ratio_max", 0.6) * active
        rows.append((h, uu, pu, is_busy))
    return rows


def _idle_hosts(
    rule: RuleSpec,
    umin: Grid | None,
    win: tuple[float, float],
    silent: set[str],
    sets: dict[str, frozenset[str]] | None,
) -> tuple[list[str], dict[str, float]]:
    """Return the hosts that never entered the collective and each one's lowest GPU utilisation.

    Per GPU (`sets`), those whose set of spinning GPUs differs from most hosts'; else those whose lowest GPU
    utilisation is idle while the typical host's is not.
    """
    umin_by_host: dict[str, float] = {}
    if umin is not None:
        wm = umin.mask(*win)
        umin_by_host = {
            lab.get("host", ""): nan_median(v[wm]) for lab, v in zip(umin.labels, umin.values, strict=True)
        }
    for h in silent:
        umin_by_host.pop(h, None)
    odd: list[str] = []
    if sets is not None:
        odd = _odd_hosts(sets)
        umin_by_host = {h: v for h, v in umin_by_host.items() if h in odd}
    elif umin_by_host:
        typical = nan_median([v for v in umin_by_host.values() if math.isfinite(v)])
        for h, v in umin_by_host.items():
            if (
                math.isfinite(v)
                and math.isfinite(typical)
                and v < rule.params.get("idle_util", 20.0) <= typical
            ):
                odd.append(h)
    return odd, umin_by_host


def _trained_gpus(ctx: Context, rule: RuleSpec, at: int = 5) -> set[tuple[str, str]] | None:
    """Return the job's GPUs as (host, gpu) (`_tenant.job_gpus`), None when every GPU is; `at`: the index
    of the rule's per-GPU power query."""
    g = ctx.grid(rule.queries[at]) if len(rule.queries) > at else None
    if g is None:
        return None
    return job_gpus(ctx, g, trained_ratio=float(rule.params.get("trained_ratio", 0.75)))


def _busy_sets(
    g: Grid,
    cols: np.ndarray,
    util_min: float,
    skip: set[str],
    only: set[tuple[str, str]] | None = None,
) -> dict[str, frozenset[str]]:
    """Return each host's set of GPU indices that spin: on average over `cols` at utilisation >= util_min. A
    polling kernel's sampled utilisation scatters (a spinning GPU may read 50 % now and then), so a share of
    samples above the line (or their median, over a few coarse samples) would drop spinning GPUs at random
    and make hosts look odd; an idle GPU reads near 0 throughout.

    Among `only`, the job's GPUs, when given: each counted by its place among its host's job GPUs (the
    local rank it runs, as the job numbers its devices), since the job may hold other indices on each host.
    """
    sets: dict[str, set[str]] = {}
    local = local_ordinals(only) if only is not None else {}
    for lab, v in zip(g.labels, g.values, strict=True):
        h, gpu = lab.get("host", ""), lab.get("gpu", "")
        if h in skip:
            continue
        sets.setdefault(h, set())
        if only is not None and (h, gpu) not in only:
            continue
        seg = v[cols]
        seg = seg[~np.isnan(seg)]
        if len(seg) and float(np.mean(seg)) >= util_min:
            sets[h].add(local.get((h, gpu), gpu))
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
    length = _cut_by_kill(ctx, g, busy, e, length)
    if e + 1 < length:
        return None
    final = np.zeros(len(g.t), bool)
    final[e + 1 - length : e + 1] = True
    spinning = [r for r in range(len(g.labels)) if busy[r, final].mean() >= 0.8]
    # every GPU the spinning sets may count (typically at util_min over the final spin) is judged
    with np.errstate(all="ignore"):
        typical = np.nanmean(g.values[:, final], axis=1) >= util_min
    job = job_gpus_before_steps(
        ctx, g, np.nonzero(typical)[0].tolist(), final, float(p.get("idle_util", 20.0))
    )
    spinning = [r for r in spinning if job is None or g.key(r) in job]
    if not spinning:
        return None
    starts = []
    for r in spinning:
        i = e
        while i > 0 and busy[r, i - 1]:
            i -= 1
        starts.append(float(g.t[i]) - g.step / 2)
    onset = _refine_settle(ctx.grid(rule.queries[0]), float(np.median(starts)), float(g.t[e]), g.step)
    onset = max(onset, _power_settle(ctx.grid(rule.queries[1]), onset, float(g.t[e])))
    sets = _busy_sets(g, final, util_min, set(), job)
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


#: the triage classes of a kill for unresponsive ranks: the coordinator's heartbeat timeout, a collective's
UNRESPONSIVE = ("heartbeat-timeout", "nccl-timeout")


def _cut_by_kill(ctx: Context, g: Grid, busy: np.ndarray, e: int, length: int) -> int:
    """Return how many instants of spinning make a hang before the first step: `length`, or less when the
    job's log reports it killed for unresponsive ranks (a heartbeat or collective timeout) while the GPUs
    still spun: the kill cut the spin short, and the whole spin (at least 3 scrapes and 2 minutes) counts."""
    crash = ctx.timeline.crash_time
    classes = {m.get("class") for m in (ctx.triage or {}).get("matches") or [] if isinstance(m, Mapping)}
    if crash is None or not classes & set(UNRESPONSIVE) or float(g.t[e]) < crash - 2 * g.step:
        return length
    i = e
    while i > 0 and busy[:, i - 1].any():
        i -= 1
    run = e - i + 1
    return min(length, run) if run >= max(3, 120.0 / max(g.step, 1e-9)) else length


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


def _power_settle(power: Grid | None, since: float, end: float) -> float:
    """Return when the hosts' power settled at its busy-wait level: the median over hosts of the last instant
    (after `since`) their power stood clearly above it. GPUs that computed at high utilisation and then
    spin (the first step's work before its first collective) spin only from when their power fell; a host
    whose power never stood clearly above its final level gives no time. `since` when no host does."""
    if power is None or len(power.t) < 3:
        return since
    final = power.mask(end - 3 * power.step, end)
    seen = power.mask(since, end)
    times = []
    for v in power.values:
        level = nan_median(v[final])
        x = np.where(seen, np.nan_to_num(v, nan=0.0), 0.0)
        top = float(x.max()) if len(x) else 0.0
        if not math.isfinite(level) or top < 1.5 * max(level, 1e-9):
            continue
        high = np.nonzero(x > level + 0.5 * (top - level))[0]
        if len(high) and high[-1] + 1 < len(power.t):
            times.append(float(power.t[high[-1] + 1]) - power.step / 2)
    return float(np.median(times)) if times else since
