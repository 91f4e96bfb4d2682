"""Corpus G's node_exporter and training gauges (#10).

node_exporter with its default collectors as they matter here: uname, boot time, loadavg, processes
(`node_procs_*` from stat), meminfo, vmstat's `oom_kill`, pressure, netdev for the front NIC, hwmon
CPU temperatures and the infiniband collector (port and hw counters of IB or RoCE mlx5 devices). EFA
sites export EFA's hw counters through the textfile collector instead (`efa_*_total`). The training
gauges (`training_*`) come from a pushgateway, whose last push stays after the job stops.
"""

from __future__ import annotations

import random

import numpy as np

from bench.outside._g_fleet import Fleet
from bench.outside._g_time import CKPT, HANG, INIT, TRAIN, Effects, Timeline
from bench.outside._g_tsdb import Om, grid, target

GIB = 1024.0**3


def mem_total(fl: Fleet) -> float:
    return {"gb200": 884.0, "b200": 2015.0}.get(fl.gpu.name.split()[-1].lower(), 1_967.0) * GIB


def _memory(
    fl: Fleet, tl: Timeline, eff: Effects, hi: int, t: np.ndarray, nr
) -> tuple[np.ndarray, np.ndarray]:
    """(MemAvailable, Cached) bytes: a floor that grows with training, save rises, an OOM kill."""
    total = mem_total(fl)
    live = (t >= tl.t_launch) & (t < tl.t_stop)
    ramp = np.clip((t - tl.t_launch) / max(tl.t_train - tl.t_launch, 1), 0, 1)
    used = total * (0.04 + np.where(live, 0.16 * ramp, 0.0)) + nr.normal(0, 0.3 * GIB, len(t))
    for t0, t1, gib, keep in eff.mem_rises.get(hi, []):
        up = np.clip((t - t0) / max(t1 - t0, 1), 0, 1)
        after = t >= t1
        used += np.where(after, keep * GIB, up * gib * GIB) * live
        if keep == 0:
            used -= np.where(after, 0, 0)
    kill = eff.oom_kill.get(hi)
    if kill is not None:
        used = np.where(t >= kill, total * 0.05, np.minimum(used, total * 0.985))
    cached = np.clip(total * 0.09 + nr.normal(0, 0.5 * GIB, len(t)), 0, None)
    avail = np.clip(total - used, total * 0.004, total)
    return avail, np.minimum(cached, avail * 0.6)


