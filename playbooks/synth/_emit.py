"""Turn a simulated job into exporter series of one metric profile (AMD seed system or standard exporters).

`series(job)` yields `(family, labels, timestamps, values, fmt)` grouped by family, in the exact
metric names and labels the exporters use (seed-system.md §4 for `amd`; `_standard` for dcgm-exporter
or AMD's device-metrics-exporter with node_exporter and `training_*` gauges, deployed as `_deploy`
says). NaN values are samples the exporter did not produce.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ._deploy import Exporters
from ._sim import Job
from ._standard import standard_series

Item = tuple[str, dict[str, str], np.ndarray, np.ndarray, str]
MIB = 1024.0**2


def _ip(job: Job, h: int) -> str:
    return f"10.{12 + (job.seed % 50)}.{h // 250}.{11 + h % 250}"


def _mask(job: Job, h: int, vals: np.ndarray, *, gpu: bool = False, hw: bool = True) -> np.ndarray:
    """Apply exporter absence, GPU-plugin gaps and ghost freezing to one host's series."""
    v = np.array(vals, dtype=float, copy=True)
    if hw and h in job.frozen_from:
        i = job.frozen_from[h]
        v[i : job.frozen_to.get(h, len(v))] = v[i]
    pres = job.gpu_present[h] if gpu else job.present[h]
    v[~pres] = np.nan
    return v


def _tb_series(job: Job, name_map: dict[str, str], labels: dict[str, str]) -> Iterator[Item]:
    exp = job.tb_exported
    t_real = job.step_end[exp]
    idx_real = np.nonzero(exp)[0]
    fill_t = np.array([f[0] for f in job.fills]) if job.fills else np.zeros(0)
    fill_i = np.array([f[1] for f in job.fills], dtype=int) if job.fills else np.zeros(0, int)
    ts = np.concatenate([t_real, fill_t])
    src = np.concatenate([idx_real, fill_i])
    is_fill = np.concatenate([np.zeros(len(t_real)), np.ones(len(fill_t))])
    order = np.argsort(ts, kind="stable")
    ts, src, is_fill = ts[order], src[order], is_fill[order]
    per_step = {
        "step": job.step_num.astype(float),
        "loss": job.loss,
        "grad_norm": job.grad_norm,
        "raw_grad_norm": job.raw_grad_norm,
        "lr": job.lr,
        "step_time": job.step_secs,
        "tgs": job.tgs,
        "tflops_s": job.tflops_s,
        "tflops": job.tflops_s * job.step_secs,
        "tokens": np.full(len(job.step_num), float(job.tokens)),
        "moe_lb": job.moe_lb,
    }
    for key, metric in name_map.items():
        if key == "moe_lb" and not job.moe:
            continue
        if key == "fill":
            yield metric, labels, ts, is_fill, "d"
            continue
        fmt = "d" if key == "step" else "g"
        yield metric, labels, ts, per_step[key][src], fmt


