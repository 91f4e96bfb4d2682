"""The decision: rank the root-cause candidates and name class, family, culprits, onset, confidence, chain."""

from __future__ import annotations

from typing import Any

from .context import Context, Finding, _r
from .report import fmt_time

__all__ = ["FAMILY", "PRIORITY", "decide_diagnosis"]

FAMILY = {
    "healthy": "none", "collective-hang": "collective", "network-hang": "network-rdma", "node-death": "node",
    "heartbeat-false-positive": "heartbeat", "host-oom": "host-memory", "thermal-straggler": "thermal",
    "rdma-degradation": "network-rdma", "restore-resource-leak": "cpu-contention",
    "monitoring-ghost-data": "monitoring", "gpu-driver-fault": "gpu-driver", "gpu-hardware-fault": "gpu-hardware",
    "training-instability": "training",
}
# How specific a cause is, to order findings whose onsets coincide (a hang is the effect of nearly anything).
PRIORITY = {
    "gpu-hardware-fault": 10, "host-oom": 9, "node-death": 8, "heartbeat-false-positive": 7, "network-hang": 7,
    "training-instability": 6, "thermal-straggler": 5, "rdma-degradation": 5, "monitoring-ghost-data": 4,
    "gpu-driver-fault": 4, "restore-resource-leak": 3, "collective-hang": 1, "healthy": 0,
}
# Classes whose story includes the job stopping; their stall/busy-wait findings are effects.
STOPPING = {"collective-hang", "network-hang", "node-death", "heartbeat-false-positive", "host-oom",
            "gpu-hardware-fault"}
SEV_RANK = {"info": 0, "warning": 1, "critical": 2}


def decide_diagnosis(ctx: Context, findings: list[Finding]) -> dict[str, Any]:
    """Return the contract's `diagnosis` object; re-class and demote findings explained by the primary."""
    tl = ctx.timeline
    if ctx.triage is None and not any(f.rule == "busy_wait" for f in findings):
        # Without a log, steps that stop before the data ends may just be the job's end (exporters kept
        # running): only GPUs still spinning make it a hang.
        for f in findings:
            if f.rule == "step_stall":
                f.severity = "info"
                f.title += " (GPUs not busy-waiting: the job may simply have ended)"
    for f in findings:
        # a rule may need another rule's finding on the same host to stand (e.g. dmesg errors alone)
        needs = f.extra.get("needs") or ()
        if needs and not any(o.rule in needs and set(o.hosts) & set(f.hosts) for o in findings):
            f.severity = "info"
    cands = [f for f in findings if f.role == "cause" and SEV_RANK[f.severity] >= 1 and f.klass != "healthy"]
    if not cands:
        return _healthy(ctx, findings)
    top = max(SEV_RANK[f.severity] for f in cands)
    pool = [f for f in cands if SEV_RANK[f.severity] == top]
    inf = float("inf")
    earliest = min((f.onset if f.onset is not None else inf) for f in pool)
    tol = max(90.0, 2 * (tl.step_s or 0.0))
    group = [f for f in pool if (f.onset if f.onset is not None else inf) <= earliest + tol]
    primary = max(group, key=lambda f: (PRIORITY.get(f.klass, 0), -(f.onset or 0)))
    klass = primary.klass
    # a network event shortly before a stall made the hang
    net = [f for f in findings if f.klass in ("rdma-degradation", "network-hang") and f.role == "cause"
           and SEV_RANK[f.severity] >= 1 and f.onset is not None]
    if tl.stalled and tl.last_advance is not None and klass in ("collective-hang", "rdma-degradation"):
        before = [f for f in net if tl.last_advance - 1800 <= f.onset <= tl.last_advance + 60]
        if before:
            klass = "network-hang"
            primary = min(before, key=lambda f: f.onset or inf)
    same = [f for f in findings if f.klass == klass or (klass == "network-hang" and f in net)]
    hosts: list[str] = []
    gpus: list[dict[str, Any]] = []
    if klass in ("rdma-degradation", "network-hang"):
        for f in net if klass == "rdma-degradation" or not tl.stalled else [f for f in net if f.onset <= (tl.last_advance or inf) + 60]:
            hosts += [h for h in f.hosts if h not in hosts]
    elif klass == "collective-hang":
        bw = [f for f in findings if f.rule == "busy_wait"]
        hosts = list(bw[0].hosts) if bw else []
    elif not primary.extra.get("no_culprits"):
        hosts = list(primary.hosts)
    gpu_by_host: dict[str, list[str]] = {}
    for f in same:
        if f.gpus and len(f.hosts) == 1:
            gpu_by_host.setdefault(f.hosts[0], [])
            gpu_by_host[f.hosts[0]] += [g for g in f.gpus if g not in gpu_by_host[f.hosts[0]]]
    if klass in ("thermal-straggler", "gpu-hardware-fault"):
        for f in same:
            if f.gpus and len(f.hosts) == 1 and f.hosts[0] in hosts and f.role == "cause":
                gpu_by_host[f.hosts[0]] = list(f.gpus)
                break
    for h in hosts:
        gl = gpu_by_host.get(h) or []
        gpus += [{"host": h, "gpu": g} for g in gl] if gl else [{"host": h, "gpu": None}]
    onset = primary.onset
    if klass == "collective-hang":
        onset = tl.last_advance
    elif klass == "network-hang":
        onset = min((f.onset for f in same if f.onset is not None and f in net), default=onset)
    # findings explained by the primary: the stall/busy-wait are its effects; data problems on a dead or
    # faulty host after the onset are consequences
    for f in findings:
        if f is primary:
            continue
        if klass in STOPPING and f.klass == "collective-hang":
            f.klass = klass
        elif klass == "network-hang" and f.klass == "rdma-degradation" and set(f.hosts) <= set(hosts) \
                and (f.onset or inf) <= (tl.last_advance or inf) + 60:
            f.klass = klass
        elif (f.klass in ("monitoring-ghost-data", "gpu-driver-fault") and klass in ("node-death", "gpu-hardware-fault",
                                                                                     "host-oom")
              and set(f.hosts) & set(hosts) and (f.onset or inf) >= (onset or 0) - tol):
            f.severity = "info"
            f.title += f" (explained by the {klass.replace('-', ' ')})"
    corroboration = sum(1 for f in same if f is not primary and SEV_RANK[f.severity] >= 1)
    conf = (0.8 if primary.severity == "critical" else 0.65) + 0.05 * min(3, corroboration)
    if klass == "collective-hang" and not any(f.rule == "busy_wait" for f in findings):
        conf = 0.5
    if klass == "restore-resource-leak":
        conf = 0.45
    if klass == "network-hang" and primary.klass != "network-hang":
        conf -= 0.05
    chain = _chain(ctx, klass, primary, findings, onset)
    return {"class": klass, "root_cause_family": FAMILY[klass], "culprits": gpus, "onset": _r(onset),
            "confidence": round(min(0.95, max(0.05, conf)), 2),
            "summary": _summary(ctx, klass, hosts, gpus, onset, primary, findings), "chain": chain}


