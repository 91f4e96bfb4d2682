"""Generator A, part 4: node_exporter's series (host, network, InfiniBand) and the trainer's gauges.

node_exporter is scraped as `IP:9100` or `name:9100`; the node's name is only in
`node_uname_info{nodename}`. Counters start at since-boot values. Every NIC carries the sparse RDMA
retransmit trickle real fabrics show (a few packets on about 1 % of scrapes); a fault adds a
sustained rate. node_exporter >= 1.11 adds the InfiniBand hw counters
(`node_infiniband_local_ack_timeout_errors_total`, `..._roce_adp_retransmits_total`, ...).
"""

from __future__ import annotations

import numpy as np

from bench.outside._a_plan import Plan
from bench.outside._a_series import BUSY, SAVE, TRAIN, _add_up, gpu_modes, scrape_times
from bench.outside._om import Store

GIB = 2**30


def _counter(rng: np.random.Generator, ts: np.ndarray, rate: np.ndarray, base_max: float) -> np.ndarray:
    """A cumulative counter from a per-second rate, starting at a since-boot value."""
    dt = np.diff(ts, prepend=ts[0])
    return np.round(float(rng.uniform(0, base_max)) + np.cumsum(np.maximum(rate, 0) * dt))


def _sparse(rng: np.random.Generator, n: int, prob: float, hi: int) -> np.ndarray:
    """Sparse increments: on a share `prob` of scrapes, 1..hi events."""
    hit = rng.random(n) < prob
    return np.cumsum(np.where(hit, rng.integers(1, hi + 1, n), 0)).astype(float)


def _in(ts: np.ndarray, windows: list[tuple[float, float]]) -> np.ndarray:
    m = np.zeros(len(ts), bool)
    for a, b in windows:
        m |= (ts >= a) & (ts < b)
    return m


def _host_values(plan: Plan, rng: np.random.Generator, host: str, ts: np.ndarray) -> dict[str, np.ndarray]:
    """Host-level gauges and counters (memory, procs, PSI, TCP, CPU) of one node."""
    n = len(ts)
    mode = gpu_modes(plan, host, 0, ts)
    train = np.isin(mode, (TRAIN, BUSY)).astype(float)
    save = _in(ts, plan.ckpts) & (mode == SAVE)
    rep0 = host in plan.replica0
    total = float(rng.choice([1024, 2048])) * GIB
    used = float(rng.uniform(60, 140)) * GIB + train * float(rng.uniform(150, 300)) * GIB
    if rep0:
        for a, b in plan.ckpts:
            rise = np.clip((ts - a) / max(b - a, 1), 0, 1) * np.exp(-np.clip(ts - b, 0, None) / 120)
            used = used + rise * float(rng.uniform(300, 500)) * GIB
    used = used * (1 + 0.005 * rng.normal(0, 1, n))
    noise = np.abs(rng.normal(0, 1, n))
    io_rate = 0.002 + save * (0.5 if rep0 else 0.1) * (1 + 0.2 * noise)
    tcp_rate = rng.uniform(0.2, 3.0) + save * rng.uniform(200, 2000) + noise
    for h, a, b, rate in plan.tcp_bursts:
        if h == host:
            tcp_rate = tcp_rate + ((ts >= a) & (ts < b)) * rate * (1 + 0.3 * noise)
    running = np.round(3 + train * rng.uniform(18, 40) + save * 10 + 2 * noise)
    return {
        "node_memory_MemTotal_bytes": np.full(n, total),
        "node_memory_MemAvailable_bytes": np.round(total - used),
        "node_memory_Dirty_bytes": np.round(save * rng.uniform(2, 20) * GIB + noise * 2e6),
        "node_memory_Writeback_bytes": np.round(save * rng.uniform(0.5, 4) * GIB),
        "node_procs_running": running,
        "node_procs_blocked": np.round(save * (12 if rep0 else 2) * noise),
        "node_load1": np.round(running * 0.9 + noise, 2),
        "node_context_switches_total": _counter(rng, ts, 40000 + train * 120000 * (1 + 0.1 * noise), 1e11),
        "node_pressure_io_stalled_seconds_total": np.round(_counter(rng, ts, io_rate, 5e3), 3),
        "node_pressure_io_waiting_seconds_total": np.round(_counter(rng, ts, io_rate * 1.4, 8e3), 3),
        "node_pressure_cpu_waiting_seconds_total": np.round(_counter(rng, ts, 0.01 + 0.02 * noise, 2e4), 3),
        "node_vmstat_oom_kill": np.full(n, float(rng.integers(0, 3))),
        "node_netstat_Tcp_RetransSegs": _counter(rng, ts, tcp_rate, 5e6),
        "node_netstat_Tcp_OutSegs": _counter(rng, ts, 2e4 + save * 3e5, 5e10),
    }


