"""Generator A, part 1: the story of one job as times and events (no metric values yet).

A `Plan` holds the cluster (host names in one of several naming styles, their addresses, GPUs),
the exporter layout as someone deployed it, the scrape timing, the training timeline (when each
step completed, checkpoint saves, data-loader hiccups) and the incident's events (a hang, a dead
host, an RDMA fault, a frozen exporter, a heartbeat kill), plus the red herrings every job carries.
`_a_series` turns it into samples, `_a_log` into a log.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

GPU_MODELS = {
    # name: (modelName label, idle W, busy-wait extra W, training W, TDP W, FB MiB)
    "H100": ("NVIDIA H100 80GB HBM3", 72.0, 45.0, 590.0, 700.0, 81559.0),
    "H200": ("NVIDIA H200", 78.0, 48.0, 610.0, 700.0, 143771.0),
    "A100": ("NVIDIA A100-SXM4-80GB", 58.0, 38.0, 330.0, 400.0, 81920.0),
    "B200": ("NVIDIA B200", 145.0, 55.0, 860.0, 1000.0, 183359.0),
}


@dataclass
class Layout:
    """How the exporters were deployed."""

    dcgm_host_label: str | None  # "Hostname" (releases), "hostname" (HEAD) or None (Kubernetes)
    dcgm_job: str
    node_job: str
    node_by_ip: bool  # node_exporter scraped as IP:9100 (host only via node_uname_info)
    dcgm_collect_s: float  # DCGM's own collection period (repeats under a faster scrape)
    ecc_fields: str  # "ecc" (ECC_*_VOL_TOTAL) or "remap" (remapped rows, the default counter set)
    ne_hw_counters: bool  # node_exporter >= 1.11: InfiniBand hw counters
    trainer_job: str
    trainer_gauges: bool  # the trainer exports training_* gauges (else only the log has steps)
    late_targets: dict[str, int] = field(default_factory=dict)  # "dcgm:host" -> scrapes missed at start


@dataclass
class RdmaFault:
    """RDMA retransmits (and ACK timeouts) on some NICs of one host over a window."""

    host: str
    nics: list[int]
    start: float
    end: float
    retx_per_s: float
    ack_per_s: float


@dataclass
class Plan:
    """Everything that happens in one job, in unix seconds."""

    name: str
    cls: str
    family: str
    story: str
    seed: int
    hosts: list[str]
    ips: list[str]
    gpus: int
    model: str
    nics: int
    interval: float
    layout: Layout
    t0: float
    t_end: float
    load_start: float  # GPUs start loading / compiling
    train_start: float  # first step begins
    step_end: np.ndarray  # completion time of each completed step (step numbers first_step..)
    step_secs: np.ndarray
    losses: np.ndarray
    first_step: int
    total_steps: int  # steps=T of the config
    tokens_per_step: float
    ckpt_period: int
    ckpts: list[tuple[float, float]]  # save windows (GPUs mostly idle, replica-0 host memory up)
    replica0: list[str]
    hiccups: list[tuple[float, float]]  # data-loader stalls (GPU util dips everywhere)
    active_end: float  # when GPUs stop training (finish, hang or crash)
    job_end: float  # when the job ended (the TSDB ends a little later)
    end_kind: str  # completed | cancelled | heartbeat | node-failure
    hb_timeout: float
    busy_start: dict[str, float] = field(default_factory=dict)  # host -> busy-wait began
    busy_gpus: dict[str, list[int]] = field(default_factory=dict)
    dead: dict[str, tuple[float, str]] = field(default_factory=dict)  # host -> (time, silent|zero)
    xids: list[tuple[str, int, float, int]] = field(default_factory=list)  # host, gpu, time, code
    ecc: list[tuple[str, int, float, float]] = field(default_factory=list)  # host, gpu, start, per min
    gpu_gone: list[tuple[str, int, float]] = field(default_factory=list)  # GPU fell off the bus
    rdma: list[RdmaFault] = field(default_factory=list)
    ghost: tuple[str, float] | None = None
    warm: tuple[str, float] | None = None
    accused: list[str] = field(default_factory=list)
    tcp_bursts: list[tuple[str, float, float, float]] = field(default_factory=list)  # host, start, end, per s
    culprits: list[dict[str, str | None]] = field(default_factory=list)
    onset: float | None = None


def host_names(rng: np.random.Generator, n: int) -> tuple[list[str], list[str], str]:
    """Return (host names, IPs, style) for n hosts in one of four naming styles."""
    style = str(rng.choice(["gpu-node", "dgx", "ip", "fqdn"]))
    third = int(rng.integers(0, 40))
    first = int(rng.integers(2, 200))
    ips = [f"10.{int(rng.integers(0, 8))}.{third}.{first + i}" for i in range(n)]
    ips = [f"10.0.{third}.{first + i}" for i in range(n)] if style == "ip" else ips
    if style == "gpu-node":
        names = [f"gpu-node-{first + i:03d}" for i in range(n)]
    elif style == "dgx":
        rack = "abcdef"[int(rng.integers(0, 6))]
        names = [f"dgx-h100-{rack}{first % 40 + i:02d}" for i in range(n)]
    elif style == "ip":
        names = ["ip-" + ip.replace(".", "-") for ip in ips]
    else:
        names = [f"worker-{first + i}.cluster.local" for i in range(n)]
    return names, ips, style


def draw_layout(rng: np.random.Generator, interval: float, hosts: list[str], need_hw: bool) -> Layout:
    """Draw an exporter deployment for the job."""
    host_label = [None, "Hostname", "hostname"][int(rng.integers(0, 3))]
    late: dict[str, int] = {}
    for h in hosts:
        if rng.random() < 0.2:
            late[f"{rng.choice(['dcgm', 'node'])}:{h}"] = int(rng.integers(1, 3))
    return Layout(
        dcgm_host_label=host_label,
        dcgm_job=str(rng.choice(["dcgm-exporter", "nvidia-dcgm-exporter", "gpu-metrics"])),
        node_job=str(rng.choice(["node-exporter", "node", "node_exporter"])),
        node_by_ip=bool(host_label is None or rng.random() < 0.6),
        dcgm_collect_s=30.0 if interval < 30 and rng.random() < 0.4 else interval,
        ecc_fields="ecc" if rng.random() < 0.5 else "remap",
        ne_hw_counters=need_hw or rng.random() < 0.6,
        trainer_job=str(rng.choice(["trainer", "training-metrics", "maxtext"])),
        trainer_gauges=bool(rng.random() < 0.8),
        late_targets=late,
    )


def step_durations(rng: np.random.Generator, n: int, base: float, period: int) -> np.ndarray:
    """Return the seconds of n steps: compile-heavy first step, warm-up, checkpoint and loader stalls."""
    secs = base * (1 + rng.normal(0, 0.015, n))
    secs[0] = base * rng.uniform(6, 14)  # includes XLA compilation
    warm = min(n - 1, int(rng.integers(3, 7)))
    secs[1 : warm + 1] *= np.linspace(1.6, 1.05, warm)
    for s in range(period, n, period):
        secs[s] += rng.uniform(1.5, 4.0) * base  # the step after a synchronous save
    for s in rng.choice(np.arange(warm + 1, n), size=max(1, n // 120), replace=False):
        secs[s] *= rng.uniform(1.3, 2.2)  # data-loader hiccup
    return secs


def apply_slowdown(secs: np.ndarray, starts: np.ndarray, t_slow: float, factor: float) -> np.ndarray:
    """Return step seconds where every step that starts after t_slow is `factor` times slower."""
    out = secs.copy()
    t = starts[0]
    for i in range(len(out)):
        if t >= t_slow:
            out[i] = secs[i] * factor * (1 + 0.02 * np.sin(i))
        t += out[i]
    return out


def losses(rng: np.random.Generator, n: int, first: int) -> np.ndarray:
    """A loss curve: fast early drop, slow decay, noise."""
    k = np.arange(first, first + n, dtype=float)
    start = rng.uniform(9.5, 11.5)
    floor = rng.uniform(2.0, 3.2)
    return floor + (start - floor) * np.exp(-k / rng.uniform(40, 140)) + rng.normal(0, 0.03, n)
