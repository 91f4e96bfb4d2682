"""Simulate one training job: its step timeline and every hardware/host/network signal on a time grid.

The simulation is deterministic for a seed. It produces plain numpy arrays; `_emit` turns them into
exporter series of a profile and `_log` into the job's log.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import numpy as np

from . import _variants
from ._models import GPU_MODELS, HOST_SCHEMES, MODEL_NAMES, SCENARIO_TABLE, VENDOR_MODELS, GpuModel, Scenario

NAN = float("nan")
TIB = 1024.0**4
GIB = 1024.0**3


@dataclass
class Job:
    """Everything the generator decided about one job, plus its simulated signals.

    Attributes are filled by `simulate`; arrays are on the time grid `t` unless named `step_*`.
    """

    scenario: Scenario
    seed: int
    profile: str
    gpu: GpuModel
    hosts: list[str]
    gpus: int
    interval: float
    job_id: str
    job_name: str
    model_name: str
    moe: bool
    start: float
    setup_s: float
    passthrough: dict[str, str]
    config: dict[str, str]
    steps_total: int
    ckpt_period: int
    hb_timeout: int
    replicas: int
    first_step: int
    restored_from: int | None
    steps_limit: int | None = None
    # timeline
    train_start: float = 0.0
    job_end: float = 0.0
    stall_time: float | None = None
    crash_time: float | None = None
    onset: float | None = None
    culprits: list[dict] = field(default_factory=list)
    accused_tasks: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    red_herrings: dict = field(default_factory=dict)
    variants: dict = field(default_factory=dict)
    # steps (index i = i-th completed step of this run)
    step_num: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    step_end: np.ndarray = field(default_factory=lambda: np.zeros(0))
    step_secs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    loss: np.ndarray = field(default_factory=lambda: np.zeros(0))
    grad_norm: np.ndarray = field(default_factory=lambda: np.zeros(0))
    raw_grad_norm: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lr: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tgs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tflops_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    moe_lb: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tb_exported: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    fills: list[tuple[float, int]] = field(default_factory=list)  # (time, index into steps)
    ckpt_steps: list[int] = field(default_factory=list)
    # what the run's steps are made of (base step time, noise, loss curve, ...): a restored run shares its
    # baseline's (same model, config and cluster), so it differs only by what the scenario adds
    step_params: dict[str, float] = field(default_factory=dict)
    # grid
    t: np.ndarray = field(default_factory=lambda: np.zeros(0))
    gpu_sig: dict[str, np.ndarray] = field(default_factory=dict)  # (K, G, N)
    host_sig: dict[str, np.ndarray] = field(default_factory=dict)  # (K, N)
    nic_sig: dict[str, np.ndarray] = field(default_factory=dict)  # (K, D, N)
    present: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (K, N) exporter answers
    gpu_present: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (K, N) GPU plugin produced data
    frozen_from: dict[int, int] = field(default_factory=dict)  # host index -> grid index
    scrape_timeout_mask: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (K, N)

    @property
    def nodes(self) -> int:
        return len(self.hosts)

    @property
    def head(self) -> str:
        return self.hosts[0]

    @property
    def last_step(self) -> int | None:
        return int(self.step_num[-1]) if len(self.step_num) else None


def _hostnames(rng: np.random.Generator, n: int) -> list[str]:
    pattern, offset = HOST_SCHEMES[int(rng.integers(len(HOST_SCHEMES)))]
    offset += int(rng.integers(0, 40))
    per_rack = int(rng.choice([4, 8, 16]))
    names = []
    for i in range(n):
        k = i + offset
        names.append(pattern.format(n=k, rack=1 + k // per_rack, slot=1 + k % per_rack))
    return names


def _job_identity(rng: np.random.Generator, seed: int, start: float, profile: str, scenario: str) -> str:
    # Jobs of one seed share hosts and start time across scenarios; their ids must still differ, as two
    # real jobs' do. The scenario and profile are mixed in without drawing from `rng`, so every other
    # value of the job stays what the seed made it.
    salt = zlib.crc32(f"{scenario}/{profile}".encode())
    if profile == "nvidia" and rng.random() < 0.5:
        stamp = _utc(start).strftime("%Y%m%d-%H%M%S")
        return f"k8s-{stamp}-{(int(rng.integers(0, 0xFFFF)) ^ salt) & 0xFFFF:04x}"
    return str(10_000 + (int(rng.integers(10_000, 99_999)) + salt) % 89_999)


def _utc(ts: float):
    import datetime as _dt

    return _dt.datetime.fromtimestamp(ts, tz=_dt.UTC)


def plan(
    scenario: str,
    seed: int,
    nodes: int,
    *,
    profile: str = "amd",
    gpus: int = 8,
    interval: float = 15.0,
    hours: float | None = None,
    restored_from: int | None = None,
    base: Job | None = None,
) -> Job:
    """Return the decided (not yet simulated) job for a scenario and seed."""
    sc = SCENARIO_TABLE[scenario]
    rng = np.random.default_rng([seed, 0 if restored_from is None else 1])
    if base is not None:
        gpu, hosts, model_name = base.gpu, base.hosts, base.model_name
    else:
        gpu = GPU_MODELS[str(rng.choice(VENDOR_MODELS[profile]))]
        hosts = _hostnames(rng, nodes)
        model_name = str(rng.choice(MODEL_NAMES))
    moe = model_name.startswith(("mixtral", "deepseek")) or scenario == "training-instability"
    if scenario == "training-instability" and not model_name.startswith(("mixtral", "deepseek")):
        model_name = "mixtral-8x22b"
    # Jobs lie in the past (spring 2026), at a seed-dependent day and hour, aligned to the interval.
    day0 = 1_772_323_200.0  # 2026-03-01T00:00:00Z
    start = day0 + float(rng.integers(0, 90)) * 86400 + float(rng.integers(0, 86400))
    if base is not None:
        start = base.job_end + float(rng.uniform(1800, 7200))
    start = math.floor(start / interval) * interval
    hours = float(hours) if hours else float(rng.uniform(2.2, 3.2))
    ckpt_period = int(rng.choice([20, 25, 40, 50, 100]))
    replicas = max(r for r in (1, 2, 3, 4) if nodes % r == 0 and r <= max(1, nodes // 2))
    hb_timeout = (
        int(rng.choice([100, 300, 900]))
        if sc.klass in ("heartbeat-false-positive", "node-death")
        else int(rng.choice([100, 900, 14400]))
    )
    pdbs = int(rng.choice([1, 2, 4]))
    seq = int(rng.choice([4096, 8192]))
    passthrough = {
        "steps": "0",  # filled once the step count is known
        "per_device_batch_size": str(pdbs),
        "max_target_length": str(seq),
        "enable_checkpointing": "true",
        "checkpoint_period": str(ckpt_period),
        "async_checkpointing": "false",
        "remat_policy": str(rng.choice(["full", "save_qkv_proj", "minimal"])),
        "dcn_data_parallelism": str(replicas),
        "_env_NCCL_DEBUG": "WARN",
    }
    if scenario == "restore-resource-leak":
        passthrough["enable_single_replica_ckpt_restoring"] = "true"
    if moe:
        passthrough["load_balance_loss_weight"] = "0.01"
    if base is not None:
        passthrough = dict(base.passthrough)
        ckpt_period, hb_timeout, replicas = base.ckpt_period, base.hb_timeout, base.replicas
    job = Job(
        scenario=sc,
        seed=seed,
        profile=profile,
        gpu=gpu,
        hosts=hosts,
        gpus=gpus,
        interval=float(interval),
        job_id="",
        job_name="",
        model_name=model_name,
        moe=moe,
        start=start,
        setup_s=float(rng.uniform(480, 1200)),
        passthrough=passthrough,
        config={},
        steps_total=0,
        ckpt_period=ckpt_period,
        hb_timeout=hb_timeout,
        replicas=replicas,
        first_step=0 if restored_from is None else restored_from + 1,
        restored_from=restored_from,
    )
    job.job_id = _job_identity(rng, seed, start, profile, scenario)
    job.train_start = start + job.setup_s
    job.job_end = start + hours * 3600.0
    if base is not None:
        job.steps_limit = base.steps_total  # same config: the restored run ends at the same last step
        job.step_params = dict(base.step_params)
    return job


# --------------------------------------------------------------------------------------------- steps


def _simulate_steps(job: Job, rng: np.random.Generator, slowdown) -> None:
    """Fill the per-step arrays for a run that trains from train_start until job_end (or a stall)."""
    drawn = {
        "base": float(rng.uniform(9.5, 31.0)),
        "noise": float(rng.uniform(0.006, 0.02)),
        "tflop_factor": float(rng.uniform(0.3, 1.2)),
        "l0": float(rng.uniform(9.5, 11.0)),
        "linf": float(rng.uniform(1.9, 2.6)),
        "tau": float(rng.uniform(150, 600)),
        "lr_peak": float(rng.choice([1e-4, 3e-4, 6e-4])),
        "warm": int(rng.integers(20, 80)),
    }
    job.step_params = {**drawn, **job.step_params}  # inherited values (a restored run's) win
    p = job.step_params
    base, noise = p["base"], p["noise"]
    l0, linf, tau, lr_peak, warm = p["l0"], p["linf"], p["tau"], p["lr_peak"], int(p["warm"])
    pdbs = int(job.passthrough["per_device_batch_size"])
    seq = int(job.passthrough["max_target_length"])
    tokens = pdbs * seq
    tflop_step = tokens * 6 * 7e10 / 1e12 * p["tflop_factor"]
    stop_at = job.stall_time if job.stall_time is not None else job.job_end - float(rng.uniform(40, 120))
    t = job.train_start
    step = job.first_step
    nums, ends, secs = [], [], []
    while True:
        d = base * (1 + rng.normal(0, noise)) * slowdown(t)
        k = step - job.first_step
        if k == 0:
            d += float(rng.uniform(40, 150))  # first step after compile
        elif k < 5:
            d *= float(rng.uniform(1.2, 2.2))  # warm-up
        if step > 0 and (step - 1) % job.ckpt_period == 0 and step - 1 in job.ckpt_steps:
            d += job._ckpt_extra[step - 1]  # type: ignore[attr-defined]
        if t + d > stop_at or (job.steps_limit is not None and step >= job.steps_limit):
            break
        t += d
        nums.append(step)
        ends.append(t)
        secs.append(d)
        if step % job.ckpt_period == 0:
            job.ckpt_steps.append(step)
            job._ckpt_extra[step] = float(rng.uniform(12, 80))  # type: ignore[attr-defined]
        step += 1
    job.step_num = np.array(nums, dtype=int)
    job.step_end = np.array(ends)
    job.step_secs = np.array(secs)
    n = len(nums)
    s = job.step_num.astype(float)
    job.loss = linf + (l0 - linf) * np.exp(-s / tau) + rng.normal(0, 0.02, n)
    job.grad_norm = np.abs(rng.normal(0.55, 0.08, n)) + 0.9 * np.exp(-s / 80)
    job.raw_grad_norm = job.grad_norm * rng.uniform(1.0, 1.15, n)
    job.lr = np.where(
        s < warm,
        lr_peak * (s + 1) / warm,
        lr_peak * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * np.minimum(1, s / 5000)))),
    )
    job.tgs = tokens / job.step_secs
    job.tflops_s = tflop_step / job.step_secs
    job.moe_lb = np.abs(rng.normal(0.012, 0.0008, n)) if job.moe else np.zeros(n)
    job._tokens = tokens  # type: ignore[attr-defined]
    job._base_step = base  # type: ignore[attr-defined]


def _steps_done_at(job: Job, t: np.ndarray) -> np.ndarray:
    """Return, for each grid time, the index of the last completed step (-1 before the first)."""
    return np.searchsorted(job.step_end, t, side="right") - 1


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
    slow: dict = {"t0": None, "factor": 1.0, "ramp": 1.0, "until": None}

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
        return 1.0 + (slow["factor"] - 1.0) * frac

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
    cum = lambda rate, base0: base0 + np.cumsum(rate * job.interval, axis=-1)  # noqa: E731
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


def _lag(x: np.ndarray, alpha: float) -> np.ndarray:
    """Return an exponentially smoothed copy along the last axis (thermal inertia)."""
    out = np.empty_like(x)
    acc = x[..., 0]
    for i in range(x.shape[-1]):
        acc = acc + alpha * (x[..., i] - acc)
        out[..., i] = acc
    return out


def _ring(cum: np.ndarray) -> np.ndarray:
    """Return a dmesg error count as the exporter reads it: what is in the ring buffer, so it can drop."""
    out = cum.copy()
    for row in out.reshape(-1, out.shape[-1]):
        if row[-1] > 40:
            wrap = int(np.argmax(row > row[-1] * 0.7))
            row[wrap:] -= row[wrap] * 0.5
    return np.floor(out)


def _truncate_steps(job: Job, keep: np.ndarray) -> None:
    for name in (
        "step_num",
        "step_end",
        "step_secs",
        "loss",
        "grad_norm",
        "raw_grad_norm",
        "lr",
        "tgs",
        "tflops_s",
        "moe_lb",
    ):
        setattr(job, name, getattr(job, name)[keep])
    last = job.last_step
    job.ckpt_steps = [c for c in job.ckpt_steps if last is not None and c <= last]


def _instability(job: Job, rng: np.random.Generator, i0: int) -> None:
    """Make training-level metrics move first: grad-norm spike, loss jump, MoE load-balance spike."""
    n = len(job.step_num)
    k = np.arange(n) - i0
    after = k >= 0
    decay = np.where(after, np.exp(-np.clip(k, 0, None) / float(rng.uniform(15, 40))), 0.0)
    job.grad_norm = job.grad_norm * (1 + float(rng.uniform(6, 15)) * decay)
    job.raw_grad_norm = job.grad_norm * rng.uniform(1.5, 3.0, n)
    job.loss = job.loss + float(rng.uniform(0.6, 1.5)) * np.where(
        after, np.exp(-np.clip(k, 0, None) / 60.0), 0
    )
    job.moe_lb = job.moe_lb * (1 + float(rng.uniform(4, 9)) * decay)


def _gpu_counters(job: Job, rng: np.random.Generator, shape: tuple[int, int, int]) -> None:
    K, G, N = shape
    t = job.t
    z = np.zeros(shape)
    ce_base = np.zeros((K, G, 1))
    # a GPU with old correctable errors that do not grow in this window (red herring)
    rh, rg = int(rng.integers(0, K)), int(rng.integers(0, G))
    ce_base[rh, rg] = float(rng.integers(2, 9))
    job.red_herrings["static_correctable_errors"] = f"{job.hosts[rh]}:{rg}"
    sig = {
        "umc_ue": z.copy(),
        "umc_ce": z + ce_base,
        "xgmi_ue": z.copy(),
        "xgmi_ce": z.copy(),
        "gfx_ue": z.copy(),
        "pcie_corr": z + np.floor(rng.uniform(0, 3, (K, G, 1))),
        "pcie_nonfatal": z.copy(),
        "pcie_fatal": z.copy(),
        "xid": z.copy(),
    }
    hw = getattr(job, "_hwfault", None)
    if hw is not None:
        h, g, t0 = hw["host"], hw["gpu"], hw["t"]
        on = t >= t0
        n_ue = float(rng.integers(1, 4))
        sig["umc_ue"][h, g] = np.where(on, n_ue + np.floor((t - t0) / 60.0).clip(0, 5), 0)
        sig["xid"][h, g] = np.where(on, float(rng.choice([48, 79])), 0)
        job.host_sig["dmesg"][h] = np.where(on, job.host_sig["dmesg"][h] + 3, job.host_sig["dmesg"][h])
        job._xid = int(sig["xid"][h, g][on][0]) if on.any() else 48  # type: ignore[attr-defined]
    pre = getattr(job, "_predeath", None)
    if pre is not None:
        h, g = pre["host"], pre["gpu"]
        on = t >= pre["t"]
        sig["xid"][h, g] = np.where(on, 79.0, 0.0)
        if job.gpu.vendor == "amd":  # no Xid there: the RAS counters of the failing GPU grow instead
            sig["umc_ue"][h, g] = np.where(on, 1.0 + np.floor((t - pre["t"]) / 60.0).clip(0, 3), 0.0)
        job.host_sig["dmesg"][h] = job.host_sig["dmesg"][h] + np.where(
            on, 2.0 + np.floor((t - pre["t"]) / 30.0), 0
        )
    job.gpu_sig.update(sig)


def _tb_export(job: Job, rng: np.random.Generator) -> None:
    """Decide which steps the TensorBoard bridge exported and where it wrote staleness fills."""
    n = len(job.step_num)
    exported = np.ones(n, bool)
    # the best-effort bridge drops a few steps (plugin timeouts)
    if n > 20:
        exported[rng.choice(n, size=max(1, n // 150), replace=False)] = False
    if n:
        exported[-1] = True  # the final step is always exported
    job.tb_exported = exported
    fills: list[tuple[float, int]] = []
    times = job.step_end[exported]
    idxs = np.nonzero(exported)[0]
    end = job.crash_time if job.crash_time is not None else job.job_end
    for j in range(len(times)):
        nxt = times[j + 1] if j + 1 < len(times) else end
        f = times[j] + 150.0
        while f < nxt - 1.0:
            fills.append((float(f), int(idxs[j])))
            f += 150.0
    job.fills = fills
