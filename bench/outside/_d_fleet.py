"""Corpus D fleets: host names and how their exporters were deployed (written blind, #10).

A host has one canonical name (what Slurm, the log and DCGM's host label call it) and the other names
real deployments give it: an FQDN in `node_uname_info{nodename}` or in node_exporter's `instance`, a node IP,
a Kubernetes pod IP for the DCGM exporter pod. A `Layout` says which of those each scrape target carries.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuModel:
    """What DCGM's `modelName` says and the power/clock envelope of the part."""

    name: str
    idle_w: float
    train_w: float
    tdp_w: float
    max_clock: int
    idle_clock: int
    fb_mib: int


MODELS = [
    GpuModel("NVIDIA H100 80GB HBM3", 72.0, 610.0, 700.0, 1980, 345, 81559),
    GpuModel("NVIDIA A100-SXM4-80GB", 58.0, 330.0, 400.0, 1410, 210, 81920),
    GpuModel("NVIDIA H200", 76.0, 640.0, 700.0, 1980, 345, 143771),
]


@dataclass
class Host:
    """One node under all its names."""

    name: str  # canonical: Slurm node name = DCGM Hostname = the truth's name
    fqdn: str
    ip: str
    pod_ip: str
    uname: str  # node_uname_info{nodename}
    nics: list[str] = field(default_factory=list)


@dataclass
class Layout:
    """How the exporters were deployed on this cluster."""

    style: str  # slurm-fqdn | slurm-ip | k8s
    dcgm_job: str
    node_job: str
    train_job: str
    dcgm_host_label: str | None  # Hostname | hostname | None (--no-hostname)
    node_by: str  # fqdn | ip | name : what node_exporter's instance holds
    dcgm_release: str
    gpu_util: bool  # DCGM_FI_DEV_GPU_UTIL in the counter set
    ecc_fields: bool  # ECC SBE/DBE uncommented (else remapped rows only)
    ib_retx: bool  # node_exporter >= 1.11 hw counters (retransmits, ACK timeouts)
    node_label: bool  # kube-prometheus-stack relabel of __meta_kubernetes_pod_node_name to `node`
    dcgm_collect_s: int  # DCGM's own collection interval (30 s default)
    trainer_poll_s: int  # how often the trainer's gauges are refreshed
    traits: list[str] = field(default_factory=list)


def stable(*parts: object) -> int:
    """A hash that does not change between processes (str hashes do)."""
    return zlib.crc32("|".join(map(str, parts)).encode())


def _ip(rng: random.Random) -> tuple[int, int, int]:
    return rng.randint(0, 3), rng.randint(0, 31), rng.randint(2, 250)


def make_hosts(rng: random.Random, n: int, nics: int) -> list[Host]:
    """n hosts in one naming style drawn from the seed (on-prem, AWS, ParallelCluster, GCP)."""
    style = rng.choice(["onprem", "aws", "pcluster", "gcp", "dgx"])
    base = rng.randint(1, 200)
    hosts: list[Host] = []
    used: set[str] = set()  # names and addresses: two hosts never share one (a TSDB would merge them)
    rack = rng.randint(1, 9)
    while len(hosts) < n:
        i = base + len(hosts)
        a, b, c = _ip(rng)
        ip = f"10.{a + 1}.{b}.{c}"
        if ip in used:
            continue
        if style == "onprem":
            name, dom = f"gpu-{i:03d}", "cluster.internal"
        elif style == "aws":
            name, dom = f"ip-10-{a + 1}-{b}-{c}", "ec2.internal"
        elif style == "pcluster":
            name, dom = f"gpu-st-p5-48xlarge-{i}", "pcluster.local"
        elif style == "gcp":
            name, dom = f"a3-megagpu-8g-{i:04d}", "us-central1-a.c.llm-train.internal"
        else:
            name, dom = f"dgx-r{rack}{(i // 16) % 10}-{i % 16 + 1:02d}", "hpc.example.org"
        if name in used:
            continue
        pod_ip = f"192.168.{rng.randint(0, 250)}.{rng.randint(2, 250)}"
        if pod_ip in used:
            continue
        used |= {name, ip, pod_ip}
        fqdn = f"{name}.{dom}"
        hosts.append(Host(name, fqdn, ip, pod_ip, name, [f"mlx5_{k}" for k in range(nics)]))
    if style == "onprem":  # some clusters sort names; rank order is Slurm's
        hosts.sort(key=lambda h: h.name)
    return hosts