def _healthy(ctx: Context, findings: list[Finding]) -> dict[str, Any]:
    tl = ctx.timeline
    notes = []
    if tl.restored:
        notes.append("The job restored from a checkpoint; compare it with a fresh-start baseline (`compare`) to "
                     "see a restore leak, which a single job cannot show against itself.")
    infos = [f.title for f in findings if f.severity == "info" and f.role != "context"]
    summary = ("Nothing beyond normal behaviour: training ran at its own steady pace; checkpoint spikes and warm-up "
               "were excluded, counters were judged by their growth within the job, and no host or GPU left its "
               "peers.")
    if infos:
        summary += " Minor observations: " + "; ".join(infos[:3]) + "."
    if notes:
        summary += " " + " ".join(notes)
    return {"class": "healthy", "root_cause_family": "none", "culprits": [], "onset": None,
            "confidence": 0.7 if not infos else 0.6, "summary": summary, "chain": []}


def _chain(ctx: Context, klass: str, primary: Finding, findings: list[Finding], onset: float | None) -> list[str]:
    tl = ctx.timeline
    steps: list[tuple[float, str]] = [(onset or 0.0, f"{fmt_time(onset)}: {primary.title}")]
    seen = {primary.title}
    for f in sorted(findings, key=lambda f: f.onset or 0.0):
        if f is primary or f.title in seen or f.role == "context" or f.onset is None:
            continue
        related = f.klass == klass or f.role == "symptom"
        if related and f.onset >= (onset or 0.0) - 60:
            steps.append((f.onset, f"{fmt_time(f.onset)}: {f.title}"))
            seen.add(f.title)
    if tl.stalled and tl.last_advance and not any("steps stopped" in s.lower() for _, s in steps):
        steps.append((tl.last_advance, f"{fmt_time(tl.last_advance)}: training steps stopped at step "
                                        f"{int(tl.last_step or 0)}"))
    if tl.crash_time:
        steps.append((tl.crash_time, f"{fmt_time(tl.crash_time)}: the job ended (time from the log)"))
    steps.sort(key=lambda s: s[0])
    return [s for _, s in steps[:8]]


