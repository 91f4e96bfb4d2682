"""Corpus C: a simulated `World` as the series real exporters would have given Prometheus.

GPU exporter: NVIDIA dcgm-exporter (`DCGM_FI_*`, host label `Hostname`, `hostname` or none, ECC as
SBE/DBE or as remapped rows, 30 s collection) or AMD device-metrics-exporter (`gpu_*`, optional
`amd_` prefix, `gpu_package_power` or `gpu_power_usage`, `gpu_id`, `gpu_partition_id`). Host
exporter: node_exporter (`instance` by name or by address, `node_uname_info`, InfiniBand port
counters, 1.11 RDMA hw counters). Trainer gauges `training_*` on the rank-0 host. Prometheus' own
`up`/`scrape_duration_seconds` per target. Kubernetes deployments add pod/namespace/container labels.
"""

from __future__ import annotations

import numpy as np

from bench.outside._c_sim import World, counter
from bench.outside._om import Store


class Emitter:
    """Adds one target's series to a store with that target's sample times and presence."""

    def __init__(self, w: World, store: Store) -> None:
        self.w, self.store = w, store
        self.rng = np.random.default_rng(w.spec.seed + 7)

    def times(self, phase: float) -> np.ndarray:
        jit = self.rng.normal(0, 0.01 * self.w.iv, self.w.T).clip(-0.05 * self.w.iv, 0.05 * self.w.iv)
        return self.w.t + phase + jit

    def add(
        self, name: str, kind: str, labels: dict, times: np.ndarray, values: np.ndarray, ok: np.ndarray
    ) -> None:
        self.store.add(name, kind, labels, times[ok], np.asarray(values, float)[ok])


def _freeze(values: np.ndarray, start: int | None) -> np.ndarray:
    if start is None:
        return values
    out = np.array(values, float)
    out[..., start:] = out[..., start - 1 : start]
    return out


def _reset(values: np.ndarray, at: list[int]) -> np.ndarray:
    out = np.array(values, float)
    for k in at:
        out[..., k:] -= out[..., k : k + 1]
    return out


def _hold(values: np.ndarray, w: World, every: float) -> np.ndarray:
    """DCGM's collection period longer than the scrape: each value repeats until the next poll."""
    if every <= w.iv:
        return values
    k = np.floor((w.t - w.t[0]) / every).astype(int)
    first = np.searchsorted(k, k, side="left")
    return values[..., first]


def _kube(role: str, h: int, w: World) -> dict[str, str]:
    if not w.spec.layout.kube:
        return {}
    tag = f"{(w.spec.seed + h * 7919) % 0xFFFFF:05x}"
    ns = {"gpu": "gpu-operator", "node": "monitoring", "train": "training"}[role]
    cont = {
        "gpu": "nvidia-dcgm-exporter" if w.spec.layout.gpu == "dcgm" else "device-metrics-exporter",
        "node": "node-exporter",
        "train": "trainer",
    }[role]
    return {
        "pod": f"{cont}-{tag}",
        "namespace": ns,
        "container": cont,
        "endpoint": "metrics",
        "service": cont,
    }


def _instance(w: World, h: int, port: int, by_ip: bool) -> str:
    return f"{w.spec.ips[h] if by_ip else w.spec.hosts[h]}:{port}"


def gpu_series(w: World, e: Emitter) -> None:
    lay = w.spec.layout
    for h in range(w.H):
        ok = w.gpu_ok[h]
        times = e.times(float(e.rng.uniform(0, 0.8 * w.iv)))
        base = {
            "job": lay.jobs["gpu"],
            "instance": _instance(w, h, 9400, lay.kube or lay.host_label == "none"),
        }
        base |= _kube("gpu", h, w)
        frozen = w.frozen.get(f"gpu:{h}")
        resets = [k for kind, hh, k in w.resets if kind == "gpu" and hh == h]
        if lay.gpu == "dcgm":
            _dcgm_host(w, e, h, base, times, ok, frozen, resets)
        else:
            _amd_host(w, e, h, base, times, ok, frozen, resets)
        _up(w, e, base, times, ok, h)