def make_layout(rng: random.Random, hosts: list[Host], need_retx: bool) -> Layout:
    """One deployment drawn from what clusters run (releases, job names, label sets)."""
    style = rng.choice(["slurm-fqdn", "slurm-ip", "k8s", "k8s", "slurm-fqdn"])
    label = rng.choices(["Hostname", "hostname", None], weights=[6, 3, 2])[0]
    if style == "k8s":
        dcgm_job, node_job = "nvidia-dcgm-exporter", "node-exporter"
        train_job = rng.choice(["trainer-metrics", "pytorch-job"])
        node_by = rng.choice(["ip", "ip", "name"])
    else:
        dcgm_job = rng.choice(["dcgm", "dcgm-exporter", "gpu", "dcgm_exporter"])
        node_job = rng.choice(["node", "node-exporter", "node_exporter", "nodes"])
        train_job = rng.choice(["train", "trainer", "torch"])
        node_by = "fqdn" if style == "slurm-fqdn" else "ip"
    uname_fqdn = rng.random() < 0.5
    for h in hosts:
        h.uname = h.fqdn if uname_fqdn else h.name
    release = rng.choice(["3.1.8-3.1.5", "3.3.5-3.4.0", "3.3.9-3.6.1", "4.1.1-4.0.4", "4.2.3-4.1.1"])
    lay = Layout(
        style=style,
        dcgm_job=dcgm_job,
        node_job=node_job,
        train_job=train_job,
        dcgm_host_label=label,
        node_by=node_by,
        dcgm_release=release,
        gpu_util=rng.random() < 0.85,
        ecc_fields=rng.random() < 0.3,
        ib_retx=need_retx or rng.random() < 0.6,
        node_label=style == "k8s" and rng.random() < 0.6,
        dcgm_collect_s=30 if rng.random() < 0.5 else 0,
        trainer_poll_s=rng.choice([0, 0, 30, 60]),
    )
    lay.traits += [
        f"layout={style}",
        f"dcgm {release} job={dcgm_job} host-label={label}",
        f"node_exporter job={node_job} instance={node_by} uname={'fqdn' if uname_fqdn else 'short'}",
    ]
    if not lay.gpu_util:
        lay.traits.append("no DCGM_FI_DEV_GPU_UTIL (profiling fields only)")
    if lay.dcgm_collect_s:
        lay.traits.append("DCGM 30 s collection")
    if lay.trainer_poll_s:
        lay.traits.append(f"trainer gauges refreshed every {lay.trainer_poll_s} s")
    return lay


def dcgm_target(lay: Layout, h: Host, epoch: int) -> dict[str, str]:
    """Target labels of a host's DCGM exporter (epoch > 0: the pod after a restart)."""
    if lay.style == "k8s":
        suffix = "".join(chr(97 + (stable(h.name, epoch) >> k) % 26) for k in range(0, 25, 5))
        ip = (
            h.pod_ip
            if epoch == 0
            else h.pod_ip.rsplit(".", 1)[0] + f".{(int(h.pod_ip.rsplit('.', 1)[1]) + 7 * epoch) % 250 + 2}"
        )
        pod = (
            "gpu-operator",
            f"nvidia-dcgm-exporter-{suffix}",
            "nvidia-dcgm-exporter",
            "nvidia-dcgm-exporter",
        )
        return {"instance": f"{ip}:9400", "job": lay.dcgm_job} | _k8s(lay, h, pod, "gpu-metrics")
    inst = h.fqdn if lay.style == "slurm-fqdn" else h.name
    return {"instance": f"{inst}:9400", "job": lay.dcgm_job}


def node_target(lay: Layout, h: Host) -> dict[str, str]:
    """Target labels of a host's node_exporter."""
    inst = {"fqdn": h.fqdn, "ip": h.ip, "name": h.name}[lay.node_by]
    labels = {"instance": f"{inst}:9100", "job": lay.node_job}
    if lay.style == "k8s":
        svc = "kube-prometheus-stack-prometheus-node-exporter"
        labels |= _k8s(
            lay,
            h,
            ("monitoring", f"{svc}-{stable(h.name) % 99999:05d}", "node-exporter", svc),
            "http-metrics",
        )
    return labels


def _k8s(lay: Layout, h: Host, pod: tuple[str, str, str, str], endpoint: str) -> dict[str, str]:
    """What a ServiceMonitor's scrape adds: namespace, pod, container, service, endpoint (and `node`)."""
    labels = dict(zip(("namespace", "pod", "container", "service"), pod, strict=True)) | {
        "endpoint": endpoint
    }
    if lay.node_label:
        labels["node"] = h.name
    return labels


def dcgm_gpu_labels(lay: Layout, h: Host, g: int, model: GpuModel, uuid_seed: int) -> dict[str, str]:
    """Per-GPU labels dcgm-exporter adds (by release)."""
    rnd = random.Random(stable(h.name, g, uuid_seed))
    uuid = "GPU-" + "-".join(
        "".join(rnd.choice("0123456789abcdef") for _ in range(k)) for k in (8, 4, 4, 4, 12)
    )
    labels = {"gpu": str(g), "UUID": uuid, "device": f"nvidia{g}", "modelName": model.name}
    major = int(lay.dcgm_release.split(".")[0])
    if major >= 3 and lay.dcgm_release >= "3.3":
        bus = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB][g % 8]
        labels["pci_bus_id"] = f"00000000:{bus:02X}:00.0"
        labels["DCGM_FI_DRIVER_VERSION"] = "550.90.07" if major == 3 else "570.124.06"
    if lay.dcgm_host_label:
        labels[lay.dcgm_host_label] = h.name
    return labels


def k8s_workload_labels(rank: int) -> dict[str, str]:
    """dcgm-exporter --kubernetes: the pod holding the GPU, renamed exported_* by the scrape."""
    return {
        "exported_namespace": "training",
        "exported_pod": f"llm-pretrain-worker-{rank}",
        "exported_container": "pytorch",
    }
