"""Turn a simulated job into exporter series of one metric profile (AMD seed system or NVIDIA).

`series(job)` yields `(family, labels, timestamps, values, fmt)` grouped by family, in the exact
metric names and labels the exporters use (seed-system.md §4 for `amd`; DCGM exporter, node_exporter
and `training_*` gauges for `nvidia`). NaN values are samples the exporter did not produce.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ._sim import Job

Item = tuple[str, dict[str, str], np.ndarray, np.ndarray, str]
MIB = 1024.0**2


def _ip(job: Job, h: int) -> str:
    return f"10.{12 + (job.seed % 50)}.{h // 250}.{11 + h % 250}"


def _mask(job: Job, h: int, vals: np.ndarray, *, gpu: bool = False, hw: bool = True) -> np.ndarray:
    """Apply exporter absence, GPU-plugin gaps and ghost freezing to one host's series."""
    v = np.array(vals, dtype=float, copy=True)
    if hw and h in job.frozen_from:
        i = job.frozen_from[h]
        v[i:] = v[i]
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
        "step": job.step_num.astype(float), "loss": job.loss, "grad_norm": job.grad_norm,
        "raw_grad_norm": job.raw_grad_norm, "lr": job.lr, "step_time": job.step_secs, "tgs": job.tgs,
        "tflops_s": job.tflops_s, "tflops": job.tflops_s * job.step_secs,
        "tokens": np.full(len(job.step_num), float(getattr(job, "_tokens", 0))), "moe_lb": job.moe_lb,
    }
    for key, metric in name_map.items():
        if key == "moe_lb" and not job.moe:
            continue
        if key == "fill":
            yield metric, labels, ts, is_fill, "d"
            continue
        fmt = "d" if key == "step" else "g"
        yield metric, labels, ts, per_step[key][src], fmt


def _scrape_meta(job: Job, jobname: str, instances: list[str]) -> Iterator[tuple[str, dict, np.ndarray]]:
    for h, inst in enumerate(instances):
        yield h, {"instance": inst, "job": jobname}, job.present[h]


