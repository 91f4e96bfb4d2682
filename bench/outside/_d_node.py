"""Corpus D: node_exporter's series (memory, processes, TCP, PSI, InfiniBand) and the trainer's gauges."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from bench.outside._d_fleet import node_target, stable
from bench.outside._d_sim import Series, Sim
from bench.outside._d_timeline import BUSY, SAVE, TRAIN, step_gauges

GIB = 1024.0**3


def _counter(rate: np.ndarray, scrape: float, start: np.ndarray) -> np.ndarray:
    """A cumulative counter from a per-second rate (integer increments), from a lifetime start."""
    inc = np.floor(np.maximum(rate, 0) * scrape)
    return start[..., None] + np.cumsum(inc, axis=-1)


def node_state(sim: Sim) -> dict[str, np.ndarray]:
    """Per-host (and per-NIC) figures at each tick."""
    p, r = sim.plan, sim.np
    h, t = sim.H, sim.T
    code = sim.code
    train = (code == TRAIN).astype(float)
    save = code == SAVE
    writers = np.zeros((h, 1), dtype=bool)
    writers[: max(1, h // 8)] = True  # the data-parallel replica-0 hosts write the checkpoint
    base_mem = (170 + 90 * r.random((h, 1))) * GIB
    mem = (
        base_mem + 40 * GIB * train + np.where(save & writers, 0.55 * p.extra.get("save_gib", 600) * GIB, 0.0)
    )
    mem = mem + sim.mem_add + 2 * GIB * r.standard_normal((h, t))
    procs_base = p.extra.get("procs_base") if "procs_base" in p.extra else 6 + 30 * r.random((h, 1))
    procs = np.round(procs_base + 12 * train + sim.procs_add + r.poisson(2.0, (h, t)))
    blocked = r.poisson(0.3, (h, t)) + np.where(save & writers, r.poisson(12, (h, t)), 0)
    tcp = (
        0.5
        + 0.6 * r.random((h, t))
        + np.where(save & writers, 400 + 900 * r.random((h, t)), 0.0)
        + sim.tcp_add
    )
    dirty = np.where(
        save & writers, (20 + 30 * r.random((h, t))) * GIB, (0.05 + 0.2 * r.random((h, t))) * GIB
    )
    psi = 0.004 + np.where(save & writers, 0.45, 0.0) + 0.003 * r.random((h, t))
    nics = len(p.hosts[0].nics)
    busy = (code == BUSY)[:, None, :]
    ib_rate = (
        (22e9 + 6e9 * r.random((h, nics, 1)))
        * train[:, None, :]
        * (1 + 0.05 * r.standard_normal((h, nics, t)))
    )
    ib_rate = ib_rate + np.where(busy, 2e4, 3e5)
    wait = 4e5 + 2e5 * r.random((h, nics, 1)) + 5e4 * r.standard_normal((h, nics, t))
    # the retransmit trickle every NIC shows: a few to tens of packets on ~1 % of scrapes
    trickle = np.where(r.random((h, nics, t)) < 0.01, r.integers(2, 40, (h, nics, t)), 0)
    retx = trickle + sim.retx
    ack = np.where(r.random((h, nics, t)) < 0.002, 1, 0) + sim.acktmo
    return {
        "mem": mem,
        "procs": procs,
        "blocked": blocked,
        "tcp": tcp,
        "dirty": dirty,
        "psi": psi,
        "ib": ib_rate,
        "wait": wait,
        "retx": retx,
        "ack": ack,
        "train": train,
    }


def node_series(sim: Sim) -> Iterator[Series]:
    """node_exporter's families for every host, with the layout's target labels."""
    p, r = sim.plan, sim.np
    st = node_state(sim)
    h, s = sim.H, float(p.scrape)
    total = np.full((h, sim.T), 2015.5 * GIB)
    start = lambda scale: np.floor(scale * (1 + r.random(h)))  # noqa: E731 - lifetime counters
    nstart = lambda scale: np.floor(scale * (1 + r.random((h, len(p.hosts[0].nics)))))  # noqa: E731
    oom = start(3.0)[:, None] + np.cumsum(sim.oom, axis=1)
    fams: dict[str, tuple[np.ndarray, str]] = {
        "node_memory_MemTotal_bytes": (total, ".0f"),
        "node_memory_MemAvailable_bytes": (np.maximum(total - st["mem"], 0.4 * GIB), ".0f"),
        "node_memory_Dirty_bytes": (st["dirty"], ".0f"),
        "node_vmstat_oom_kill": (oom, ".0f"),
        "node_procs_running": (st["procs"], ".0f"),
        "node_procs_blocked": (st["blocked"], ".0f"),
        "node_load1": (np.round(st["procs"] * 0.9 + st["blocked"], 2), ".2f"),
        "node_context_switches_total": (_counter(8e4 + 1.2e5 * st["train"], s, start(1e12)), ".0f"),
        "node_netstat_Tcp_RetransSegs": (_counter(st["tcp"], s, start(4e6)), ".0f"),
        "node_pressure_io_stalled_seconds_total": (
            start(5e4)[:, None] + np.cumsum(st["psi"] * s, axis=1),
            ".6f",
        ),
    }
    nic_fams: dict[str, tuple[np.ndarray, str]] = {
        "node_infiniband_port_data_transmitted_bytes_total": (_counter(st["ib"], s, nstart(1e15)), ".0f"),
        "node_infiniband_port_data_received_bytes_total": (_counter(st["ib"] * 1.01, s, nstart(1e15)), ".0f"),
        "node_infiniband_port_packets_transmitted_total": (_counter(st["ib"] / 4096, s, nstart(2e11)), ".0f"),
        "node_infiniband_port_transmit_wait_total": (_counter(st["wait"], s, nstart(1e12)), ".0f"),
        "node_infiniband_state_id": (np.full(st["wait"].shape, 4.0), ".0f"),
        "node_infiniband_physical_state_id": (np.full(st["wait"].shape, 5.0), ".0f"),
    }
    if p.layout.ib_retx:
        nic_fams["node_infiniband_roce_adp_retransmits_total"] = (
            nstart(5e3)[..., None] + np.cumsum(st["retx"], axis=-1),
            ".0f",
        )
        nic_fams["node_infiniband_local_ack_timeout_errors_total"] = (
            nstart(20)[..., None] + np.cumsum(st["ack"], axis=-1),
            ".0f",
        )
    for name, (arr, fmt) in fams.items():
        for i, host in enumerate(p.hosts):
            yield Series(
                name, node_target(p.layout, host), sim.freeze("node", i, arr[i].copy()), _ntimes(sim, i), fmt
            )
    for name, (arr, fmt) in nic_fams.items():
        for i, host in enumerate(p.hosts):
            vals = sim.freeze("node", i, arr[i].copy())
            for n, dev in enumerate(host.nics):
                yield Series(
                    name,
                    node_target(p.layout, host) | {"device": dev, "port": "1"},
                    vals[n],
                    _ntimes(sim, i),
                    fmt,
                )
    for i, host in enumerate(p.hosts):
        labels = node_target(p.layout, host) | {
            "nodename": host.uname,
            "sysname": "Linux",
            "machine": "x86_64",
            "domainname": "(none)",
            "release": "5.15.0-1063-nvidia",
            "version": "#64-Ubuntu SMP Fri Aug 9 17:13:45 UTC 2024",
        }
        yield Series("node_uname_info", labels, np.ones(sim.T), _ntimes(sim, i), ".0f")
        yield from _node_meta(sim, i)


def _ntimes(sim: Sim, i: int) -> np.ndarray:
    return sim.times(f"node/{sim.plan.hosts[i].name}", sim.node_present[i] & (sim.node_up[i] > 0))


def _node_meta(sim: Sim, i: int) -> Iterator[Series]:
    host = sim.plan.hosts[i]
    base = node_target(sim.plan.layout, host)
    times = sim.times(f"node/{host.name}", sim.node_present[i])
    ok = sim.node_up[i] > 0
    dur = 0.03 + 0.05 * sim.np.random(sim.T)
    yield Series("up", dict(base), ok.astype(float), times, ".0f")
    yield Series("scrape_duration_seconds", dict(base), np.where(ok, dur, 10.0), times, ".6f")
    yield Series("scrape_samples_scraped", dict(base), np.where(ok, 1650.0, 0.0), times, ".0f")


def trainer_series(sim: Sim) -> Iterator[Series]:
    """The trainer's gauges, served by rank 0 (absent in some deployments: only the log has steps)."""
    p = sim.plan
    if p.extra.get("no_trainer"):
        return
    gauges = step_gauges(p, sim.tl)
    h0 = p.hosts[0]
    inst = f"{h0.pod_ip}:8000" if p.layout.style == "k8s" else f"{h0.name}:8000"
    base = {"instance": inst, "job": p.layout.train_job}
    after = sim.ticks <= sim.tl.job_end + p.scrape
    present = sim.train_present & after & (sim.node_up[0] > 0)
    times = sim.times(f"train/{stable(inst)}", present)
    for name, vals in gauges.items():
        ok = ~np.isnan(vals)
        yield Series(
            name,
            dict(base),
            np.nan_to_num(vals),
            np.where(ok, times, np.nan),
            ".6g" if "loss" in name else ".10g",
        )
    yield Series("up", dict(base), np.ones(sim.T), times, ".0f")