def _cpu_series(
    plan: Plan, rng: np.random.Generator, host: str, ts: np.ndarray
) -> list[tuple[dict[str, str], np.ndarray]]:
    mode = gpu_modes(plan, host, 0, ts)
    busy = np.isin(mode, (TRAIN, BUSY)) * 0.6 + 0.05
    out = []
    for cpu in range(4):
        share = {"user": busy * 0.8, "system": busy * 0.2, "iowait": (mode == SAVE) * 0.2 + 0.002}
        share["idle"] = 1 - share["user"] - share["system"] - share["iowait"]
        for m, frac in share.items():
            out.append(({"cpu": str(cpu), "mode": m}, np.round(_counter(rng, ts, frac, 5e5), 2)))
    return out


def _nic_series(
    plan: Plan, rng: np.random.Generator, host: str, nic: int, ts: np.ndarray
) -> dict[str, np.ndarray]:
    """One HCA port's counters: traffic, trickle, and any fault on it."""
    n = len(ts)
    mode = gpu_modes(plan, host, 0, ts)
    traffic = np.isin(mode, (TRAIN,)) * rng.uniform(6e9, 2e10) * (1 + 0.05 * rng.normal(0, 1, n))
    retx, ack, seq = _sparse(rng, n, 0.01, 8), _sparse(rng, n, 0.003, 2), _sparse(rng, n, 0.004, 3)
    wait_rate = traffic / 4e3
    for f in plan.rdma:
        if f.host == host and nic in f.nics:
            on = ((ts >= f.start) & (ts < f.end)).astype(float) * (1 + 0.3 * np.abs(rng.normal(0, 1, n)))
            dt = np.diff(ts, prepend=ts[0])
            retx += np.round(np.cumsum(on * f.retx_per_s * dt))
            ack += np.round(np.cumsum(on * f.ack_per_s * dt))
            seq += np.round(np.cumsum(on * f.retx_per_s * 0.2 * dt))
            wait_rate = wait_rate * (1 + 4 * on)
    base = float(rng.integers(0, 400))
    out = {
        "node_infiniband_port_data_transmitted_bytes_total": _counter(rng, ts, traffic, 1e15),
        "node_infiniband_port_data_received_bytes_total": _counter(rng, ts, traffic * 0.98, 1e15),
        "node_infiniband_port_packets_transmitted_total": _counter(rng, ts, traffic / 4096, 1e12),
        "node_infiniband_port_packets_received_total": _counter(rng, ts, traffic / 4096, 1e12),
        "node_infiniband_port_transmit_wait_total": _counter(rng, ts, wait_rate, 1e10),
        "node_infiniband_link_downed_total": np.full(n, float(rng.integers(0, 2))),
        "node_infiniband_link_error_recovery_total": np.full(n, float(rng.integers(0, 3))),
        "node_infiniband_symbol_error_total": np.full(n, float(rng.integers(0, 20))),
        "node_infiniband_state_id": np.full(n, 4.0),
        "node_infiniband_physical_state_id": np.full(n, 5.0),
        "node_infiniband_rate_bytes_per_second": np.full(n, 5e10),
    }
    if plan.layout.ne_hw_counters:
        out |= {
            "node_infiniband_roce_adp_retransmits_total": base * 10 + retx,
            "node_infiniband_local_ack_timeout_errors_total": base + ack,
            "node_infiniband_packet_sequence_errors_total": base * 2 + seq,
            "node_infiniband_out_of_sequence_packets_received_total": base * 3 + _sparse(rng, n, 0.02, 4),
            "node_infiniband_np_cnp_packets_sent_total": _counter(
                rng, ts, np.isin(mode, (TRAIN,)) * 2.0, 1e7
            ),
            "node_infiniband_rp_cnp_packets_handled_total": _counter(
                rng, ts, np.isin(mode, (TRAIN,)) * 2.0, 1e7
            ),
        }
    return out


