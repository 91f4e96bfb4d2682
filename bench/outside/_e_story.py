"""Corpus E: each class's story on a timeline, and the truth the contract gives it (#10)."""

from __future__ import annotations

import random

from bench.outside._e_plan import Case
from bench.outside._e_time import Timeline, base_timeline, frac, last_step_before, run_steps


def _finish(tl: Timeline, case: Case, rng: random.Random) -> None:
    """A job that trains to its end: it completes a few minutes before the window closes."""
    run_steps(tl, case, rng, tl.t1 - rng.uniform(1.5, 4) * 60, {})
    tl.end = (tl.steps[-1].end if tl.steps else tl.t1) + rng.uniform(8, 30)
    tl.exit = "completed"


def _hang_at(tl: Timeline, case: Case, rng: random.Random, at: float) -> None:
    """Steps stop at `at` (the collective never returns); the watchdog or the user ends the job."""
    run_steps(tl, case, rng, at, {})
    tl.hang = last_step_before(tl, at)
    tl.phases = [p for p in tl.phases if p[0] < tl.hang]
    watchdog = rng.choice((600, 1800))
    if tl.hang + watchdog < tl.t1 - 60:
        tl.end, tl.exit = tl.hang + watchdog + rng.uniform(1, 20), "failed"
        tl.ev["watchdog_s"] = watchdog
    else:
        tl.end, tl.exit = tl.t1 - rng.uniform(20, 90), "cancelled"


def healthy(tl: Timeline, case: Case, rng: random.Random) -> None:
    _finish(tl, case, rng)
    tl.story = "healthy run: " + ", ".join(sorted(case.herrings)) if case.herrings else "healthy run"


def collective_hang(tl: Timeline, case: Case, rng: random.Random) -> None:
    hosts = case.hosts
    if case.variant == "before_first_step":
        tl.ev["settle"] = tl.train_start + rng.uniform(60, 150)
        tl.hang, tl.onset = tl.ev["settle"], tl.ev["settle"]
        tl.end, tl.exit = tl.t1 - rng.uniform(20, 90), "cancelled"
        tl.story = "hang in the first collective: no step completes, every GPU busy-waits"
        return
    _hang_at(tl, case, rng, frac(tl, rng, 0.4, 0.65))
    tl.onset = tl.hang
    if case.variant == "odd_host":
        h = rng.randrange(len(hosts))
        tl.ev["odd_host"] = h
        tl.culprits = [(hosts[h], None)]
        tl.story = f"collective hang; {hosts[h]}'s stuck-GPU set differs (two of its GPUs idle, not spinning)"
    else:
        tl.story = "collective hang without trigger: every GPU busy-waits at idle power"


def network_hang(tl: Timeline, case: Case, rng: random.Random) -> None:
    at = frac(tl, rng, 0.45, 0.7)
    k = 2 if case.variant == "two" else 1
    idx = rng.sample(range(len(case.hosts)), k)
    tl.ev["net"] = at - rng.uniform(60, 240)
    tl.ev["net_hosts"] = float(sum(1 << i for i in idx))
    _hang_at(tl, case, rng, at)
    tl.culprits = [(case.hosts[i], None) for i in sorted(idx)]
    tl.onset = tl.ev["net"]
    tl.story = (
        f"RDMA retransmits / ACK timeouts on {', '.join(h for h, _ in tl.culprits)}, then a collective hang"
    )


def node_death(tl: Timeline, case: Case, rng: random.Random) -> None:
    h = rng.randrange(len(case.hosts))
    death = frac(tl, rng, 0.45, 0.7)
    tl.ev["death"], tl.ev["dead_host"] = death, h
    if case.variant != "silent":
        tl.ev["xid"] = death - rng.uniform(60, 200)
        tl.ev["xid_code"] = 79.0 if case.variant == "xid79" else 74.0
        tl.ev["xid_gpu"] = float(rng.choice(case.gpus))
    _hang_at(tl, case, rng, death)
    tl.end = min(tl.t1 - 30, death + rng.uniform(300, 540))
    tl.exit = "node-fail"
    tl.culprits = [(case.hosts[h], None)]
    tl.onset = tl.ev.get("xid", death)
    what = f"Xid {int(tl.ev['xid_code'])}, then " if "xid" in tl.ev else ""
    tl.story = (
        f"{what}{case.hosts[h]} goes silent (both exporters gone); the others hang until Slurm kills the job"
    )


