"""Corpus E: what each case is (class, fleet, deployment, log format), drawn from the seed (#10).

Written blind to the engine and to corpora A-D. One `Case` per job directory (a restore pair holds two).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

CLASSES = (
    "healthy",
    "collective-hang",
    "network-hang",
    "node-death",
    "heartbeat-false-positive",
    "host-oom",
    "thermal-straggler",
    "rdma-degradation",
    "restore-resource-leak",
    "monitoring-ghost-data",
    "gpu-driver-fault",
    "gpu-hardware-fault",
    "training-instability",
)

FAMILY = {
    "healthy": "none",
    "collective-hang": "collective",
    "network-hang": "network-rdma",
    "node-death": "node",
    "heartbeat-false-positive": "heartbeat",
    "host-oom": "host-memory",
    "thermal-straggler": "thermal",
    "rdma-degradation": "network-rdma",
    "restore-resource-leak": "cpu-contention",
    "monitoring-ghost-data": "monitoring",
    "gpu-driver-fault": "gpu-driver",
    "gpu-hardware-fault": "gpu-hardware",
    "training-instability": "training",
}

# GPU model: (modelName label, idle W, busy-wait extra W, training W, max SM clock MHz, FB MiB, peak TFLOP/s)
GPUS = {
    "H100": ("NVIDIA H100 80GB HBM3", 72.0, 48.0, 610.0, 1980, 81559, 989.0),
    "A100": ("NVIDIA A100-SXM4-80GB", 58.0, 36.0, 330.0, 1410, 81920, 312.0),
    "B200": ("NVIDIA B200", 140.0, 70.0, 860.0, 1965, 183359, 2250.0),
}

LOG_FORMATS = ("megatron", "hf", "jax", "deepspeed", "maxtext")
NAMING = ("gpu-{:03d}", "dgx-a{:02d}", "node{:04d}", "gpu-r{r}-{:02d}", "sc-b{:03d}")


@dataclass
class Case:
    """One job to build.

    Attributes:
        index, cls, seed: position in the corpus, the true class and the case's own seed.
        hosts: the job's hosts (short names); gpus: GPU indices the job uses on each (others are a tenant's).
        gpu_model, scrape_s, minutes, start: hardware, scrape interval, job length, job start (unix s).
        log_format, instance_style, net: log flavour, node_exporter `instance` style, "ib" or "roce".
        gpu_util: whether DCGM_FI_DEV_GPU_UTIL is exported; trainer_gauges: training_* gauges exported.
        quirks: monitoring realities (exporter restart, target gap, duplicate job, ...).
        herrings: red herrings (ckpt, eval, warmup, hot_rack, old_xid, tenant).
        variant: class-specific choice (e.g. hang before the first step).
        role: "" for a single job, "a"/"b" for the fresh / restored job of a pair.
    """

    index: int
    cls: str
    seed: int
    hosts: list[str]
    gpus: list[int]
    gpu_model: str
    scrape_s: int
    minutes: int
    start: float
    log_format: str
    instance_style: str
    net: str
    gpu_util: bool
    trainer_gauges: bool
    quirks: set[str] = field(default_factory=set)
    herrings: set[str] = field(default_factory=set)
    variant: str = ""
    role: str = ""
    leak: bool = False

    @property
    def name(self) -> str:
        return f"{self.index:02d}-{self.cls}"


def hostnames(rng: random.Random, n: int) -> list[str]:
    """n hosts of one naming scheme, numbered with a gap or two (like a real allocation)."""
    scheme = rng.choice(NAMING)
    first = rng.randint(1, 40)
    nums: list[int] = []
    k = first
    while len(nums) < n:
        nums.append(k)
        k += 1 if rng.random() > 0.08 else rng.randint(2, 5)
    rack = rng.randint(1, 9)
    return [scheme.format(x, r=rack) if "{r}" in scheme else scheme.format(x) for x in nums]


def compress(hosts: list[str]) -> str:
    """Slurm's compressed node list: gpu-[001-016,020] (hosts of one prefix and width)."""
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int]] = []
    for h in hosts:
        m = re.match(r"^(.*?)(\d+)$", h)
        if not m:
            return ",".join(hosts)
        key = (m.group(1), len(m.group(2)))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(m.group(2)))
    parts = []
    for prefix, width in order:
        nums = sorted(groups[(prefix, width)])
        runs, lo = [], nums[0]
        for a, b in zip(nums, nums[1:] + [None], strict=True):
            if b is None or b != a + 1:
                runs.append(f"{lo:0{width}d}" if lo == a else f"{lo:0{width}d}-{a:0{width}d}")
                lo = b if b is not None else lo
        parts.append(f"{prefix}[{','.join(runs)}]" if len(nums) > 1 else f"{prefix}{nums[0]:0{width}d}")
    return ",".join(parts)


