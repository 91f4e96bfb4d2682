"""Corpus E: node_exporter 1.8 series (infiniband, hwmon, netdev, pressure, vmstat, textfile RDMA counters),
the trainer's gauges, and the quirks and story effects that act on whole targets (#10).
"""

from __future__ import annotations

import random

import numpy as np

from bench.outside._e_fleet import Fleet
from bench.outside._e_plan import Case
from bench.outside._e_series import Target, instance
from bench.outside._e_time import Timeline

REAL_NAN = -9.87654321e300  # a NaN the exporter really reported (NaN in arrays means "no sample")
HWC = ("local_ack_timeout_err", "out_of_sequence", "packet_seq_err")


def _counter(rate: np.ndarray, dt: float, start: float) -> np.ndarray:
    return (start + np.cumsum(np.maximum(rate, 0) * dt)).round()


def _ib_series(case: Case, fl: Fleet, h: int, rng: np.random.Generator) -> list:
    out: list = []
    dt = case.scrape_s
    hwc = case.net == "roce" or case.seed % 10 < 7
    for p in range(8):
        dev = {"device": f"mlx5_{p}", "port": "1"}
        share = fl.net_rate[h] / 8 * (1 + rng.normal(0, 0.02, fl.grid.size))
        if case.net == "ib":
            bad = np.maximum(fl.retx[h] - 1.0, 0) * (p < 2)  # a bad link shows physical-layer errors too
            base = rng.uniform(1e12, 9e13)
            wait = fl.ib_wait[h] * (1 + rng.normal(0, 0.1, fl.grid.size)) / 8
            out += [
                ("node_infiniband_port_data_transmitted_bytes_total", dev, _counter(share, dt, base)),
                (
                    "node_infiniband_port_data_received_bytes_total",
                    dev,
                    _counter(share * 0.998, dt, base * 1.01),
                ),
                (
                    "node_infiniband_port_packets_transmitted_total",
                    dev,
                    _counter(share / 4096, dt, base / 4096),
                ),
                ("node_infiniband_port_packets_received_total", dev, _counter(share / 4096, dt, base / 4100)),
                ("node_infiniband_port_transmit_wait_total", dev, _counter(wait, dt, rng.uniform(1e8, 1e10))),
                ("node_infiniband_link_downed_total", dev, np.full(fl.grid.size, float(rng.integers(0, 3)))),
                (
                    "node_infiniband_link_error_recovery_total",
                    dev,
                    _counter(bad * 0.002, dt, float(rng.integers(0, 4))),
                ),
                (
                    "node_infiniband_symbol_error_total",
                    dev,
                    _counter(bad * 0.3, dt, float(rng.integers(0, 40))),
                ),
                ("node_infiniband_port_errors_received_total", dev, _counter(bad * 0.05, dt, 0.0)),
                ("node_infiniband_state_id", dev, np.full(fl.grid.size, 4.0)),
            ]
        if hwc:
            for name in HWC:
                r = fl.retx[h] / 8 * (0.08 if name == "local_ack_timeout_err" else 1.0)
                if name == "packet_seq_err":
                    r = r * 0.3
                out.append((f"node_rdma_hw_{name}_total", {**dev, "hca": f"mlx5_{p}"}, _counter(r, dt, 0.0)))
    return out