def heartbeat_fp(tl: Timeline, case: Case, rng: random.Random) -> None:
    crash = frac(tl, rng, 0.55, 0.85)
    tl.hb_timeout = rng.choice((100, 300, 600))
    while crash - tl.hb_timeout < tl.train_start + 120:
        tl.hb_timeout //= 2
    run_steps(tl, case, rng, crash, {})
    tl.crash, tl.end, tl.exit = crash, crash + rng.uniform(3, 25), "failed"
    k = rng.choice((1, 1, 2))
    tl.accused = [case.hosts[i] for i in sorted(rng.sample(range(1, len(case.hosts)), k))]
    tl.onset = crash - tl.hb_timeout
    tl.story = (
        f"coordinator declared {', '.join(tl.accused)} dead (missed heartbeats) while they trained normally"
    )


def host_oom(tl: Timeline, case: Case, rng: random.Random) -> None:
    tl.save_s = (4.0 * case.scrape_s, 8.0 * case.scrape_s)  # big host-side copies: minutes
    tl.ckpt_every = tl.ckpt_every or max(20, int(60 / tl.step_s * 6) // 10 * 10)
    run_steps(tl, case, rng, tl.t1, {})
    saves = [p for p in tl.phases if p[2] == "ckpt"]
    lo, hi = tl.train_start + 0.4 * (tl.t1 - tl.train_start), tl.t1 - 300
    late = [p for p in saves if lo <= p[0] <= hi] or saves[-1:]
    fatal = late[0]
    kill = fatal[0] + max(60.0, rng.uniform(4, 7) * case.scrape_s)
    tl.steps = [s for s in tl.steps if s.end <= fatal[0]]
    tl.phases = [p for p in tl.phases if p[0] < fatal[0]] + [(fatal[0], kill, "ckpt")]
    k = 2 if len(case.hosts) >= 16 and rng.random() < 0.4 else 1
    tl.culprits = [(case.hosts[i], None) for i in range(k)]
    tl.crash, tl.end, tl.exit = kill, kill + rng.uniform(20, 120), "failed"
    tl.ev["kill"], tl.ev["fatal_save"], tl.ev["oom_hosts"] = kill, fatal[0], float(k)
    tl.onset = fatal[0]
    tl.story = "checkpoint save on the replica-0 host(s) exhausts host memory; OOM kill; the job fails"


def thermal(tl: Timeline, case: Case, rng: random.Random) -> None:
    h, g = rng.randrange(len(case.hosts)), rng.choice(case.gpus)
    onset = frac(tl, rng, 0.3, 0.55)
    tl.ev["hot"], tl.ev["hot_host"], tl.ev["hot_gpu"] = onset, h, g
    tl.ev["hot_amp"] = rng.uniform(1.08, 1.22)
    tl.slow.append((onset + 150, tl.ev["hot_amp"]))
    _finish(tl, case, rng)
    tl.culprits, tl.onset = [(case.hosts[h], g)], onset
    tl.story = (
        f"GPU {g} of {case.hosts[h]} heats up, its SM clock drops, the job slows {tl.ev['hot_amp']:.2f}x"
    )


def rdma(tl: Timeline, case: Case, rng: random.Random) -> None:
    k = {"one": 1, "two": 2, "three": 3}[case.variant]
    idx = sorted(rng.sample(range(len(case.hosts)), k))
    onset = frac(tl, rng, 0.25, 0.5)
    tl.ev["rdma"], tl.ev["rdma_hosts"] = onset, float(sum(1 << i for i in idx))
    tl.slow.append((onset + 30, rng.uniform(1.12, 1.35)))
    _finish(tl, case, rng)
    tl.culprits, tl.onset = [(case.hosts[i], None) for i in idx], onset
    tl.story = (
        f"sustained RDMA retransmits on {', '.join(case.hosts[i] for i in idx)}; throughput down, no hang"
    )


def ghost(tl: Timeline, case: Case, rng: random.Random) -> None:
    h = rng.randrange(len(case.hosts))
    tl.ev["freeze"], tl.ev["freeze_host"] = frac(tl, rng, 0.3, 0.6), h
    _finish(tl, case, rng)
    tl.culprits, tl.onset = [(case.hosts[h], None)], tl.ev["freeze"]
    which = "dcgm-exporter" if case.variant == "dcgm" else "node_exporter"
    tl.story = f"{which} on {case.hosts[h]} serves frozen values; training is fine"


def driver(tl: Timeline, case: Case, rng: random.Random) -> None:
    h, g = rng.randrange(len(case.hosts)), rng.choice(case.gpus)
    tl.ev["driver"], tl.ev["drv_host"], tl.ev["drv_gpu"] = frac(tl, rng, 0.25, 0.5), h, g
    _finish(tl, case, rng)
    tl.culprits, tl.onset = [(case.hosts[h], g)], tl.ev["driver"]
    tl.story = f"driver errors (Xid 119 GSP timeouts) on {case.hosts[h]}: scrape timeouts and gaps, training unaffected"


def hardware(tl: Timeline, case: Case, rng: random.Random) -> None:
    h, g = rng.randrange(len(case.hosts)), rng.choice(case.gpus)
    at = frac(tl, rng, 0.4, 0.65)
    tl.ev["hw"], tl.ev["hw_host"], tl.ev["hw_gpu"] = at, h, g
    crash = at + (rng.uniform(150, 360) if case.variant == "remap" else rng.uniform(20, 90))
    run_steps(tl, case, rng, crash, {})
    tl.crash, tl.end, tl.exit = crash, crash + rng.uniform(20, 90), "failed"
    tl.culprits, tl.onset = [(case.hosts[h], g)], at
    tl.story = {
        "xid48": f"double-bit ECC (Xid 48) on GPU {g} of {case.hosts[h]}, the rank crashes",
        "remap": f"uncorrectable row remap (Xid 63) then Xid 48 on GPU {g} of {case.hosts[h]}, crash",
        "xid79_gpu": f"GPU {g} of {case.hosts[h]} falls off the bus (Xid 79); the host keeps reporting",
    }[case.variant]


def instability(tl: Timeline, case: Case, rng: random.Random) -> None:
    at = frac(tl, rng, 0.35, 0.6)
    spec = {"at": at, "kind": case.variant, "rate": rng.uniform(0.02, 0.08), "nan_after": rng.uniform(1, 3)}
    stop = tl.t1 - rng.uniform(1.5, 4) * 60
    run_steps(tl, case, rng, stop, spec)
    tl.end = tl.steps[-1].end + rng.uniform(5, 30)
    tl.exit = "failed" if case.variant == "nan" else "cancelled"
    tl.ev["instab"] = at
    first = next(s.end for s in tl.steps if s.end >= at)
    tl.onset = first
    tl.story = {
        "nan": "loss and grad norm blow up then go NaN; the trainer aborts, GPUs go idle",
        "diverge": "loss diverges (grad norm x10-100); skipped steps change the GPUs' load; job cancelled",
        "grad_spike": "grad-norm spike then loss divergence; system metrics follow; job cancelled",
    }[case.variant]


STORIES = {
    "healthy": healthy,
    "collective-hang": collective_hang,
    "network-hang": network_hang,
    "node-death": node_death,
    "heartbeat-false-positive": heartbeat_fp,
    "host-oom": host_oom,
    "thermal-straggler": thermal,
    "rdma-degradation": rdma,
    "monitoring-ghost-data": ghost,
    "gpu-driver-fault": driver,
    "gpu-hardware-fault": hardware,
    "training-instability": instability,
    "restore-resource-leak": healthy,
}


def story(case: Case) -> Timeline:
    """The case's timeline with its class's story applied."""
    rng = random.Random(case.seed)
    tl = base_timeline(case, rng)
    if case.role == "b":
        tl.first_step = case.seed % 7 * 100 + 200
    STORIES[case.cls](tl, case, rng)
    return tl
