"""Simulate one training job: its step timeline and every hardware/host/network signal on a time grid.

The simulation is deterministic for a seed. It produces plain numpy arrays; `_emit` turns them into
exporter series of a profile and `_log` into the job's log. The stages below draw from one random stream
in a fixed order (incident, steps, grid, GPU, host, NIC, red herrings, scenario, counters): a new draw
goes at the end of a stage's draws, or it changes every seed's job.
"""

from __future__ import annotations

import math

import numpy as np

from . import _sim_scenarios, _variants, _variants_apply, _variants_thermal
from ._sim_parts import (
    STEP_FIELDS,
    _gpu_counters,
    _instability,
    _lag,
    _ring,
    _simulate_steps,
    _tb_export,
    _truncate_steps,
)
from ._sim_plan import GIB, JAX_HB_DEFAULT, NAN, TIB, Job, plan
from ._sim_state import GpuSignals, Grid, HostSignals, Incident, NicSignals, Sim, Slowdown

__all__ = ["GIB", "NAN", "TIB", "Job", "plan", "simulate"]


def simulate(job: Job) -> Job:
    """Simulate the job's steps and signals in place and return it."""
    rng = np.random.default_rng([job.seed, 7, 0 if job.restored_from is None else 1])
    job.ckpt_extra = {}
    inc = _incident(job, rng)
    _run_steps(job, rng, inc)
    grid = _grid(job, rng)
    s = Sim(
        job=job,
        rng=rng,
        inc=inc,
        grid=grid,
        gpu=_gpu_signals(job, rng, grid, inc.slow),
        host=_host_signals(job, rng, grid),
        nic=_nic_signals(job, rng, grid),
    )
    big_h = _red_herrings(s)
    _sim_scenarios.apply(s)
    if "mixed_models" in job.variants:
        _variants_apply.mixed_models(job, s.gpu.power, s.inc.host)
    if "near_limit_save" in job.variants:
        _variants_apply.near_limit_save(job, s.host.mem, s.host.rep0, grid.t)
    if "hot_host" in job.variants:
        # a thermal straggler's own host, or any host of a healthy job
        warm = (
            s.inc.host
            if job.scenario.name == "thermal-straggler"
            else int(_variants.stream(job, 26).integers(job.nodes))
        )
        _variants_apply.hot_host(job, s.gpu.temp, grid.training, grid.t, warm)
    if "missed_dip" in job.variants:
        _variants_thermal.missed_dip(job, s.gpu.temp, grid.t, grid.training)
    if "exporter_stall" in job.variants:
        if "stall_in_dip" in job.opt_in:
            secs = job.variants["exporter_stall"][0]
            _variants_apply.cooling_drop(
                job, s.gpu.temp, grid.t, _variants_apply.stall_start(job), hold=secs + 60.0
            )
        hs = s.host
        _variants_apply.exporter_stall(job, hs.timeouts, hs.scrape, hs.gpu_present, grid.t)
    if "restart_at_end" in job.variants:
        _variants_apply.restart_at_end(job, s.host.gpu_present, grid.t)
    if "culprit_stall" in job.variants:
        secs, into = job.variants["culprit_stall"]
        at = (s.inc.host, s.inc.onset + into * float(s.inc.slow.ramp), secs)
        _variants_apply.exporter_stall(job, s.host.timeouts, s.host.scrape, s.host.gpu_present, grid.t, at)
    if "late_host" in job.variants:
        _variants_thermal.late_host(job, s.gpu, grid.t, grid.training, s.inc)
    _store(s, big_h)
    _gpu_counters(job, rng, (job.nodes, job.gpus, grid.n))
    _variants_apply.late_exporter(job, s.host.present)
    job.present = s.host.present
    job.gpu_present = s.host.gpu_present & s.host.present
    job.scrape_timeout_mask = s.host.timeouts
    if "scrape_blips" in job.variants:
        _variants_apply.scrape_blips(job)
    _tb_export(job, rng)
    return job


