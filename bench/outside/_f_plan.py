"""Outside corpus F (#10): what each case of a seed is (class, fleet, exporters, launcher, framework).

Written blind: nothing here knows the engine. A case is drawn from its own random stream
(seed, index), so a case builds the same whatever else the seed holds.
"""

from __future__ import annotations

import random
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
# name, idle W, training W, max SM MHz, idle SM MHz, memory GiB
SKUS = {
    "H100": ("NVIDIA H100 80GB HBM3", 72.0, 610.0, 1980, 345, 80),
    "H200": ("NVIDIA H200", 78.0, 640.0, 1980, 345, 141),
    "A100": ("NVIDIA A100-SXM4-80GB", 58.0, 330.0, 1410, 210, 80),
}
ZONES = ("UTC", "America/Los_Angeles", "Europe/Berlin", "Asia/Tokyo", "America/New_York", "Asia/Kolkata")
MODELS = ("llama3-8b", "llama3-70b", "mixtral-8x7b", "gpt-20b", "qwen2-14b", "nemotron-15b")


@dataclass
class Case:
    """One job to build.

    Attributes:
        seed, index, cls: where it comes from and its class.
        hosts: host names (the machines; truth names these).
        gpus: GPUs per host.
        sku: SKU key per host (one host may differ).
        gpu_exp: "nvsmi" (nvidia_gpu_exporter) or "dcgm" (dcgm-exporter with Kubernetes labels).
        k8s: launched as a PyTorchJob/JobSet (kubectl logs) rather than by Slurm.
        ext: external labels every series carries (Thanos/federation), possibly empty.
        host_label: which label names the host on DCGM series ("Hostname" or "hostname").
        scrape: GPU exporter scrape interval; node_scrape: node_exporter's.
        framework: "lightning", "torchtitan" or "nemo".
        tz: the log's local time zone.
        model: the model name the log shows.
        restored: the job resumed from a checkpoint.
        rng: the case's random stream.
    """

    seed: int
    index: int
    cls: str
    hosts: list[str]
    gpus: int
    sku: list[str]
    gpu_exp: str
    k8s: bool
    ext: dict[str, str]
    host_label: str
    scrape: int
    node_scrape: int
    framework: str
    tz: str
    model: str
    restored: bool = False
    small: bool = False
    rng: random.Random = field(default_factory=random.Random)

    @property
    def name(self) -> str:
        return f"{self.index:02d}-{self.cls}"


def plan(small: bool) -> list[str]:
    """The classes of a seed, in order: every class twice, healthy six times, restore as pairs."""
    if small:
        return ["network-hang", "restore-resource-leak", "gpu-hardware-fault"]
    body = [c for c in CLASSES if c not in ("healthy", "restore-resource-leak") for _ in range(2)]
    return body + ["healthy"] * 4 + ["restore-resource-leak"] * 2 + ["healthy-pair"]


def _hostnames(rng: random.Random, n: int, k8s: bool) -> list[str]:
    style = rng.choice(("dash", "rack", "fqdn", "cloud") if not k8s else ("rack", "cloud", "dash"))
    first = rng.randrange(1, 60)
    if style == "dash":
        pre = rng.choice(("gpu", "hgx", "dgx", "trn"))
        return [f"{pre}-{first + i:03d}" for i in range(n)]
    if style == "rack":
        per = rng.choice((4, 8))
        rack = rng.randrange(1, 20)
        return [f"r{rack + i // per:02d}n{i % per + 1:02d}" for i in range(n)]
    if style == "fqdn":
        site = rng.choice(("iad2", "sjc1", "fra3"))
        return [f"node{first + i:04d}.{site}.cluster.internal" for i in range(n)]
    zone = rng.choice(("a", "b", "c"))
    return [
        f"ip-10-{rng.randrange(1, 250)}-{rng.randrange(0, 60) + i // 200}-{(first * 7 + i) % 250 + 2}"
        f".us-east-2{zone}.compute.internal"
        for i in range(n)
    ]


def make_case(seed: int, index: int, cls: str, small: bool) -> Case:
    """Draw one case's shape from its own stream."""
    rng = random.Random(seed * 1_000_003 + index * 7919 + 17)
    if small:
        n = 8
    else:
        n = rng.choice((8, 8, 12, 16, 16, 24, 32, 32, 48, 64))
        if index == 5:
            n = 128
    k8s = rng.random() < 0.5
    gpu_exp = (
        "dcgm"
        if cls in ("gpu-driver-fault",) or (k8s and rng.random() < 0.75)
        else rng.choice(("nvsmi", "nvsmi", "dcgm"))
    )
    if cls == "gpu-hardware-fault" and index % 2 == 0:
        gpu_exp = "dcgm"
    hosts = _hostnames(rng, n, k8s)
    base = rng.choice(("H100", "H100", "H200", "A100"))
    sku = [base] * n
    if rng.random() < 0.5 and n >= 8:  # a host with a different SKU (a herring)
        sku[rng.randrange(n)] = "H200" if base != "H200" else "H100"
    scrape = rng.choice((5, 10, 15, 15, 30, 30)) if n <= 32 else rng.choice((30, 60))
    if n >= 128:
        scrape = 60
    node_scrape = scrape if rng.random() < 0.6 else min(60, scrape * 2)
    ext: dict[str, str] = {}
    if rng.random() < 0.4:
        ext = {
            "cluster": rng.choice(("prod-gpu-east", "train-b", "hpc-west")),
            "replica": rng.choice(("A", "B", "prometheus-0")),
        }
    return Case(
        seed=seed,
        index=index,
        cls=cls,
        hosts=hosts,
        gpus=8,
        sku=sku,
        gpu_exp=gpu_exp,
        k8s=k8s,
        ext=ext,
        host_label=rng.choice(("Hostname", "Hostname", "hostname")),
        scrape=scrape,
        node_scrape=node_scrape,
        framework=rng.choice(("lightning", "torchtitan", "nemo")),
        tz=rng.choice(ZONES),
        model=rng.choice(MODELS),
        small=small,
        rng=rng,
    )