def node_series(om: Om, fl: Fleet, tl: Timeline, eff: Effects, hi: int, rng: random.Random) -> None:
    """All node_exporter series of host `hi` (and its target's up/scrape series)."""
    h = fl.hosts[hi]
    t = grid(tl.t0, tl.t1, fl.scrape_s, rng, eff.prom_gap)
    n = len(t)
    nr = np.random.default_rng(rng.randrange(1 << 30))
    ok = np.ones(n, bool)
    if hi in eff.dead:
        ok &= t < eff.dead[hi]
    if (hi, "node") in eff.outage:
        a, b = eff.outage[(hi, "node")]
        ok &= (t < a) | (t >= b)
    lab = {"instance": h.node_instance, "job": "node-exporter" if fl.layout == "k8s" else "node"}
    if fl.layout == "k8s":
        lab.update(
            namespace="monitoring",
            pod=f"node-exporter-{h.exporter_pod[-5:]}",
            node=h.name,
            service="prometheus-node-exporter",
        )
    ph = tl.phase_at(t)
    series: list[tuple[str, dict, np.ndarray]] = []
    arch = "aarch64" if fl.gpu.per_host == 4 else "x86_64"
    dom = h.fqdn.split(".", 1)[1] if "." in h.fqdn else "(none)"
    series.append(
        (
            "node_uname_info",
            {
                "domainname": dom if fl.site == "gcp" else "(none)",
                "machine": arch,
                "nodename": h.name,
                "release": "5.15.0-1063-nvidia",
                "sysname": "Linux",
                "version": "#64-Ubuntu SMP",
            },
            np.ones(n),
        )
    )
    series.append(("node_boot_time_seconds", {}, np.full(n, round(tl.t0 - rng.uniform(2, 40) * 86400))))
    train = np.isin(ph, [TRAIN, INIT, CKPT, HANG])
    busy = np.where(train, len(fl.owned) * rng.uniform(1.2, 2.0), 1.0)
    leak = (t >= tl.t_train) & (t < tl.t_stop)
    busy = busy + eff.extra_procs * leak + nr.normal(0, 1.3, n).clip(-1, None)
    series.append(("node_procs_running", {}, np.round(np.clip(busy, 1, None))))
    blocked = np.where(ph == CKPT, nr.integers(4, 18, n), nr.integers(0, 2, n))
    series.append(("node_procs_blocked", {}, blocked.astype(float)))
    load = _lag(busy + blocked, t, 60.0)
    series += [
        ("node_load1", {}, np.round(load, 2)),
        ("node_load5", {}, np.round(_lag(load, t, 300.0), 2)),
        ("node_load15", {}, np.round(_lag(load, t, 900.0), 2)),
    ]
    avail, cached = _memory(fl, tl, eff, hi, t, nr)
    total = mem_total(fl)
    series += [
        ("node_memory_MemTotal_bytes", {}, np.full(n, total)),
        ("node_memory_MemAvailable_bytes", {}, np.round(avail)),
        ("node_memory_MemFree_bytes", {}, np.round(np.clip(avail - cached, 0, None))),
        ("node_memory_Cached_bytes", {}, np.round(cached)),
    ]
    kills = (t >= eff.oom_kill[hi]) * 1.0 if hi in eff.oom_kill else np.zeros(n)
    series.append(("node_vmstat_oom_kill", {}, kills + float(rng.choice([0, 0, 1]))))
    dt = np.diff(t, prepend=t[0] - fl.scrape_s)
    mem_stall = np.where(avail < total * 0.03, 0.6, 0.0005) * dt
    io_stall = np.where(ph == CKPT, 0.5, 0.002) * dt
    series += [
        ("node_pressure_memory_stalled_seconds_total", {}, np.cumsum(mem_stall) + 40.0),
        ("node_pressure_io_stalled_seconds_total", {}, np.cumsum(io_stall) + 900.0),
    ]
    nic = {"gcp": "ens8", "aws": "enp71s0", "cray": "hsn0", "hgx": "eno1"}[fl.site]
    net = np.cumsum(np.where(ph == CKPT, 2.5e9, 4e6) * dt) + 1e12
    series += [
        ("node_network_receive_bytes_total", {"device": nic}, np.round(net * 0.3)),
        ("node_network_transmit_bytes_total", {"device": nic}, np.round(net)),
    ]
    for sensor in ("temp1", "temp2"):
        base = 48 + eff.warm.get(hi, 0.0) * 0.8 + np.where(train, 14, 0) + rng.uniform(-2, 2)
        series.append(
            (
                "node_hwmon_temp_celsius",
                {"chip": "platform_coretemp_0", "sensor": sensor},
                np.round(_lag(base + nr.normal(0, 0.5, n), t, 120.0), 1),
            )
        )
    series += _rdma(fl, tl, eff, hi, t, ph, dt, nr)
    for name, extra, val in series:
        v = val.astype(float).copy()
        v[~ok] = np.nan
        om.add(name, {**lab, **extra}, t, v)
    dur = np.array([abs(rng.gauss(0.035, 0.01)) for _ in range(n)])
    dur[~ok] = fl.timeout_s
    target(om, lab, t, ok, dur, len(series) + 600)


def _lag(x: np.ndarray, t: np.ndarray, tau: float) -> np.ndarray:
    out = np.empty_like(x, dtype=float)
    out[0] = x[0]
    a = 1.0 - np.exp(-np.diff(t, prepend=t[0]) / tau)
    for i in range(1, len(x)):
        out[i] = out[i - 1] + a[i] * (x[i] - out[i - 1])
    return out


def _retx_rate(eff: Effects, hi: int, t: np.ndarray, nr) -> np.ndarray:
    """Retransmit-class events per second on this host: the background trickle plus a story's burst."""
    base = eff.trickle_hosts.get(hi, eff.trickle)
    rate = np.full(len(t), base) * nr.uniform(0.3, 1.7, len(t))
    if hi in eff.retx:
        a, b, r = eff.retx[hi]
        m = (t >= a) & (t < b)
        rate[m] += r * nr.uniform(0.7, 1.3, m.sum())
    return rate