_SUMMARY = {
    "collective-hang": "The job hung in a collective: the step counter stopped at {stall} and every GPU then "
                       "spun at high utilisation with power far below its training level (RCCL/NCCL busy-wait), "
                       "with no network, node or hardware event before it.{odd}",
    "network-hang": "A network event on {hosts} triggered the hang: RDMA link trouble (retransmits, ACK timeouts, "
                    "transmit waits or link errors) started at {onset}, the collectives then stalled (steps "
                    "stopped at {stall}) and every GPU busy-waited.",
    "node-death": "Host {hosts} stopped at {onset} (its exporter went silent or its GPUs dropped to 0 W / 0 %); "
                  "the other hosts then waited for it in their collectives until the job was killed.",
    "heartbeat-false-positive": "The coordinator killed the job for missed heartbeats, but at the heartbeat-stop "
                                "time ({onset}) the accused hosts ({accused}) drew their usual training power at "
                                "high utilisation: the tasks were alive; the heartbeat mechanism failed.",
    "host-oom": "Host memory on {hosts} climbed from its usual level to the limit from {onset} (a checkpoint save "
                "on a replica-0 host) and the kernel OOM-killed the trainer; the other hosts then timed out.",
    "thermal-straggler": "GPU {gpu} on {hosts} left its peers from {onset}: it ran hotter and its clock dropped, "
                         "and since every step is synchronous the whole job slowed down with it.",
    "rdma-degradation": "Sustained RDMA link trouble (retransmits, ACK timeouts, transmit waits or link errors) "
                        "on {hosts} from {onset} slowed every collective: step time rose for the whole job "
                        "without a hang.",
    "restore-resource-leak": "This restored job carries uniformly more runnable processes on every host than a "
                             "job of its size should (a prior, not a measured baseline): the signature of the "
                             "restore leak of communicator polling threads. Confirm with `compare` against a "
                             "fresh start with the same config.",
    "monitoring-ghost-data": "The exporter on {hosts} froze at {onset}: its values stopped changing exactly while "
                             "its peers' kept moving and training went on. The data, not the job, is broken: "
                             "ignore {hosts}'s hardware metrics after the onset.",
    "gpu-driver-fault": "GPU driver trouble on {hosts} from {onset}: GPU metric collection times out and leaves "
                        "gaps (and the kernel logs GPU errors where collected), while training is unaffected.",
    "gpu-hardware-fault": "GPU {gpu} on {hosts} reported uncorrectable memory/hardware errors at {onset}; the "
                          "job failed shortly after. Drain the node.",
    "training-instability": "A training-level metric moved first: the {what} jumped at {onset}; utilisation "
                            "spread and step time followed. The system metrics are symptoms, not the cause.",
}


def _summary(ctx: Context, klass: str, hosts: list[str], gpus: list[dict[str, Any]], onset: float | None,
             primary: Finding, findings: list[Finding]) -> str:
    tl = ctx.timeline
    odd = ""
    if klass == "collective-hang" and hosts:
        odd = f" Some GPUs of {', '.join(hosts)} never entered the collective: start there."
    gpu = ", ".join(str(g["gpu"]) if len(hosts) == 1 else f"{g['host']}:{g['gpu']}" for g in gpus
                    if g.get("gpu") is not None) or "?"
    moved = sorted({f.title.removesuffix(" jumps") for f in findings
                    if f.klass == "training-instability" and SEV_RANK[f.severity] >= 1}, key=str.lower)
    moved = [m if sum(c.isupper() for c in m.split()[0]) >= 2 else m[0].lower() + m[1:] for m in moved]
    what = (", ".join(moved[:-1]) + " and " + moved[-1] if len(moved) > 1 else moved[0]) if moved else "the loss"
    text = _SUMMARY[klass].format(hosts=", ".join(hosts) or "the hosts", onset=fmt_time(onset),
                                  stall=fmt_time(tl.last_advance), odd=odd, gpu=gpu, what=what,
                                  accused=", ".join(primary.hosts))
    others = sorted({f.klass for f in findings if SEV_RANK[f.severity] >= 1 and f.klass not in (klass, "healthy")})
    if others:
        text += " Also seen: " + ", ".join(others) + "."
    return text