def _dcgm_host(w, e, h, base, times, ok, frozen, resets) -> None:  # noqa: ANN001
    lay = w.spec.layout
    hold = 30.0 if lay.dcgm_collect_30s else w.iv
    a = w.arr
    fields = [
        ("DCGM_FI_DEV_GPU_UTIL", a["util"]),
        ("DCGM_FI_DEV_POWER_USAGE", a["power"]),
        ("DCGM_FI_DEV_GPU_TEMP", a["temp"]),
        ("DCGM_FI_DEV_SM_CLOCK", a["clock"]),
        ("DCGM_FI_DEV_FB_USED", a["fb"]),
        ("DCGM_FI_DEV_XID_ERRORS", a["xid"]),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", _reset(a["pcie_replay"][h], resets)),
    ]
    if lay.dcgm_ecc == "sbe-dbe":
        fields += [
            ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", _reset(a["sbe"][h], resets)),
            ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", _reset(a["dbe"][h], resets)),
        ]
    else:
        fields += [
            ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", a["remap_c"]),
            ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", a["remap_u"]),
            ("DCGM_FI_DEV_ROW_REMAP_FAILURE", a["remap_fail"]),
        ]
    total_mib = float(a["fb"].max()) / 0.88
    for g in range(w.G):
        labels = base | {
            "gpu": str(g),
            "UUID": f"GPU-{w.spec.seed % 10**8:08x}-{h:04x}-{g:04x}",
            "device": f"nvidia{g}",
            "modelName": w.spec.gpu_model,
            "pci_bus_id": f"00000000:{[0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB][g % 8]:02X}:00.0",
        }
        if lay.host_label != "none":
            labels[lay.host_label] = w.spec.hosts[h]
        for name, arr in fields:
            vals = arr[g] if arr.ndim == 2 else arr[h, g]
            vals = _freeze(_hold(vals, w, hold), frozen)
            e.add(name, "gauge", labels, times, vals, ok)
        free = _freeze(_hold(total_mib - a["fb"][h, g], w, hold), frozen)
        e.add("DCGM_FI_DEV_FB_FREE", "gauge", labels, times, free, ok)


def _amd_host(w, e, h, base, times, ok, frozen, resets) -> None:  # noqa: ANN001
    lay, a, p = w.spec.layout, w.arr, w.spec.layout.amd_prefix
    fields = [
        (lay.amd_power, a["power"]),
        ("gpu_junction_temperature", a["temp"]),
        ("gpu_edge_temperature", a["temp"] - 6),
        ("gpu_gfx_activity", a["util"]),
        ("gpu_used_vram", a["fb"] * 1.048576),
        ("gpu_total_vram", a["fb"] * 0 + float(a["fb"].max()) / 0.88),
        ("gpu_ecc_correct_total", a["sbe"] + 0),
        ("gpu_ecc_uncorrect_total", a["dbe"] + a["remap_u"]),
        ("pcie_replay_count", a["pcie_replay"]),
    ]
    for g in range(w.G):
        gone = None
        if w.arr["xid"][h, g].max() == 79:
            gone = int(np.argmax(w.arr["xid"][h, g] == 79))
        labels = base | {
            "gpu_id": str(g),
            "hostname": w.spec.hosts[h],
            "card_model": w.spec.gpu_model,
            "card_series": f"AMD Instinct {w.spec.gpu_model} OAM",
            "gpu_partition_id": "0",
            "serial_number": f"PCB{w.spec.seed % 10**6:06d}{h:03d}{g}",
            "gpu_compute_partition_type": "spx",
        }
        g_ok = ok.copy()
        if gone is not None:
            g_ok[gone:] = False
        for name, arr in fields:
            vals = _freeze(
                _reset(arr[h, g], resets) if name.startswith(("gpu_ecc", "pcie")) else arr[h, g], frozen
            )
            e.add(p + name, "gauge", labels, times, vals, g_ok)
        clk = _freeze(a["clock"][h, g], frozen)
        e.add(p + "gpu_clock", "gauge", labels | {"clock_type": "GPU_CLOCK_TYPE_SYSTEM"}, times, clk, g_ok)
        e.add(
            p + "gpu_clock",
            "gauge",
            labels | {"clock_type": "GPU_CLOCK_TYPE_MEMORY"},
            times,
            clk * 0 + 1300,
            g_ok,
        )


def _up(w: World, e: Emitter, base: dict, times: np.ndarray, ok: np.ndarray, h: int) -> None:
    """Prometheus' own series for a target: up is 0 where the scrape failed (static configs keep a
    dead target; Kubernetes drops a gone pod's target)."""
    present = np.ones(w.T, bool) if not w.spec.layout.kube else _kube_present(w, ok)
    dur = np.where(ok, e.rng.uniform(0.02, 0.3, w.T), 10.0)
    e.add("up", "gauge", {k: base[k] for k in ("job", "instance")}, times, ok.astype(float), present)
    e.add("scrape_duration_seconds", "gauge", {k: base[k] for k in ("job", "instance")}, times, dur, present)


def _kube_present(w: World, ok: np.ndarray) -> np.ndarray:
    last = np.flatnonzero(ok)
    keep = np.ones(w.T, bool)
    if len(last) and last[-1] < w.T - 1 and not ok[last[-1] + 1 :].any():
        keep[last[-1] + 4 :] = False  # the pod is gone a minute later
    return keep