def _rdma(fl, tl, eff, hi, t, ph, dt, nr) -> list[tuple[str, dict, np.ndarray]]:
    if fl.rdma == "none":
        return []
    out = []
    active = np.isin(ph, [TRAIN]) * 1.0
    rate = _retx_rate(eff, hi, t, nr)
    k = len(fl.nics)
    for j, dev in enumerate(fl.nics):
        share = rate / k * nr.uniform(0.5, 1.5)
        ev = np.floor(np.cumsum(share * dt)) + float(nr.integers(0, 40))
        data = np.round(np.cumsum(active * 4.2e9 * nr.uniform(0.9, 1.1, len(t)) * dt) + 7e13 + j * 1e11)
        d = {"device": dev, "port": "1"}
        if fl.rdma == "efa":
            out += [
                ("efa_tx_bytes_total", d, data),
                ("efa_rx_bytes_total", d, data * 0.999),
                ("efa_retrans_pkts_total", d, ev * 3),
                ("efa_retrans_timeout_events_total", d, np.floor(ev / 3)),
                ("efa_unresponsive_remote_events_total", d, np.floor(ev / 40)),
            ]
            continue
        lanes = 4.0  # the counters count 4-byte words (port_xmit_data / 4 in sysfs)
        out += [
            ("node_infiniband_port_data_transmitted_bytes_total", d, data),
            ("node_infiniband_port_data_received_bytes_total", d, data * 0.998),
            ("node_infiniband_local_ack_timeout_errors_total", d, np.floor(ev / 2)),
            ("node_infiniband_out_of_sequence_packets_received_total", d, ev),
            ("node_infiniband_packet_sequence_errors_total", d, np.floor(ev / 5)),
            ("node_infiniband_link_downed_total", d, np.zeros(len(t))),
            ("node_infiniband_symbol_error_total", d, np.full(len(t), float(nr.integers(0, 3)))),
            ("node_infiniband_port_errors_received_total", d, np.zeros(len(t))),
            ("node_infiniband_state_id", d, np.full(len(t), 4.0)),
            ("node_infiniband_rate_bytes_per_second", d, np.full(len(t), 5e10 * lanes / lanes)),
        ]
        if fl.rdma == "roce":
            cnp = np.cumsum(active * 30 * dt * nr.uniform(0.5, 1.5, len(t)))
            out += [
                ("node_infiniband_roce_adp_retransmits_total", d, ev),
                ("node_infiniband_np_cnp_packets_sent_total", d, np.round(cnp)),
                ("node_infiniband_rp_cnp_packets_handled_total", d, np.round(cnp * 0.9)),
            ]
    return out


def train_series(
    om: Om, fl: Fleet, tl: Timeline, eff: Effects, rng: random.Random, tokens_per_step: float
) -> None:
    """The pushgateway's training gauges (the last push stays after the job stops)."""
    if not len(tl.step_t):
        return
    t = grid(tl.t0, tl.t1, fl.scrape_s, rng, eff.prom_gap)
    lab = {"instance": "pushgateway.monitoring.svc:9091", "job": "pushgateway", "exported_job": fl.job_name}
    idx = np.searchsorted(tl.step_t, t, side="right") - 1
    has = idx >= 0
    i = np.clip(idx, 0, None)
    dts = np.diff(tl.step_t, prepend=tl.step_t[0] - tl.step_s)
    mask = np.where(has, 1.0, np.nan)
    om.add("training_step", lab, t, tl.step_no[i] * mask)
    if len(tl.loss):
        om.add("training_loss", lab, t, np.round(tl.loss[i], 4) * mask)
    om.add("training_step_time_seconds", lab, t, np.round(dts[i], 3) * mask)
    om.add("training_tokens_per_second", lab, t, np.round(tokens_per_step / dts[i]) * mask)
    om.add("training_last_step_timestamp_seconds", lab, t, np.round(tl.step_t[i], 3) * mask)
    target(om, lab, t, np.ones(len(t), bool), np.full(len(t), 0.004), 5)