# ------------------------------------------------------------------------------------------ timeline


def _incident(job: Job, rng: np.random.Generator) -> Incident:
    """Draw the culprit, the onset, the variants, how the job ends and how much it slows down."""
    K, G = job.nodes, job.gpus
    train_window = job.job_end - job.train_start
    culprit_h = int(rng.integers(1, K)) if K > 1 else 0  # never the head: it carries the tb_* bridge
    culprit_g = int(rng.integers(0, G))
    onset_frac = float(rng.uniform(0.35, 0.65))
    onset = job.train_start + onset_frac * train_window
    job.variants = _variants.choose(job)
    _variants_thermal.choose(job, job.variants)
    _ending(job, rng, onset)
    if "late_driver" in job.variants:  # the fault starts minutes before the data ends
        onset = job.job_end - float(job.variants["late_driver"][0])
    return Incident(host=culprit_h, gpu=culprit_g, onset=onset, slow=_slowdown(job, rng, onset))


def _ending(job: Job, rng: np.random.Generator, onset: float) -> None:
    """Set when the job stalls, crashes and ends."""
    sc = job.scenario
    if sc.ending == "hang":
        job.stall_time = onset
        if sc.name == "network-hang":
            job.stall_time = onset + float(rng.uniform(90, 300))
        if "pre_step" in job.variants:
            job.stall_time = job.train_start + job.variants["pre_step"]
        hang_len = float(rng.uniform(1500, 2700))
        job.job_end = min(job.job_end, job.stall_time + hang_len)
        job.job_end = max(job.job_end, job.stall_time + 1200)
        if "heartbeat_kill" in job.variants:
            job.hb_timeout, stop, job.accused_tasks = job.variants["heartbeat_kill"]
            job.crash_time = job.stall_time + stop + job.hb_timeout
            job.job_end = job.crash_time + float(rng.uniform(60, 180))
            return
        if "watchdog_kill" in job.variants:
            wd, after = job.variants["watchdog_kill"]
            job.crash_time = job.stall_time + wd
            job.job_end = job.crash_time + after
            return
    elif sc.name == "heartbeat-false-positive":
        job.hb_timeout = JAX_HB_DEFAULT if "hb_default" in job.variants else job.hb_timeout
        job.crash_time = onset + job.hb_timeout
        job.stall_time = job.crash_time
    elif sc.name == "node-death":
        job.stall_time = onset + float(rng.uniform(2, 20))
        job.crash_time = onset + job.hb_timeout + float(rng.uniform(5, 40))
        if "long_wait" in job.variants:
            job.crash_time = onset + job.variants["long_wait"]
    elif sc.name == "gpu-hardware-fault":
        job.crash_time = onset + float(rng.uniform(40, 300))
        job.stall_time = job.crash_time
    if job.crash_time is not None:
        job.job_end = job.crash_time + float(rng.uniform(60, 180))
    if "error_at_end" in job.variants:
        job.crash_time = job.stall_time = onset + min(15.0, 0.5 * job.variants["error_at_end"])
        job.job_end = onset + job.variants["error_at_end"]
    if "death_at_end" in job.variants:
        job.job_end = onset + job.variants["death_at_end"]  # the capture ends; the job (and its log) go on
    if "capture_after_end" in job.variants:
        # the run completes and its processes exit; the capture goes on with the job's GPUs idle
        job.stall_time = job.crash_time = job.job_end - job.variants["capture_after_end"]


