"""Corpus C: what each case is (class, variant, size, naming, exporter layout, red herrings).

Written blind (#10): from the diagnosis contract, the seed-system digest and the exporters' own docs,
without reading the engine or the other outside generators. Everything is drawn from one
`random.Random(seed)` so a seed gives the same corpus.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# (class, variant) -> how many a seed; the variants are what the scenario module knows how to build
MENU: list[tuple[str, str, int]] = [
    ("healthy", "plain", 7),
    ("healthy", "pair", 1),
    ("collective-hang", "mid", 2),
    ("collective-hang", "prestep", 1),
    ("collective-hang", "oddhost", 1),
    ("network-hang", "retx", 2),
    ("network-hang", "acktimeout", 1),
    ("node-death", "silent", 1),
    ("node-death", "zero", 1),
    ("node-death", "xid79", 1),
    ("node-death", "slurm", 1),
    ("heartbeat-false-positive", "plain", 3),
    ("host-oom", "staircase", 2),
    ("host-oom", "two", 1),
    ("thermal-straggler", "ramp", 3),
    ("rdma-degradation", "one", 2),
    ("rdma-degradation", "two", 1),
    ("restore-resource-leak", "pair", 2),
    ("monitoring-ghost-data", "gpu", 1),
    ("monitoring-ghost-data", "node", 1),
    ("gpu-driver-fault", "gaps", 2),
    ("gpu-hardware-fault", "ecc", 1),
    ("gpu-hardware-fault", "xid", 1),
    ("gpu-hardware-fault", "remap", 1),
    ("training-instability", "diverge", 2),
    ("training-instability", "gradnorm", 1),
]

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

CLASHES = {
    "gpu-driver-fault": ("exporter_restart",),
    "monitoring-ghost-data": ("exporter_restart",),
    "gpu-hardware-fault": ("ce_burst",),
    "training-instability": ("loss_spike",),
    "node-death": ("exporter_restart",),
}
HERRINGS = ["warm_host", "slow_disk", "ce_burst", "retx_few", "eval_phase", "loss_spike", "exporter_restart"]


@dataclass
class Layout:
    """How the exporters are deployed on this cluster."""

    gpu: str  # dcgm | amd-dme
    host_label: str  # Hostname | hostname | none
    node_instance: str  # name | ip
    kube: bool  # Kubernetes labels and job names
    dcgm_ecc: str  # sbe-dbe | remap (default counter sets)
    amd_power: str  # gpu_package_power | gpu_power_usage
    amd_prefix: str  # "" | "amd_"
    dcgm_collect_30s: bool
    training_gauges: bool
    ib_hw_counters: bool  # node_exporter >= 1.11 RDMA hw counters
    gpu_late_scrapes: int  # GPU exporter comes up this many scrapes late
    jobs: dict[str, str] = field(default_factory=dict)  # role -> scrape job name


@dataclass
class Spec:
    """One case to build."""

    name: str
    cls: str
    variant: str
    seed: int
    hosts: list[str]
    ips: list[str]
    gpus: int
    interval: float
    hours: float
    step_s: float
    start: float
    layout: Layout
    herrings: list[str]
    slurm: bool
    model: str
    gpu_model: str


def _host_names(rng: random.Random, n: int) -> list[str]:
    style = rng.choice(["slurm", "rack", "fqdn", "pod", "aws", "dgx"])
    if style == "slurm":
        base = rng.choice(["gpu", "node", "cn", "hpc"])
        first = rng.randint(1, 300)
        return [f"{base}{first + i:04d}" for i in range(n)]
    if style == "rack":
        rows = rng.choice("abcdefgh")
        return [f"{rows}{i // 8 + 1:02d}r{i % 8 + 1:02d}-gpu" for i in range(n)]
    if style == "fqdn":
        dom = rng.choice(["cluster.internal", "hpc.example.org", "ml.corp.example"])
        return [f"sxm{100 + i}.{dom}" for i in range(n)]
    if style == "pod":
        job = rng.choice(["llama-pretrain", "moe-sft", "mixtral-run"])
        tag = "".join(rng.choice("0123456789abcdef") for _ in range(5))
        return [f"{job}-{tag}-worker-{i}" for i in range(n)]
    if style == "aws":
        third = rng.randint(0, 200)
        return [f"ip-10-{third}-{i // 200}-{10 + i % 200}" for i in range(n)]
    return [f"dgx-h{rng.randint(1, 9)}-{i + 1:03d}" for i in range(n)]


def _ips(rng: random.Random, n: int) -> list[str]:
    a, b = rng.randint(10, 10), rng.randint(0, 250)
    return [f"{a}.{b}.{(i + 16) // 250}.{(i + 16) % 250 + 2}" for i in range(n)]


def _layout(rng: random.Random, cls: str) -> Layout:
    gpu = "amd-dme" if rng.random() < 0.35 else "dcgm"
    kube = rng.random() < 0.4
    jobs = {
        "node": rng.choice(["node", "node-exporter", "kubernetes-nodes", "prometheus-node-exporter"]),
        "gpu": rng.choice(["dcgm", "nvidia-dcgm-exporter", "gpu-metrics"])
        if gpu == "dcgm"
        else rng.choice(["amd-device-metrics-exporter", "amd-gpu", "gpu-metrics"]),
        "train": rng.choice(["trainer", "pytorch-job", "training-metrics"]),
    }
    if kube:
        jobs["node"] = "serviceMonitor/monitoring/node-exporter/0"
        jobs["gpu"] = f"serviceMonitor/gpu-operator/{'dcgm' if gpu == 'dcgm' else 'amd'}-exporter/0"
    host_label = rng.choice(["Hostname", "Hostname", "hostname", "none"]) if gpu == "dcgm" else "hostname"
    return Layout(
        gpu=gpu,
        host_label=host_label,
        node_instance="ip" if rng.random() < 0.4 or host_label == "none" else "name",
        kube=kube,
        dcgm_ecc="remap" if rng.random() < 0.5 else "sbe-dbe",
        amd_power=rng.choice(["gpu_package_power", "gpu_power_usage"]),
        amd_prefix="amd_" if rng.random() < 0.25 else "",
        dcgm_collect_30s=rng.random() < 0.3,
        training_gauges=cls == "training-instability" or rng.random() < 0.8,
        ib_hw_counters=cls in ("network-hang", "rdma-degradation") or rng.random() < 0.7,
        gpu_late_scrapes=rng.choice([0, 0, 0, 1, 2]),
        jobs=jobs,
    )


def _size(rng: random.Random) -> tuple[int, int, float, float]:
    """Hosts, GPUs a host, scrape interval and hours, within a sample budget for a fast build."""
    hosts = rng.choice([16, 16, 24, 32, 32, 48, 64, 96])
    gpus = rng.choice([4, 8, 8, 8])
    hours = round(rng.uniform(1.0, 3.0), 2)
    interval = rng.choice([5, 10, 15, 15, 20, 30, 30, 60])
    while hosts * gpus * hours * 3600 / interval > 160_000 and interval < 60:
        interval = {5: 10, 10: 15, 15: 20, 20: 30, 30: 60}[interval]
    while hosts * gpus * hours * 3600 / interval > 160_000 and hours > 1.0:
        hours = round(max(1.0, hours - 0.25), 2)
    return hosts, gpus, float(interval), hours


def plan_cases(seed: int) -> list[Spec]:
    """Every case of one seed, in a fixed order."""
    rng = random.Random(f"corpus-c:{seed}")
    specs = []
    for cls, variant, count in MENU:
        for k in range(count):
            hosts, gpus, interval, hours = _size(rng)
            names = _host_names(rng, hosts)
            layout = _layout(rng, cls)
            if variant == "remap":
                layout.dcgm_ecc = "remap"
            n_herr = rng.choice([1, 2, 2, 3]) if cls == "healthy" else rng.choice([0, 1, 1])
            herrings = [h for h in rng.sample(HERRINGS, n_herr) if h not in CLASHES.get(cls, ())]
            if cls == "healthy" and k == 0:
                herrings = sorted(set(herrings) | {"exporter_restart"})
            specs.append(
                Spec(
                    name=f"{len(specs):02d}-{cls}-{variant}",
                    cls=cls,
                    variant=variant,
                    seed=rng.randrange(2**31),
                    hosts=names,
                    ips=_ips(rng, hosts),
                    gpus=gpus,
                    interval=interval,
                    hours=hours,
                    step_s=round(rng.uniform(4.0, 30.0), 1),
                    start=float(rng.randint(1_790_000_000, 1_795_000_000) // 60 * 60),
                    layout=layout,
                    herrings=herrings,
                    slurm=not layout.kube,
                    model=rng.choice(
                        ["llama3-70b", "llama2-70b", "mixtral-8x22b", "gpt3-175b", "deepseek-v3"]
                    ),
                    gpu_model=("MI300X" if rng.random() < 0.6 else "MI355X")
                    if layout.gpu == "amd-dme"
                    else rng.choice(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA H200"]),
                )
            )
    return specs
