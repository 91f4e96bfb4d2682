"""Corpus D: one story per class. `prepare` sets the plan before the timeline is walked; `apply` edits
the simulated state, sets the truth (culprits, onset as an offset) and returns the log's events."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from bench.outside._d_sim import Sim
from bench.outside._d_timeline import GONE, IDLE, Plan, simulate

Event = tuple[float, int | None, str, dict]


def _hang_end(p: Plan) -> None:
    p.after_stop = "busy"
    if p.log_style == "glog":  # nobody's watchdog: the user cancels after a while
        p.busy_for = p.rng.uniform(900, 1500)
        p.status, p.exit_code = "cancelled", 143
    else:
        p.busy_for = 600 + p.rng.uniform(5, 20)
        p.status, p.exit_code = "failed", 1
    p.busy_for = min(p.busy_for, p.dur - (p.stop_at or p.setup_s) - 90)


def prep_hang(p: Plan) -> None:
    p.stop_at = p.dur * p.rng.uniform(0.45, 0.7)
    if p.extra.get("pre_step"):
        p.pre_step_hang, p.stop_at = True, p.setup_s
    _hang_end(p)


def _end_events(sim: Sim, stall: float, skip: list[int]) -> list[Event]:
    p = sim.plan
    if p.log_style == "glog":
        return [(sim.tl.job_end - 1, None, "scancel", {})]
    return [(min(stall + 600 + 1, sim.tl.job_end - 4), None, "watchdog", {"skip": skip})]


def apply_collective(sim: Sim) -> list[Event]:
    p, rng = sim.plan, sim.plan.rng
    odd = rng.randrange(len(p.hosts))
    variant = rng.choice(["all", "none", "subset"]) if not p.pre_step_hang else rng.choice(["subset", "none"])
    if p.pre_step_hang and rng.random() < 0.5:  # a pipeline pattern: only some indices spin everywhere
        common = sorted(rng.sample(range(p.gpus), 3))
        sim.spin[:, :] = False
        sim.spin[:, common] = True
        p.story.append(f"every host spins GPUs {common}")
    if variant == "none":
        sim.spin[odd, :] = False
        p.story.append(f"{p.hosts[odd].name}'s GPUs never entered the collective (idle)")
    elif variant == "subset":
        sim.spin[odd, :] = False
        sim.spin[odd, sorted(rng.sample(range(p.gpus), 2))] = True
        p.story.append(f"{p.hosts[odd].name} spins a different set of GPUs")
    if variant != "all":
        p.culprits = [{"host": p.hosts[odd].name, "gpu": None}]
    if p.pre_step_hang:
        stall = p.setup_s + p.extra.get("first_compute", 40.0)
        p.onset = stall
        p.story.append("hang in the first collective, no step ever completed")
    else:
        stall = sim.tl.step_t[-1]
        p.onset = stall
        p.story.append(f"steps stop after step {sim.tl.step_n[-1]}; GPUs busy-wait")
    return _end_events(sim, stall, [odd] if variant == "none" else [])


def prep_network(p: Plan) -> None:
    prep_hang(p)
    p.extra["burst_lead"] = p.rng.uniform(60, 300)


def apply_network(sim: Sim) -> list[Event]:
    p, rng = sim.plan, sim.plan.rng
    stall = sim.tl.step_t[-1]
    k = rng.choice([1, 1, 2])
    bad = rng.sample(range(len(p.hosts)), k)
    start = stall - p.extra["burst_lead"]
    a, b = sim.tick(start), sim.tick(stall + 90)
    for h in bad:
        nic = rng.randrange(len(p.hosts[h].nics))
        sim.retx[h, nic, a:b] = sim.np.integers(150, 2500, b - a)
        sim.acktmo[h, nic, a:b] = sim.np.integers(3, 40, b - a)
    p.culprits = [{"host": p.hosts[h].name, "gpu": None} for h in bad]
    p.onset = sim.ticks[a]
    p.story.append(
        f"RDMA retransmits + ACK timeouts on {[p.hosts[h].name for h in bad]} {p.extra['burst_lead']:.0f} s before the stall"
    )
    return [(stall + 30, bad[0], "ib_error", {})] + _end_events(sim, stall, [])


def prep_death(p: Plan) -> None:
    p.stop_at = p.dur * p.rng.uniform(0.45, 0.75)
    p.after_stop = "busy"
    p.busy_for = p.rng.uniform(120, 400) if p.log_style != "k8s" else 610
    p.status, p.exit_code = "failed", 1


def apply_death(sim: Sim) -> list[Event]:
    p, rng = sim.plan, sim.plan.rng
    d = rng.randrange(1, len(p.hosts))
    death = p.stop_at or 0.0
    k = sim.tick(death)
    sim.code[d, k:] = GONE
    sim.node_up[d, k:] = 0
    sim.dcgm_up[d, k:] = 0
    p.onset = death
    p.culprits = [{"host": p.hosts[d].name, "gpu": None}]
    p.story.append(f"{p.hosts[d].name} goes silent (exporters unreachable)")
    if rng.random() < 0.5:
        g = rng.randrange(p.gpus)
        lead = rng.uniform(60, 240)
        e = sim.tick(death - lead)
        sim.xid[d, g, e:] = 79
        sim.pcie[d, g, e:k] = sim.np.integers(0, 30, k - e)
        p.onset = sim.ticks[e]
        p.culprits = [{"host": p.hosts[d].name, "gpu": str(g)}]
        p.story.append(f"Xid 79 + PCIe replays on GPU {g} {lead:.0f} s before")
    if p.log_style == "k8s":
        return [(min(death + 600 + 1, sim.tl.job_end - 4), None, "watchdog", {"skip": [d]})]
    return [(sim.tl.job_end - 2, d, "node_failure", {})]


def prep_heartbeat(p: Plan) -> None:
    p.log_style = "glog"
    p.hb_timeout = p.rng.choice([300, 600, 900])
    p.stop_at = p.dur * p.rng.uniform(0.55, 0.85)
    p.status, p.exit_code = "failed", 1


def apply_heartbeat(sim: Sim) -> list[Event]:
    p, rng = sim.plan, sim.plan.rng
    accused = sorted(rng.sample(range(1, len(p.hosts)), rng.choice([1, 2, 3])))
    crash = (p.stop_at or 0.0) + 1
    p.onset = crash - p.hb_timeout
    p.story.append(
        f"coordinator kills for missed heartbeats: {[p.hosts[a].name for a in accused]} trained normally"
    )
    return [(crash, 0, "heartbeat", {"accused": accused})]


def prep_oom(p: Plan) -> None:
    p.extra["save_gib"] = 0
    p.ckpt_period = max(40, int(p.dur * 0.14 / p.step_s))
    tl = simulate(p)
    saves = [s for s in tl.saves if s[0] > p.dur * 0.35]
    fatal = saves[min(len(saves) - 1, 1)] if saves else tl.saves[-1]
    p.extra["fatal"] = fatal
    p.stop_at = fatal[0] + (fatal[1] - fatal[0]) * p.rng.uniform(0.5, 0.8)
    p.status, p.exit_code = "failed", 137


def apply_oom(sim: Sim) -> list[Event]:
    p, rng = sim.plan, sim.plan.rng
    gib = 1024.0**3
    writers = list(range(max(1, len(p.hosts) // 8)))
    killed = rng.choice(writers)
    kill = p.stop_at or 0.0
    fatal_start = p.extra["fatal"][0]
    room = 2015.5 - 215 - 40  # about what the job leaves free on a writer
    saves = [s for s in sim.tl.saves if s[0] < fatal_start] + [(fatal_start, kill, -1)]
    for h in writers:
        retained, share = 0.0, (1.0 if h == killed else rng.uniform(0.8, 0.9))
        step = room * 0.28 * share
        for a, b, _ in saves:
            ka, kb = sim.tick(a), sim.tick(b)
            last = b == kill
            peak = room * 1.02 if (last and h == killed) else retained + step * 2.0
            if ka < kb:
                sim.mem_add[h, ka:kb] = np.linspace(retained, peak, kb - ka) * gib
            retained += step
            sim.mem_add[h, kb:] = retained * gib
    kk = sim.tick(kill)
    sim.mem_add[killed, kk:] = 0
    sim.oom[killed, kk] = 1
    p.onset = fatal_start
    p.culprits = [{"host": p.hosts[killed].name, "gpu": None}]
    p.story.append(
        f"checkpoint saves retain memory on replica-0 writers; {p.hosts[killed].name} OOM-killed in the last save"
    )
    return [(kill + 2, killed, "oom", {})]


def prep_thermal(p: Plan) -> None:
    on = p.dur * p.rng.uniform(0.3, 0.55)
    ramp = p.rng.uniform(360, 900)
    p.extra["thermal"] = (on, ramp)
    p.slow = [(on + ramp * 0.5, p.rng.uniform(1.15, 1.3))]


def apply_thermal(sim: Sim) -> list[Event]:
    p, rng = sim.plan, sim.plan.rng
    on, ramp = p.extra["thermal"]
    h, g = rng.randrange(len(p.hosts)), rng.randrange(p.gpus)
    x = np.clip((sim.ticks - on) / ramp, 0, 1)
    rise = rng.uniform(18, 24)
    sim.temp_add[h, g] = rise * x
    sim.clock_mul[h, g] = 1 - 0.3 * np.clip((x - 0.4) / 0.6, 0, 1)
    p.onset = on
    p.culprits = [{"host": p.hosts[h].name, "gpu": str(g)}]
    p.story.append(f"GPU {g} of {p.hosts[h].name} heats +{rise:.0f} C over {ramp:.0f} s, clock -30 %")
    return []


def prep_rdma(p: Plan) -> None:
    on = p.dur * p.rng.uniform(0.3, 0.6)
    p.extra["rdma_on"] = on
    p.slow = [(on, p.rng.uniform(1.2, 1.32))]


def apply_rdma(sim: Sim) -> list[Event]:
    p, rng = sim.plan, sim.plan.rng
    on = p.extra["rdma_on"]
    bad = rng.sample(range(len(p.hosts)), rng.choice([1, 2]))
    a = sim.tick(on)
    for h in bad:
        nic = rng.randrange(len(p.hosts[h].nics))
        sim.retx[h, nic, a:] = sim.np.integers(300, 3000, sim.T - a)
        sim.acktmo[h, nic, a:] = sim.np.integers(0, 8, sim.T - a)
    p.onset = sim.ticks[a]
    p.culprits = [{"host": p.hosts[h].name, "gpu": None} for h in bad]
    p.story.append(f"sustained RDMA retransmits on {[p.hosts[h].name for h in bad]}, step time up")
    return []


def _one_host(sim: Sim, lo: float, hi: float) -> tuple[int, int]:
    """A culprit host and the tick its trouble starts (a share of the data between lo and hi)."""
    p, rng = sim.plan, sim.plan.rng
    h = rng.randrange(len(p.hosts))
    a = sim.tick(p.dur * rng.uniform(lo, hi))
    p.onset = sim.ticks[a]
    p.culprits = [{"host": p.hosts[h].name, "gpu": None}]
    return h, a


def apply_ghost(sim: Sim) -> list[Event]:
    p, rng = sim.plan, sim.plan.rng
    h, a = _one_host(sim, 0.3, 0.6)
    which = rng.choice(["dcgm", "dcgm", "node"])
    sim.frozen[(which, h)] = a
    p.story.append(f"{which} exporter on {p.hosts[h].name} serves frozen values while training goes on")
    return []


def apply_driver(sim: Sim) -> list[Event]:
    p, rng = sim.plan, sim.plan.rng
    h, a = _one_host(sim, 0.25, 0.55)
    slow = sim.np.random(sim.T - a) < rng.uniform(0.3, 0.5)
    slow[0] = True
    sim.dcgm_up[h, a:] = np.where(slow, 0.0, 1.0)
    sim.dcgm_dur[h, a:] = 2 + 6 * sim.np.random(sim.T - a)
    p.story.append(
        f"DCGM on {p.hosts[h].name} times out intermittently (driver calls hang), training unaffected"
    )
    return []


def prep_hardware(p: Plan) -> None:
    p.stop_at = p.dur * p.rng.uniform(0.45, 0.8)
    p.status, p.exit_code = "failed", 1


def apply_hardware(sim: Sim) -> list[Event]:
    p, rng = sim.plan, sim.plan.rng
    h, g = rng.randrange(len(p.hosts)), rng.randrange(p.gpus)
    t = (p.stop_at or 0.0) - rng.uniform(2, 12)
    k = sim.tick(t)
    xid = rng.choice([48, 95, 79])
    sim.xid[h, g, k:] = xid
    sim.unc_rows[h, g, k] = 1 if xid != 79 else 0
    if xid == 79:
        sim.code[h, k:] = IDLE
    p.onset = sim.ticks[k]
    p.culprits = [{"host": p.hosts[h].name, "gpu": str(g)}]
    p.story.append(f"Xid {xid} on GPU {g} of {p.hosts[h].name}; the trainer aborts; the host keeps reporting")
    return [((p.stop_at or 0.0) + 2, h, "cuda_ecc", {"gpu": g})]


def prep_instability(p: Plan) -> None:
    on = p.dur * p.rng.uniform(0.4, 0.6)
    first = int((on - p.setup_s) / (p.step_s * 1.03))
    p.extra["div_step"] = first
    p.extra["loss_add"] = lambda s, f=first: 0.0 if s < f else 0.05 * (s - f) ** 1.25
    p.slow = [(on + 200, 1.12)]
    p.stop_at = on + p.rng.uniform(420, 700)
    p.status, p.exit_code = "failed", 1


def apply_instability(sim: Sim) -> list[Event]:
    p = sim.plan
    f = p.extra["div_step"]
    idx = next((i for i, n in enumerate(sim.tl.step_n) if n >= f), len(sim.tl.step_n) - 1)
    p.onset = sim.tl.step_t[idx]
    a = sim.tick(p.onset + 180)
    busy = sim.code[:, a:] != IDLE
    sim.clock_mul[:, :, a:] *= np.where(
        busy[:, None, :], 1 - 0.04 * sim.np.random((sim.H, sim.G, sim.T - a)), 1
    )
    p.story.append(f"loss diverges from step {f}, NaN, trainer stops")
    return [((p.stop_at or 0.0) - 4, 0, "nan", {"step": sim.tl.step_n[-1]})]


def _none(p: Plan) -> None:
    return None


def _quiet(sim: Sim) -> list[Event]:
    return []


STORIES: dict[str, tuple[str, Callable[[Plan], None], Callable[[Sim], list[Event]]]] = {
    "healthy": ("none", _none, _quiet),
    "collective-hang": ("collective", prep_hang, apply_collective),
    "network-hang": ("network-rdma", prep_network, apply_network),
    "node-death": ("node", prep_death, apply_death),
    "heartbeat-false-positive": ("heartbeat", prep_heartbeat, apply_heartbeat),
    "host-oom": ("host-memory", prep_oom, apply_oom),
    "thermal-straggler": ("thermal", prep_thermal, apply_thermal),
    "rdma-degradation": ("network-rdma", prep_rdma, apply_rdma),
    "monitoring-ghost-data": ("monitoring", _none, apply_ghost),
    "gpu-driver-fault": ("gpu-driver", _none, apply_driver),
    "gpu-hardware-fault": ("gpu-hardware", prep_hardware, apply_hardware),
    "training-instability": ("training", prep_instability, apply_instability),
}