def _slowdown(job: Job, rng: np.random.Generator, onset: float) -> Slowdown:
    """Return how the scenario stretches step times (no slowdown for most)."""
    name = job.scenario.name
    if name == "thermal-straggler":
        factor, ramp = float(rng.uniform(1.08, 1.16)), float(rng.uniform(600, 1200))
        return Slowdown(t0=onset, factor=factor, ramp=float(job.variants.get("slow_heating", ramp)))
    if name == "rdma-degradation":
        return Slowdown(t0=onset, factor=float(rng.uniform(1.2, 1.33)), ramp=120.0)
    if name == "restore-resource-leak" and job.restored_from is not None:
        return Slowdown(t0=job.train_start, factor=float(rng.uniform(1.009, 1.014)), ramp=1.0)
    if name == "training-instability":
        t0 = onset + float(rng.uniform(180, 420))
        # the system follows the training metrics for a while, then recovers with them
        return Slowdown(
            t0=t0,
            factor=float(rng.uniform(1.1, 1.2)),
            ramp=300.0,
            until=min(t0 + float(rng.uniform(900, 1500)), job.job_end - 900.0),
        )
    return Slowdown()


def _run_steps(job: Job, rng: np.random.Generator, inc: Incident) -> None:
    """Simulate the steps, cut them where the job stops, and set the onset and the configured step count."""
    sc, onset = job.scenario, inc.onset
    _simulate_steps(job, rng, inc.slow)
    if job.steps_limit is not None and job.last_step == job.steps_limit - 1:
        job.job_end = float(job.step_end[-1]) + float(rng.uniform(40, 120))
    if sc.name == "host-oom":
        _oom_kill(job, rng, onset)
    elif job.stall_time is not None:
        _truncate_steps(job, job.step_end <= job.stall_time)

    if "elastic_restart" in job.variants:
        _variants_apply.elastic_restart(job, onset, STEP_FIELDS)
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
        if "smooth_divergence" in job.variants:
            _variants_apply.smooth_divergence(job, i0)
        else:
            _instability(job, rng, i0)
        if "nan_stop" in job.variants or "nan_traceback" in job.variants:
            _variants_apply.nan_stop(job, i0, STEP_FIELDS, rng, at_once="nan_traceback" in job.variants)
        elif "climb_to_nan" in job.variants or "blowup_traceback" in job.variants:
            steps, factor = job.variants.get("climb_to_nan") or job.variants["blowup_traceback"]
            climb = np.arange(len(job.step_num)) - i0 + 1
            job.loss = job.loss * np.where(climb > 0, factor ** np.clip(climb, 0, None), 1.0)
            at_once = "blowup_traceback" in job.variants
            _variants_apply.nan_stop(job, i0 + steps, STEP_FIELDS, rng, at_once=at_once)

    # steps config: complete jobs ran all their steps; others meant to go further.
    last = job.last_step if job.last_step is not None else 0
    if sc.ending == "complete" and not _variants_apply.NAN_ENDINGS & set(job.variants):
        job.steps_total = last + 1
    else:
        job.steps_total = int(math.ceil((last + 1) * float(rng.uniform(1.4, 2.2)) / 100.0) * 100)
    job.passthrough["steps"] = str(job.steps_total)


def _oom_kill(job: Job, rng: np.random.Generator, onset: float) -> None:
    """host-oom: memory ramps from the end of the first checkpoint after the onset until the kernel kills."""
    fatal = [c for c in job.ckpt_steps if job.step_end[c - job.first_step] >= onset]
    c = fatal[0] if fatal else job.ckpt_steps[-1]
    i = c - job.first_step
    ramp_start = float(job.step_end[i])
    kill = ramp_start + float(rng.uniform(50, 160))
    job.onset = ramp_start
    job.crash_time = kill + float(rng.uniform(30, 240))  # NCCL timeout on the survivors
    job.stall_time = kill
    job.job_end = job.crash_time + float(rng.uniform(60, 150))
    _truncate_steps(job, job.step_end <= kill)
    job.oom = {"ramp_start": ramp_start, "kill": kill}


# ------------------------------------------------------------------------------------------ grid


