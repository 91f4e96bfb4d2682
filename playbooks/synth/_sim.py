"""Simulate one training job: its step timeline and every hardware/host/network signal on a time grid.

The simulation is deterministic for a seed. It produces plain numpy arrays; `_emit` turns them into
exporter series of a profile and `_log` into the job's log.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _variants
from ._sim_parts import (
    _gpu_counters,
    _instability,
    _lag,
    _ring,
    _simulate_steps,
    _tb_export,
    _truncate_steps,
)
from ._sim_plan import GIB, NAN, TIB, Job, plan

__all__ = ["GIB", "NAN", "TIB", "Job", "plan", "simulate"]


# ------------------------------------------------------------------------------------------ simulate


def simulate(job: Job) -> Job:
    """Simulate the job's steps and signals in place and return it."""
    sc = job.scenario
    rng = np.random.default_rng([job.seed, 7, 0 if job.restored_from is None else 1])
    K, G = job.nodes, job.gpus
    job._ckpt_extra = {}  # type: ignore[attr-defined]
    train_window = job.job_end - job.train_start
    culprit_h = int(rng.integers(1, K)) if K > 1 else 0  # never the head: it carries the tb_* bridge
    culprit_g = int(rng.integers(0, G))
    onset_frac = float(rng.uniform(0.35, 0.65))
    onset = job.train_start + onset_frac * train_window
    slow: dict[str, Any] = {"t0": None, "factor": 1.0, "ramp": 1.0, "until": None}

    job.variants = _variants.choose(job)
    if sc.ending == "hang":
        job.stall_time = onset
        if sc.name == "network-hang":
            job.stall_time = onset + float(rng.uniform(90, 300))
        if "pre_step" in job.variants:
            job.stall_time = job.train_start + job.variants["pre_step"]
        hang_len = float(rng.uniform(1500, 2700))
        job.job_end = min(job.job_end, job.stall_time + hang_len)
        job.job_end = max(job.job_end, job.stall_time + 1200)
    elif sc.name == "heartbeat-false-positive":
        job.crash_time = onset + job.hb_timeout
        job.stall_time = job.crash_time
    elif sc.name == "node-death":
        job.stall_time = onset + float(rng.uniform(2, 20))
        job.crash_time = onset + job.hb_timeout + float(rng.uniform(5, 40))
    elif sc.name == "gpu-hardware-fault":
        job.crash_time = onset + float(rng.uniform(40, 300))
        job.stall_time = job.crash_time
    if job.crash_time is not None:
        job.job_end = job.crash_time + float(rng.uniform(60, 180))
    if "error_at_end" in job.variants:
        job.crash_time = job.stall_time = onset + min(15.0, 0.5 * job.variants["error_at_end"])
        job.job_end = onset + job.variants["error_at_end"]

    if sc.name == "thermal-straggler":
        slow.update(t0=onset, factor=float(rng.uniform(1.08, 1.16)), ramp=float(rng.uniform(600, 1200)))
    elif sc.name == "rdma-degradation":
        slow.update(t0=onset, factor=float(rng.uniform(1.2, 1.33)), ramp=120.0)
    elif sc.name == "restore-resource-leak" and job.restored_from is not None:
        slow.update(t0=job.train_start, factor=float(rng.uniform(1.009, 1.014)), ramp=1.0)
    elif sc.name == "training-instability":
        t0 = onset + float(rng.uniform(180, 420))
        # the system follows the training metrics for a while, then recovers with them
        slow.update(
            t0=t0,
            factor=float(rng.uniform(1.1, 1.2)),
            ramp=300.0,
            until=min(t0 + float(rng.uniform(900, 1500)), job.job_end - 900.0),
        )

    def slowdown(t: float) -> float:
        if slow["t0"] is None or t < slow["t0"]:
            return 1.0
        if slow.get("until") is not None and t > slow["until"]:
            return 1.0
        frac = min(1.0, (t - slow["t0"]) / slow["ramp"])
        factor: float = 1.0 + (slow["factor"] - 1.0) * frac
        return factor

    # host-oom: the fatal checkpoint is the first one after the planned onset.
    _simulate_steps(job, rng, slowdown)
    if job.steps_limit is not None and job.last_step == job.steps_limit - 1:
        job.job_end = float(job.step_end[-1]) + float(rng.uniform(40, 120))
    if sc.name == "host-oom":
        fatal = [c for c in job.ckpt_steps if job.step_end[c - job.first_step] >= onset]
        c = fatal[0] if fatal else job.ckpt_steps[-1]
        i = c - job.first_step
        ramp_start = float(job.step_end[i])
        kill = ramp_start + float(rng.uniform(50, 160))
        job.onset = ramp_start
        job.crash_time = kill + float(rng.uniform(30, 240))  # NCCL timeout on the survivors
        job.stall_time = kill
        job.job_end = job.crash_time + float(rng.uniform(60, 150))
        keep = job.step_end <= kill
        _truncate_steps(job, keep)
        job._oom = {"ramp_start": ramp_start, "kill": kill}  # type: ignore[attr-defined]
    elif job.stall_time is not None:
        _truncate_steps(job, job.step_end <= job.stall_time)

    if job.onset is None and sc.klass != "healthy":
        job.onset = onset
    if sc.name == "collective-hang":
        job.onset = float(job.step_end[-1]) if len(job.step_end) else job.stall_time
    if sc.name == "restore-resource-leak":
        job.onset = job.train_start if job.restored_from is not None else None
    if sc.name == "training-instability":
        # The instability starts at the first step that completes after the planned onset.
        i0 = int(np.searchsorted(job.step_end, onset))
        job.onset = float(job.step_end[max(0, i0 - 1)]) if i0 else float(job.step_end[0])
        _instability(job, rng, i0)

    # steps config: complete jobs ran all their steps; others meant to go further.
    last = job.last_step if job.last_step is not None else 0
    if sc.ending == "complete":
        job.steps_total = last + 1
    else:
        job.steps_total = int(math.ceil((last + 1) * float(rng.uniform(1.4, 2.2)) / 100.0) * 100)
    job.passthrough["steps"] = str(job.steps_total)

    # ----------------------------------------------------------------------------------- grid
    t = np.arange(job.start, job.job_end + 1e-6, job.interval)
    job.t = t
    N = len(t)
    training = (t >= job.train_start) & (t < (job.stall_time if job.stall_time is not None else job.job_end))
    if len(job.step_end) == 0:
        training[:] = False
    hang = np.zeros(N, bool)
    if job.stall_time is not None:
        end_hang = job.crash_time if job.crash_time is not None else job.job_end
        hang = (t >= job.stall_time) & (t < end_hang)
    after_crash = np.zeros(N, bool) if job.crash_time is None else t >= job.crash_time

    # checkpoint save windows: from the end of step C for ckpt_extra + some writeback time
    ckpt_win = np.zeros(N, bool)
    ckpt_gpu_wait = np.zeros(N, bool)
    for c in job.ckpt_steps:
        i = c - job.first_step
        if i < 0 or i >= len(job.step_end):
            continue
        t0 = job.step_end[i]
        extra = job._ckpt_extra.get(c, 30.0)  # type: ignore[attr-defined]
        ckpt_gpu_wait |= (t >= t0) & (t < t0 + extra)
        ckpt_win |= (t >= t0) & (t < t0 + extra + float(rng.uniform(60, 240)))
    warm_end = float(job.step_end[min(5, len(job.step_end) - 1)]) if len(job.step_end) else job.train_start
    job._warm_end = warm_end  # type: ignore[attr-defined]
    job._ckpt_win = ckpt_win  # type: ignore[attr-defined]

    gm = job.gpu
    # per-GPU static offsets: silicon lottery and cooling position
    p_off = rng.normal(0, 0.025, (K, G))
    t_off = rng.normal(0, 2.0, (K, G)) + rng.normal(0, 1.5, (K, 1))
    shape = (K, G, N)
    util = np.zeros(shape)
    power = np.full(shape, gm.idle_w) * (1 + p_off[..., None] * 0.3)
    train_b = training[None, None, :]
    # setup phase: brief compile activity
    compile_ = (t >= job.train_start - 240) & (t < job.train_start)
    util = np.where(compile_[None, None, :], 35.0, util)
    power = np.where(compile_[None, None, :], gm.idle_w + 0.25 * (gm.active_w - gm.idle_w), power)
    act_noise = rng.normal(0, 0.02, shape)
    active_p = gm.active_w * (1 + p_off[..., None] + act_noise)
    power = np.where(train_b, active_p, power)
    util = np.where(train_b, np.clip(rng.normal(97.5, 1.5, shape), 85, 100), util)
    # during a synchronous checkpoint save the GPUs wait
    wait_b = (ckpt_gpu_wait & training)[None, None, :]
    power = np.where(wait_b, gm.busy_wait_w * (1 + rng.normal(0, 0.02, shape)), power)
    util = np.where(wait_b, np.clip(rng.normal(60, 15, shape), 0, 100), util)
    # hang: busy-wait at high utilisation, near-idle power
    hang_b = hang[None, None, :]
    power = np.where(hang_b, gm.busy_wait_w * (1 + rng.normal(0, 0.015, shape)), power)
    util = np.where(hang_b, np.clip(rng.normal(99.2, 0.6, shape), 95, 100), util)
    idle_b = after_crash[None, None, :] | (t >= job.job_end - 30)[None, None, :]
    power = np.where(idle_b, gm.idle_w * (1 + rng.normal(0, 0.01, shape)), power)
    util = np.where(idle_b, 0.0, util)
    # slowdown lowers everyone's power a little (GPUs wait on the slowest)
    sd = np.array([slowdown(x) for x in t])
    power = np.where(train_b, gm.busy_wait_w + (power - gm.busy_wait_w) / sd[None, None, :], power)

    temp = (
        gm.temp_idle_c
        + t_off[..., None]
        + (gm.temp_active_c - gm.temp_idle_c) * ((power - gm.idle_w) / (gm.active_w - gm.idle_w)).clip(0, 1.1)
    )
    temp = _lag(temp, 0.35) + rng.normal(0, 0.4, shape)
    clock = np.where(train_b | hang_b, gm.clock_mhz, gm.clock_mhz * 0.35)
    clock = clock + rng.normal(0, 6, shape)
    vram = np.where(
        (t >= job.train_start - 240)[None, None, :] & ~idle_b,
        gm.vram_bytes * rng.uniform(0.80, 0.92, (K, G, 1)),
        gm.vram_bytes * 0.003,
    )

    # ------------------------------------------------------------------------------ host signals
    rep0 = np.arange(K) < max(1, K // job.replicas)  # DP replica #0 hosts write the checkpoint
    job._rep0 = rep0  # type: ignore[attr-defined]
    mem_total = np.full((K, 1), 2 * TIB) * np.ones((1, N))
    steady = np.where(rep0, rng.uniform(0.62, 0.68, K), rng.uniform(0.09, 0.12, K))[:, None]
    mem = np.where((t >= job.train_start - 300)[None, :], steady, 0.04) * 2 * TIB
    mem = mem * (1 + rng.normal(0, 0.003, (K, N)))
    ck = ckpt_win[None, :] & rep0[:, None]
    mem = np.where(ck, mem + 2 * TIB * rng.uniform(0.05, 0.09, (K, 1)), mem)
    io_full = np.clip(rng.normal(0.3, 0.3, (K, N)), 0, None)
    io_full = np.where(ck, rng.uniform(35, 80, (K, N)), io_full)
    io_full = np.where(ckpt_win[None, :] & ~rep0[:, None], io_full + rng.uniform(0, 8, (K, N)), io_full)
    io_some = np.clip(io_full * 1.3 + rng.normal(1, 0.5, (K, N)), 0, 100)
    dirty = np.where(ck, rng.uniform(2, 12, (K, N)) * GIB, rng.uniform(0.05, 0.4, (K, N)) * GIB)
    writeback = np.where(ck, rng.uniform(0.5, 4, (K, N)) * GIB, rng.uniform(0, 0.02, (K, N)) * GIB)
    blocked = np.where(ck, rng.integers(10, 22, (K, N)), rng.integers(0, 3, (K, N))).astype(float)
    running = np.where(train_b[0], rng.integers(6, 14, (K, N)), rng.integers(1, 4, (K, N))).astype(float)
    running = np.where(hang[None, :], rng.integers(8, 14, (K, N)), running)
    if "host_background" in job.variants:
        _variants.host_background(job, running, t >= job.train_start - 300)
    cpu_util = np.where(train_b[0], rng.uniform(18, 30, (K, N)), rng.uniform(1, 4, (K, N)))
    ctx_rate = np.where(train_b[0], rng.uniform(2e4, 6e4, (K, N)), rng.uniform(3e3, 6e3, (K, N)))
    tcp_rate = np.abs(rng.normal(0.4, 0.4, (K, N)))
    tcp_rate = np.where(ck, rng.uniform(500, 3000, (K, N)), tcp_rate)  # NFS on checkpoint writers
    scrape = np.clip(rng.normal(0.11, 0.02, (K, N)), 0.05, None)
    dmesg = np.zeros((K, N))
    oom_rate = np.zeros((K, N))
    listen_drop_rate = np.zeros((K, N))
    abort_rate = np.zeros((K, N))
    gpu_procs = np.where(
        (t >= job.train_start - 240)[None, :] & ~after_crash[None, :], float(G), 0.0
    ) * np.ones((K, 1))

    D = min(G, 8)
    nshape = (K, D, N)
    rdma_bw = np.where(train_b[0][None], rng.uniform(8e9, 12e9, nshape), rng.uniform(1e5, 1e6, nshape))
    retx = np.abs(rng.normal(0, 0.02, nshape)) * (rng.random(nshape) < 0.01)
    ack = np.zeros(nshape)
    trickle_retx, trickle_ack = _variants.rdma_trickle(job, K, D, N)
    retx, ack = retx + trickle_retx, ack + trickle_ack
    cnp = np.where(train_b[0][None], np.abs(rng.normal(0.5, 0.5, nshape)), 0.0)
    retry_excd = np.zeros(nshape)
    cqe = np.zeros(nshape)
    port = np.ones(nshape)
    net_err = np.zeros((K, N))

    present = np.ones((K, N), bool)
    gpu_present = np.ones((K, N), bool)
    timeouts = np.zeros((K, N), bool)

    # red herrings, every job: a host with high TCP retransmits but clean RDMA
    noisy = int(rng.integers(0, K)) if K > 2 else 0
    if K > 2 and noisy == culprit_h:
        noisy = (culprit_h + 1) % K
    tcp_rate[noisy] += rng.uniform(25, 180, N)
    job.red_herrings["high_tcp_clean_rdma_host"] = job.hosts[noisy]
    # large lifetime counters that do not grow in the job window
    big_h = [int(x) for x in rng.choice(K, size=min(K, 2), replace=False)]
    job.red_herrings["large_static_counters"] = [job.hosts[h] for h in big_h]

    # ------------------------------------------------------------------------------ scenarios
    ch, cg = culprit_h, culprit_g
    name = sc.name
    if name == "collective-hang" and "pre_step" in job.variants:
        _variants.pre_step_hang(job, util, power, hang, gm.idle_w)
    elif name == "collective-hang":
        if rng.random() < 0.5 and K > 2:
            stuck = rng.choice(G, size=int(rng.integers(2, max(3, G - 1))), replace=False)
            hmask = hang
            util[ch, stuck] = np.where(hmask, rng.uniform(0, 2, (len(stuck), N)), util[ch, stuck])
            power[ch, stuck] = np.where(
                hmask, gm.idle_w * rng.uniform(0.98, 1.02, (len(stuck), N)), power[ch, stuck]
            )
            job.culprits = [{"host": job.hosts[ch], "gpu": None}]
            job.notes.append(f"{len(stuck)} GPUs of {job.hosts[ch]} never entered the collective")
        else:
            job.notes.append("uniform deadlock: every GPU busy-waits; no origin host")
    elif name == "network-hang":
        nh = [ch]
        assert job.stall_time is not None, "a hang ending sets stall_time (plan above)"
        burst = (t >= onset) & (t < job.stall_time + float(rng.uniform(60, 240)))
        for h in nh:
            devs = rng.choice(D, size=int(rng.integers(1, 3)), replace=False)
            for d in devs:
                retx[h, d] = np.where(burst, rng.uniform(200, 2500, N), retx[h, d])
                ack[h, d] = np.where(burst, rng.uniform(2, 25, N), ack[h, d])
            tcp_rate[h] = np.where(burst, tcp_rate[h] + rng.uniform(50, 400, N), tcp_rate[h])
        job.culprits = [{"host": job.hosts[h], "gpu": None} for h in nh]
    elif name == "node-death":
        death = onset
        dead = t >= death
        if rng.random() < 0.6:
            present[ch] = ~dead
            job.notes.append(f"{job.hosts[ch]}: exporter stops answering at the death")
        else:
            power[ch] = np.where(dead, 0.0, power[ch])
            util[ch] = np.where(dead, 0.0, util[ch])
            clock[ch] = np.where(dead, 0.0, clock[ch])
            gpu_procs[ch] = np.where(dead, 0.0, gpu_procs[ch])
            job.notes.append(f"{job.hosts[ch]}: GPUs at 0 W / 0 % after the death")
        job.culprits = [{"host": job.hosts[ch], "gpu": None}]
        job.accused_tasks = [ch]
        if "errors_before_death" in job.variants:
            t_err = death - job.variants["errors_before_death"]
            job._predeath = {"host": ch, "gpu": cg, "t": t_err, "until": death}  # type: ignore[attr-defined]
            job.onset = t_err
            job.notes.append(
                f"{job.hosts[ch]} GPU {cg}: Xid 79 and kernel errors from the onset, silent later"
            )
    elif name == "heartbeat-false-positive":
        n_acc = int(rng.integers(1, min(4, K)))
        acc = (
            sorted({int(x) for x in rng.choice(np.arange(1, K), size=n_acc, replace=False)}) if K > 1 else [0]
        )
        job.accused_tasks = acc
        job.culprits = []
        job.notes.append(
            "accused hosts trained at full power until the kill: " + ", ".join(job.hosts[a] for a in acc)
        )
    elif name == "host-oom":
        info = job._oom  # type: ignore[attr-defined]
        h = int(rng.integers(0, max(1, int(rep0.sum()))))
        h = h if h != 0 or K == 1 else (1 if rep0.sum() > 1 else 0)
        ramp = (t >= info["ramp_start"]) & (t < info["kill"])
        frac = np.clip((t - info["ramp_start"]) / max(1.0, info["kill"] - info["ramp_start"]), 0, 1)
        if "staircase" in job.variants:
            _variants.staircase(job, mem, h, t, info["ramp_start"])
        mem[h] = np.where(ramp, mem[h] + (2 * TIB * 0.999 - mem[h]) * frac, mem[h])
        mem[h] = np.where(t >= info["kill"], 2 * TIB * rng.uniform(0.08, 0.1), mem[h])
        oom_rate[h] = np.where((t >= info["kill"]) & (t < info["kill"] + job.interval), 1.0 / job.interval, 0)
        dead = t >= info["kill"]
        power[h] = np.where(dead[None, :], gm.idle_w, power[h])
        util[h] = np.where(dead[None, :], 0.0, util[h])
        blocked[h] = np.where(ramp, blocked[h] + rng.integers(15, 40, N), blocked[h])
        job.culprits = [{"host": job.hosts[h], "gpu": None}]
        job._oom_host = h  # type: ignore[attr-defined]
    elif name == "thermal-straggler":
        ramp = float(slow["ramp"])
        frac = np.clip((t - onset) / ramp, 0, 1) * training
        rise = float(rng.uniform(22, 32))
        temp[ch, cg] = temp[ch, cg] + rise * frac
        clock[ch, cg] = clock[ch, cg] * (1 - float(rng.uniform(0.2, 0.35)) * np.clip(frac * 1.5 - 0.3, 0, 1))
        power[ch, cg] = power[ch, cg] * (1 - 0.15 * frac)
        job.culprits = [{"host": job.hosts[ch], "gpu": str(cg)}]
    elif name == "rdma-degradation":
        n_bad = int(rng.integers(1, min(3, K - 1) + 1)) if K > 2 else 1
        bad = (
            sorted({int(x) for x in rng.choice(np.arange(1, K), size=n_bad, replace=False)}) if K > 1 else [0]
        )
        if job.variants.get("majority_degraded"):
            bad = _variants.majority_degraded(job, bad)
        on = t >= onset
        for j, h in enumerate(bad):
            d = int(rng.integers(0, D))
            retx[h, d] = np.where(on & training, rng.uniform(80, 600, N), retx[h, d])
            ack[h, d] = np.where(on & training, rng.uniform(0.3, 4, N), ack[h, d])
            cnp[h, d] = np.where(on & training, cnp[h, d] + rng.uniform(5, 40, N), cnp[h, d])
            if j == 0 and rng.random() < 0.4:
                retry_excd[h, d] = np.where(on & training, rng.uniform(0.01, 0.2, N), 0)
        job.culprits = [{"host": job.hosts[h], "gpu": None} for h in bad]
    elif name == "restore-resource-leak" and job.restored_from is not None:
        extra = float(rng.uniform(15, 19))
        running = np.where(
            (t >= job.train_start)[None, :], running + extra + rng.normal(0, 0.6, (K, N)), running
        )
        job.notes.append(f"+{extra:.1f} runnable threads per host after the restore")
        job.culprits = []
    elif name == "monitoring-ghost-data":
        job.frozen_from[ch] = int(np.searchsorted(t, onset))
        job.culprits = [{"host": job.hosts[ch], "gpu": None}]
    elif name == "gpu-driver-fault":
        on = t >= onset
        timeouts[ch] = on & (rng.random(N) < 0.45)
        scrape[ch] = np.where(timeouts[ch], rng.uniform(11.9, 12.3, N), scrape[ch])
        gpu_present[ch] = ~timeouts[ch]
        inc = (on & (rng.random(N) < 0.12)).astype(float) * rng.integers(1, 6, N)
        dmesg[ch] = inc
        job.culprits = [{"host": job.hosts[ch], "gpu": None}]
    elif name == "gpu-hardware-fault":
        job._hwfault = {"host": ch, "gpu": cg, "t": onset}  # type: ignore[attr-defined]
        dead = after_crash
        power[ch, cg] = np.where(dead, gm.idle_w * 0.9, power[ch, cg])
        job.culprits = [{"host": job.hosts[ch], "gpu": str(cg)}]
    elif name == "training-instability":
        lag0 = float(slow["t0"])
        on = (t >= lag0) & (t <= float(slow["until"])) & training
        weak = rng.choice(G, size=max(1, G // 4), replace=False)
        for h in range(K):
            util[h, weak] = np.where(on, util[h, weak] - rng.uniform(10, 25, (len(weak), N)), util[h, weak])
            power[h, weak] = np.where(on, power[h, weak] * 0.88, power[h, weak])
        job.culprits = []

    if "near_limit_save" in job.variants:
        _variants.near_limit_save(job, mem, rep0, t)
    # scrape timeouts also drop GPU samples
    job.gpu_sig = {
        "power": power,
        "temp": temp,
        "sclk": clock,
        "mclk": np.where(train_b | hang_b, gm.mem_clock_mhz, gm.mem_clock_mhz * 0.5) * np.ones(shape),
        "util": util,
        "vram_used": vram,
        "vram_total": np.full(shape, gm.vram_bytes),
    }
    job.host_sig = {
        "mem_used": mem,
        "mem_total": mem_total,
        "dirty": dirty,
        "writeback": writeback,
        "io_full": io_full,
        "io_some": io_some,
        "blocked": blocked,
        "running": running,
        "cpu_util": cpu_util,
        "scrape": scrape,
        "gpu_procs": gpu_procs,
    }

    def cum(rate: np.ndarray, base0: np.ndarray | float) -> np.ndarray:
        return base0 + np.cumsum(rate * job.interval, axis=-1)

    big = np.zeros((K, 1))
    big[big_h] = rng.uniform(1e5, 5e6, (len(big_h), 1))
    job.host_sig.update(
        {
            "tcp_retrans": np.floor(cum(tcp_rate, rng.uniform(1e6, 4e7, (K, 1)))),
            "ctx": np.floor(cum(ctx_rate, rng.uniform(1e9, 9e10, (K, 1)))),
            "oom": np.floor(cum(oom_rate, np.where(np.arange(K)[:, None] == big_h[0], 2.0, 0.0))),
            "listen_drops": np.floor(cum(listen_drop_rate, rng.integers(0, 30, (K, 1)).astype(float))),
            "tcp_abort": np.floor(cum(abort_rate, rng.integers(0, 500, (K, 1)).astype(float))),
            "dmesg": _ring(np.cumsum(dmesg, axis=-1)),
            "net_rx_err": np.floor(cum(net_err, 0.0)),
        }
    )
    job.nic_sig = {
        "retx": np.floor(cum(retx, big[:, :, None] * np.ones((1, D, 1)))),
        "ack": np.floor(cum(ack, (big[:, :, None] / 2000) * np.ones((1, D, 1)))),
        "cnp": np.floor(cum(cnp, rng.uniform(1e3, 1e6, (K, D, 1)))),
        "retry_excd": np.floor(cum(retry_excd, 0.0)),
        "cqe": np.floor(cum(cqe, 0.0)),
        "tx_bytes": np.floor(cum(rdma_bw, rng.uniform(1e12, 1e14, (K, D, 1)))),
        "port": port,
    }
    _gpu_counters(job, rng, shape)
    _variants.late_exporter(job, present)
    job.present = present
    job.gpu_present = gpu_present & present
    job.scrape_timeout_mask = timeouts
    _tb_export(job, rng)
    return job
