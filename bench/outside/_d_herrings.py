"""Corpus D: what real fleets show that is nobody's fault (applied to every case, drawn from the seed).

A Prometheus restart (every target missing 2-5 min), network blips dropping random scrapes, a rack
power-capped by design, a stale Xid in DCGM's gauge from before the job, old correctable remapped rows,
a host with high TCP retransmits but clean RDMA, a restarted DCGM pod (new IP and pod name), benign NCCL
warnings. They stay clear of the story's onset so that the truth stays true.
"""

from __future__ import annotations

from bench.outside._d_sim import Sim

Event = tuple[float, int | None, str, dict]


def _clear(sim: Sim, at: float, span: float) -> bool:
    """True when [at, at + span] stays 10 min away from the onset and the stall."""
    p = sim.plan
    marks = [m for m in (p.onset, p.stop_at) if m is not None]
    return all(abs(at - m) > 600 and abs(at + span - m) > 600 for m in marks)


def apply_herrings(sim: Sim) -> list[Event]:
    """Add the fleet's red herrings; returns the log events they print."""
    p, rng = sim.plan, sim.plan.rng
    events: list[Event] = []
    culprit_hosts = {c["host"] for c in p.culprits}
    free = [i for i, h in enumerate(p.hosts) if h.name not in culprit_hosts]
    if rng.random() < 0.4:
        span = rng.uniform(120, 300)
        for _ in range(10):
            at = rng.uniform(0.15, 0.9) * p.dur
            if _clear(sim, at, span):
                a, b = sim.tick(at), sim.tick(at + span)
                sim.dcgm_present[:, a:b] = False
                sim.node_present[:, a:b] = False
                sim.train_present[a:b] = False
                p.story.append(f"herring: Prometheus restarted, every target missing {span:.0f} s")
                break
    blips = sim.np.random((sim.H, sim.T)) < 0.004
    sim.node_up[blips] = 0
    blips = sim.np.random((sim.H, sim.T)) < 0.004
    sim.dcgm_up[blips] = 0
    if rng.random() < 0.3 and len(free) >= 6:
        start = rng.randrange(0, len(p.hosts) - 4)
        p.capped = [i for i in range(start, start + rng.choice([2, 4])) if i in free]
        p.story.append(f"herring: rack power-capped by design: {[p.hosts[i].name for i in p.capped]}")
    if rng.random() < 0.35 and free:
        h, g = rng.choice(free), rng.randrange(p.gpus)
        sim.xid[h, g, :] = rng.choice([13, 31, 43, 79])
        p.story.append(
            f"herring: stale Xid {int(sim.xid[h, g, 0])} on {p.hosts[h].name} GPU {g} from before the job"
        )
    if rng.random() < 0.4 and free:
        h, g = rng.choice(free), rng.randrange(p.gpus)
        sim.corr_rows[h, g, 0] = rng.randint(1, 3)
        p.story.append(f"herring: old correctable remapped rows on {p.hosts[h].name} GPU {g}")
    if rng.random() < 0.4 and free:
        h = rng.choice(free)
        sim.tcp_add[h, :] = rng.uniform(25, 80)
        p.story.append(f"herring: {p.hosts[h].name} high TCP retransmits, clean RDMA")
    if p.layout.style == "k8s" and rng.random() < 0.5 and free:
        h = rng.choice(free)
        at = rng.uniform(0.2, 0.85) * p.dur
        if _clear(sim, at, 60):
            k = sim.tick(at)
            sim.dcgm_epoch_at[h] = k
            sim.dcgm_present[h, k : k + 2] = False
            p.story.append(f"herring: DCGM pod on {p.hosts[h].name} restarted (new pod IP)")
    for task in rng.sample(range(len(p.hosts)), min(3, len(p.hosts))):
        events.append((p.setup_s + rng.uniform(0, 600), task, "benign", {}))
    return events