#: (metric, RAS/PCIe counter key) of the seed system's per-GPU error counters
_AMD_GPU_COUNTERS = (
    ("hw_gpu_ras_umc_ue_total", "umc_ue"),
    ("hw_gpu_ras_umc_ce_total", "umc_ce"),
    ("hw_gpu_ras_xgmi_ue_total", "xgmi_ue"),
    ("hw_gpu_ras_xgmi_ce_total", "xgmi_ce"),
    ("hw_gpu_ras_gfx_ue_total", "gfx_ue"),
    ("hw_gpu_pcie_correctable_total", "pcie_corr"),
    ("hw_gpu_pcie_nonfatal_total", "pcie_nonfatal"),
    ("hw_gpu_pcie_fatal_total", "pcie_fatal"),
)
#: (metric, host signal key or None for always 0, format) of node_hw's host series
_AMD_HOST = (
    ("hw_tcp_retransmits_total", "tcp_retrans", "d"),
    ("hw_tcp_listen_drops_total", "listen_drops", "d"),
    ("hw_tcp_listen_overflows_total", "listen_drops", "d"),
    ("hw_tcp_abort_on_timeout_total", "tcp_abort", "d"),
    ("hw_tcp_estab_resets_total", None, "d"),
    ("hw_procs_running", "running", "d"),
    ("hw_procs_blocked", "blocked", "d"),
    ("hw_context_switches_total", "ctx", "d"),
    ("hw_oom_kills_total", "oom", "d"),
    ("hw_mem_dirty_bytes", "dirty", "d"),
    ("hw_mem_writeback_bytes", "writeback", "d"),
    ("hw_io_pressure_some_pct", "io_some", "f2"),
    ("hw_io_pressure_full_pct", "io_full", "f2"),
    ("hw_dmesg_gpu_errors_total", "dmesg", "d"),
    ("hw_gpu_user_processes", "gpu_procs", "d"),
    ("hw_scrape_duration_seconds", "scrape", "f3"),
)
#: (metric, NIC signal key, format) of node_hw's RDMA series
_AMD_NIC = (
    ("hw_rdma_tx_retx_pkts_total", "retx", "d"),
    ("hw_rdma_tx_ack_timeout_total", "ack", "d"),
    ("hw_rdma_rx_cnp_pkts_total", "cnp", "d"),
    ("hw_rdma_req_tx_retry_excd_err_total", "retry_excd", "d"),
    ("hw_rdma_req_rx_cqe_err_total", "cqe", "d"),
    ("hw_rdma_tx_bytes_total", "tx_bytes", "d"),
    ("hw_rdma_port_state", "port", "d"),
)
#: TensorBoard bridge: per-step signal -> tb_* metric
_AMD_TB = {
    "step": "tb_step",
    "loss": "tb_learning_loss",
    "grad_norm": "tb_learning_grad_norm",
    "raw_grad_norm": "tb_learning_raw_grad_norm",
    "lr": "tb_learning_current_learning_rate",
    "moe_lb": "tb_learning_moe_lb_loss",
    "step_time": "tb_perf_step_time_seconds",
    "tgs": "tb_perf_per_device_tokens_per_sec",
    "tflops_s": "tb_perf_per_device_tflops_per_sec",
    "tflops": "tb_perf_per_device_tflops",
    "tokens": "tb_perf_per_device_tokens",
    "fill": "tb_metrics_plugin_staleness_fill",
}


def amd_series(job: Job) -> Iterator[Item]:
    """The seed system's series: node_hw (GPU, host, NIC), Ray, Prometheus' own and the tb_* bridge."""
    yield from _amd_gpus(job)
    yield from _amd_hosts(job)
    yield from _amd_ray(job)
    yield from _amd_targets(job)
    head = {"host": job.hosts[0], "instance": _hw_instance(job, 0), "job": "node_hw"}
    yield from _tb_series(job, _AMD_TB, head)


def _hw_instance(job: Job, h: int) -> str:
    return f"{job.hosts[h]}:9400"


def _amd_gpus(job: Job) -> Iterator[Item]:
    gs = job.gpu_sig

    def gpu_fam(name: str, arr: np.ndarray, fmt: str, extra: dict[str, str] | None = None) -> Iterator[Item]:
        for h in range(job.nodes):
            for g in range(job.gpus):
                lab = {
                    "gpu": str(g),
                    "host": job.hosts[h],
                    "instance": _hw_instance(job, h),
                    "job": "node_hw",
                }
                if extra:
                    lab.update(extra)
                yield name, lab, job.t, _mask(job, h, arr[h, g], gpu=True), fmt

    yield from gpu_fam("hw_gpu_temperature_celsius", gs["temp"], "f1")
    yield from gpu_fam("hw_gpu_power_watts", gs["power"], "f1")
    yield from gpu_fam("hw_gpu_clock_mhz", gs["sclk"], "d", {"type": "sclk"})
    yield from gpu_fam("hw_gpu_clock_mhz", gs["mclk"], "d", {"type": "mclk"})
    yield from gpu_fam("hw_gpu_vram_used_bytes", gs["vram_used"], "d")
    yield from gpu_fam("hw_gpu_vram_total_bytes", gs["vram_total"], "d")
    for metric, key in _AMD_GPU_COUNTERS:
        yield from gpu_fam(metric, gs[key], "d")


