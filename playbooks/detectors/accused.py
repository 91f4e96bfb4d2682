"""The accused-alive detector: the hosts a heartbeat timeout accused trained like the rest up to the kill."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from playbooks._timeline_steps import _int
from playbooks.anomaly import Grid, nan_median
from playbooks.context import Context, Finding, triage_get
from playbooks.model import Playbook, RuleSpec
from playbooks.report import fmt_time

from ._base import _blind, _dur, _ev, _finding, _gaps, _match_host, _steady_level

#: the JAX coordination service's heartbeat timeout when the program sets none (seconds: ten missed 10 s
#: heartbeats; MaxText's base.yml has the same): a log that does not state it ran with it
JAX_HEARTBEAT_TIMEOUT_DEFAULT = 100


@dataclass(frozen=True)
class _Scene:
    """What every accused host is judged against.

    Attributes:
        power, util: per-host power and utilisation (util None when absent or on another grid).
        pack_p, pack_u: the peers' median power and utilisation per instant.
        judged: the instants around the heartbeat-stop time where the peers trained.
        tail: the instants from the heartbeat-stop time to the kill.
        active: the job's own training power.
        a, b: the window `judged` was taken from.
    """

    power: Grid
    util: Grid | None
    pack_p: np.ndarray
    pack_u: np.ndarray | None
    judged: np.ndarray
    tail: np.ndarray
    active: float
    ratio: float
    umin: float
    margin: float
    a: float
    b: float
    hb_stop: float
    crash: float


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
    timeout = JAX_HEARTBEAT_TIMEOUT_DEFAULT if timeout is None else timeout
    power, util = ctx.grid(rule.queries[0]), ctx.grid(rule.queries[1])
    if not accused or crash is None or power is None:
        return None
    if util is not None and len(util.t) != len(power.t):
        util = None
    hosts_all = [lab.get("host", "") for lab in power.labels]
    rows = {name: _match_host(name, hosts_all) for name in accused}
    named = {n: h for n, h in rows.items() if h is not None}
    if len(named) < len(accused):
        # the GPU exporter names the hosts otherwise than the log (`--no-hostname` DCGM at its pod IPs)
        found = _whole_job(ctx, rule, power, util, float(crash) - timeout, float(crash))
        if found is None:
            return None
        sc, ev = found
    else:
        own = _scene(ctx, rule, power, util, named.values(), float(crash) - timeout, float(crash))
        if own is None:
            return None
        sc, ev, alive = own, [], []
        for name in accused:
            ok, host_ev = _judge(ctx, rule, sc, named[name])
            alive.append(ok)
            ev += host_ev
        if not all(alive):
            return None
    if tl.last_advance is not None and tl.last_advance > sc.hb_stop and ctx.grid("step") is not None:
        ev.insert(
            0,
            _ev(
                ctx,
                "step",
                {},
                tl.last_step or 0,
                f"training steps went on for {(tl.last_advance - sc.hb_stop) / 60:.1f} min after the "
                f"heartbeat-stop time, up to {fmt_time(tl.last_advance)}: every task was alive",
            ),
        )
    return _finding(pb, rule, [named.get(n, n) for n in accused], [], sc.hb_stop, ev, no_culprits=True)


def _whole_job(
    ctx: Context, rule: RuleSpec, power: Grid, util: Grid | None, hb_stop: float, crash: float
) -> tuple[_Scene, list[dict[str, Any]]] | None:
    """Judge every GPU host of the job when the accused cannot be told among them: they are among them only
    when the GPU exporter reports at least as many hosts as the job has nodes (the log's node list), and
    then every host that reported around the heartbeat-stop time must have trained with the others up to
    the kill (one that did not may be an accused task that really died: nothing is said then)."""
    nodes = list((ctx.triage or {}).get("nodes") or [])
    hosts = [str(lab.get("host", "")) for lab in power.labels]
    sc = _scene(ctx, rule, power, util, (), hb_stop, crash)
    if sc is None or not nodes:
        return None
    seen = [h for h in hosts if _reported(sc, h)]
    if len(seen) < len(nodes):
        return None
    judged = [_judge(ctx, rule, sc, h) for h in seen]
    if not all(ok for ok, _ in judged):
        return None
    worst = min(range(len(seen)), key=lambda i: float(judged[i][1][0]["value"]))
    ev = [
        _ev(
            ctx,
            rule.queries[0],
            {},
            len(seen),
            f"the GPU exporter names no host as the log does, so the accused cannot be told apart; all "
            f"{len(seen)} GPU hosts it reports ({len(nodes)} nodes in the job) trained with the others "
            f"around the heartbeat-stop time and up to the kill, the accused among them",
        ),
        *judged[worst][1],
    ]
    return sc, ev


def _reported(sc: _Scene, h: str) -> bool:
    """Whether host `h` reported at most of the instants the job is judged at (an exporter replaced by a
    new pod at a new address reports under its new name)."""
    row = sc.power.row(host=h)
    return row is not None and float(np.isfinite(row[sc.judged]).mean()) >= 0.5


def _pack(g: Grid, accused: Collection[str]) -> np.ndarray:
    """Return the peers' (every host but the accused) median of `g` per instant."""
    peers = [i for i, lab in enumerate(g.labels) if lab.get("host") not in accused]
    median: np.ndarray = np.nanmedian(g.values[peers or list(range(len(g.labels)))], axis=0)
    return median


def _scene(
    ctx: Context,
    rule: RuleSpec,
    power: Grid,
    util: Grid | None,
    accused: Collection[str],
    hb_stop: float,
    crash: float,
) -> _Scene | None:
    """Return what the accused are judged against, or None when the job did not train after the heartbeats
    stopped (the accusation may be true) or too few instants where the peers trained are seen."""
    p = rule.params
    ratio, umin = float(p.get("power_ratio_min", 0.7)), float(p.get("util_min", 60.0))
    active = _steady_level(ctx, power)
    if not math.isfinite(active) or active <= 0:
        return None
    tl = ctx.timeline
    if not _trained_until_kill(ctx, crash, power.step):
        return None
    pack_p = _pack(power, accused)
    pack_u = _pack(util, accused) if util is not None else None
    pack_trains = pack_p >= ratio * active
    tail = (power.t > hb_stop) & (power.t <= crash)
    if not (pack_trains & tail).any() and not (tl.last_advance is not None and tl.last_advance > hb_stop):
        return None  # nothing trained after the heartbeats stopped: the accusation may be true
    margin = _dur(rule, "margin", 120.0)
    need = max(3, int(round(margin / max(power.step, 1e-9) / 2)))
    # a checkpoint save is no instant to judge a host by: each exporter samples on its own offset, so with
    # coarse scrapes one host's sample may fall inside the save while its peers' fall outside
    quiet = ~tl.in_checkpoint(power.t, pad=power.step)
    # widen the window (up to 4x) until enough instants where the job trained are seen
    for k in (1, 2, 4):
        a, b = hb_stop - k * margin, min(hb_stop + k * margin, crash)
        judged = pack_trains & quiet & power.mask(a, b)
        if judged.sum() >= need:
            break
    if judged.sum() < need:
        return None
    return _Scene(
        power, util, pack_p, pack_u, judged, tail, active, ratio, umin, margin, a, b, hb_stop, crash
    )


def _trained_until_kill(ctx: Context, crash: float, scrape: float) -> bool:
    """Whether the job trained until the coordinator killed it: a step completed at all and, when the steps
    stopped before the data's end, the last one within a couple of steps (or scrapes) of the kill. A job
    whose steps stopped long before the kill, or never started, hung: the kill only ended it, and heartbeats
    that the hang blocked are no false positive, whatever the accused hosts' GPUs then did with their peers."""
    tl = ctx.timeline
    if tl.last_advance is None and triage_get(ctx.triage, "job", "last_step") is None:
        return False
    if not tl.stalled or tl.last_advance is None:
        return True
    return tl.last_advance >= crash - max(90.0, 2 * (tl.step_s or 0.0), 2 * scrape)


def _judge(ctx: Context, rule: RuleSpec, sc: _Scene, h: str) -> tuple[bool, list[dict[str, Any]]]:
    """Return whether accused host `h` trained with its peers, and the evidence."""
    pr = sc.power.row(host=h)
    assert pr is not None, "h is one of power's own hosts"
    ur = sc.util.row(host=h) if sc.util is not None else None
    judged, tail = sc.judged, sc.tail
    pw = nan_median(pr[judged])
    uu = nan_median(ur[judged]) if ur is not None else float("nan")
    low = int((np.nan_to_num(pr[judged], nan=0.0) < sc.ratio * sc.active).sum())
    ok = (
        math.isfinite(pw)
        and pw >= sc.ratio * sc.active
        and low <= 0.2 * judged.sum()
        and (not math.isfinite(uu) or uu >= sc.umin)
    )
    # up to the kill it moves with its peers (training, saving a checkpoint, or waiting with them)
    lag = 0
    if tail.any():
        with np.errstate(invalid="ignore"):
            moves = np.nan_to_num(pr[tail], nan=0.0) >= sc.ratio * sc.pack_p[tail]
            if ur is not None and sc.pack_u is not None:
                moves &= np.nan_to_num(ur[tail], nan=0.0) >= sc.ratio * sc.pack_u[tail]
        lag = int((~moves).sum())
        ok = ok and lag <= 0.2 * tail.sum()
    presence = rule.params.get("presence", ())
    for q in presence:
        pg = ctx.grid(str(q))
        prs = pg.row(host=h) if pg is not None else None
        if pg is None or prs is None:
            continue
        m = pg.mask(sc.a, sc.crash + pg.step)
        if _gaps(prs[m], _blind(pg)[m]):
            ok = False
    n_before = int((judged & (sc.power.t <= sc.hb_stop)).sum())
    n_after = int((judged & (sc.power.t > sc.hb_stop)).sum())
    ev = [
        _ev(
            ctx,
            rule.queries[0],
            {"host": h},
            pw,
            f"{pw:.0f} W ({pw / sc.active:.0%} of the job's training power) and {uu:.0f} % utilisation at "
            f"the {int(judged.sum())} instants its peers trained between {fmt_time(sc.a)} and {fmt_time(sc.b)} "
            f"({n_before} before, {n_after} after the heartbeat-stop time {fmt_time(sc.hb_stop)}); "
            f"{int(tail.sum()) - lag}/{int(tail.sum())} instants in step with its peers up to the kill: "
            f"{'training' if ok else 'NOT training'}",
        )
    ]
    for q in [q for q in rule.queries[2:] if q not in presence]:
        g = ctx.grid(q)
        r = g.row(host=h) if g is not None else None
        if g is not None and r is not None:
            at = nan_median(r[g.mask(sc.hb_stop - sc.margin, sc.hb_stop)])
            ev.append(_ev(ctx, q, {"host": h}, at, "at the heartbeat-stop time"))
    return bool(ok), ev