def _grid(job: Job, rng: np.random.Generator) -> Grid:
    """Lay the time grid and mark training, hang, crash and checkpoint windows on it."""
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
        extra = job.ckpt_extra.get(c, 30.0)
        ckpt_gpu_wait |= (t >= t0) & (t < t0 + extra)
        ckpt_win |= (t >= t0) & (t < t0 + extra + float(rng.uniform(60, 240)))
    job.warm_end = (
        float(job.step_end[min(5, len(job.step_end) - 1)]) if len(job.step_end) else job.train_start
    )
    return Grid(t, training, hang, after_crash, ckpt_win, ckpt_gpu_wait)


# ------------------------------------------------------------------------------------------ signals


def _gpu_signals(job: Job, rng: np.random.Generator, grid: Grid, slowdown: Slowdown) -> GpuSignals:
    """GPU utilisation, power, temperature, clock and memory through setup, training, saves, hang and end."""
    t, K, G, N = grid.t, job.nodes, job.gpus, grid.n
    gm = job.gpu
    # per-GPU static offsets: silicon lottery and cooling position
    p_off = rng.normal(0, 0.025, (K, G))
    t_off = rng.normal(0, 2.0, (K, G)) + rng.normal(0, 1.5, (K, 1))
    shape = (K, G, N)
    util = np.zeros(shape)
    power = np.full(shape, gm.idle_w) * (1 + p_off[..., None] * 0.3)
    train_b = grid.training[None, None, :]
    # setup phase: brief compile activity
    compile_ = (t >= job.train_start - 240) & (t < job.train_start)
    util = np.where(compile_[None, None, :], 35.0, util)
    power = np.where(compile_[None, None, :], gm.idle_w + 0.25 * (gm.active_w - gm.idle_w), power)
    act_noise = rng.normal(0, 0.02, shape)
    active_p = gm.active_w * (1 + p_off[..., None] + act_noise)
    power = np.where(train_b, active_p, power)
    util = np.where(train_b, np.clip(rng.normal(97.5, 1.5, shape), 85, 100), util)
    # during a synchronous checkpoint save the GPUs wait
    wait_b = (grid.ckpt_gpu_wait & grid.training)[None, None, :]
    power = np.where(wait_b, gm.busy_wait_w * (1 + rng.normal(0, 0.02, shape)), power)
    util = np.where(wait_b, np.clip(rng.normal(60, 15, shape), 0, 100), util)
    # hang: busy-wait at high utilisation, near-idle power
    hang_b = grid.hang[None, None, :]
    power = np.where(hang_b, gm.busy_wait_w * (1 + rng.normal(0, 0.015, shape)), power)
    util = np.where(hang_b, np.clip(rng.normal(99.2, 0.6, shape), 95, 100), util)
    idle_b = _idle(job, grid)[None, None, :]
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
    return GpuSignals(util=util, power=power, temp=temp, clock=clock, vram=vram)


def _idle(job: Job, grid: Grid) -> np.ndarray:
    """After the crash and in the job's last 30 s the GPUs idle (not when the capture ends before the job)."""
    if "death_at_end" in job.variants:
        return grid.after_crash
    return grid.after_crash | (grid.t >= job.job_end - 30)


