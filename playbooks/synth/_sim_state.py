"""The simulator's working state: the incident drawn for one job, its time grid and its signal arrays.

`_sim.simulate` fills these stage by stage; `_sim_scenarios` changes them as each scenario's incident does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._sim_plan import Job


@dataclass
class Slowdown:
    """How much longer a step takes than its base time at time t: 1 before `t0`, then a linear ramp over
    `ramp` seconds up to `factor`, and 1 again after `until` (when set)."""

    t0: float | None = None
    factor: float = 1.0
    ramp: float = 1.0
    until: float | None = None

    def __call__(self, t: float) -> float:
        if self.t0 is None or t < self.t0:
            return 1.0
        if self.until is not None and t > self.until:
            return 1.0
        frac = min(1.0, (t - self.t0) / self.ramp)
        return 1.0 + (self.factor - 1.0) * frac


@dataclass
class Incident:
    """Where and when the job's incident strikes: the culprit host and GPU, the planned onset, the slowdown."""

    host: int
    gpu: int
    onset: float
    slow: Slowdown


@dataclass
class Grid:
    """The time grid and the job's phases on it (boolean masks of length N)."""

    t: np.ndarray
    training: np.ndarray
    hang: np.ndarray
    after_crash: np.ndarray
    ckpt_win: np.ndarray  # a checkpoint is being saved or written back
    ckpt_gpu_wait: np.ndarray  # the GPUs wait for a synchronous save

    @property
    def n(self) -> int:
        return len(self.t)


@dataclass
class GpuSignals:
    """Per-GPU gauges, each (K, G, N)."""

    util: np.ndarray
    power: np.ndarray
    temp: np.ndarray
    clock: np.ndarray
    vram: np.ndarray


@dataclass
class HostSignals:
    """Per-host gauges and rates, each (K, N), and which hosts write the checkpoint (`rep0`, (K,))."""

    rep0: np.ndarray
    mem: np.ndarray
    mem_total: np.ndarray
    io_full: np.ndarray
    io_some: np.ndarray
    dirty: np.ndarray
    writeback: np.ndarray
    blocked: np.ndarray
    running: np.ndarray
    cpu_util: np.ndarray
    ctx_rate: np.ndarray
    tcp_rate: np.ndarray
    scrape: np.ndarray
    dmesg: np.ndarray
    oom_rate: np.ndarray
    listen_drop_rate: np.ndarray
    abort_rate: np.ndarray
    net_err: np.ndarray
    gpu_procs: np.ndarray
    present: np.ndarray  # the exporter answers
    gpu_present: np.ndarray  # the GPU plugin produced data
    timeouts: np.ndarray  # the scrape timed out


@dataclass
class NicSignals:
    """Per-RDMA-device rates and states, each (K, D, N)."""

    rdma_bw: np.ndarray
    retx: np.ndarray
    ack: np.ndarray
    cnp: np.ndarray
    retry_excd: np.ndarray
    cqe: np.ndarray
    port: np.ndarray


@dataclass
class Sim:
    """One job being simulated: the job, its random stream, the incident, the grid and every signal."""

    job: Job
    rng: np.random.Generator
    inc: Incident
    grid: Grid
    gpu: GpuSignals
    host: HostSignals
    nic: NicSignals
