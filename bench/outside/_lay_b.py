"""blind-b's exporter layouts: one job's arrays written under the names real exporters use.

GPU side: dcgm-exporter (`Hostname` of releases, `hostname` of HEAD, or no host label with Kubernetes
pod labels), AMD's device-metrics-exporter, or the seed system's `hw_gpu_*` plugin. Host side:
node_exporter (by address, joined to the node through `node_uname_info`, or by name) or the seed's
`hw_*` + `ray_node_*`. Training: `training_*` gauges from rank 0, or the seed's `tb_*` bridge.
Every target gets its own scrape phase, jitter, an occasional missed scrape and sometimes a late start.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.outside._om_b import OpenMetrics
from bench.outside._sim_b import Job


class Target:
    """One scrape target: its timestamps and which scrapes exist."""

    def __init__(self, job: Job, jobname: str, instance: str, late: int = 0) -> None:
        rng = job.rng
        n = len(job.grid)
        self.labels = {"job": jobname, "instance": instance}
        jit = np.clip(rng.normal(0, 0.01, n), -0.03, 0.03) * job.interval
        self.ts = job.grid + rng.uniform(0, 0.9) * job.interval + jit
        self.ok = rng.random(n) > 0.004
        self.ok[:late] = False
        self.dur = rng.gamma(3, 0.01, n)
        self.refused = rng.random(n) < 0.5  # a missed scrape: connection refused, else timed out
        self.refused[:late] = True

    def emit_up(self, om: OpenMetrics, timeout: float) -> None:
        om.add("up", self.labels, self.ts, self.ok.astype(float))
        failed = np.where(self.refused, 0.001, timeout)
        om.add("scrape_duration_seconds", self.labels, self.ts, np.where(self.ok, self.dur, failed))


def _put(
    om: OpenMetrics, name: str, labels: dict[str, str], tg: Target, vals: np.ndarray, ok: Any = None
) -> None:
    keep = tg.ok if ok is None else (tg.ok & ok)
    om.add(name, {**tg.labels, **labels}, tg.ts[keep], np.asarray(vals, dtype=float)[keep])


def _held(job: Job, arr: np.ndarray, period: float) -> np.ndarray:
    """DCGM collects every `period` s: a faster scrape repeats the last collected value."""
    if period <= job.interval:
        return arr
    slot = np.floor((job.grid - job.grid[0] + job.rng.uniform(0, period)) / period)
    first = np.concatenate([[0], np.flatnonzero(np.diff(slot)) + 1])
    take = first[np.searchsorted(first, np.arange(len(slot)), side="right") - 1]
    return arr[..., take]


def _uuid(rng: np.random.Generator) -> str:
    h = "".join(f"{x:02x}" for x in rng.integers(0, 256, 16))
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _gpu_target(job: Job, om: OpenMetrics, cfg: dict[str, Any], h: int, port: int) -> Target:
    """A GPU exporter's target on host h: its driver-fault gaps are timed-out scrapes."""
    tg = Target(job, cfg["gpu_job"], f"{job.ips[h]}:{port}", late=cfg["late"].get(h, 0))
    tg.ok &= ~job.gpu_gap[h]
    tg.refused &= ~job.gpu_gap[h]
    tg.emit_up(om, 10.0)
    return tg


def _gpu_seen(job: Job, h: int, g: int) -> np.ndarray:
    """False from the scrape on which a GPU that fell off the bus stops answering its exporter."""
    seen = np.ones(len(job.grid), dtype=bool)
    lost = job.meta.get("gpu_lost")
    if lost and lost[:2] == (h, g):
        seen[lost[2] :] = False
    return seen


DCGM_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": "util",
    "DCGM_FI_DEV_POWER_USAGE": "power",
    "DCGM_FI_DEV_GPU_TEMP": "temp",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock",
    "DCGM_FI_DEV_FB_USED": "fb_used",
    "DCGM_FI_DEV_XID_ERRORS": "xid",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "pcie_replay",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy",
}
ECC_FIELDS = {
    "ecc": {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc_sbe", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_dbe"},
    "remap": {
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "remap_corr",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "remap_uncorr",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": "remap_fail",
    },
}


