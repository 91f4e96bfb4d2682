"""Corpus G's fleets (#10): sites, host names, GPU models and exporter layouts.

A `Fleet` is what the monitoring of one job sees: its hosts (name, address, rack), its GPUs (model,
count per host, which of them the job owns), how dcgm-exporter and node_exporter are scraped (labels,
instance form, interval, timeout) and what the job logs. Every choice is drawn from a seeded RNG.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Gpu:
    """A GPU model as its exporter reports it.

    Attributes:
        name: `modelName` label (what NVML returns).
        per_host: GPUs on one host.
        tdp: power limit in W; idle: power at rest in W.
        sm_max: SM clock under load (MHz); sm_idle: SM clock at rest; mem_clock: memory clock (MHz).
        fb_mib: frame buffer in MiB.
    """

    name: str
    per_host: int
    tdp: float
    idle: float
    sm_max: float
    sm_idle: float
    mem_clock: float
    fb_mib: float


GPUS = {
    "h100": Gpu("NVIDIA H100 80GB HBM3", 8, 700.0, 72.0, 1980.0, 345.0, 2619.0, 81559.0),
    "h200": Gpu("NVIDIA H200", 8, 700.0, 78.0, 1980.0, 345.0, 3201.0, 143771.0),
    "b200": Gpu("NVIDIA B200", 8, 1000.0, 140.0, 1965.0, 600.0, 3996.0, 183359.0),
    "gb200": Gpu("NVIDIA GB200", 4, 1200.0, 160.0, 2062.0, 645.0, 3996.0, 189471.0),
}


@dataclass
class Host:
    """One node of the job.

    Attributes:
        name: the host name the job log and dcgm-exporter's `Hostname` use (the truth's host).
        ip: its cluster address; fqdn: its DNS name; rack: rack index (warm-rack herrings).
        node_instance: node_exporter's `instance` label; dcgm_instance: dcgm-exporter's.
        exporter_pod: the dcgm-exporter pod name (Kubernetes sites).
    """

    name: str
    ip: str
    fqdn: str
    rack: int
    node_instance: str = ""
    dcgm_instance: str = ""
    exporter_pod: str = ""


@dataclass
class Fleet:
    """Hosts, GPUs and the monitoring layout of one job.

    Attributes:
        site: gcp | aws | cray | hgx.
        layout: k8s (scraped through a service, exported_* labels) | static (file_sd targets).
        gpu: the model; owned: GPU indices the job uses on each host (the others belong to a co-tenant).
        scrape_s: scrape interval; timeout_s: scrape timeout.
        dcgm_new: dcgm-exporter 3.3+/4.x field names (CLOCK_EVENT_REASONS, XID err_code labels);
        dcp: DCP profiling fields and ECC counters (dcp-metrics-included.csv).
        xid_count: the experimental `DCGM_EXP_XID_ERRORS_COUNT` collector is on.
        rdma: ib | roce | efa | none (node_exporter infiniband collector devices).
        nics: RDMA device names; train_gauges: a textfile/pushgateway exports training_* gauges.
        log: torchrun | pytorchjob | composer | raytrain; tz: the log's UTC offset in hours.
    """

    site: str
    layout: str
    gpu: Gpu
    hosts: list[Host]
    owned: list[int]
    scrape_s: float
    timeout_s: float
    dcgm_new: bool
    dcp: bool
    xid_count: bool
    rdma: str
    nics: list[str]
    train_gauges: bool
    log: str
    tz: float
    namespace: str = "training"
    job_name: str = "llm"
    extra: dict = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _pod_suffix(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))


def _hosts(site: str, n: int, rng: random.Random) -> list[Host]:
    """n hosts named as the site names them, with addresses in one /16."""
    b = rng.randint(0, 200)
    hosts = []
    if site == "gcp":
        cluster, proj = rng.choice(["a3mega", "a3u", "trn"]), rng.choice(["ml-prod-417", "llm-train-22"])
        kind = rng.choice(["a3-highgpu-8g", "a3-megagpu-8g", "a3-ultragpu-8g"])
        num = rng.randint(0, 40)
        for i in range(n):
            num += rng.choice([1, 1, 1, 2])
            name = f"{kind}-{cluster}-{num}"
            ip = f"10.{b}.{rng.randint(0, 3)}.{rng.randint(2, 250)}"
            hosts.append(Host(name, ip, f"{name}.c.{proj}.internal", i // 4))
    elif site == "aws":
        for i in range(n):
            ip = f"10.{b}.{rng.randint(16, 200)}.{rng.randint(2, 250)}"
            name = "ip-" + ip.replace(".", "-")
            hosts.append(Host(name, ip, f"{name}.ec2.internal", i // 8))
    elif site == "cray":
        nid = rng.randint(1000, 6000)
        for i in range(n):
            nid += 1 + (4 if i and i % 4 == 0 and rng.random() < 0.3 else 0)
            ip = f"10.{b}.{nid // 250 % 250}.{nid % 250 + 1}"
            hosts.append(Host(f"nid{nid:06d}", ip, f"nid{nid:06d}.hsn.cm.local", nid // 16))
    else:
        rack0 = rng.randint(1, 20)
        per = rng.choice([2, 4])
        for i in range(n):
            name = f"hgx-r{rack0 + i // per:02d}-n{i % per + 1}"
            ip = f"172.{16 + b % 16}.{rack0 + i // per}.{10 + i % per}"
            hosts.append(Host(name, ip, f"{name}.cluster.lan", i // per))
    seen: set[str] = set()
    for h in hosts:  # unique addresses
        while h.ip in seen:
            a = h.ip.split(".")
            h.ip = ".".join(a[:3] + [str((int(a[3]) + 7) % 250 + 2)])
            if site == "aws":
                h.name = "ip-" + h.ip.replace(".", "-")
                h.fqdn = f"{h.name}.ec2.internal"
        seen.add(h.ip)
    return hosts


SITE_GPUS = {
    "gcp": ["h100", "h100", "h200"],
    "aws": ["h100", "h200", "b200"],
    "cray": ["gb200"],
    "hgx": ["b200", "h100"],
}
SITE_LOGS = {
    "gcp": ["pytorchjob", "composer"],
    "aws": ["torchrun", "raytrain"],
    "cray": ["raytrain", "torchrun"],
    "hgx": ["pytorchjob", "composer", "torchrun"],
}
SITE_RDMA = {"gcp": "roce", "aws": "efa", "cray": "none", "hgx": "ib"}


def _nics(rdma: str, rng: random.Random) -> list[str]:
    if rdma == "ib":
        return [f"mlx5_{i}" for i in range(8)]
    if rdma == "roce":
        return [f"mlx5_{i}" for i in range(rng.choice([4, 8]))]
    if rdma == "efa":
        return [f"rdmap{16 + i * 16}s0" for i in range(rng.choice([4, 8]))]
    return []


def make_fleet(rng: random.Random, n: int, needs_rdma: bool = False, site: str | None = None) -> Fleet:
    """A fleet of n hosts on a random site (one with RDMA counters when the story needs them)."""
    sites = ["gcp", "aws", "hgx"] if needs_rdma else ["gcp", "aws", "cray", "hgx"]
    site = site or rng.choice(sites)
    gpu = GPUS[rng.choice(SITE_GPUS[site])]
    hosts = _hosts(site, n, rng)
    layout = "k8s" if site == "gcp" or (site == "hgx" and rng.random() < 0.6) else "static"
    rdma = SITE_RDMA[site]
    log = rng.choice(SITE_LOGS[site])
    if layout == "static" and log in ("pytorchjob", "composer"):
        log = "torchrun"
    owned = list(range(gpu.per_host))
    fl = Fleet(
        site=site,
        layout=layout,
        gpu=gpu,
        hosts=hosts,
        owned=owned,
        scrape_s=rng.choice([10.0, 20.0, 30.0]),
        timeout_s=0.0,
        dcgm_new=rng.random() < 0.7,
        dcp=rng.random() < 0.5,
        xid_count=rng.random() < 0.4,
        rdma=rdma,
        nics=_nics(rdma, rng),
        train_gauges=log == "composer" or rng.random() < 0.35,
        log=log,
        tz=rng.choice([0.0, -5.0, -7.0, 1.0, 8.0, 5.5]) if log != "pytorchjob" else 0.0,
        namespace=rng.choice(["training", "llm-pretrain", "research"]),
        job_name=rng.choice(["llama3-70b-pt", "moe-8x22b", "gpt-neox-20b", "mixtral-ft", "dense-34b"]),
    )
    fl.timeout_s = min(fl.scrape_s, rng.choice([8.0, 10.0, fl.scrape_s]))
    node_ip = rng.random() < 0.5
    for h in hosts:
        h.node_instance = f"{h.ip}:9100" if node_ip else f"{h.fqdn}:9100"
        if layout == "k8s":  # the gpu-operator's exporter pod is not on the host network: a pod address
            h.dcgm_instance = f"192.168.{rng.randint(0, 255)}.{rng.randint(2, 254)}:9400"
        else:
            h.dcgm_instance = f"{h.ip}:9400" if rng.random() < 0.5 else f"{h.fqdn}:9400"
        h.exporter_pod = f"nvidia-dcgm-exporter-{_pod_suffix(rng)}"
    fl.extra["uuid"] = {
        h.name: [
            f"GPU-{_hex(rng, 8)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 12)}"
            for _ in range(gpu.per_host)
        ]
        for h in hosts
    }
    fl.extra["driver"] = rng.choice(["550.127.05", "560.35.03", "570.124.06", "570.133.20"])
    return fl


PCI_BUS = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
GRACE_DOMAINS = ["0008", "0009", "0018", "0019"]


def pci_bus(fl: Fleet, g: int, nvrm: bool = False) -> str:
    """GPU g's PCI address: dcgm-exporter's `pci_bus_id` (8-digit domain) or NVRM's `PCI:dddd:bb:dd`."""
    if fl.gpu.per_host == 4:
        dom, bus = GRACE_DOMAINS[g % 4], "01"
    else:
        dom, bus = "0000", PCI_BUS[g % 8]
    if nvrm:
        return f"{dom}:{bus}:00"
    return f"0000{dom}:{bus.upper()}:00.0"
