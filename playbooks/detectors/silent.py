"""The silent-host detector: at most half the hosts went silent up to the data's end (a node death; when the
death began: `_silent.py`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from playbooks.anomaly import Grid
from playbooks.context import Context, Finding, triage_get
from playbooks.hostnames import is_ipv4
from playbooks.model import Playbook, RuleSpec
from playbooks.report import fmt_time

from ._base import _dur, _ev, _finding, _match_host
from ._silent import silence_onset


def _det_host_silent(
    ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]
) -> Finding | None:
    """At most half the hosts went silent (no samples, exporter down, or GPUs at 0 W) up to the data end.

    The silence must last `min_duration`, or several scrapes when it began as the steps stopped. A silence in
    the data's last scrape or two (the capture ended soon after the death) is too short to stand alone: it
    counts when the job's log reports that host dead (Slurm's node failure, the heartbeat accusation).
    """
    samples = ctx.grid(rule.queries[0])
    up, power, util = (ctx.grid(q) for q in rule.queries[1:4])
    ref = samples or power
    if ref is None:
        return None
    t = ref.t
    hosts = [lab.get("host", "") for lab in ref.labels]
    if up is not None:
        hosts += [lab.get("host", "") for lab in up.labels if lab.get("host", "") not in hosts]
    if len(hosts) < 2:
        return None
    absent, via_up, dead = _silences(rule, t, hosts, samples, up, power, util)
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
    reported = _reported_dead(ctx, hosts) if e == len(t) - 1 else set()
    out_hosts, ev, onset, starts = [], [], None, {}
    for h in hosts:
        d = dead[h]
        if not d[e]:
            i = _rebooted(ctx, t, absent[h], present_share, util, h, near, short)
            if i is None:
                continue
        else:
            i = e
            while i > 0 and d[i - 1]:
                i -= 1
            at_stall = (
                tl.stalled and tl.last_advance is not None and abs(float(t[i]) - tl.last_advance) <= near
            )
            if i == 0 or (t[e] - t[i] < (short if at_stall else length) and h not in reported):
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
        if d[e] and h not in reported and _trained_on(ctx, up, h, t, (i, e), t_on + length):
            continue
        text = f"{how} from {fmt_time(t_on)} while the other hosts still report"
        starts[h] = t_on
        t_on, before = silence_onset(ctx, rule, h, float(t[i]), t_on)
        text += before
        out_hosts.append(h)
        onset = t_on if onset is None else min(onset, t_on)
        ev.append(_ev(ctx, rule.queries[0], {"host": h}, how, text))
    named = _gpu_addresses_named(ctx, hosts, ref, starts, 2 * ref.step)
    for addr, node in named.items():
        how = (
            f"went silent {abs(starts[addr] - starts[node]):.0f} s from it"
            if node in starts
            else "went silent as the job's log reports the node dead"
        )
        text = f"{addr} is {node}'s GPU exporter, scraped at an address no node name joins: it {how}, "
        text += "and no GPU reports under the node's own name"
        ev.append(_ev(ctx, rule.queries[0], {"host": addr}, "GPU exporter's address", text))
    out_hosts = list(dict.fromkeys(named.get(h, h) for h in out_hosts))
    if not out_hosts or len(out_hosts) > max(1, 0.5 * len(hosts)):
        return None
    # silent_at: when the first host fell silent (the onset may be earlier: its errors before the silence)
    return _finding(pb, rule, out_hosts, [], onset, ev, aliases=named, silent_at=min(starts.values()))


def _trained_on(
    ctx: Context, up: Grid | None, h: str, t: np.ndarray, span: tuple[int, int], until: float
) -> bool:
    """Return True if a host whose GPU data went silent over `span` (grid indices, to the data's end) is
    alive: its own exporter target answered throughout, and the job's steps still advanced at `until` (the
    silence's start plus its minimum duration: a dead host's ranks would have stopped every collective): its
    GPU exporter stopped (a restart, a hang), not the host."""
    u = up.row(host=h) if up is not None and len(up.t) == len(t) else None
    last = ctx.timeline.last_advance
    i, e = span
    if u is None or last is None:
        return False
    return bool(np.all(u[i : e + 1] >= 1)) and last >= until


def _rebooted(
    ctx: Context,
    t: np.ndarray,
    absent: np.ndarray,
    present_share: np.ndarray,
    util: Grid | None,
    h: str,
    near: float,
    short: float,
) -> int | None:
    """Return where a host that died and came back (a reboot) went silent, or None.

    The job stalled as it went silent (its silence begins within `near` of the last step), it stayed silent
    while most hosts reported for at least `short` (several scrapes), and when it reported again its GPUs
    idled while the others still busy-waited in their collectives (two scrapes at least, before the job was
    killed and every GPU idled): it never rejoined the job."""
    tl = ctx.timeline
    if not tl.stalled or tl.last_advance is None or util is None or len(util.t) != len(t):
        return None
    u = util.row(host=h)
    if u is None:
        return None
    with np.errstate(all="ignore"):
        pack_u = np.nanmedian(util.values, axis=0)
    runs = np.flatnonzero(np.diff(np.r_[0, (absent & (present_share >= 0.5)).astype(np.int8), 0]))
    for i, j in zip(runs[::2], runs[1::2], strict=True):
        if abs(float(t[i]) - tl.last_advance) > near or float(t[j - 1] - t[i]) + (t[1] - t[0]) < short:
            continue
        # judged while the others still busy-wait: once the job is killed (a watchdog's timeout) every GPU idles
        after = np.zeros(len(t), bool)
        after[j:] = np.isfinite(u[j:]) & np.isfinite(pack_u[j:]) & (pack_u[j:] >= 50)
        if after.sum() >= 2 and np.nanmedian(u[after]) < 5:
            return int(i)
    return None


def _gpu_addresses_named(
    ctx: Context, hosts: list[str], gpu: Grid, starts: dict[str, float], within: float
) -> dict[str, str]:
    """Return {address: node} for the silent GPU exporters named by a bare address (no host-identity join
    named their node: `--no-hostname` DCGM scraped at its pod IP) whose node is plain: exactly one node
    with no GPU series under its own name went silent within `within` of the address (or the job's log
    reports it dead), and that node is claimed by no other address. Two real nodes are never merged: a
    node whose own name carries GPU series, or a name that is no bare address, is nobody's alias."""
    with_gpus = {lab.get("host", "") for lab in gpu.labels}
    plain = [h for h in hosts if h not in with_gpus]
    reported = _reported_dead(ctx, hosts)
    found: dict[str, str] = {}
    for addr in starts:
        if addr not in with_gpus or not is_ipv4(addr):
            continue
        nodes = [
            n
            for n in plain
            if not is_ipv4(n) and (abs(starts.get(n, float("inf")) - starts[addr]) <= within or n in reported)
        ]
        if len(nodes) == 1:
            found[addr] = nodes[0]
    claimed = list(found.values())
    return {a: n for a, n in found.items() if claimed.count(n) == 1}