def _host_series(case: Case, fl: Fleet, h: int, rng: np.random.Generator) -> list:
    g, dt, t = fl.grid, case.scrape_s, fl.grid.size
    used = fl.mem_used[h]
    procs = fl.procs[h].round()
    dirty = fl.ckpt * rng.uniform(2e9, 9e9) + rng.exponential(5e7, t)
    eth = "ens1f0np0" if case.net == "roce" else "eno1"
    netdev = [
        ("node_network_transmit_bytes_total", {"device": eth}, _counter(5e6 + fl.io_rate[h] * 0.9, dt, 7e12)),
        ("node_network_receive_bytes_total", {"device": eth}, _counter(4e6 + fl.io_rate[h] * 0.05, dt, 9e12)),
        ("node_network_receive_errs_total", {"device": eth}, np.zeros(t)),
        ("node_network_transmit_drop_total", {"device": eth}, np.zeros(t)),
    ]
    if case.net == "roce":
        for i in range(4):
            dev = {"device": f"ens{i + 2}f0np0"}
            netdev.append(("node_network_transmit_bytes_total", dev, _counter(fl.net_rate[h] / 4, dt, 3e13)))
            netdev.append(("node_network_receive_bytes_total", dev, _counter(fl.net_rate[h] / 4, dt, 3e13)))
    hot = 48 + 12 * fl.act[h].mean(axis=0) + rng.normal(0, 1, t)
    return [
        ("node_load1", {}, (procs * 0.9 + rng.normal(0, 0.5, t)).clip(0).round(2)),
        ("node_procs_running", {}, procs),
        ("node_procs_blocked", {}, (fl.ckpt * rng.integers(3, 14, t) + (rng.random(t) < 0.1)).astype(float)),
        ("node_context_switches_total", {}, _counter(procs * 9000, dt, 4e11)),
        ("node_memory_MemTotal_bytes", {}, np.full(t, fl.mem_total)),
        ("node_memory_MemAvailable_bytes", {}, (fl.mem_total - used).round()),
        ("node_memory_MemFree_bytes", {}, ((fl.mem_total - used) * 0.55).round()),
        ("node_memory_Dirty_bytes", {}, dirty.round()),
        ("node_memory_Writeback_bytes", {}, (fl.ckpt * rng.uniform(1e8, 6e8, t)).round()),
        ("node_vmstat_oom_kill", {}, np.full(t, float(rng.integers(0, 3)))),
        ("node_pressure_io_stalled_seconds_total", {}, _counter(fl.ckpt * 0.55 + 0.002, dt, 2e4)),
        ("node_pressure_io_waiting_seconds_total", {}, _counter(fl.ckpt * 0.7 + 0.004, dt, 3e4)),
        (
            "node_pressure_memory_stalled_seconds_total",
            {},
            _counter(np.clip(used / fl.mem_total - 0.9, 0, 1), dt, 10.0),
        ),
        ("node_disk_written_bytes_total", {"device": "nvme0n1"}, _counter(fl.io_rate[h] * 0.1, dt, 5e13)),
        ("node_netstat_Tcp_RetransSegs", {}, _counter(fl.tcp_retx[h], dt, 1e6)),
        ("node_netstat_TcpExt_TCPTimeouts", {}, _counter(fl.tcp_retx[h] * 0.01, dt, 2e3)),
        ("node_hwmon_temp_celsius", {"chip": "platform_coretemp_0", "sensor": "temp1"}, hot.round()),
        ("node_hwmon_temp_celsius", {"chip": "platform_coretemp_1", "sensor": "temp1"}, (hot - 2).round()),
        ("node_hwmon_temp_celsius", {"chip": "nvme_nvme0", "sensor": "temp1"}, (hot - 9).round()),
        ("node_boot_time_seconds", {}, np.full(t, float(int(g[0]) - int(rng.integers(3, 90)) * 86400))),
        (
            "node_uname_info",
            {
                "nodename": case.hosts[h],
                "release": "5.15.0-105-generic",
                "machine": "x86_64",
                "sysname": "Linux",
                "version": "#115-Ubuntu SMP",
                "domainname": "(none)",
            },
            np.ones(t),
        ),
        *netdev,
        *_ib_series(case, fl, h, rng),
    ]


def node_targets(case: Case, fl: Fleet, prng: random.Random) -> list[Target]:
    rng = np.random.default_rng(case.seed + 9)
    kube = case.instance_style == "host"
    out = []
    for h in range(len(case.hosts)):
        tgt = Target(
            job="node-exporter" if kube else "node",
            instance=instance(case, h, 9100),
            host=h,
            offset=prng.uniform(0, case.scrape_s * 0.9),
            alive=np.ones(fl.grid.size, bool),
            configured=np.ones(fl.grid.size, bool),
            labels={"namespace": "monitoring", "service": "node-exporter"} if kube else {},
        )
        tgt.series = _host_series(case, fl, h, rng)
        for c in ("cpu", "meminfo", "infiniband", "hwmon", "netdev", "textfile"):
            base = {"infiniband": 0.04, "hwmon": 0.02}.get(c, 0.004)
            tgt.series.append(
                (
                    "node_scrape_collector_duration_seconds",
                    {"collector": c},
                    (base * (1 + np.abs(rng.normal(0, 0.3, fl.grid.size)))).round(6),
                )
            )
        out.append(tgt)
    return out


def trainer_target(case: Case, tl: Timeline, fl: Fleet) -> Target:
    """The training script's /metrics on the rank-0 node (present while the process lives)."""
    g = fl.grid
    on = (g >= tl.start + 60) & (g < tl.end)
    ends = np.array([s.end for s in tl.steps]) if tl.steps else np.array([np.inf])
    idx = np.searchsorted(ends, g, side="right") - 1
    has = (idx >= 0) & on
    pick = np.clip(idx, 0, None)
    steps = tl.steps or []

    def col(f) -> np.ndarray:  # noqa: ANN001
        arr = np.array([f(s) for s in steps]) if steps else np.zeros(1)
        return np.where(has, arr[pick], np.nan)

    tokens = 4096 * 512 * (len(case.hosts) // 8 + 1)
    series: list[tuple[str, dict[str, str], np.ndarray]] = [
        ("training_step", {}, col(lambda s: float(s.n))),
        ("training_loss", {}, col(lambda s: s.loss if s.loss == s.loss else REAL_NAN)),
        ("training_step_time_seconds", {}, col(lambda s: s.seconds)),
        ("training_grad_norm", {}, col(lambda s: s.grad_norm if s.grad_norm == s.grad_norm else REAL_NAN)),
        ("training_tokens_per_second", {}, col(lambda s: tokens / s.seconds)),
        ("training_last_step_timestamp_seconds", {}, col(lambda s: s.end)),
    ]
    return Target(
        job="trainer",
        instance=instance(case, 0, 8000),
        host=0,
        offset=3.0,
        alive=on,
        configured=g >= tl.start + 60,
        series=series,
    )