def node_series(w: World, e: Emitter) -> None:
    lay, a = w.spec.layout, w.arr
    for h in range(w.H):
        ok = w.node_ok[h]
        times = e.times(float(e.rng.uniform(0, 0.8 * w.iv)))
        base = {"job": lay.jobs["node"], "instance": _instance(w, h, 9100, lay.node_instance == "ip")}
        base |= _kube("node", h, w)
        fz = w.frozen.get(f"node:{h}")

        def put(name: str, kind: str, vals: np.ndarray, extra: dict | None = None) -> None:
            e.add(name, kind, base | (extra or {}), times, _freeze(vals, fz), ok)  # noqa: B023

        put(
            "node_uname_info",
            "gauge",
            np.ones(w.T),
            {
                "nodename": w.spec.hosts[h],
                "sysname": "Linux",
                "release": "5.15.0-119-generic",
                "machine": "x86_64",
                "domainname": "(none)",
            },
        )
        put("node_procs_running", "gauge", a["running"][h])
        put("node_procs_blocked", "gauge", a["blocked"][h])
        put("node_load1", "gauge", (a["running"][h] * 0.9).round(2))
        put("node_memory_MemTotal_bytes", "gauge", np.full(w.T, a["mem_total"][h]))
        put("node_memory_MemAvailable_bytes", "gauge", (a["mem_total"][h] - a["mem_used"][h]).clip(2e8))
        put("node_vmstat_oom_kill", "unknown", a["oom"][h])
        put("node_pressure_io_stalled_seconds_total", "counter", counter(a["io_rate"][h] * w.iv, 1e4 + h))
        put("node_netstat_Tcp_RetransSegs", "unknown", counter((a["tcp_rate"][h] * w.iv).round(), 5e5 + h))
        put("node_context_switches_total", "counter", counter(e.rng.uniform(4e4, 6e4, w.T) * w.iv, 1e9))
        put(
            "node_scrape_collector_duration_seconds",
            "gauge",
            e.rng.uniform(0.001, 0.02, w.T),
            {"collector": "infiniband"},
        )
        _ib(w, h, put)
        _up(w, e, base, times, ok, h)


def _ib(w: World, h: int, put) -> None:  # noqa: ANN001
    a = w.arr
    dev = "mlx5_{}" if w.spec.layout.gpu == "dcgm" else "bnxt_re{}"
    for n in range(a["tx_rate"].shape[1]):
        lab = {"device": dev.format(n), "port": "1"}
        put(
            "node_infiniband_port_data_transmitted_bytes_total",
            "counter",
            counter(a["tx_rate"][h, n] * w.iv),
            lab,
        )
        put(
            "node_infiniband_port_data_received_bytes_total",
            "counter",
            counter(a["tx_rate"][h, n] * w.iv),
            lab,
        )
        put(
            "node_infiniband_port_transmit_wait_total",
            "counter",
            counter((a["wait_rate"][h, n] * w.iv).round()),
            lab,
        )
        put("node_infiniband_state_id", "gauge", a["port_state"][h, n], lab)
        if w.spec.layout.ib_hw_counters:
            put(
                "node_infiniband_roce_adp_retransmits_total",
                "counter",
                counter(a["retx_inc"][h, n], 1e3 * n),
                lab,
            )
            put(
                "node_infiniband_local_ack_timeout_errors_total",
                "counter",
                counter(a["ack_inc"][h, n], 7.0),
                lab,
            )


def train_series(w: World, e: Emitter) -> None:
    if not w.spec.layout.training_gauges or not w.steps:
        return
    lay = w.spec.layout
    done = np.array([s[1] for s in w.steps])
    k = np.searchsorted(done, w.t, side="right") - 1
    ok = (k >= 0) & w.train_ok
    if w.crash_t is not None:
        ok &= w.t < w.crash_t
    k = k.clip(0)
    steps = np.array([s[0] for s in w.steps], float)
    secs = np.array([s[2] for s in w.steps])
    loss = np.array([s[3] for s in w.steps])
    grad = _grad_norm(w, steps)
    tokens = 4096 * 8 * w.G / secs
    base = {"job": lay.jobs["train"], "instance": _instance(w, 0, 8000, lay.kube)} | _kube("train", 0, w)
    times = e.times(float(e.rng.uniform(0, 0.8 * w.iv)))
    for name, vals in [
        ("training_step", steps),
        ("training_loss", loss),
        ("training_step_time_seconds", secs),
        ("training_tokens_per_second", tokens),
        ("training_last_step_timestamp_seconds", done),
        ("training_grad_norm", grad),
    ]:
        e.add(name, "gauge", base, times, vals[k], ok)


def _grad_norm(w: World, steps: np.ndarray) -> np.ndarray:
    g = 1.0 + 0.05 * np.random.default_rng(w.spec.seed + 3).normal(0, 1, len(steps))
    s0 = w.log.get("s0")
    if s0 is not None:
        g = g + np.where(steps >= s0, 0.4 * (steps - s0).clip(0) ** 1.2, 0)
    return g


def build_store(w: World) -> Store:
    store = Store()
    e = Emitter(w, store)
    gpu_series(w, e)
    node_series(w, e)
    train_series(w, e)
    return store
