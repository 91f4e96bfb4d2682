"""What each scenario's incident does to the simulated signals, and who it names as culprits.

One function per scenario, in `EFFECTS`; each changes the arrays of a `Sim` in place. The draws from
`s.rng` stay in the order they always had, so a seed's job is byte-identical to what it was.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import _variants, _variants_apply, _variants_thermal
from ._sim_plan import TIB, GpuFault
from ._sim_state import Sim


def _collective_hang(s: Sim) -> None:
    job, rng, g, ch = s.job, s.rng, s.gpu, s.inc.host
    K, G, N = job.nodes, job.gpus, s.grid.n
    if "pre_step" in job.variants:
        _variants_apply.pre_step_hang(job, g.util, g.power, s.grid.hang, job.gpu.idle_w)
        return
    if rng.random() < 0.5 and K > 2:
        stuck = rng.choice(G, size=int(rng.integers(2, max(3, G - 1))), replace=False)
        hmask = s.grid.hang
        g.util[ch, stuck] = np.where(hmask, rng.uniform(0, 2, (len(stuck), N)), g.util[ch, stuck])
        g.power[ch, stuck] = np.where(
            hmask, job.gpu.idle_w * rng.uniform(0.98, 1.02, (len(stuck), N)), g.power[ch, stuck]
        )
        job.culprits = [{"host": job.hosts[ch], "gpu": None}]
        job.notes.append(f"{len(stuck)} GPUs of {job.hosts[ch]} never entered the collective")
    else:
        job.notes.append("uniform deadlock: every GPU busy-waits; no origin host")
    if "noisy_spin" in job.variants:
        _variants_apply.noisy_spin(job, g.util, s.grid.hang)


def _network_hang(s: Sim) -> None:
    job, rng, t, nic = s.job, s.rng, s.grid.t, s.nic
    D, N = nic.retx.shape[1], s.grid.n
    nh = [s.inc.host]
    assert job.stall_time is not None, "a hang ending sets stall_time (plan above)"
    burst = (t >= s.inc.onset) & (t < job.stall_time + float(rng.uniform(60, 240)))
    for h in nh:
        devs = rng.choice(D, size=int(rng.integers(1, 3)), replace=False)
        for d in devs:
            nic.retx[h, d] = np.where(burst, rng.uniform(200, 2500, N), nic.retx[h, d])
            nic.ack[h, d] = np.where(burst, rng.uniform(2, 25, N), nic.ack[h, d])
        tcp = s.host.tcp_rate
        tcp[h] = np.where(burst, tcp[h] + rng.uniform(50, 400, N), tcp[h])
    job.culprits = [{"host": job.hosts[h], "gpu": None} for h in nh]


def _node_death(s: Sim) -> None:
    job, rng, g, ch, cg = s.job, s.rng, s.gpu, s.inc.host, s.inc.gpu
    death = s.inc.onset
    dead = s.grid.t >= death
    if rng.random() < 0.6:
        s.host.present[ch] = ~dead
        job.notes.append(f"{job.hosts[ch]}: exporter stops answering at the death")
    else:
        for arr in (g.power, g.util, g.clock):
            arr[ch] = np.where(dead, 0.0, arr[ch])
        s.host.gpu_procs[ch] = np.where(dead, 0.0, s.host.gpu_procs[ch])
        job.notes.append(f"{job.hosts[ch]}: GPUs at 0 W / 0 % after the death")
    job.culprits = [{"host": job.hosts[ch], "gpu": None}]
    job.accused_tasks = [ch]
    if "errors_before_death" in job.variants:
        t_err = death - job.variants["errors_before_death"]
        job.predeath = GpuFault(host=ch, gpu=cg, t=t_err)
        job.onset = t_err
        job.notes.append(f"{job.hosts[ch]} GPU {cg}: Xid 79 and kernel errors from the onset, silent later")
    if "remap_before_death" in job.variants:
        job.preremap = GpuFault(host=ch, gpu=cg, t=death - job.variants["remap_before_death"])
        job.onset = job.preremap.t
        job.notes.append(f"{job.hosts[ch]} GPU {cg}: one row remapped at the onset, silent later")


def _heartbeat_false_positive(s: Sim) -> None:
    job, rng, K = s.job, s.rng, s.job.nodes
    n_acc = int(rng.integers(1, min(4, K)))
    acc = sorted({int(x) for x in rng.choice(np.arange(1, K), size=n_acc, replace=False)}) if K > 1 else [0]
    job.accused_tasks = acc
    job.culprits = []
    if "hb_net_blip" in job.variants:
        _variants_apply.hb_net_blip(job, s.nic.retx, s.nic.ack, s.grid.t, acc[0], s.inc.onset)
    job.notes.append(
        "accused hosts trained at full power until the kill: " + ", ".join(job.hosts[a] for a in acc)
    )


def _host_oom(s: Sim) -> None:
    job, rng, t, hs, g = s.job, s.rng, s.grid.t, s.host, s.gpu
    K, N = job.nodes, s.grid.n
    assert job.oom is not None, "the host-oom timeline sets the kill (_sim._oom_kill)"
    info, rep0, mem = job.oom, hs.rep0, hs.mem
    h = int(rng.integers(0, max(1, int(rep0.sum()))))
    h = h if h != 0 or K == 1 else (1 if rep0.sum() > 1 else 0)
    ramp = (t >= info["ramp_start"]) & (t < info["kill"])
    frac = np.clip((t - info["ramp_start"]) / max(1.0, info["kill"] - info["ramp_start"]), 0, 1)
    if "staircase" in job.variants:
        _variants_apply.staircase(job, mem, h, t, info["ramp_start"])
    mem[h] = np.where(ramp, mem[h] + (2 * TIB * 0.999 - mem[h]) * frac, mem[h])
    mem[h] = np.where(t >= info["kill"], 2 * TIB * rng.uniform(0.08, 0.1), mem[h])
    hs.oom_rate[h] = np.where((t >= info["kill"]) & (t < info["kill"] + job.interval), 1.0 / job.interval, 0)
    dead = t >= info["kill"]
    g.power[h] = np.where(dead[None, :], job.gpu.idle_w, g.power[h])
    g.util[h] = np.where(dead[None, :], 0.0, g.util[h])
    hs.blocked[h] = np.where(ramp, hs.blocked[h] + rng.integers(15, 40, N), hs.blocked[h])
    job.culprits = [{"host": job.hosts[h], "gpu": None}]
    job.oom_host = h


def _thermal_straggler(s: Sim) -> None:
    job, rng, g, ch, cg = s.job, s.rng, s.gpu, s.inc.host, s.inc.gpu
    ramp = float(s.inc.slow.ramp)
    rise = float(rng.uniform(22, 32))
    if "faint_heat" in job.variants or "settled_heat" in job.variants:
        rise, settle = _variants_thermal.faint_heat(job, g.temp)
        ramp = settle or ramp
    frac = np.clip((s.grid.t - s.inc.onset) / ramp, 0, 1) * s.grid.training
    g.temp[ch, cg] = g.temp[ch, cg] + rise * frac
    g.clock[ch, cg] = g.clock[ch, cg] * (1 - float(rng.uniform(0.2, 0.35)) * np.clip(frac * 1.5 - 0.3, 0, 1))
    g.power[ch, cg] = g.power[ch, cg] * (1 - 0.15 * frac)
    if "capped_rack" in job.variants:
        _variants_apply.capped_rack(job, g.temp, g.clock, g.power, ch)
    if "cooling_drop" in job.variants:
        _variants_apply.cooling_drop(job, g.temp, s.grid.t, s.inc.onset)
    job.culprits = [{"host": job.hosts[ch], "gpu": str(cg)}]


def _rdma_degradation(s: Sim) -> None:
    job, rng, nic, K = s.job, s.rng, s.nic, s.job.nodes
    D, N = nic.retx.shape[1], s.grid.n
    n_bad = int(rng.integers(1, min(3, K - 1) + 1)) if K > 2 else 1
    bad = sorted({int(x) for x in rng.choice(np.arange(1, K), size=n_bad, replace=False)}) if K > 1 else [0]
    if job.variants.get("majority_degraded"):
        bad = _variants_apply.majority_degraded(job, bad)
    on = (s.grid.t >= s.inc.onset) & s.grid.training
    for j, h in enumerate(bad):
        d = int(rng.integers(0, D))
        nic.retx[h, d] = np.where(on, rng.uniform(80, 600, N), nic.retx[h, d])
        nic.ack[h, d] = np.where(on, rng.uniform(0.3, 4, N), nic.ack[h, d])
        nic.cnp[h, d] = np.where(on, nic.cnp[h, d] + rng.uniform(5, 40, N), nic.cnp[h, d])
        if j == 0 and rng.random() < 0.4:
            nic.retry_excd[h, d] = np.where(on, rng.uniform(0.01, 0.2, N), 0)
    job.culprits = [{"host": job.hosts[h], "gpu": None} for h in bad]


def _restore_resource_leak(s: Sim) -> None:
    job, rng, hs = s.job, s.rng, s.host
    if job.restored_from is None:  # the fresh-start baseline is healthy
        return
    K, N = job.nodes, s.grid.n
    extra = float(rng.uniform(15, 19))
    # leak_at_launch: the threads come up with the processes, minutes before the restore and the first step
    since = job.start if "leak_at_launch" in job.opt_in else job.train_start
    hs.running = np.where(
        (s.grid.t >= since)[None, :], hs.running + extra + rng.normal(0, 0.6, (K, N)), hs.running
    )
    job.notes.append(f"+{extra:.1f} runnable threads per host after the restore")
    job.culprits = []


def _monitoring_ghost_data(s: Sim) -> None:
    job, ch = s.job, s.inc.host
    job.frozen_from[ch] = int(np.searchsorted(s.grid.t, s.inc.onset))
    if "short_freeze" in job.variants:
        job.frozen_from[ch], job.frozen_to[ch] = _variants_apply.short_freeze(job, s.grid.t, s.inc.onset)
    if "node_freeze" in job.variants:
        job.notes.append("the node_exporter froze, not the GPU exporter")
    job.culprits = [{"host": job.hosts[ch], "gpu": None}]


def _gpu_driver_fault(s: Sim) -> None:
    job, rng, hs, ch, N = s.job, s.rng, s.host, s.inc.host, s.grid.n
    on = s.grid.t >= s.inc.onset
    if "xid_stretch" in job.variants:
        # the GSP stops answering once: one stretch of timed-out scrapes, Xid 119 in DCGM's gauge, no dmesg count
        secs, gpu = job.variants["xid_stretch"]
        win = on & (s.grid.t < s.inc.onset + secs)
        hs.timeouts[ch] = win
        hs.scrape[ch] = np.where(win, 12.0, hs.scrape[ch])
        hs.gpu_present[ch] = ~win
        job.driver_xid = GpuFault(host=ch, gpu=int(gpu), t=s.inc.onset)
        job.culprits = [{"host": job.hosts[ch], "gpu": str(gpu)}]  # the Xid names the GPU
        return
    if "late_driver" in job.variants:
        _late_driver(s, on)
        return
    hs.timeouts[ch] = on & (rng.random(N) < 0.45)
    hs.scrape[ch] = np.where(hs.timeouts[ch], rng.uniform(11.9, 12.3, N), hs.scrape[ch])
    hs.gpu_present[ch] = ~hs.timeouts[ch]
    inc = (on & (rng.random(N) < 0.12)).astype(float) * rng.integers(1, 6, N)
    hs.dmesg[ch] = inc
    job.culprits = [{"host": job.hosts[ch], "gpu": None}]


def _late_driver(s: Sim, on: np.ndarray) -> None:
    """`late_driver`: from the onset to the data's end every scrape of the host's GPU exporter is slow
    (6.5-9.9 s) and a share of them fail outright (no sample, `up` 0); Xid 119 on one GPU, no dmesg count."""
    job, hs, ch, N = s.job, s.host, s.inc.host, s.grid.n
    _, gpu, share = job.variants["late_driver"]
    r = _variants.stream(job, 50)
    failed = on & (r.random(N) < share)
    hs.timeouts[ch] = on & ~failed
    hs.scrape[ch] = np.where(on, r.uniform(6.5, 9.9, N), hs.scrape[ch])
    hs.gpu_present[ch] &= ~failed
    job.gpu_down = np.zeros(hs.timeouts.shape, bool)
    job.gpu_down[ch] = failed
    job.driver_xid = GpuFault(host=ch, gpu=int(gpu), t=s.inc.onset)
    job.culprits = [{"host": job.hosts[ch], "gpu": str(gpu)}]


def _gpu_hardware_fault(s: Sim) -> None:
    job, g, ch, cg = s.job, s.gpu, s.inc.host, s.inc.gpu
    job.hwfault = GpuFault(host=ch, gpu=cg, t=s.inc.onset)
    g.power[ch, cg] = np.where(s.grid.after_crash, job.gpu.idle_w * 0.9, g.power[ch, cg])
    job.culprits = [{"host": job.hosts[ch], "gpu": str(cg)}]


def _training_instability(s: Sim) -> None:
    job, rng, g, slow = s.job, s.rng, s.gpu, s.inc.slow
    assert slow.t0 is not None and slow.until is not None, "the instability's slowdown has a start and an end"
    on = (s.grid.t >= slow.t0) & (s.grid.t <= slow.until) & s.grid.training
    weak = rng.choice(job.gpus, size=max(1, job.gpus // 4), replace=False)
    for h in range(job.nodes):
        g.util[h, weak] = np.where(
            on, g.util[h, weak] - rng.uniform(10, 25, (len(weak), s.grid.n)), g.util[h, weak]
        )
        g.power[h, weak] = np.where(on, g.power[h, weak] * 0.88, g.power[h, weak])
    job.culprits = []


#: scenario name -> what its incident does (healthy has none)
EFFECTS: dict[str, Callable[[Sim], None]] = {
    "collective-hang": _collective_hang,
    "network-hang": _network_hang,
    "node-death": _node_death,
    "heartbeat-false-positive": _heartbeat_false_positive,
    "host-oom": _host_oom,
    "thermal-straggler": _thermal_straggler,
    "rdma-degradation": _rdma_degradation,
    "restore-resource-leak": _restore_resource_leak,
    "monitoring-ghost-data": _monitoring_ghost_data,
    "gpu-driver-fault": _gpu_driver_fault,
    "gpu-hardware-fault": _gpu_hardware_fault,
    "training-instability": _training_instability,
}


def apply(s: Sim) -> None:
    """Apply the job's scenario to its signals."""
    effect = EFFECTS.get(s.job.scenario.name)
    if effect is not None:
        effect(s)
