"""Corpus E: scrape targets and the DCGM exporter's series (dcp-metrics-included.csv deployment) (#10).

A `Target` is one Prometheus scrape target (job + instance + the labels its discovery adds); it owns its series
(name, labels, values on the grid; NaN = no sample). Quirks act on targets: gaps, restarts, a frozen
exporter, a second job scraping the same exporter, a pod that comes back under another name.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

import numpy as np

from bench.outside._e_fleet import Fleet
from bench.outside._e_plan import GPUS, Case
from bench.outside._e_time import Timeline


@dataclass
class Target:
    """One scrape target and its series.

    Attributes:
        job, instance, labels: the target's identity; host: index of its node.
        offset: the target's scrape phase (s); alive: scraped successfully; configured: known to Prometheus.
        freeze: grid index from which the exporter serves stale values; slow_scrape: scrape seconds per sample.
        dup_job: a second job name scraping the same exporter; series: (name, labels, values).
    """

    job: str
    instance: str
    host: int
    offset: float
    alive: np.ndarray
    configured: np.ndarray
    labels: dict[str, str] = field(default_factory=dict)
    freeze: int | None = None
    slow_scrape: np.ndarray | None = None
    dup_job: str | None = None
    series: list[tuple[str, dict[str, str], np.ndarray]] = field(default_factory=list)


def ip_of(case: Case, h: int) -> str:
    return f"10.{40 + case.index % 50}.{h // 200}.{11 + h % 200}"


def instance(case: Case, h: int, port: int, kube_pod_ip: bool = False) -> str:
    host = case.hosts[h]
    style = case.instance_style
    if kube_pod_ip or style == "ip:port":
        return f"{ip_of(case, h)}:{port}"
    if style == "host":
        return host
    if style == "fqdn:port":
        return f"{host}.cluster.example.com:{port}"
    return f"{host}:{port}"


def _uuid(case: Case, h: int, g: int) -> str:
    d = hashlib.sha1(f"{case.seed}-{h}-{g}".encode()).hexdigest()
    return f"GPU-{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:32]}"


PCI = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


def gpu_labels(case: Case, h: int, g: int) -> dict[str, str]:
    return {
        "gpu": str(g),
        "UUID": _uuid(case, h, g),
        "pci_bus_id": f"00000000:{PCI[g]}:00.0",
        "device": f"nvidia{g}",
        "modelName": GPUS[case.gpu_model][0],
        "Hostname": case.hosts[h],
        "DCGM_FI_DRIVER_VERSION": {"H100": "535.161.08", "A100": "535.161.08", "B200": "570.124.06"}[
            case.gpu_model
        ],
    }


def _xid(case: Case, tl: Timeline, grid: np.ndarray, h: int, g: int, prng: random.Random) -> np.ndarray:
    x = np.zeros(grid.size)
    if "old_xid" in case.herrings and (h, g) == _old_xid_slot(case):
        x[:] = 13.0 if case.seed % 2 else 43.0  # a previous job's Xid, held by the gauge
    ev = tl.ev
    if "xid" in ev and int(ev["dead_host"]) == h and int(ev["xid_gpu"]) == g:
        x[grid >= ev["xid"]] = ev["xid_code"]
    if "hw" in ev and int(ev["hw_host"]) == h and int(ev["hw_gpu"]) == g:
        code = {"xid48": 48.0, "remap": 63.0, "xid79_gpu": 79.0}[case.variant]
        x[grid >= ev["hw"]] = code
        if case.variant == "remap":
            x[grid >= (tl.crash or 0) - 5] = 48.0
    if "driver" in ev and int(ev["drv_host"]) == h and int(ev["drv_gpu"]) == g:
        x[grid >= ev["driver"]] = 119.0
    return x


def _old_xid_slot(case: Case) -> tuple[int, int]:
    r = random.Random(case.seed + 77)
    return r.randrange(len(case.hosts)), r.randrange(8)


def _gpu_values(case: Case, tl: Timeline, fl: Fleet, h: int, g: int, rng: np.random.Generator) -> dict:
    name, idle, bw_w, train_w, max_clk, fb, _ = GPUS[case.gpu_model]
    act, ten, bw = fl.act[h, g], fl.tensor[h, g], fl.bw[h, g]
    t = fl.grid.size
    power = idle + (train_w - idle) * act * (0.2 + 0.8 * ten) + bw * bw_w
    power = power * (1 + rng.normal(0, 0.025, t))
    energy = np.cumsum(power * case.scrape_s * 1000.0) + rng.uniform(1e9, 9e10)
    util = np.clip(100 * np.maximum(act, bw) + rng.normal(0, 1.5, t), 0, 100).round()
    busy = (act > 0.3) | (bw > 0)
    fb_used = np.where(busy | (fl.grid > tl.train_start) & fl.job_on, fb * rng.uniform(0.78, 0.9), 520.0)
    thr = np.where(act < 0.05, 1.0, np.where(rng.random(t) < 0.18, 4.0, 0.0))
    hot = fl.clock[h, g] < max_clk * 0.9
    thr[hot & (act > 0.3)] = 96.0  # SW + HW thermal slowdown
    ten_scale = {"H100": 0.42, "A100": 0.36, "B200": 0.51}[case.gpu_model]
    return {
        "DCGM_FI_DEV_SM_CLOCK": fl.clock[h, g].round(),
        "DCGM_FI_DEV_MEM_CLOCK": np.full(t, {"H100": 2619.0, "A100": 1593.0, "B200": 3996.0}[case.gpu_model]),
        "DCGM_FI_DEV_GPU_TEMP": fl.temp[h, g].round(),
        "DCGM_FI_DEV_MEMORY_TEMP": (fl.temp[h, g] + 6 + rng.normal(0, 0.5, t)).round(),
        "DCGM_FI_DEV_POWER_USAGE": power.round(3),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": energy.round(),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": np.zeros(t),
        "DCGM_FI_DEV_GPU_UTIL": util,
        "DCGM_FI_DEV_MEM_COPY_UTIL": np.clip(act * 38 + rng.normal(0, 2, t), 0, 100).round(),
        "DCGM_FI_DEV_FB_USED": fb_used.round(),
        "DCGM_FI_DEV_FB_FREE": (fb - fb_used).round(),
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": np.full(t, float(rng.choice([0, 0, 0, 1, 2]))),
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": np.zeros(t),
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": np.zeros(t),
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": thr,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": np.clip(act * 0.96 + bw * 0.99 + rng.normal(0, 0.01, t), 0, 1).round(
            4
        ),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": np.clip(
            act * ten * ten_scale + rng.normal(0, 0.005, t), 0, 1
        ).round(4),
        "DCGM_FI_PROF_DRAM_ACTIVE": np.clip(act * (0.08 + 0.3 * ten) + bw * 0.004, 0, 1).round(4),
        "DCGM_FI_PROF_NVLINK_TX_BYTES": (
            act * ten * rng.uniform(6e10, 9e10) * (1 + rng.normal(0, 0.05, t))
        ).round(),
        "DCGM_FI_PROF_NVLINK_RX_BYTES": (
            act * ten * rng.uniform(6e10, 9e10) * (1 + rng.normal(0, 0.05, t))
        ).round(),
        "DCGM_FI_PROF_PCIE_TX_BYTES": (2e7 + act * 4e8 + fl.ckpt * 6e9 * (g in case.gpus)).round(),
        "DCGM_FI_PROF_PCIE_RX_BYTES": (2e7 + act * 9e8 + rng.exponential(1e7, t)).round(),
    }


def _gpu_story(case: Case, tl: Timeline, fl: Fleet, h: int, g: int, vals: dict) -> None:
    ev, grid = tl.ev, fl.grid
    if "hw" in ev and int(ev["hw_host"]) == h and int(ev["hw_gpu"]) == g:
        vals["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"][grid >= ev["hw"]] = 1.0
        if case.variant == "remap":
            vals["DCGM_FI_DEV_ROW_REMAP_FAILURE"][grid >= (tl.crash or 0) - 5] = 1.0
        if case.variant == "xid79_gpu":
            vals["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"][grid >= ev["hw"] - 40] = 37.0
            for v in vals.values():
                v[grid >= ev["hw"] + case.scrape_s] = np.nan  # the GPU left the bus; DCGM stops reporting it


def dcgm_targets(case: Case, tl: Timeline, fl: Fleet, prng: random.Random) -> list[Target]:
    """One dcgm-exporter per node: every GPU's fields (no ECC counters; no GPU_UTIL in some clusters)."""
    rng = np.random.default_rng(case.seed + 5)
    kube = case.instance_style in ("host", "ip:port")
    out = []
    for h in range(len(case.hosts)):
        labels = (
            {
                "namespace": "gpu-operator",
                "pod": f"nvidia-dcgm-exporter-{_pod(case, h, 0)}",
                "container": "nvidia-dcgm-exporter",
                "service": "nvidia-dcgm-exporter",
            }
            if kube
            else {}
        )
        tgt = Target(
            job="nvidia-dcgm-exporter" if kube else "dcgm",
            instance=instance(case, h, 9400, kube_pod_ip=kube),
            host=h,
            offset=prng.uniform(0, case.scrape_s * 0.9),
            alive=np.ones(fl.grid.size, bool),
            configured=np.ones(fl.grid.size, bool),
            labels=labels,
        )
        for g in range(8):
            vals = _gpu_values(case, tl, fl, h, g, rng)
            vals["DCGM_FI_DEV_XID_ERRORS"] = _xid(case, tl, fl.grid, h, g, prng)
            _gpu_story(case, tl, fl, h, g, vals)
            if not case.gpu_util:
                del vals["DCGM_FI_DEV_GPU_UTIL"]
            for name, v in vals.items():
                tgt.series.append((name, gpu_labels(case, h, g), v))
        out.append(tgt)
    return out


def _pod(case: Case, h: int, gen: int) -> str:
    return hashlib.md5(f"{case.seed}{h}{gen}".encode()).hexdigest()[:5]