def _kind(name: str) -> str:
    if name.endswith("_total") and not name.startswith("node_netstat") and name != "node_vmstat_oom_kill":
        return "counter"
    return "unknown" if name.startswith(("node_netstat", "node_vmstat")) else "gauge"


def add_node_exporter(plan: Plan, rng: np.random.Generator, store: Store) -> None:
    """Add every node's node_exporter series and `up`."""
    lay = plan.layout
    for hi, host in enumerate(plan.hosts):
        inst = f"{plan.ips[hi] if lay.node_by_ip else host}:9100"
        base = {"job": lay.node_job, "instance": inst}
        times, ok = scrape_times(plan, rng, f"node:{host}")
        _add_up(plan, store, lay.node_job, inst, times, ok)
        ts = times[ok]
        if len(ts) == 0:
            continue
        uname = {
            "nodename": host,
            "sysname": "Linux",
            "release": "5.15.0-119-generic",
            "machine": "x86_64",
            "domainname": "(none)",
            "version": "#129-Ubuntu SMP",
        }
        store.add("node_uname_info", "gauge", base | uname, ts, np.ones(len(ts)))
        for name, arr in _host_values(plan, rng, host, ts).items():
            store.add(name, _kind(name), base, ts, arr)
        for labels, arr in _cpu_series(plan, rng, host, ts):
            store.add("node_cpu_seconds_total", "counter", base | labels, ts, arr)
        for nic in range(plan.nics):
            labels = base | {"device": f"mlx5_{nic}", "port": "1"}
            for name, arr in _nic_series(plan, rng, host, nic, ts).items():
                store.add(name, _kind(name), labels, ts, arr)


def add_trainer(plan: Plan, rng: np.random.Generator, store: Store) -> None:
    """The rank-0 trainer's gauges, scraped like any target; absent before the first step."""
    if not plan.layout.trainer_gauges:
        return
    inst = f"{plan.hosts[0]}:8000"
    times, ok = scrape_times(plan, rng, f"trainer:{plan.hosts[0]}")
    alive = (times >= plan.load_start) & (times < plan.job_end)
    _add_up(plan, store, plan.layout.trainer_job, inst, times[alive], ok[alive])
    ts = times[ok & alive]
    j = np.searchsorted(plan.step_end, ts, side="right") - 1
    ts, j = ts[j >= 0], j[j >= 0]
    labels = {"job": plan.layout.trainer_job, "instance": inst}
    secs = plan.step_secs[j]
    gauges = {
        "training_step": plan.first_step + j.astype(float),
        "training_loss": np.round(plan.losses[j], 4),
        "training_step_time_seconds": np.round(secs, 3),
        "training_tokens_per_second": np.round(plan.tokens_per_step / secs, 1),
        "training_last_step_timestamp_seconds": np.round(plan.step_end[j], 3),
    }
    for name, arr in gauges.items():
        store.add(name, "gauge", labels, ts, arr)