def amd_series(job: Job) -> Iterator[Item]:
    t = job.t
    K, G = job.nodes, job.gpus
    hosts = job.hosts
    hw_inst = [f"{h}:9400" for h in hosts]
    ray_inst = [f"{h}:55080" for h in hosts]
    gs = job.gpu_sig

    def gpu_fam(name: str, arr: np.ndarray, fmt: str, extra: dict[str, str] | None = None) -> Iterator[Item]:
        for h in range(K):
            for g in range(G):
                lab = {"gpu": str(g), "host": hosts[h], "instance": hw_inst[h], "job": "node_hw"}
                if extra:
                    lab.update(extra)
                yield name, lab, t, _mask(job, h, arr[h, g], gpu=True), fmt

    yield from gpu_fam("hw_gpu_temperature_celsius", gs["temp"], "f1")
    yield from gpu_fam("hw_gpu_power_watts", gs["power"], "f1")
    yield from gpu_fam("hw_gpu_clock_mhz", gs["sclk"], "d", {"type": "sclk"})
    yield from gpu_fam("hw_gpu_clock_mhz", gs["mclk"], "d", {"type": "mclk"})
    yield from gpu_fam("hw_gpu_vram_used_bytes", gs["vram_used"], "d")
    yield from gpu_fam("hw_gpu_vram_total_bytes", gs["vram_total"], "d")
    for key, metric in (("umc_ue", "hw_gpu_ras_umc_ue_total"), ("umc_ce", "hw_gpu_ras_umc_ce_total"),
                        ("xgmi_ue", "hw_gpu_ras_xgmi_ue_total"), ("xgmi_ce", "hw_gpu_ras_xgmi_ce_total"),
                        ("gfx_ue", "hw_gpu_ras_gfx_ue_total"), ("pcie_corr", "hw_gpu_pcie_correctable_total"),
                        ("pcie_nonfatal", "hw_gpu_pcie_nonfatal_total"), ("pcie_fatal", "hw_gpu_pcie_fatal_total")):
        yield from gpu_fam(metric, gs[key], "d")

    hsig = job.host_sig
    host_metrics = (
        ("hw_tcp_retransmits_total", "tcp_retrans", "d"), ("hw_tcp_listen_drops_total", "listen_drops", "d"),
        ("hw_tcp_listen_overflows_total", "listen_drops", "d"),
        ("hw_tcp_abort_on_timeout_total", "tcp_abort", "d"), ("hw_tcp_estab_resets_total", None, "d"),
        ("hw_procs_running", "running", "d"), ("hw_procs_blocked", "blocked", "d"),
        ("hw_context_switches_total", "ctx", "d"), ("hw_oom_kills_total", "oom", "d"),
        ("hw_mem_dirty_bytes", "dirty", "d"), ("hw_mem_writeback_bytes", "writeback", "d"),
        ("hw_io_pressure_some_pct", "io_some", "f2"), ("hw_io_pressure_full_pct", "io_full", "f2"),
        ("hw_dmesg_gpu_errors_total", "dmesg", "d"), ("hw_gpu_user_processes", "gpu_procs", "d"),
        ("hw_scrape_duration_seconds", "scrape", "f3"),
    )
    for metric, key, fmt in host_metrics:
        for h in range(K):
            vals = hsig[key][h] if key else np.zeros(len(t))
            yield metric, {"host": hosts[h], "instance": hw_inst[h], "job": "node_hw"}, t, _mask(job, h, vals), fmt
    for metric in ("hw_net_rx_errors_total", "hw_net_tx_errors_total"):
        for h in range(K):
            lab = {"device": "eth0", "host": hosts[h], "instance": hw_inst[h], "job": "node_hw"}
            yield metric, lab, t, _mask(job, h, hsig["net_rx_err"][h]), "d"
    ns = job.nic_sig
    D = ns["retx"].shape[1]
    for metric, key, fmt in (
        ("hw_rdma_tx_retx_pkts_total", "retx", "d"), ("hw_rdma_tx_ack_timeout_total", "ack", "d"),
        ("hw_rdma_rx_cnp_pkts_total", "cnp", "d"), ("hw_rdma_req_tx_retry_excd_err_total", "retry_excd", "d"),
        ("hw_rdma_req_rx_cqe_err_total", "cqe", "d"), ("hw_rdma_tx_bytes_total", "tx_bytes", "d"),
        ("hw_rdma_port_state", "port", "d"),
    ):
        for h in range(K):
            for d in range(D):
                lab = {"device": f"ionic_{d}", "host": hosts[h], "instance": hw_inst[h], "job": "node_hw",
                       "port": "1"}
                yield metric, lab, t, _mask(job, h, ns[key][h, d]), fmt

    # Ray metrics: no host label (map via instance or ip)
    def ray_lab(h: int) -> dict[str, str]:
        return {"IsHeadNode": "true" if h == 0 else "false", "SessionName": f"session_{job.job_id}",
                "Version": "2.44.1", "instance": ray_inst[h], "ip": _ip(job, h), "job": "ray"}

    for h in range(K):
        for g in range(G):
            lab = ray_lab(h) | {"GpuDeviceName": f"AMD Instinct {job.gpu.name}", "GpuIndex": str(g)}
            yield "ray_node_gpus_utilization", lab, t, _mask(job, h, gs["util"][h, g], hw=False), "f1"
    for metric, key, fmt in (("ray_node_mem_used", "mem_used", "d"), ("ray_node_mem_total", "mem_total", "d"),
                             ("ray_node_cpu_utilization", "cpu_util", "f1")):
        for h in range(K):
            yield metric, ray_lab(h), t, _mask(job, h, hsig[key][h], hw=False), fmt

    # Prometheus' own per-target series
    for jobname, insts in (("node_hw", hw_inst), ("ray", ray_inst)):
        for h in range(K):
            yield "up", {"instance": insts[h], "job": jobname}, t, job.present[h].astype(float), "d"
    for jobname, insts in (("node_hw", hw_inst), ("ray", ray_inst)):
        for h in range(K):
            dur = np.where(job.present[h], 0.004 + 0.002 * np.sin(np.arange(len(t)) + h) ** 2, 10.0)
            yield "scrape_duration_seconds", {"instance": insts[h], "job": jobname}, t, dur, "f4"

    head = {"host": hosts[0], "instance": hw_inst[0], "job": "node_hw"}
    yield from _tb_series(job, {
        "step": "tb_step", "loss": "tb_learning_loss", "grad_norm": "tb_learning_grad_norm",
        "raw_grad_norm": "tb_learning_raw_grad_norm", "lr": "tb_learning_current_learning_rate",
        "moe_lb": "tb_learning_moe_lb_loss", "step_time": "tb_perf_step_time_seconds",
        "tgs": "tb_perf_per_device_tokens_per_sec", "tflops_s": "tb_perf_per_device_tflops_per_sec",
        "tflops": "tb_perf_per_device_tflops", "tokens": "tb_perf_per_device_tokens",
        "fill": "tb_metrics_plugin_staleness_fill"}, head)