def _scale(rng: random.Random, small: bool) -> tuple[int, int, int]:
    """(hosts, minutes, scrape_s) with the sample count kept near a build budget."""
    if small:
        return rng.choice((4, 6, 8)), rng.randint(20, 26), rng.choice((15, 30))
    n = rng.choice((8, 8, 12, 16, 16, 24, 32, 48, 64))
    scrape = rng.choice((10, 15, 15, 30, 30, 60))
    minutes = rng.randint(20, 90)
    budget = 8000  # hosts x samples per series (about 330 series a host: ~2.5M samples a case at most)
    while n * minutes * 60 / scrape > budget and scrape < 60:
        scrape = {10: 15, 15: 30, 30: 60}[scrape]
    while n * minutes * 60 / scrape > budget and minutes > 20:
        minutes -= 5
    return n, minutes, scrape


def make_case(seed: int, index: int, cls: str, small: bool) -> Case:
    """Draw one case's fleet and deployment from (seed, index)."""
    rng = random.Random(seed * 1009 + index * 7919 + 13)
    n, minutes, scrape = _scale(rng, small)
    partial = rng.random() < 0.2 and cls not in ("node-death",)
    gpus = (list(range(4)) if rng.random() < 0.5 else list(range(4, 8))) if partial else list(range(8))
    day = rng.randint(0, 300)
    start = 1767225600.0 + day * 86400 + rng.randint(0, 86399)  # 2026
    fmt = rng.choice(LOG_FORMATS)
    if cls == "heartbeat-false-positive":
        fmt = rng.choice(("jax", "maxtext"))
    quirks = {q for q in ("exporter_restart", "target_gap", "dup_job", "stale_series") if rng.random() < 0.3}
    herrings = {h for h in ("ckpt", "eval", "warmup", "hot_rack", "old_xid") if rng.random() < 0.55}
    if partial:
        herrings.add("tenant")
    case = Case(
        index=index,
        cls=cls,
        seed=rng.randint(0, 2**31),
        hosts=hostnames(rng, n),
        gpus=gpus,
        gpu_model=rng.choice(("H100", "H100", "A100", "B200")),
        scrape_s=scrape,
        minutes=minutes,
        start=start,
        log_format=fmt,
        instance_style=rng.choice(("host:port", "host:port", "host", "fqdn:port", "ip:port")),
        net=rng.choice(("ib", "ib", "roce")),
        gpu_util=rng.random() < 0.6,
        trainer_gauges=rng.random() < 0.75,
        quirks=quirks,
        herrings=herrings,
    )
    order = _order(seed)
    case.variant = _variant(cls, seed + order[:index].count(cls))
    if cls in ("host-oom",):
        case.herrings.add("ckpt")  # the fatal rise is a save
    return case


def _variant(cls: str, k: int) -> str:
    """The k-th variant of a class (a seed's cases of one class take successive variants)."""
    options = {
        "collective-hang": ("plain", "odd_host", "before_first_step"),
        "network-hang": ("one", "two"),
        "node-death": ("xid79", "silent", "xid74"),
        "host-oom": ("one", "two_saves"),
        "gpu-hardware-fault": ("xid48", "remap", "xid79_gpu"),
        "training-instability": ("nan", "diverge", "grad_spike"),
        "rdma-degradation": ("one", "two", "three"),
        "monitoring-ghost-data": ("dcgm", "node"),
        "healthy": ("plain", "restore_pair", "plain", "plain"),
    }
    choices = options.get(cls, ("plain",))
    return choices[k % len(choices)]


def _order(seed: int) -> list[str]:
    """The seed's classes in case order: two of each, two more healthy, one more node-death and instability."""
    classes = [c for c in CLASSES for _ in range(2)] + [
        "healthy",
        "healthy",
        "training-instability",
        "node-death",
    ]
    random.Random(seed).shuffle(classes)
    return classes


def plan(seed: int, small: bool, only: set[str]) -> list[Case]:
    """About 30 cases over all 13 classes (two of each, a few more healthy ones)."""
    cases = [make_case(seed, i, c, small) for i, c in enumerate(_order(seed))]
    return [c for c in cases if not only or c.cls in only]