def _reported_dead(ctx: Context, hosts: list[str]) -> set[str]:
    """Return the hosts the job's log reports dead: a Slurm node failure on it, or its tasks accused of
    missing heartbeats."""
    tr = ctx.triage or {}
    events = triage_get(tr, "details", "host_events") or []
    names = [str(e.get("host")) for e in events if isinstance(e, Mapping) and e.get("kind") == "node-failure"]
    names += [str(a) for a in tr.get("heartbeat_accused") or []]
    return {h for h in (_match_host(n, hosts) for n in names if n and n != "None") if h is not None}


def _silences(
    rule: RuleSpec,
    t: np.ndarray,
    hosts: list[str],
    samples: Grid | None,
    up: Grid | None,
    power: Grid | None,
    util: Grid | None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Return, per host and instant on `t`: absent (no samples or target down), down by `up`, and dead
    (absent, or GPUs well below the pack's power and idle)."""

    def row(g: Grid | None, h: str) -> np.ndarray | None:
        if g is None or len(g.t) != len(t):
            return None
        return g.row(host=h)

    with np.errstate(all="ignore"):
        p_med = np.nanmedian(power.values, axis=0) if power is not None and len(power.t) == len(t) else None
    absent: dict[str, np.ndarray] = {}
    via_up: dict[str, np.ndarray] = {}
    dead: dict[str, np.ndarray] = {}
    zero = float(rule.params.get("zero_ratio", 0.2))
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
                z = (pw < zero * p_med) & ((ut < 5) if ut is not None else True)
        absent[h], via_up[h], dead[h] = a, vu, a | z
    return absent, via_up, dead