def nvidia_series(job: Job) -> Iterator[Item]:
    t = job.t
    K, G = job.nodes, job.gpus
    hosts = job.hosts
    gs = job.gpu_sig
    dcgm_inst = [f"{_ip(job, h)}:9400" for h in range(K)]
    node_inst = [f"{h}:9100" for h in hosts]
    rng = np.random.default_rng([job.seed, 99])
    uuids = [[f"GPU-{rng.integers(0, 2**32):08x}-{rng.integers(0, 2**16):04x}-{rng.integers(0, 2**16):04x}-"
              f"{rng.integers(0, 2**16):04x}-{rng.integers(0, 2**48):012x}" for _ in range(G)] for _ in range(K)]

    def dcgm(name: str, arr: np.ndarray, fmt: str) -> Iterator[Item]:
        for h in range(K):
            for g in range(G):
                lab = {"DCGM_FI_DRIVER_VERSION": "560.35.03", "Hostname": hosts[h], "UUID": uuids[h][g],
                       "device": f"nvidia{g}", "gpu": str(g), "instance": dcgm_inst[h], "job": "dcgm-exporter",
                       "modelName": job.gpu.dcgm_model_name, "pci_bus_id": f"00000000:{0x18 + 0x10 * g:02X}:00.0"}
                yield name, lab, t, _mask(job, h, arr[h, g], gpu=True), fmt

    fb_total = gs["vram_total"] / MIB
    fb_used = gs["vram_used"] / MIB
    yield from dcgm("DCGM_FI_DEV_GPU_TEMP", gs["temp"], "d")
    yield from dcgm("DCGM_FI_DEV_POWER_USAGE", gs["power"], "f3")
    yield from dcgm("DCGM_FI_DEV_SM_CLOCK", gs["sclk"], "d")
    yield from dcgm("DCGM_FI_DEV_MEM_CLOCK", gs["mclk"], "d")
    yield from dcgm("DCGM_FI_DEV_GPU_UTIL", gs["util"], "d")
    yield from dcgm("DCGM_FI_DEV_FB_USED", fb_used, "d")
    yield from dcgm("DCGM_FI_DEV_FB_FREE", fb_total - fb_used, "d")
    yield from dcgm("DCGM_FI_DEV_XID_ERRORS", gs["xid"], "d")
    yield from dcgm("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gs["umc_ue"], "d")
    yield from dcgm("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", gs["umc_ce"], "d")
    yield from dcgm("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", gs["pcie_corr"], "d")

    hs = job.host_sig
    io_full_s = np.cumsum(hs["io_full"] / 100.0 * job.interval, axis=-1) + 1e5
    io_some_s = np.cumsum(hs["io_some"] / 100.0 * job.interval, axis=-1) + 3e5
    node_metrics = (
        ("node_netstat_Tcp_RetransSegs", hs["tcp_retrans"], "d"),
        ("node_netstat_TcpExt_ListenDrops", hs["listen_drops"], "d"),
        ("node_netstat_TcpExt_TCPAbortOnTimeout", hs["tcp_abort"], "d"),
        ("node_procs_running", hs["running"], "d"), ("node_procs_blocked", hs["blocked"], "d"),
        ("node_context_switches_total", hs["ctx"], "d"), ("node_vmstat_oom_kill", hs["oom"], "d"),
        ("node_memory_MemTotal_bytes", hs["mem_total"], "d"),
        ("node_memory_MemAvailable_bytes", hs["mem_total"] - hs["mem_used"], "d"),
        ("node_memory_Dirty_bytes", hs["dirty"], "d"), ("node_memory_Writeback_bytes", hs["writeback"], "d"),
        ("node_pressure_io_stalled_seconds_total", io_full_s, "f3"),
        ("node_pressure_io_waiting_seconds_total", io_some_s, "f3"),
        ("node_load1", hs["running"] * 0.9, "f2"),
    )
    for metric, arr, fmt in node_metrics:
        for h in range(K):
            yield metric, {"instance": node_inst[h], "job": "node"}, t, _mask(job, h, arr[h], hw=False), fmt
    for metric in ("node_network_receive_errs_total", "node_network_transmit_errs_total"):
        for h in range(K):
            lab = {"device": "eth0", "instance": node_inst[h], "job": "node"}
            yield metric, lab, t, _mask(job, h, hs["net_rx_err"][h], hw=False), "d"
    ns = job.nic_sig
    D = ns["retx"].shape[1]
    wait = ns["retx"] * 40 + ns["cnp"] * 3
    link_err = np.floor(ns["ack"] / 4.0)
    for metric, arr, fmt in (
        ("node_infiniband_state_id", ns["port"] * 4, "d"),
        ("node_infiniband_port_transmit_wait_total", wait, "d"),
        ("node_infiniband_link_error_recovery_total", link_err, "d"),
        ("node_infiniband_link_downed_total", ns["retry_excd"], "d"),
        ("node_infiniband_port_data_transmitted_bytes_total", ns["tx_bytes"], "d"),
    ):
        for h in range(K):
            for d in range(D):
                lab = {"device": f"mlx5_{d}", "instance": node_inst[h], "job": "node", "port": "1"}
                yield metric, lab, t, _mask(job, h, arr[h, d], hw=False), fmt

    for jobname, insts in (("dcgm-exporter", dcgm_inst), ("node", node_inst)):
        for h in range(K):
            yield "up", {"instance": insts[h], "job": jobname}, t, job.present[h].astype(float), "d"
    for jobname, insts in (("dcgm-exporter", dcgm_inst), ("node", node_inst)):
        for h in range(K):
            dur = np.where(job.present[h], 0.02 + 0.01 * np.sin(np.arange(len(t)) + h) ** 2, 10.0)
            if jobname == "dcgm-exporter":
                dur = np.where(job.scrape_timeout_mask[h], 9.99, dur)
            yield "scrape_duration_seconds", {"instance": insts[h], "job": jobname}, t, dur, "f4"

    # training gauges scraped from rank 0's exporter: value of the last completed step at each scrape
    tr_inst = f"{hosts[0]}:8000"
    idx = np.searchsorted(job.step_end, t, side="right") - 1
    valid = idx >= 0
    ii = np.clip(idx, 0, None)
    up = job.t <= (job.crash_time if job.crash_time is not None else job.job_end)
    lab = {"instance": tr_inst, "job": "training"}
    for metric, arr, fmt in (
        ("training_step", job.step_num.astype(float), "d"), ("training_loss", job.loss, "g"),
        ("training_step_time_seconds", job.step_secs, "g"), ("training_tokens_per_second", job.tgs, "g"),
        ("training_grad_norm", job.grad_norm, "g"), ("training_learning_rate", job.lr, "g"),
        ("training_last_step_timestamp_seconds", job.step_end, "f3"),
    ) + ((("training_moe_lb_loss", job.moe_lb, "g"),) if job.moe else ()):
        if len(arr) == 0:
            continue
        vals = np.where(valid & up, arr[ii], np.nan)
        yield metric, lab, t, vals, fmt


def series(job: Job) -> Iterator[Item]:
    """Yield every series of the job in its profile's names, grouped by family."""
    return amd_series(job) if job.profile == "amd" else nvidia_series(job)