def emit_dcgm(job: Job, om: OpenMetrics, cfg: dict[str, Any]) -> None:
    rng = job.rng
    fields = {**DCGM_FIELDS, **ECC_FIELDS[cfg["ecc_mode"]]}
    arrays = {f: _held(job, job.gpu[k], cfg["dcgm_period"]) for f, k in fields.items()}
    fb_total = job.spec[3]
    for h, host in enumerate(job.hosts):
        tg = _gpu_target(job, om, cfg, h, 9400)
        for g in range(job.gpus):
            lab = {
                "gpu": str(g),
                "UUID": _uuid(rng),
                "device": f"nvidia{g}",
                "modelName": job.gpu_model,
                "pci_bus_id": f"00000000:{0x18 + 0x10 * g:02X}:00.0",
                "DCGM_FI_DRIVER_VERSION": cfg["driver"],
            }
            if cfg["dcgm_host"]:
                lab[cfg["dcgm_host"]] = host
            if cfg["k8s"]:
                lab.update(
                    pod=f"{job.meta['job_name']}-worker-{h}", namespace="training", container="trainer"
                )
            seen = _gpu_seen(job, h, g)
            for f, arr in arrays.items():
                _put(om, f, lab, tg, arr[h, g], seen)
            free = fb_total - arrays["DCGM_FI_DEV_FB_USED"][h, g]
            _put(om, "DCGM_FI_DEV_FB_FREE", lab, tg, free, seen)


def emit_amd(job: Job, om: OpenMetrics, cfg: dict[str, Any]) -> None:
    rng = job.rng
    for h, host in enumerate(job.hosts):
        tg = _gpu_target(job, om, cfg, h, 5000)
        for g in range(job.gpus):
            lab = {
                "gpu_id": str(g),
                "hostname": host,
                "gpu_partition_id": "0",
                "card_series": "AMD Instinct MI300X OAM",
                "card_model": "MI300X",
                "serial_number": f"PCB0{int(rng.integers(10**8, 10**9))}",
                "gpu_compute_partition_type": "spx",
                "driver_version": "6.10.5",
            }
            _put(om, "gpu_package_power", lab, tg, job.gpu["power"][h, g])
            _put(om, "gpu_junction_temperature", lab, tg, job.gpu["temp"][h, g])
            _put(om, "gpu_edge_temperature", lab, tg, job.gpu["temp"][h, g] - 9)
            _put(om, "gpu_gfx_activity", lab, tg, np.round(job.gpu["util"][h, g]))
            _put(
                om,
                "gpu_clock",
                {**lab, "clock_type": "GPU_CLOCK_TYPE_SYSTEM", "clock_index": "0"},
                tg,
                job.gpu["sm_clock"][h, g],
            )
            _put(om, "gpu_used_vram", lab, tg, job.gpu["fb_used"][h, g])
            _put(om, "gpu_total_vram", lab, tg, np.full(len(job.grid), job.spec[3]))
            _put(om, "gpu_ecc_correct_total", lab, tg, job.gpu["ecc_sbe"][h, g])
            _put(om, "gpu_ecc_uncorrect_total", lab, tg, job.gpu["ecc_dbe"][h, g])


def emit_node_exporter(job: Job, om: OpenMetrics, cfg: dict[str, Any]) -> None:
    for h, host in enumerate(job.hosts):
        inst = f"{job.ips[h]}:9100" if cfg["node_by_ip"] else f"{host}:9100"
        tg = Target(job, cfg["node_job"], inst)
        tg.emit_up(om, 10.0)
        hs = job.host
        uname = {
            "nodename": host,
            "sysname": "Linux",
            "machine": "x86_64",
            "release": "5.15.0-119-generic",
            "domainname": "(none)",
            "version": "#129-Ubuntu SMP",
        }
        _put(om, "node_uname_info", uname, tg, np.ones(len(job.grid)))
        _put(om, "node_memory_MemTotal_bytes", {}, tg, hs["mem_total"][h])
        avail = hs["mem_total"][h] - hs["mem_used"][h]
        _put(om, "node_memory_MemAvailable_bytes", {}, tg, avail)
        _put(om, "node_memory_MemFree_bytes", {}, tg, avail * 0.6)
        _put(om, "node_vmstat_oom_kill", {}, tg, hs["oom_kills"][h])
        _put(om, "node_procs_running", {}, tg, hs["procs_running"][h])
        _put(om, "node_procs_blocked", {}, tg, hs["procs_blocked"][h])
        _put(om, "node_netstat_Tcp_RetransSegs", {}, tg, hs["tcp_retrans"][h])
        _put(om, "node_context_switches_total", {}, tg, hs["ctx_switches"][h])
        stall = np.cumsum(hs["io_full_pct"][h] / 100 * job.interval) + 1e4 * (h + 1)
        _put(om, "node_pressure_io_stalled_seconds_total", {}, tg, stall)
        _put(om, "node_pressure_io_waiting_seconds_total", {}, tg, stall * 1.4)
        _put(om, "node_load1", {}, tg, hs["procs_running"][h] * 0.9)
        for k in range(job.nics):
            lab = {"device": f"mlx5_{k}", "port": "1"}
            _put(om, "node_infiniband_port_data_transmitted_bytes_total", lab, tg, job.nic["tx_bytes"][h, k])
            _put(om, "node_infiniband_state_id", lab, tg, np.full(len(job.grid), 4.0))
            if cfg["rdma_hw"]:
                _put(om, "node_infiniband_roce_adp_retransmits_total", lab, tg, job.nic["retx"][h, k])
                _put(om, "node_infiniband_local_ack_timeout_err_total", lab, tg, job.nic["ack_timeout"][h, k])