def _host_signals(job: Job, rng: np.random.Generator, grid: Grid) -> HostSignals:
    """Host memory, pressure, page cache, threads, CPU and TCP: checkpoint writers differ from the rest."""
    t, K, G, N = grid.t, job.nodes, job.gpus, grid.n
    train = grid.training[None, :]
    rep0 = np.arange(K) < max(1, K // job.replicas)  # DP replica #0 hosts write the checkpoint
    mem_total = np.full((K, 1), 2 * TIB) * np.ones((1, N))
    steady = np.where(rep0, rng.uniform(0.62, 0.68, K), rng.uniform(0.09, 0.12, K))[:, None]
    mem = np.where((t >= job.train_start - 300)[None, :], steady, 0.04) * 2 * TIB
    mem = mem * (1 + rng.normal(0, 0.003, (K, N)))
    ck = grid.ckpt_win[None, :] & rep0[:, None]
    mem = np.where(ck, mem + 2 * TIB * rng.uniform(0.05, 0.09, (K, 1)), mem)
    io_full = np.clip(rng.normal(0.3, 0.3, (K, N)), 0, None)
    io_full = np.where(ck, rng.uniform(35, 80, (K, N)), io_full)
    io_full = np.where(grid.ckpt_win[None, :] & ~rep0[:, None], io_full + rng.uniform(0, 8, (K, N)), io_full)
    io_some = np.clip(io_full * 1.3 + rng.normal(1, 0.5, (K, N)), 0, 100)
    dirty = np.where(ck, rng.uniform(2, 12, (K, N)) * GIB, rng.uniform(0.05, 0.4, (K, N)) * GIB)
    writeback = np.where(ck, rng.uniform(0.5, 4, (K, N)) * GIB, rng.uniform(0, 0.02, (K, N)) * GIB)
    blocked = np.where(ck, rng.integers(10, 22, (K, N)), rng.integers(0, 3, (K, N))).astype(float)
    running = np.where(train, rng.integers(6, 14, (K, N)), rng.integers(1, 4, (K, N))).astype(float)
    running = np.where(grid.hang[None, :], rng.integers(8, 14, (K, N)), running)
    if "host_background" in job.variants:
        _variants_apply.host_background(job, running, t >= job.train_start - 300)
    cpu_util = np.where(train, rng.uniform(18, 30, (K, N)), rng.uniform(1, 4, (K, N)))
    ctx_rate = np.where(train, rng.uniform(2e4, 6e4, (K, N)), rng.uniform(3e3, 6e3, (K, N)))
    tcp_rate = np.abs(rng.normal(0.4, 0.4, (K, N)))
    tcp_rate = np.where(ck, rng.uniform(500, 3000, (K, N)), tcp_rate)  # NFS on checkpoint writers
    scrape = np.clip(rng.normal(0.11, 0.02, (K, N)), 0.05, None)
    zeros = np.zeros((K, N))
    gpu_procs = np.where(
        (t >= job.train_start - 240)[None, :] & ~grid.after_crash[None, :], float(G), 0.0
    ) * np.ones((K, 1))
    return HostSignals(
        rep0=rep0,
        mem=mem,
        mem_total=mem_total,
        io_full=io_full,
        io_some=io_some,
        dirty=dirty,
        writeback=writeback,
        blocked=blocked,
        running=running,
        cpu_util=cpu_util,
        ctx_rate=ctx_rate,
        tcp_rate=tcp_rate,
        scrape=scrape,
        dmesg=zeros.copy(),
        oom_rate=zeros.copy(),
        listen_drop_rate=zeros.copy(),
        abort_rate=zeros.copy(),
        net_err=zeros.copy(),
        gpu_procs=gpu_procs,
        present=np.ones((K, N), bool),
        gpu_present=np.ones((K, N), bool),
        timeouts=np.zeros((K, N), bool),
    )


def _nic_signals(job: Job, rng: np.random.Generator, grid: Grid) -> NicSignals:
    """RDMA bandwidth, retransmits, ACK timeouts and congestion notices, with the background trickle."""
    K, N = job.nodes, grid.n
    D = min(job.gpus, 8)
    nshape = (K, D, N)
    train = grid.training[None, None, :]
    rdma_bw = np.where(train, rng.uniform(8e9, 12e9, nshape), rng.uniform(1e5, 1e6, nshape))
    retx = np.abs(rng.normal(0, 0.02, nshape)) * (rng.random(nshape) < 0.01)
    ack = np.zeros(nshape)
    trickle_retx, trickle_ack = _variants_apply.rdma_trickle(job, K, D, N)
    retx, ack = retx + trickle_retx, ack + trickle_ack
    cnp = np.where(train, np.abs(rng.normal(0.5, 0.5, nshape)), 0.0)
    return NicSignals(
        rdma_bw=rdma_bw,
        retx=retx,
        ack=ack,
        cnp=cnp,
        retry_excd=np.zeros(nshape),
        cqe=np.zeros(nshape),
        port=np.ones(nshape),
    )


def _red_herrings(s: Sim) -> list[int]:
    """Every job's red herrings: a host with high TCP retransmits but clean RDMA, large static counters.

    Returns the hosts with large lifetime counters (they do not grow in the job window)."""
    job, rng, K = s.job, s.rng, s.job.nodes
    noisy = int(rng.integers(0, K)) if K > 2 else 0
    if K > 2 and noisy == s.inc.host:
        noisy = (s.inc.host + 1) % K
    s.host.tcp_rate[noisy] += rng.uniform(25, 180, s.grid.n)
    job.red_herrings["high_tcp_clean_rdma_host"] = job.hosts[noisy]
    big_h = [int(x) for x in rng.choice(K, size=min(K, 2), replace=False)]
    job.red_herrings["large_static_counters"] = [job.hosts[h] for h in big_h]
    return big_h


def _store(s: Sim, big_h: list[int]) -> None:
    """Put the signals on the job: gauges as they are, rates as the exporters' cumulative counters."""
    job, rng, g, hs, nic = s.job, s.rng, s.gpu, s.host, s.nic
    K, D = job.nodes, nic.retx.shape[1]
    running_b = (s.grid.training | s.grid.hang)[None, None, :]
    gm = job.gpu
    job.gpu_sig = {
        "power": g.power,
        "temp": g.temp,
        "sclk": g.clock,
        "mclk": np.where(running_b, gm.mem_clock_mhz, gm.mem_clock_mhz * 0.5) * np.ones(g.power.shape),
        "util": g.util,
        "vram_used": g.vram,
        "vram_total": np.full(g.power.shape, gm.vram_bytes),
    }
    job.host_sig = {
        "mem_used": hs.mem,
        "mem_total": hs.mem_total,
        "dirty": hs.dirty,
        "writeback": hs.writeback,
        "io_full": hs.io_full,
        "io_some": hs.io_some,
        "blocked": hs.blocked,
        "running": hs.running,
        "cpu_util": hs.cpu_util,
        "scrape": hs.scrape,
        "gpu_procs": hs.gpu_procs,
    }

    def cum(rate: np.ndarray, base0: np.ndarray | float) -> np.ndarray:
        return base0 + np.cumsum(rate * job.interval, axis=-1)

    big = np.zeros((K, 1))
    big[big_h] = rng.uniform(1e5, 5e6, (len(big_h), 1))
    job.host_sig.update(
        {
            "tcp_retrans": np.floor(cum(hs.tcp_rate, rng.uniform(1e6, 4e7, (K, 1)))),
            "ctx": np.floor(cum(hs.ctx_rate, rng.uniform(1e9, 9e10, (K, 1)))),
            "oom": np.floor(cum(hs.oom_rate, np.where(np.arange(K)[:, None] == big_h[0], 2.0, 0.0))),
            "listen_drops": np.floor(cum(hs.listen_drop_rate, rng.integers(0, 30, (K, 1)).astype(float))),
            "tcp_abort": np.floor(cum(hs.abort_rate, rng.integers(0, 500, (K, 1)).astype(float))),
            "dmesg": _ring(np.cumsum(hs.dmesg, axis=-1)),
            "net_rx_err": np.floor(cum(hs.net_err, 0.0)),
        }
    )
    job.nic_sig = {
        "retx": np.floor(cum(nic.retx, big[:, :, None] * np.ones((1, D, 1)))),
        "ack": np.floor(cum(nic.ack, (big[:, :, None] / 2000) * np.ones((1, D, 1)))),
        "cnp": np.floor(cum(nic.cnp, rng.uniform(1e3, 1e6, (K, D, 1)))),
        "retry_excd": np.floor(cum(nic.retry_excd, 0.0)),
        "cqe": np.floor(cum(nic.cqe, 0.0)),
        "tx_bytes": np.floor(cum(nic.rdma_bw, rng.uniform(1e12, 1e14, (K, D, 1)))),
        "port": nic.port,
    }