def _amd_hosts(job: Job) -> Iterator[Item]:
    t, K, hosts, hsig = job.t, job.nodes, job.hosts, job.host_sig
    for metric, host_key, fmt in _AMD_HOST:
        for h in range(K):
            vals = hsig[host_key][h] if host_key else np.zeros(len(t))
            yield (
                metric,
                {"host": hosts[h], "instance": _hw_instance(job, h), "job": "node_hw"},
                t,
                _mask(job, h, vals),
                fmt,
            )
    for metric in ("hw_net_rx_errors_total", "hw_net_tx_errors_total"):
        for h in range(K):
            lab = {"device": "eth0", "host": hosts[h], "instance": _hw_instance(job, h), "job": "node_hw"}
            yield metric, lab, t, _mask(job, h, hsig["net_rx_err"][h]), "d"
    ns = job.nic_sig
    D = ns["retx"].shape[1]
    for metric, key, fmt in _AMD_NIC:
        for h in range(K):
            for d in range(D):
                lab = {
                    "device": f"ionic_{d}",
                    "host": hosts[h],
                    "instance": _hw_instance(job, h),
                    "job": "node_hw",
                    "port": "1",
                }
                yield metric, lab, t, _mask(job, h, ns[key][h, d]), fmt


def _amd_ray(job: Job) -> Iterator[Item]:
    """Ray's node metrics: no host label (map via instance or ip)."""
    t = job.t

    def ray_lab(h: int) -> dict[str, str]:
        return {
            "IsHeadNode": "true" if h == 0 else "false",
            "SessionName": f"session_{job.job_id}",
            "Version": "2.44.1",
            "instance": f"{job.hosts[h]}:55080",
            "ip": _ip(job, h),
            "job": "ray",
        }

    for h in range(job.nodes):
        for g in range(job.gpus):
            lab = ray_lab(h) | {"GpuDeviceName": f"AMD Instinct {job.gpu.name}", "GpuIndex": str(g)}
            yield (
                "ray_node_gpus_utilization",
                lab,
                t,
                _mask(job, h, job.gpu_sig["util"][h, g], hw=False),
                "f1",
            )
    for metric, key, fmt in (
        ("ray_node_mem_used", "mem_used", "d"),
        ("ray_node_mem_total", "mem_total", "d"),
        ("ray_node_cpu_utilization", "cpu_util", "f1"),
    ):
        for h in range(job.nodes):
            yield metric, ray_lab(h), t, _mask(job, h, job.host_sig[key][h], hw=False), fmt


def _amd_targets(job: Job) -> Iterator[Item]:
    """Prometheus' own per-target series (`up`, `scrape_duration_seconds`) of both scrape jobs."""
    t, hosts = job.t, job.hosts
    targets = (("node_hw", [f"{h}:9400" for h in hosts]), ("ray", [f"{h}:55080" for h in hosts]))
    for jobname, insts in targets:
        for h in range(job.nodes):
            yield "up", {"instance": insts[h], "job": jobname}, t, job.present[h].astype(float), "d"
    for jobname, insts in targets:
        for h in range(job.nodes):
            dur = np.where(job.present[h], 0.004 + 0.002 * np.sin(np.arange(len(t)) + h) ** 2, 10.0)
            yield "scrape_duration_seconds", {"instance": insts[h], "job": jobname}, t, dur, "f4"


def series(job: Job) -> Iterator[Item]:
    """Yield every series of the job in its profile's names, grouped by family.

    The seed system (`amd`) has one deployment; the standard exporters (`nvidia`: dcgm-exporter,
    `amd-dme`: AMD's device-metrics-exporter, each with node_exporter) follow `job.exporters`.
    """
    items = amd_series(job) if job.profile == "amd" else standard_series(job, job.exporters or Exporters())
    return _outage(items, job.monitoring_outage) if job.monitoring_outage else items


def _outage(items: Iterator[Item], window: tuple[float, float]) -> Iterator[Item]:
    """Drop every sample within `window` (a Prometheus restart: no target was scraped, `up` included)."""
    for name, labels, ts, vals, fmt in items:
        yield name, labels, ts, np.where((ts >= window[0]) & (ts < window[1]), np.nan, vals), fmt