def emit_seed_hw(job: Job, om: OpenMetrics, cfg: dict[str, Any]) -> None:
    """The seed system: one node_hw target per host (GPU + host plugins) and one Ray target."""
    for h, host in enumerate(job.hosts):
        tg = Target(job, "node_hw", f"{host}:9400", late=cfg["late"].get(h, 0))
        tg.emit_up(om, 8.0)
        gok = ~job.gpu_gap[h]
        hl = {"host": host}
        _put(om, "hw_scrape_duration_seconds", hl, tg, job.gpu_scrape_s[h])
        for g in range(job.gpus):
            lab = {"host": host, "gpu": str(g)}
            _put(om, "hw_gpu_power_watts", lab, tg, np.round(job.gpu["power"][h, g], 1), gok)
            _put(om, "hw_gpu_temperature_celsius", lab, tg, np.round(job.gpu["temp"][h, g], 1), gok)
            _put(
                om, "hw_gpu_clock_mhz", {**lab, "type": "sclk"}, tg, np.round(job.gpu["sm_clock"][h, g]), gok
            )
            _put(om, "hw_gpu_vram_used_bytes", lab, tg, job.gpu["fb_used"][h, g] * 2**20, gok)
            _put(om, "hw_gpu_ras_umc_ce_total", lab, tg, job.gpu["ecc_sbe"][h, g], gok)
            _put(om, "hw_gpu_ras_umc_ue_total", lab, tg, job.gpu["ecc_dbe"][h, g], gok)
            _put(om, "hw_gpu_pcie_correctable_total", lab, tg, job.gpu["pcie_replay"][h, g], gok)
        hs = job.host
        _put(om, "hw_dmesg_gpu_errors_total", hl, tg, job.gpu["dmesg"][h, 0])
        for name, key in (
            ("hw_procs_running", "procs_running"),
            ("hw_procs_blocked", "procs_blocked"),
            ("hw_oom_kills_total", "oom_kills"),
            ("hw_tcp_retransmits_total", "tcp_retrans"),
            ("hw_io_pressure_full_pct", "io_full_pct"),
            ("hw_context_switches_total", "ctx_switches"),
        ):
            _put(om, name, hl, tg, hs[key][h])
        for k in range(job.nics):
            lab = {"host": host, "device": f"ionic_{k}", "port": "1"}
            _put(om, "hw_rdma_tx_retx_pkts_total", lab, tg, job.nic["retx"][h, k])
            _put(om, "hw_rdma_tx_ack_timeout_total", lab, tg, job.nic["ack_timeout"][h, k])
            _put(om, "hw_rdma_tx_bytes_total", lab, tg, job.nic["tx_bytes"][h, k])
            _put(om, "hw_rdma_port_state", lab, tg, np.ones(len(job.grid)))
        ray = Target(job, "ray", f"{host}:55080")
        ray.emit_up(om, 10.0)
        rl = {"ip": job.ips[h], "SessionName": "session_2026", "IsHeadNode": str(h == 0).lower()}
        _put(om, "ray_node_mem_used", rl, ray, hs["mem_used"][h])
        _put(om, "ray_node_mem_total", rl, ray, hs["mem_total"][h])
        for g in range(job.gpus):
            gl = {**rl, "GpuIndex": str(g), "GpuDeviceName": job.gpu_model}
            _put(om, "ray_node_gpus_utilization", gl, ray, np.round(job.gpu["util"][h, g]))
