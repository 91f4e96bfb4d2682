"""blind-b's job model: the plan of one job, its training timeline and its base host/GPU signals.

Scenarios (`_scen_b`) bend these arrays into an incident; layouts (`_lay_b`) expose them under one
exporter family's names. Arrays are indexed [host, time] or [host, gpu, time] on a shared grid.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

GPU_MODELS = {
    # name: (idle W, active W, max SM clock MHz, framebuffer MiB, vendor)
    "NVIDIA H100 80GB HBM3": (72.0, 620.0, 1980.0, 81559.0, "nvidia"),
    "NVIDIA A100-SXM4-80GB": (58.0, 360.0, 1410.0, 81920.0, "nvidia"),
    "NVIDIA H200": (80.0, 640.0, 1980.0, 143771.0, "nvidia"),
    "AMD Instinct MI300X": (140.0, 690.0, 2100.0, 196592.0, "amd"),
}


def host_names(rng: np.random.Generator, n: int) -> tuple[list[str], list[str]]:
    """Node names in one of several site styles, and their IPs."""
    style = int(rng.integers(0, 5))
    a, b = int(rng.integers(1, 250)), int(rng.integers(0, 8))
    start = int(rng.integers(1, 180))
    ips = [f"10.{a}.{b + (start + i) // 250}.{(start + i) % 250 + 2}" for i in range(n)]
    if style == 0:
        names = [f"gpu-node-{start + i:03d}" for i in range(n)]
    elif style == 1:
        rack = "abcdefgh"[int(rng.integers(0, 8))]
        names = [f"dgx-h100-{rack}{start % 40 + i + 1}" for i in range(n)]
    elif style == 2:
        names = ["ip-" + ip.replace(".", "-") for ip in ips]
    elif style == 3:
        names = [f"worker-{start + i}.cluster.local" for i in range(n)]
    else:
        pod = int(rng.integers(1, 9))
        names = [f"p{pod}r{(start + i) // 8 + 1:02d}n{(start + i) % 8 + 1}" for i in range(n)]
    return names, ips


@dataclass
class Job:
    rng: np.random.Generator
    cls: str
    hosts: list[str]
    ips: list[str]
    gpus: int
    interval: float
    t0: float
    t_end: float
    gpu_model: str
    train_start: float
    step_base: float
    steps_planned: int
    ckpt_period: int
    first_step: int = 0
    replica0: list[int] = field(default_factory=list)
    nics: int = 4
    slowdown: list[Callable[[float], float]] = field(default_factory=list)
    crash_time: float | None = None
    # filled by build_steps / base_signals
    step_end: np.ndarray = field(default_factory=lambda: np.zeros(0))
    step_dur: np.ndarray = field(default_factory=lambda: np.zeros(0))
    loss: np.ndarray = field(default_factory=lambda: np.zeros(0))
    grad: np.ndarray = field(default_factory=lambda: np.zeros(0))
    grid: np.ndarray = field(default_factory=lambda: np.zeros(0))
    host: dict[str, np.ndarray] = field(default_factory=dict)
    gpu: dict[str, np.ndarray] = field(default_factory=dict)
    nic: dict[str, np.ndarray] = field(default_factory=dict)
    gpu_gap: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    gpu_scrape_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    saves: list[tuple[int, float]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    truth: dict[str, Any] = field(default_factory=dict)

    @property
    def n_hosts(self) -> int:
        return len(self.hosts)

    @property
    def spec(self) -> tuple[float, float, float, float, str]:
        return GPU_MODELS[self.gpu_model]

    def steps(self) -> np.ndarray:
        return np.arange(self.first_step, self.first_step + len(self.step_end))

    def last_step_time(self) -> float:
        return float(self.step_end[-1]) if len(self.step_end) else self.train_start


def build_steps(job: Job) -> None:
    """Step completion times: warm-up, noise, loader hiccups, checkpoint stalls, scenario slowdowns."""
    rng = job.rng
    n = job.steps_planned
    dur = job.step_base * (1.0 + rng.normal(0.0, 0.012, n))
    dur[0] += rng.uniform(40.0, 150.0)  # first step compiles
    dur[1 : min(5, n)] *= rng.uniform(1.05, 1.4, min(5, n) - 1)
    hiccups = rng.random(n) < 0.01
    dur[hiccups] *= rng.uniform(1.3, 1.9, int(hiccups.sum()))
    ends = np.zeros(n)
    saves: list[tuple[int, float]] = []
    t = job.train_start
    for i in range(n):
        step = job.first_step + i
        f = 1.0
        for fn in job.slowdown:
            f *= fn(t)
        t += dur[i] * f
        ends[i] = t
        if job.ckpt_period and step % job.ckpt_period == 0 and step != job.first_step:
            saves.append((step, t))
            t += rng.uniform(4.0, 25.0)  # the device-to-host copy blocks the next step
        elif step == job.first_step == 0 and job.ckpt_period:
            saves.append((step, t))
    keep = ends <= min(job.t_end, job.crash_time or np.inf)
    job.step_end = ends[keep]
    job.step_dur = np.diff(np.concatenate([[job.train_start], job.step_end]))
    job.saves = [s for s in saves if s[1] < (job.crash_time or np.inf) and s[1] < job.t_end]
    k = np.arange(len(job.step_end)) + job.first_step
    base = 2.0 + 8.5 * np.exp(-k / rng.uniform(150, 400))
    job.loss = base + rng.normal(0, 0.03, len(k))
    job.grad = rng.uniform(0.6, 1.4) * (1 + rng.normal(0, 0.08, len(k)))


def activity(job: Job) -> np.ndarray:
    """1 while the trainer runs (from start to its last step or crash), else 0; per host and time."""
    stop = job.crash_time if job.crash_time is not None else job.last_step_time() + 1.0
    if job.meta.get("end") == "running":
        stop = np.inf  # the data ends while the job still trains
    act = ((job.grid >= job.train_start - 60.0) & (job.grid <= stop)).astype(float)
    return np.repeat(act[None, :], job.n_hosts, axis=0)


def _lag(x: np.ndarray, dt: float, tau: float) -> np.ndarray:
    """First-order thermal lag along the last axis."""
    y = np.array(x, dtype=float)
    a = 1.0 - np.exp(-dt / tau)
    for i in range(1, y.shape[-1]):
        y[..., i] = y[..., i - 1] + a * (x[..., i] - y[..., i - 1])
    return y


def save_profile(job: Job, t: np.ndarray, ramp: float, hold: float) -> list[np.ndarray]:
    """One 0..1 envelope per checkpoint save: linear rise over `ramp` s, held, then released."""
    out = []
    for _, ts in job.saves:
        rise = np.clip((t - ts) / ramp, 0.0, 1.0)
        fall = np.clip(1.0 - (t - ts - ramp - hold) / 20.0, 0.0, 1.0)
        out.append(rise * fall)
    return out


def base_signals(job: Job) -> None:
    """Healthy host, NIC and GPU signals with per-host backgrounds and checkpoint effects."""
    rng, H, G = job.rng, job.n_hosts, job.gpus
    t = job.grid
    N = len(t)
    idle_w, act_w, clk, fb, _ = job.spec
    act = activity(job)
    job.meta["act"] = act
    # host memory
    total = float(rng.choice([1.0, 1.5, 2.0])) * 2**40
    used0 = total * rng.uniform(0.06, 0.12, H)[:, None]
    train_mem = total * rng.uniform(0.18, 0.3, H)[:, None] * act
    env = save_profile(job, t, float(rng.uniform(40, 110)), float(rng.uniform(20, 90)))
    spike = np.zeros((H, N))
    share = float(rng.uniform(0.12, 0.3))
    for e in env:
        spike[job.replica0] += total * share * e
    job.meta["mem_spike_share"] = share
    job.meta["mem_floor"] = used0 + train_mem
    job.host["mem_total"] = np.full((H, N), total)
    job.host["mem_used"] = used0 + train_mem + spike + total * rng.normal(0, 0.002, (H, N))
    # CPU, I/O
    bg = rng.uniform(2, 14, H)[:, None]
    job.host["procs_running"] = np.round(
        bg + act * (G * job.meta["threads_per_gpu"]) + rng.poisson(1.5, (H, N))
    )
    io = sum(env) if env else np.zeros(N)
    job.host["procs_blocked"] = np.round(rng.poisson(0.3, (H, N)) + 8 * io * rng.random((H, N)))
    job.host["io_full_pct"] = np.clip(
        35 * io * rng.uniform(0.5, 1.2, (H, 1)) + rng.gamma(1, 0.3, (H, N)), 0, 100
    )
    job.host["oom_kills"] = np.repeat(rng.choice([0, 0, 0, 1, 4], H)[:, None], N, axis=1).astype(float)
    retr = rng.poisson(0.5 * job.interval, (H, N)) + rng.poisson(300 * io * job.interval)
    job.host["tcp_retrans"] = rng.integers(10**4, 10**7, H)[:, None] + np.cumsum(retr, axis=1)
    job.host["ctx_switches"] = rng.integers(10**9, 10**11, H)[:, None] + np.cumsum(
        rng.normal(2e5, 2e4, (H, N)) * job.interval * (0.3 + act), axis=1
    )
    # NICs: bytes and a sparse retransmit trickle on every host
    K = job.nics
    rate = 1.2e10 * act[:, None, :] * rng.uniform(0.9, 1.1, (H, K, 1))
    job.nic["tx_bytes"] = rng.uniform(1e13, 1e15, (H, K, 1)) + np.cumsum(rate * job.interval, axis=2)
    trickle = (rng.random((H, K, N)) < 0.01) * rng.integers(1, 9, (H, K, N))
    job.nic["retx"] = rng.integers(0, 10**6, (H, K, 1)) + np.cumsum(trickle, axis=2)
    job.nic["ack_timeout"] = rng.integers(0, 10**3, (H, K, 1)) + np.cumsum(
        (rng.random((H, K, N)) < 0.002), axis=2
    )
    _gpu_signals(job, act, idle_w, act_w, clk, fb)
    job.gpu_gap = np.zeros((H, N), dtype=bool)
    job.gpu_scrape_s = rng.gamma(4, 0.03, (H, N))


def _gpu_signals(job: Job, act: np.ndarray, idle_w: float, act_w: float, clk: float, fb: float) -> None:
    rng, H, G = job.rng, job.n_hosts, job.gpus
    N = len(job.grid)
    a = np.repeat(act[:, None, :], G, axis=1)
    off = rng.normal(0, 12, (H, G, 1))
    job.gpu["util"] = np.clip(a * (97 + rng.normal(0, 1.5, (H, G, N))), 0, 100)
    job.gpu["power"] = idle_w + a * (act_w - idle_w + off) + rng.normal(0, 8, (H, G, N)) * (0.3 + a)
    tamb = rng.uniform(28, 36) + rng.normal(0, 1.5, (H, G, 1))
    warm = np.zeros((H, 1, 1))
    warm[int(rng.integers(0, H))] = rng.uniform(2.5, 5.0)  # one host sits a little warmer
    job.meta["warm_host"] = int(np.argmax(warm[:, 0, 0]))
    target = tamb + warm + a * rng.uniform(28, 38) + 0.02 * off
    job.gpu["temp"] = _lag(target, job.interval, 150.0) + rng.normal(0, 0.4, (H, G, N))
    job.gpu["sm_clock"] = np.where(a > 0, clk - rng.integers(0, 3, (H, G, N)) * 15, 345 + 0 * a)
    job.gpu["fb_used"] = np.where(a > 0, fb * rng.uniform(0.7, 0.9, (H, G, 1)), 0.002 * fb)
    job.gpu["ecc_sbe"] = np.repeat(rng.choice([0, 0, 0, 0, 2, 17], (H, G, 1)), N, axis=2).astype(float)
    job.gpu["ecc_dbe"] = np.zeros((H, G, N))
    job.gpu["remap_corr"] = np.repeat(rng.choice([0, 0, 0, 1], (H, G, 1)), N, axis=2).astype(float)
    job.gpu["remap_uncorr"] = np.zeros((H, G, N))
    job.gpu["remap_fail"] = np.zeros((H, G, N))
    job.gpu["pcie_replay"] = np.repeat(rng.choice([0, 0, 3, 120], (H, G, 1)), N, axis=2).astype(float)
    job.gpu["xid"] = np.zeros((H, G, N))
    job.gpu["dmesg"] = np.zeros((H, 1, N))
    job.gpu["energy"] = np.cumsum(job.gpu["power"] * job.interval * 1000.0, axis=2) + rng.uniform(
        1e9, 1e11, (H, G, 1)
    )


def idx(job: Job, t: float) -> int:
    """Index of the first grid time at or after t."""
    return int(np.searchsorted(job.grid, t))
