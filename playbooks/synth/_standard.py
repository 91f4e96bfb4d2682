"""Series of the ecosystem's standard exporters, deployed as `_deploy.Exporters` says.

- NVIDIA dcgm-exporter (`DCGM_FI_DEV_*`; `Hostname`, `hostname` or no host label; ECC or remapped rows;
  `DCGM_FI_DEV_XID_ERRORS` as the gauge of the last Xid), nvidia_gpu_exporter (`nvidia_smi_*` in base
  units, a `uuid` label only, the index as the value of `nvidia_smi_index`) or AMD's device-metrics-exporter (`gpu_*` with
  `hostname`, `gpu_id`, `gpu_partition_id`, `card_model`, an optional field prefix);
- node_exporter (`node_*` with `instance`, `node_uname_info{nodename}`, the InfiniBand port counters and,
  for >= 1.11, the RDMA hw counters);
- the trainer's `training_*` gauges, scraped from rank 0;
- Prometheus' own `up` and `scrape_duration_seconds` per target, under the deployer's job names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from ._deploy import Exporters, hold
from ._sim import Job

Item = tuple[str, dict[str, str], np.ndarray, np.ndarray, str]
MIB = 1024.0**2
_POD = {"dcgm": "nvidia-dcgm-exporter", "nvsmi": "nvidia-gpu-exporter"}


def _ip(job: Job, h: int) -> str:
    return f"10.{12 + (job.seed % 50)}.{h // 250}.{11 + h % 250}"


def _pod_ip(job: Job, h: int) -> str:
    return f"10.244.{h // 200}.{20 + h % 200}"


def _suffix(job: Job, h: int, n: int = 5) -> str:
    return f"{(job.seed * 7919 + h * 104729) % (36**n):0{n}x}"[:n]


def _mask(job: Job, h: int, vals: np.ndarray, *, gpu: bool = False, hw: bool = True) -> np.ndarray:
    v = np.array(vals, dtype=float, copy=True)
    # hw: a GPU exporter's series; the others are node_exporter's, which `node_freeze` freezes instead
    if hw != ("node_freeze" in job.variants) and h in job.frozen_from:
        i = job.frozen_from[h]
        v[i : job.frozen_to.get(h, len(v))] = v[i]
    pres = job.gpu_present[h] if gpu else _node_answered(job, h)
    v[~pres] = np.nan
    return v


class _Layout:
    """Targets, labels and instances of one job's deployment."""

    def __init__(self, job: Job, ex: Exporters) -> None:
        self.job, self.ex = job, ex
        K = job.nodes
        self.node_inst = [
            f"{_ip(job, h)}:9100" if ex.node_by_address else f"{job.hosts[h]}{ex.node_domain}:9100"
            for h in range(K)
        ]
        gpu_port = {"dcgm": 9400, "nvsmi": 9835}.get(ex.gpu, 5000)
        self.gpu_inst = [
            f"{_pod_ip(job, h) if ex.kubernetes else _ip(job, h)}:{gpu_port}"
            if ex.gpu != "nvsmi" or ex.node_by_address
            else f"{job.hosts[h]}:{gpu_port}"
            for h in range(K)
        ]
        self.gpu_pod = [f"{_POD.get(ex.gpu, 'amd-metrics-exporter')}-{_suffix(job, h)}" for h in range(K)]
        rng = np.random.default_rng([job.seed, 31])
        self.restart_at = (
            int(rng.integers(len(job.t) // 4, 3 * len(job.t) // 4)) if ex.hostname_change else -1
        )
        self.restart_host = int(rng.integers(K)) if ex.hostname_change else -1

    def node_labels(self, h: int) -> dict[str, str]:
        lab = {"instance": self.node_inst[h], "job": self.ex.node_job}
        if self.ex.kubernetes:
            lab |= {
                "container": "node-exporter",
                "endpoint": "http-metrics",
                "namespace": "monitoring",
                "pod": f"prometheus-node-exporter-{_suffix(self.job, h)}",
                "service": "prometheus-node-exporter",
            }
        return lab

    def gpu_target(self, h: int) -> dict[str, str]:
        lab = {"instance": self.gpu_inst[h], "job": self.ex.gpu_job}
        if self.ex.kubernetes:
            ns = "kube-amd-gpu" if self.ex.gpu == "amd-dme" else "gpu-operator"
            lab |= {
                "container": self.gpu_pod[h].rsplit("-", 1)[0],
                "endpoint": "gpu-metrics",
                "namespace": ns,
                "pod": self.gpu_pod[h],
                "service": self.gpu_pod[h].rsplit("-", 1)[0],
            }
        return lab

    def _moves(self, h: int) -> list[tuple[dict[str, str], slice]]:
        """Return (label changes, time slice) of host `h`'s GPU target: without a host label a restarted
        exporter pod comes back at another address (`instance`) and pod name, reporting the same GPUs."""
        if self.ex.gpu_host_label or h != self.restart_host:
            return [({}, slice(None))]
        port = self.gpu_inst[h].rsplit(":", 1)[1]
        moved = {"instance": f"10.245.{h // 200}.{20 + h % 200}:{port}"}
        if self.ex.kubernetes:
            moved["pod"] = f"{self.gpu_pod[h].rsplit('-', 1)[0]}-{_suffix(self.job, h + 7919)}"
        return [({}, slice(0, self.restart_at)), (moved, slice(self.restart_at, None))]

    def gpu_targets(self, h: int) -> list[tuple[dict[str, str], slice]]:
        """Return (target labels, time slice) of host `h`'s GPU exporter: two when its pod came back elsewhere."""
        return [(self.gpu_target(h) | moved, part) for moved, part in self._moves(h)]

    def gpu_series_labels(self, h: int, g: int, extra: dict[str, str]) -> list[tuple[dict[str, str], slice]]:
        """Return (labels, time slice) pairs: two when the exporter pod was restarted under another name."""
        lab = self.gpu_target(h) | extra
        if self.ex.kubernetes:
            lab |= {
                "exported_container": "trainer",
                "exported_namespace": "training",
                "exported_pod": f"{self.job.job_name.lower()[:40].strip('-')}-worker-{h}",
            }
        key = self.ex.gpu_host_label
        if not key:
            return [(lab | moved, part) for moved, part in self._moves(h)]
        if h == self.restart_host:
            return [
                (lab | {key: self.gpu_pod[h]}, slice(0, self.restart_at)),
                (lab | {key: self.job.hosts[h]}, slice(self.restart_at, None)),
            ]
        return [(lab | {key: self.job.hosts[h]}, slice(None))]


def _gpu_family(
    lay: _Layout, name: str, arr: np.ndarray, fmt: str, extra_of: Callable[[int, int], dict[str, str]]
) -> Iterator[Item]:
    job, ex = lay.job, lay.ex
    t = job.t
    for h in range(job.nodes):
        late = np.arange(len(t)) < ex.gpu_late_scrapes
        for g in range(arr.shape[1]):  # the job's GPUs, then a neighbour tenant's (shared-node)
            vals = _mask(job, h, hold(arr[h, g], job.interval, ex.gpu_collect_s, phase=h % 2), gpu=True)
            vals[late] = np.nan
            for lab, part in lay.gpu_series_labels(h, g, extra_of(h, g)):
                yield name, lab, t, _part(vals, part), fmt


def _uuids(job: Job) -> list[list[str]]:
    """Return each host's GPUs' UUIDs (the same for either NVIDIA exporter of a seed)."""
    rng = np.random.default_rng([job.seed, 99])
    return [
        [
            f"GPU-{rng.integers(0, 2**32):08x}-{rng.integers(0, 2**16):04x}-{rng.integers(0, 2**16):04x}-"
            f"{rng.integers(0, 2**16):04x}-{rng.integers(0, 2**48):012x}"
            for _ in range(job.gpu_sig["power"].shape[1])
        ]
        for _ in range(job.nodes)
    ]


def _dcgm(lay: _Layout) -> Iterator[Item]:
    job, ex = lay.job, lay.ex
    gs = job.gpu_sig
    uuids = _uuids(job)

    def extra(h: int, g: int) -> dict[str, str]:
        return {
            "DCGM_FI_DRIVER_VERSION": "560.35.03",
            "UUID": uuids[h][g],
            "device": f"nvidia{g}",
            "gpu": str(g),
            "modelName": job.gpu.dcgm_model_name,
            "pci_bus_id": f"00000000:{0x18 + 0x10 * g:02X}:00.0",
        }

    fb_total, fb_used = gs["vram_total"] / MIB, gs["vram_used"] / MIB
    ue, ce = (
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL")
        if ex.ecc == "dbe"
        else ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS")
    )
    fams = [
        ("DCGM_FI_DEV_GPU_TEMP", gs["temp"], "d"),
        ("DCGM_FI_DEV_POWER_USAGE", gs["power"], "f3"),
        ("DCGM_FI_DEV_SM_CLOCK", gs["sclk"], "d"),
        ("DCGM_FI_DEV_MEM_CLOCK", gs["mclk"], "d"),
        (
            ("DCGM_FI_DEV_GPU_UTIL", gs["util"], "d")
            if ex.gpu_util_field == "util"
            else ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", gs["util"] / 100.0, "f4")
        ),
        ("DCGM_FI_DEV_FB_USED", fb_used, "d"),
        ("DCGM_FI_DEV_FB_FREE", fb_total - fb_used, "d"),
        ("DCGM_FI_DEV_XID_ERRORS", gs["xid"], "d"),
        (ue, gs["umc_ue"], "d"),
        (ce, gs["umc_ce"], "d"),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", gs["pcie_corr"], "d"),
    ]
    if ex.ecc == "remapped":
        fams.append(("DCGM_FI_DEV_ROW_REMAP_FAILURE", np.zeros_like(gs["temp"]), "d"))
    for name, arr, fmt in fams:
        yield from _gpu_family(lay, name, arr, fmt, extra)


def _nvsmi(lay: _Layout) -> Iterator[Item]:
    """nvidia_gpu_exporter: `nvidia_smi_<query field>` in base units, each GPU labelled by its `uuid` only; the
    index is the value of nvidia_smi_index and a label of nvidia_smi_gpu_info; no PCIe replays; Xids as its
    NVML backend exports them (`_nvsmi_xids`)."""
    job, gs = lay.job, lay.job.gpu_sig
    uuids = _uuids(job)

    def extra(h: int, g: int) -> dict[str, str]:
        return {"uuid": uuids[h][g]}

    def info(h: int, g: int) -> dict[str, str]:
        return extra(h, g) | {
            "driver_version": "550.90.07",
            "index": str(g),
            "name": job.gpu.dcgm_model_name,
            "pci_bus_id": f"00000000:{0x18 + 0x10 * g:02X}:00.0",
        }

    index = np.broadcast_to(np.arange(gs["power"].shape[1])[None, :, None], gs["power"].shape)
    yield from _gpu_family(lay, "nvidia_smi_gpu_info", np.ones_like(gs["power"]), "d", info)
    fams = [
        ("nvidia_smi_index", index, "d"),
        ("nvidia_smi_temperature_gpu", gs["temp"], "d"),
        ("nvidia_smi_power_draw_watts", gs["power"], "f2"),
        ("nvidia_smi_clocks_current_sm_clock_hz", gs["sclk"] * 1e6, "d"),
        ("nvidia_smi_utilization_gpu_ratio", np.round(gs["util"]) / 100.0, "f2"),
        ("nvidia_smi_memory_used_bytes", gs["vram_used"], "d"),
        ("nvidia_smi_memory_total_bytes", gs["vram_total"], "d"),
        ("nvidia_smi_ecc_errors_uncorrected_volatile_total", gs["umc_ue"], "d"),
        ("nvidia_smi_ecc_errors_corrected_volatile_total", gs["umc_ce"], "d"),
    ]
    for name, arr, fmt in fams:
        yield from _gpu_family(lay, name, arr, fmt, extra)
    yield from _nvsmi_xids(lay, extra)


def _nvsmi_xids(lay: _Layout, extra: Callable[[int, int], dict[str, str]]) -> Iterator[Item]:
    """nvidia_gpu_exporter's NVML-backend Xid families (its docs/METRICS.md): per GPU and code, from the code's
    first event on, `nvidia_smi_xid_errors_total` (the events so far) and `nvidia_smi_xid_last_timestamp_seconds`
    (when the last came). An event is the GPU's Xid gauge turning to the code; one held from the data's start
    came a day before it (a stale Xid)."""
    job = lay.job
    xid, t = job.gpu_sig["xid"], job.t
    for code in sorted({int(c) for c in np.unique(xid) if c > 0}):
        on = xid == code
        event = on & ~np.concatenate([np.zeros_like(on[..., :1]), on[..., :-1]], axis=-1)
        when = np.where(event, t, np.nan)
        when[..., 0] = np.where(event[..., 0], t[0] - 86400.0, np.nan)
        count = np.cumsum(event, axis=-1).astype(float)
        count[count == 0] = np.nan

        def labels(h: int, g: int, code: int = code) -> dict[str, str]:
            return extra(h, g) | {"xid": str(code)}

        yield from _gpu_family(lay, "nvidia_smi_xid_errors_total", count, "d", labels)
        yield from _gpu_family(
            lay, "nvidia_smi_xid_last_timestamp_seconds", np.fmax.accumulate(when, axis=-1), "d", labels
        )


def _dme(lay: _Layout) -> Iterator[Item]:
    job, ex = lay.job, lay.ex
    gs = job.gpu_sig
    p = ex.prefix

    def extra(h: int, g: int) -> dict[str, str]:
        return {
            "card_model": f"AMD Instinct {job.gpu.name}",
            "card_series": f"AMD Instinct {job.gpu.name}",
            "gpu_id": str(g),
            "gpu_partition_id": "0",
            "serial_number": f"{job.seed:04d}{h:04d}{g:02d}",
        }

    power = "gpu_package_power" if job.gpu.name.startswith("MI3") else "gpu_power_usage"
    yield from _gpu_family(lay, p + power, gs["power"], "f1", extra)
    # a second partition of each GPU reads 0 W: the profile keeps partition 0
    yield from _gpu_family(
        lay, p + power, np.zeros_like(gs["power"]), "d", lambda h, g: extra(h, g) | {"gpu_partition_id": "1"}
    )
    fams = [
        ("gpu_junction_temperature", gs["temp"], "f1"),
        ("gpu_gfx_activity", gs["util"], "f1"),
        ("gpu_used_vram", gs["vram_used"] / MIB, "d"),
        ("gpu_total_vram", gs["vram_total"] / MIB, "d"),
        ("gpu_ecc_uncorrect_total", gs["umc_ue"], "d"),
        ("gpu_ecc_correct_total", gs["umc_ce"], "d"),
        ("pcie_replay_count", gs["pcie_corr"], "d"),
    ]
    for name, arr, fmt in fams:
        yield from _gpu_family(lay, p + name, arr, fmt, extra)
    for kind, key in (("GPU_CLOCK_TYPE_SYSTEM", "sclk"), ("GPU_CLOCK_TYPE_MEMORY", "mclk")):

        def clock_extra(h: int, g: int, k: str = kind) -> dict[str, str]:
            return extra(h, g) | {"clock_type": k}

        yield from _gpu_family(lay, p + "gpu_clock", gs[key], "d", clock_extra)


def _node(lay: _Layout) -> Iterator[Item]:
    job = lay.job
    t, K = job.t, job.nodes
    hs = job.host_sig
    io_full_s = np.cumsum(hs["io_full"] / 100.0 * job.interval, axis=-1) + 1e5
    io_some_s = np.cumsum(hs["io_some"] / 100.0 * job.interval, axis=-1) + 3e5
    for h in range(K):
        lab = lay.node_labels(h) | {
            "domainname": "(none)",
            "machine": "x86_64",
            "nodename": job.hosts[h] + lay.ex.node_domain,
            "release": "5.15.0-119-generic",
            "sysname": "Linux",
            "version": "#129-Ubuntu SMP",
        }
        yield "node_uname_info", lab, t, _mask(job, h, np.ones(len(t)), hw=False), "d"
    node_metrics = (
        ("node_netstat_Tcp_RetransSegs", hs["tcp_retrans"], "d"),
        ("node_netstat_TcpExt_ListenDrops", hs["listen_drops"], "d"),
        ("node_netstat_TcpExt_TCPAbortOnTimeout", hs["tcp_abort"], "d"),
        ("node_procs_running", hs["running"], "d"),
        ("node_procs_blocked", hs["blocked"], "d"),
        ("node_context_switches_total", hs["ctx"], "d") if lay.ex.node_stat else None,
        ("node_vmstat_oom_kill", hs["oom"], "d"),
        ("node_memory_MemTotal_bytes", hs["mem_total"], "d"),
        ("node_memory_MemAvailable_bytes", hs["mem_total"] - hs["mem_used"], "d"),
        ("node_memory_Dirty_bytes", hs["dirty"], "d"),
        ("node_memory_Writeback_bytes", hs["writeback"], "d"),
        ("node_pressure_io_stalled_seconds_total", io_full_s, "f3"),
        ("node_pressure_io_waiting_seconds_total", io_some_s, "f3"),
        ("node_load1", hs["running"] * 0.9, "f2"),
    )
    for metric, arr, fmt in filter(None, node_metrics):
        for h in range(K):
            yield metric, lay.node_labels(h), t, _mask(job, h, arr[h], hw=False), fmt
    if lay.ex.node_netdev_bytes:
        yield from _netdev_bytes(lay)
    for metric in ("node_network_receive_errs_total", "node_network_transmit_errs_total"):
        for h in range(K):
            yield (
                metric,
                lay.node_labels(h) | {"device": "eth0"},
                t,
                _mask(job, h, hs["net_rx_err"][h], hw=False),
                "d",
            )
    yield from _infiniband(lay)


def _netdev_bytes(lay: _Layout) -> Iterator[Item]:
    """The bytes each host's eth0 sent: a few hundred kB/s to a few MB/s (scrape answers, logs, checkpoint
    metadata), never still while the host lives."""
    job = lay.job
    rng = np.random.default_rng([job.seed, 32])
    rate = rng.uniform(2e5, 3e6, (job.nodes, 1)) * rng.uniform(0.5, 1.5, (job.nodes, len(job.t)))
    sent = np.floor(rng.uniform(1e9, 1e12, (job.nodes, 1)) + np.cumsum(rate * job.interval, axis=-1))
    for h in range(job.nodes):
        lab = lay.node_labels(h) | {"device": "eth0"}
        yield "node_network_transmit_bytes_total", lab, job.t, _mask(job, h, sent[h], hw=False), "d"


def _infiniband(lay: _Layout) -> Iterator[Item]:
    job, ex = lay.job, lay.ex
    t, K = job.t, job.nodes
    ns = job.nic_sig
    D = ns["retx"].shape[1]
    fams = [
        ("node_infiniband_state_id", ns["port"] * 4),
        ("node_infiniband_port_transmit_wait_total", ns["retx"] * 40 + ns["cnp"] * 3),
        ("node_infiniband_link_error_recovery_total", np.floor(ns["ack"] / 4.0)),
        ("node_infiniband_link_downed_total", ns["retry_excd"]),
        ("node_infiniband_port_data_transmitted_bytes_total", ns["tx_bytes"]),
    ]
    if ex.symbol_errors:
        fams.append(("node_infiniband_symbol_error_total", np.floor(ns["retx"] / 2.0)))
    if ex.rdma_textfile:
        fams += [
            (ex.rdma_textfile_names.format("local_ack_timeout_err"), ns["ack"]),
            (ex.rdma_textfile_names.format("packet_seq_err"), np.floor(ns["retx"] / 8.0)),
            (ex.rdma_textfile_names.format("rnr_nak_retry_err"), ns["retry_excd"]),
        ]
    if ex.rdma_hw_counters:
        fams += [
            ("node_infiniband_roce_adp_retransmits_total", ns["retx"]),
            ("node_infiniband_local_ack_timeout_errors_total", ns["ack"]),
            ("node_infiniband_np_cnp_packets_sent_total", ns["cnp"]),
            ("node_infiniband_packet_sequence_errors_total", np.floor(ns["retx"] / 8.0)),
        ]
    for metric, arr in fams:
        for h in range(K):
            for d in range(D):
                lab = lay.node_labels(h) | {"device": f"mlx5_{d}", "port": "1"}
                yield metric, lab, t, _mask(job, h, arr[h, d], hw=False), "d"


def _targets(lay: _Layout) -> Iterator[Item]:
    job, ex = lay.job, lay.ex
    t = job.t
    late = np.arange(len(t)) < ex.gpu_late_scrapes
    for h in range(job.nodes):
        up = job.present[h].astype(float)
        yield "up", lay.node_labels(h), t, _node_answered(job, h).astype(float), "d"
        if ex.gpu != "none":
            gup = np.where(late | _failed(job, h) | _down(job, h), 0.0, up)
            for lab, part in lay.gpu_targets(h):
                yield "up", lab, t, _part(gup, part), "d"
    for h in range(job.nodes):
        quick = 0.02 + 0.01 * np.sin(np.arange(len(t)) + h) ** 2
        dur = np.where(_node_answered(job, h), quick, 10.0)
        yield "scrape_duration_seconds", lay.node_labels(h), t, dur, "f4"
        if ex.gpu == "none":
            continue
        # a slow scrape takes its collection's time (a hung plugin: the 10 s timeout, 9.99 stored)
        slow = np.minimum(9.99, job.host_sig["scrape"][h])
        ok = np.where(job.present[h], quick, 10.0)
        gdur = np.where(_failed(job, h), 9.99, np.where(job.scrape_timeout_mask[h], slow, ok))
        # a refused scrape (the exporter restarting) fails at once: `up` 0, its duration a few milliseconds
        gdur = np.where(_down(job, h), 0.004, gdur)
        for lab, part in lay.gpu_targets(h):
            yield "scrape_duration_seconds", lab, t, _part(gdur, part), "f4"


def _part(values: np.ndarray, part: slice) -> np.ndarray:
    """Return `values` within `part` only (NaN, no sample, elsewhere)."""
    out = np.full(len(values), np.nan)
    out[part] = values[part]
    return out


def _failed(job: Job, h: int) -> np.ndarray:
    """Return where the GPU exporter's scrapes of host `h` failed at random (none unless asked)."""
    mask = job.failed_scrape_mask
    return mask[h] if len(mask) else np.zeros(len(job.t), dtype=bool)


def _node_answered(job: Job, h: int) -> np.ndarray:
    """Return where host `h`'s node_exporter answered its scrape (present, and not lost: `scrape_blips`)."""
    lost = job.node_failed
    pres: np.ndarray = job.present[h] & ~lost[h] if len(lost) else job.present[h]
    return pres


def _down(job: Job, h: int) -> np.ndarray:
    """Return where the GPU exporter refused the scrapes of host `h` (no GPU sample: `late_driver`,
    `restart_at_end`)."""
    mask = job.gpu_down
    return mask[h] if len(mask) else np.zeros(len(job.t), dtype=bool)


def _training(job: Job, poll_s: float = 0.0) -> Iterator[Item]:
    # training gauges scraped from rank 0's exporter: value of the last completed step at each scrape, or,
    # when the trainer refreshes them every `poll_s` seconds only, at its last refresh before the scrape
    t = job.t
    seen = t
    if poll_s > 0:
        phase = job.train_start + float(np.random.default_rng([job.seed, 778]).uniform(0, poll_s))
        seen = np.where(t >= phase, phase + np.floor((t - phase) / poll_s) * poll_s, job.train_start)
    idx = np.searchsorted(job.step_end, seen, side="right") - 1
    valid = idx >= 0
    ii = np.clip(idx, 0, None)
    up = job.t <= (job.crash_time if job.crash_time is not None else job.job_end)
    lab = {"instance": f"{job.hosts[0]}:8000", "job": "training"}
    for metric, arr, fmt in (
        ("training_step", job.step_num.astype(float), "d"),
        ("training_loss", job.loss, "g"),
        ("training_step_time_seconds", job.step_secs, "g"),
        ("training_tokens_per_second", job.tgs, "g"),
        ("training_grad_norm", job.grad_norm, "g"),
        ("training_learning_rate", job.lr, "g"),
        ("training_last_step_timestamp_seconds", job.step_end, "f3"),
    ) + ((("training_moe_lb_loss", job.moe_lb, "g"),) if job.moe else ()):
        if len(arr) == 0:
            continue
        yield metric, lab, t, np.where(valid & up, arr[ii], np.nan), fmt


def standard_series(job: Job, ex: Exporters) -> Iterator[Item]:
    """Yield every series of the job as the standard exporters deployed per `ex` export them."""
    lay = _Layout(job, ex)
    if ex.gpu != "none":
        yield from {"dcgm": _dcgm, "nvsmi": _nvsmi}.get(ex.gpu, _dme)(lay)
    yield from _node(lay)
    yield from _targets(lay)
    if ex.trainer_gauges:
        yield from _training(job, ex.step_poll_s)
