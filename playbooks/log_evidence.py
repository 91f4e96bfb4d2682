"""The job log's host events as corroboration for the diagnosis (the triage's `details.host_events`).

What the TSDB cannot show, the log can: a kill in the last scrape, a node Slurm lost, an Xid the exporter
never sampled. Each event is weighed as a diagnostician would:

- host-oom needs a kill: a kernel/cgroup OOM kill on a host, or a SIGKILL (exit 137) on a host whose memory
  reached its limit, corroborates the OOM-kill counter on that host, or stands as the kill where the counter
  saw none (onset: the final rise to the limit when the memory rule found it, else the kill);
- node-death prefers the host Slurm named: a silent-host finding is narrowed to the hosts Slurm reported
  failed, and a host Slurm reported failed that the data never saw go silent is still a dead node;
- a hardware Xid (48, 79, 94, ...) mapped to a host corroborates a GPU fault on that host, is a GPU fault
  by itself where the data shows none, and is the onset of a node death when that host then went silent.
  It names a PCI bus, not a GPU: the GPU is the one DCGM labels with that `pci_bus_id` on that host, else
  the one nvidia-smi's lines in the log put there, else unknown (null).
- a non-finite loss the trainer logged (a step's `loss: nan`, "loss is nan", "non-finite losses") is a
  training instability at that time, whatever the loss gauge shows (a gauge drops NaN samples or was last
  refreshed before them); a jump or climb the data showed before it stays the onset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .context import Context, Finding, triage_get
from .detectors.counters import _fatal_rise
from .hostnames import short_name
from .log_addresses import name_addresses
from .log_series import (
    LOG_QUERY,
    climb_into_nonfinite,
    gauge_step_times,
    judged_window,
    log_loss_departure,
    print_interval_s,
    steps_per_point,
)
from .report import fmt_time
from .triage import DRIVER_XIDS, HW_XIDS, bus_key

__all__ = ["apply_log_evidence", "hw_xid_hosts"]

#: host memory at this share of its total is at its limit (host_oom.memory_exhausted's `limit`)
MEM_LIMIT = 0.95
_LOOKBACK_S = 1800.0  # errors this long before a node went silent are its onset (as the decision's own)
_CLIMB_WINDOW_S = (
    1200.0  # the losses before a non-finite one judged for a climb (the loss_jump rule's baseline)
)


def apply_log_evidence(ctx: Context, findings: list[Finding]) -> None:
    """Add the log's host events to `findings`: evidence on findings they corroborate, new findings for what
    the data missed."""
    _nonfinite_loss(ctx, findings)
    _finer_loss_onset(ctx, findings)
    events = [e for e in triage_get(ctx.triage, "details", "host_events") or [] if isinstance(e, Mapping)]
    if not events:
        return
    known = tuple(getattr(ctx.source, "hosts", ()) or ())
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        if e.get("host"):
            by_kind.setdefault(str(e.get("kind")), []).append(
                {**e, "host": _tsdb_host(str(e["host"]), known)}
            )
    _node_failures(ctx, findings, by_kind.get("node-failure", []))
    _kills(ctx, findings, by_kind.get("oom-kill", []), by_kind.get("killed", []))
    xids = [e for e in by_kind.get("xid", []) if e.get("code") in HW_XIDS]
    drivers = [e for e in by_kind.get("xid", []) if e.get("code") in DRIVER_XIDS]
    buses = _bus_map(ctx, known) if xids or drivers else {}
    for e in [*xids, *drivers]:
        e["gpu"] = buses.get((e["host"], e.get("pci"))) or buses.get((None, e.get("pci")))
    _xids(ctx, findings, xids)
    _driver_xids(findings, drivers)
    name_addresses(ctx, findings, [*xids, *by_kind.get("gpu-ecc", [])])


def _nonfinite_loss(ctx: Context, findings: list[Finding]) -> None:
    """A non-finite loss the log shows is a training instability from the step that computed it."""
    bad = triage_get(ctx.triage, "details", "nonfinite_loss")
    t = bad.get("time") if isinstance(bad, Mapping) else None
    tl = ctx.timeline
    if not isinstance(t, int | float) or not tl.start - 60 <= t <= tl.end + 60:
        return
    ev = {
        "query": f"job log, line {bad.get('line')}",
        "labels": {},
        "value": str(bad.get("text") or "")[:300],
        "interpretation": "the trainer computed a non-finite loss: the training diverged",
    }
    step_s = tl.step_s if tl.step_s is not None and 0 < tl.step_s < 600 else 0.0
    inferred = bool(triage_get(ctx.triage, "details", "step_times_inferred"))
    named = bad.get("step")
    began = _gauge_times(ctx, [named - 1])[0] if inferred and isinstance(named, int) else None
    if began is not None:
        t = began  # the step that computed it began when the gauge saw the one before it complete
    else:
        t = _undated_report(ctx.triage, float(t)) if bad.get("undated") else float(t) - step_s
    # a time the log only infers (an undated report, a bar's clock) is no match for a departure the data dated
    guessed = began is None and (inferred or bool(bad.get("undated")))
    earlier = [
        f
        for f in _active(findings, klass="training-instability")
        if f.onset is not None and (f.onset <= t or guessed)
    ]
    earlier.sort(key=lambda f: float(f.onset or 0.0))
    if earlier:
        earlier[0].evidence.append(ev)
        earlier[0].severity = "critical"  # the divergence it saw ended in a non-finite loss: confirmed
        return
    # no jump the data confirmed: a climb of the logged losses into it (too few scrapes for the rule) began
    # the divergence
    points = _log_points(ctx)
    window = judged_window(ctx.triage, _CLIMB_WINDOW_S)
    climb = climb_into_nonfinite(points, t + step_s, window, steps_per_point(ctx.triage, len(points)))
    evs = [ev]
    if climb is not None and climb < t:
        t = climb
        evs.insert(0, _climb_evidence(points, climb, t + step_s))
    findings.append(
        _cause(
            "training",
            "loss_nonfinite",
            "training-instability",
            [],
            float(t),
            "Loss non-finite (NaN/Inf)",
            evs,
        )
    )


def _log_points(ctx: Context) -> list[list[Any]]:
    """Return the log's [time, loss] points: dated by the TSDB's step gauge where the log's own step times
    were inferred (a progress bar's clock, undated step lines placed by their durations), as they read."""
    points = triage_get(ctx.triage, "details", "log_loss") or []
    steps = triage_get(ctx.triage, "details", "log_loss_steps") or []
    if not triage_get(ctx.triage, "details", "step_times_inferred") or len(steps) != len(points):
        return list(points)
    times = _gauge_times(ctx, steps)
    if all(x is None for x in times):
        return list(points)
    return [[x, p[1]] for x, p in zip(times, points, strict=True) if x is not None]


def _gauge_times(ctx: Context, steps: Sequence[float]) -> list[float | None]:
    """When each step completed by the TSDB's step gauge (None without one, or where it cannot tell)."""
    g = ctx.grid("step")
    s = g.single() if g is not None else None
    if g is None or s is None:
        return [None] * len(steps)
    return gauge_step_times(g.t, s, steps)


def _climb_evidence(points: Sequence[Sequence[Any]], began: float, bad_t: float) -> dict[str, Any]:
    """The logged losses' climb into the non-finite one: from the last loss before it began to the last one."""
    seen = [(float(p[0]), float(p[1])) for p in points if p[0] is not None and p[1] is not None]
    before = [v for tt, v in seen if tt <= began]
    after = [(tt, v) for tt, v in seen if began < tt < bad_t]
    last = after[-1] if after else (began, before[-1] if before else float("nan"))
    return {
        "query": LOG_QUERY,
        "labels": {},
        "value": last[1],
        "interpretation": f"the logged loss climbed from {before[-1] if before else float('nan'):.4g} to "
        f"{last[1]:.4g} (at {fmt_time(last[0])}) before it turned non-finite: the divergence began then",
    }


def _undated_report(triage: Mapping[str, Any] | None, t: float) -> float:
    """When the step of an undated report of a non-finite loss began, from `t`, the last dated line before it.

    A dated report is dated when its step completed (that step began one step earlier); an undated one came
    after `t`, and the step that computed it began no earlier: at `t` when `t` is the last good step's line.
    A log that prints every Nth step ran up to a print interval of unseen steps after that line, and the job
    failed no later than its crash: any of those steps began it, none more likely, so the middle of the span."""
    every = print_interval_s(triage)
    if every is None:
        return t
    crash = triage_get(triage, "job", "crash_time")
    end = t + every if not isinstance(crash, int | float) or crash <= t else min(t + every, float(crash))
    return (t + end) / 2


def hw_xid_hosts(triage: Mapping[str, Any] | None, known: Sequence[str]) -> list[str]:
    """Return the TSDB names of the hosts the log reports a hardware Xid on (the ones `_bus_map` places)."""
    events = triage_get(triage, "details", "host_events") or []
    hosts = [
        _tsdb_host(str(e["host"]), known)
        for e in events
        if isinstance(e, Mapping) and e.get("kind") == "xid" and e.get("host") and e.get("code") in HW_XIDS
    ]
    return sorted(set(hosts))


def _bus_map(ctx: Context, known: Sequence[str]) -> dict[tuple[str | None, Any], str]:
    """Return (host, or None for any host, bus key) -> GPU index: DCGM's `pci_bus_id` labels (the
    `gpu_health.gpu_pci` query), then the nvidia-smi lines of the log."""
    out: dict[tuple[str | None, Any], str] = {}
    for s in ctx.instant("gpu_pci"):
        lab = s.get("labels") or {}
        key = bus_key(str(lab.get("pci_bus_id") or ""))
        if key and lab.get("host") and lab.get("gpu") is not None:
            out.setdefault((str(lab["host"]), key), str(lab["gpu"]))
    for b in triage_get(ctx.triage, "details", "gpu_bus") or []:
        if isinstance(b, Mapping) and b.get("pci") and b.get("gpu") is not None:
            host = _tsdb_host(str(b["host"]), known) if b.get("host") else None
            out.setdefault((host, str(b["pci"])), str(b["gpu"]))
    return out


def _tsdb_host(host: str, known: Sequence[str]) -> str:
    """Return the TSDB's name of a log's host (the same name, or the same short name), else the log's."""
    if host in known:
        return host
    short = short_name(host)
    return next((h for h in known if short_name(h) == short), host)


def _evidence(e: Mapping[str, Any], meaning: str) -> dict[str, Any]:
    return {
        "query": f"job log, line {e.get('line')}",
        "labels": {"host": str(e["host"])} | ({"gpu": str(e["gpu"])} if e.get("gpu") is not None else {}),
        "value": str(e.get("text") or "")[:300],
        "interpretation": meaning,
    }


def _cause(
    playbook: str,
    rule: str,
    klass: str,
    hosts: list[str],
    onset: float | None,
    title: str,
    ev: list[dict[str, Any]],
    gpus: list[str] | None = None,
) -> Finding:
    """Return a critical cause finding the log alone gives (the data did not show it)."""
    return Finding(
        playbook, rule, klass, "critical", "cause", hosts, gpus or [], onset, title, ev, {"source": "log"}
    )


def _active(findings: list[Finding], rule: str | None = None, klass: str | None = None) -> list[Finding]:
    return [
        f
        for f in findings
        if f.severity != "info" and (rule is None or f.rule == rule) and (klass is None or f.klass == klass)
    ]


def _node_failures(ctx: Context, findings: list[Finding], events: list[dict[str, Any]]) -> None:
    if not events:
        return
    failed = list(dict.fromkeys(e["host"] for e in events))
    meaning = "Slurm reported this node failed (slurmctld lost it) and ended the job for it."
    silent = _active(findings, rule="host_silent")
    for f in silent:
        named = [h for h in f.hosts if h in failed]
        if named:
            f.hosts = named  # the node Slurm lost, not the peers that went quiet with the job
            f.evidence += [_evidence(e, meaning) for e in events if e["host"] in named]
    seen = {h for f in silent for h in f.hosts}
    missed = [h for h in failed if h not in seen]
    if not missed:
        return
    tl = ctx.timeline
    times = [e["time"] for e in events if e["host"] in missed and e.get("time") is not None]
    onset = min(times) if times else None
    if tl.stalled and tl.last_advance is not None and (onset is None or tl.last_advance <= onset):
        onset = tl.last_advance  # the job stopped when the node did; Slurm noticed minutes later
    findings.append(
        _cause(
            "node",
            "host_silent",
            "node-death",
            missed,
            onset,
            f"Slurm reported node failure on {', '.join(missed)} (job log)",
            [_evidence(e, meaning) for e in events if e["host"] in missed],
        )
    )


def _finer_loss_onset(ctx: Context, findings: list[Finding]) -> None:
    """Date a training metric's move from the log's per-step losses when the log prints them more often
    than the series the rule judged changed (trainer gauges refreshed every 30 s or more): the series saw
    the move between its last value before it (`prev`) and the one that showed it (`cross`). A loss jump
    is the log's own metric: its departure in the log dates it. Another training metric (gradient norm,
    MoE load-balance loss) takes the log's loss departure only within that bracket: the same move, seen
    finer."""
    points = _log_points(ctx)
    times = np.array(sorted(float(p[0]) for p in points if p[0] is not None))
    if len(times) < 3:
        return
    spacing = float(np.median(np.diff(times)))
    for f in findings:
        cross, prev = f.extra.get("cross"), f.extra.get("prev")
        if f.klass != "training-instability" or cross is None or prev is None:
            continue
        if not spacing < float(cross) - float(prev):
            continue  # the series is as fine as the log
        t_on = log_loss_departure(
            points,
            float(cross),
            float(f.extra.get("window", 1200.0)),
            steps_per_point(ctx.triage, len(points)),
        )
        if t_on is None:
            continue
        if f.rule == "loss_jump" or float(prev) - spacing <= t_on <= float(cross):
            f.onset = t_on


def _kills(
    ctx: Context, findings: list[Finding], ooms: list[dict[str, Any]], killed: list[dict[str, Any]]
) -> None:
    near = {h: f for f in findings if f.rule == "memory_exhausted" for h in f.hosts}
    kills = ooms + [
        e
        for e in killed
        if e.get("code") == 137 and (e["host"] in near or _limit_between_scrapes(ctx, e["host"]))
    ]
    if not kills:
        return
    meaning = {
        True: "The kernel's OOM killer (or the job's memory cgroup) killed a process on this host.",
        False: "A task was killed (SIGKILL, exit 137) on this host while its memory was at the limit.",
    }
    counted = _active(findings, rule="oom_kill")
    for f in counted:
        f.evidence += [_evidence(e, meaning[e["kind"] == "oom-kill"]) for e in kills if e["host"] in f.hosts]
    hosts = list(dict.fromkeys(e["host"] for e in kills if not any(e["host"] in f.hosts for f in counted)))
    if not hosts:
        return
    rises = [t for t in (near[h].onset for h in hosts if h in near) if t is not None]
    rises += [t for t in (_kill_rise(ctx, h) for h in hosts) if t is not None]
    times = [e["time"] for e in kills if e["host"] in hosts and e.get("time") is not None]
    # without the memory's rise, nor a time on the kill's line: the fatal save began after the last step
    last = ctx.timeline.last_advance if ctx.timeline.stalled else None
    findings.append(
        _cause(
            "host_oom",
            "oom_kill_log",
            "host-oom",
            hosts,
            min(rises) if rises else min(times) if times else last,
            f"OOM kill on {', '.join(hosts)} (job log)",
            [_evidence(e, meaning[e["kind"] == "oom-kill"]) for e in kills if e["host"] in hosts],
        )
    )


def _kill_rise(ctx: Context, host: str) -> float | None:
    """Return when the rise that ended in the host's kill began: the start of the final rise before its
    memory's largest fall (what the kill freed), not an earlier save whose retained memory raised the floor
    (`_fatal_rise`, as the counter's own OOM rule dates it). None without such a fall (less than half)."""
    g = ctx.grid("mem_frac")
    x = g.row(host=host) if g is not None else None
    if g is None or x is None:
        return None
    seen = np.nonzero(np.isfinite(x))[0]
    if len(seen) < 3:
        return None
    k = int(np.argmin(np.diff(x[seen])))
    if not x[seen[k + 1]] < 0.5 * x[seen[k]]:
        return None
    j = _fatal_rise(ctx, g, x, int(seen[k + 1]))
    return float(g.t[j]) - g.step / 2 if j is not None else None


def _limit_between_scrapes(ctx: Context, host: str) -> bool:
    """Whether the host's memory reached its limit between two scrapes and a kill then freed it: at its last
    sample before it fell by more than half it was still climbing, and one more scrape's climb at that pace
    reaches the limit (`MEM_LIMIT` of the total). A kill comes at the limit, rarely on a scrape: the samples
    of a fast rise may all stay below it (E21 01: 80 %, then 94 %, then 5 % once the process was killed)."""
    g = ctx.grid("mem_frac")
    x = g.row(host=host) if g is not None else None
    if x is None:
        return False
    seen = x[np.isfinite(x)]
    if len(seen) < 3:
        return False
    k = int(np.argmin(np.diff(seen)))  # the largest fall: what the kill freed
    top, rise = float(seen[k]), float(seen[k] - seen[k - 1]) if k > 0 else 0.0
    return seen[k + 1] < 0.5 * top and rise > 0 and top + rise >= MEM_LIMIT


def _xids(ctx: Context, findings: list[Finding], events: list[dict[str, Any]]) -> None:
    if not events:
        return
    dead = _active(findings, klass="node-death")
    faults = _active(findings, klass="gpu-hardware-fault")
    lone: list[dict[str, Any]] = []
    for e in events:
        meaning = f"The NVIDIA driver reported Xid {e.get('code')}, a GPU hardware fault, on this host."
        d = next((f for f in dead if e["host"] in f.hosts), None)
        if d is not None:
            d.evidence.append(
                _evidence(e, meaning + " The host then went silent: it is where the death began.")
            )
            t = e.get("time")
            if t is not None and (d.onset is None or d.onset - _LOOKBACK_S <= t < d.onset):
                d.onset = t
            continue
        g = next((f for f in faults if e["host"] in f.hosts), None)
        if g is not None:
            g.evidence.append(_evidence(e, meaning))
        else:
            lone.append(e)
    for host in dict.fromkeys(e["host"] for e in lone):
        mine = [e for e in lone if e["host"] == host]
        times = [e["time"] for e in mine if e.get("time") is not None]
        tl = ctx.timeline
        onset = min(times) if times else tl.last_advance if tl.stalled else tl.crash_time
        codes = ", ".join(str(c) for c in dict.fromkeys(e.get("code") for e in mine))
        gpus = list(dict.fromkeys(str(e["gpu"]) for e in mine if e.get("gpu") is not None))
        ev = [_evidence(e, f"The NVIDIA driver reported Xid {e.get('code')} on this host.") for e in mine]
        where = f"GPU {', '.join(gpus)} on {host}" if gpus else host
        findings.append(
            _cause(
                "gpu_health",
                "xid_log",
                "gpu-hardware-fault",
                [host],
                onset,
                f"Xid {codes} on {where} (job log)",
                ev,
                gpus,
            )
        )


def _driver_xids(findings: list[Finding], events: list[dict[str, Any]]) -> None:
    """The driver's or firmware's own Xids the log shows (62, 109, 119, 120) on a host the data reports none
    on: the same note as the `xid_driver` rule's (alone a note; with scrape timeouts or metric gaps on the
    host, a GPU driver fault), read from the log."""
    seen = {h for f in findings if f.rule == "xid_driver" for h in f.hosts}
    for host in dict.fromkeys(e["host"] for e in events if e["host"] not in seen):
        mine = [e for e in events if e["host"] == host]
        times = [e["time"] for e in mine if e.get("time") is not None]
        codes = ", ".join(str(c) for c in dict.fromkeys(e.get("code") for e in mine))
        gpus = list(dict.fromkeys(str(e["gpu"]) for e in mine if e.get("gpu") is not None))
        ev = [
            _evidence(e, f"The NVIDIA driver reported Xid {e.get('code')}, its own or its firmware's.")
            for e in mine
        ]
        where = f"{host} GPU {', '.join(gpus)}" if gpus else host
        findings.append(
            Finding(
                "gpu_health",
                "xid_driver",
                "gpu-driver-fault",
                "info",
                "cause",
                [host],
                gpus,
                min(times) if times else None,
                f"Xid {codes} on {where} (job log)",
                ev,
                {"source": "log"},
            )
        )
