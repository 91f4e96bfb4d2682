"""Generator A, part 3: the GPU exporter's series (NVIDIA dcgm-exporter, default counter set).

Each host's GPUs go through modes (idle, loading, training, checkpoint save, busy-wait, read-as-zero,
loader hiccup) derived from the plan; values follow the GPU model's power envelope with per-GPU and
per-host offsets, thermal lag and noise. Layout choices: the host label (`Hostname`, `hostname` or none
with Kubernetes pod labels), the scrape job's name, DCGM's own 30 s collection under a faster scrape,
ECC fields or remapped rows, and a frozen exporter (ghost data).
"""

from __future__ import annotations

import zlib

import numpy as np

from bench.outside._a_plan import GPU_MODELS, Plan
from bench.outside._om import Store

IDLE, LOAD, TRAIN, SAVE, BUSY, ZERO, DIP = range(7)
CLOCK = {"H100": (345.0, 1980.0), "H200": (345.0, 1980.0), "A100": (210.0, 1410.0), "B200": (420.0, 1965.0)}


def scrape_times(plan: Plan, rng: np.random.Generator, key: str) -> tuple[np.ndarray, np.ndarray]:
    """Return a target's scrape times (fixed offset, small jitter) and which scrapes succeeded."""
    offset = float(rng.uniform(0, plan.interval))
    base = np.arange(plan.t0 + offset, plan.t_end, plan.interval)
    times = base + rng.normal(0, 0.003 * plan.interval, len(base))
    ok = rng.random(len(base)) > 0.004
    ok[: plan.layout.late_targets.get(key, 0)] = False
    host = key.split(":", 1)[1]
    if host in plan.dead and plan.dead[host][1] == "silent":
        ok &= times < plan.dead[host][0]
    return times, ok


def gpu_modes(plan: Plan, host: str, gpu: int, ts: np.ndarray) -> np.ndarray:
    """Return the mode of one GPU at each time."""
    mode = np.full(len(ts), IDLE)
    compile_end = plan.train_start + (0.7 * plan.step_secs[0] if len(plan.step_secs) else 0.0)
    mode[(ts >= plan.load_start) & (ts < compile_end)] = LOAD
    mode[(ts >= compile_end) & (ts < plan.active_end)] = TRAIN
    for a, b in plan.ckpts:
        mode[(ts >= a) & (ts < b) & (mode == TRAIN)] = SAVE
    for a, b in plan.hiccups:
        mode[(ts >= a) & (ts < a + 0.5 * (b - a)) & (mode == TRAIN)] = DIP
    if host in plan.busy_start:
        start = plan.busy_start[host]
        mode[(ts >= plan.active_end) & (ts < start)] = TRAIN
        spin = (ts >= start) & (ts < plan.job_end)
        mode[spin] = BUSY if gpu in plan.busy_gpus[host] else IDLE
    if host in plan.dead and plan.dead[host][1] == "zero":
        mode[ts >= plan.dead[host][0]] = ZERO
    return mode


def _lag(target: np.ndarray, ts: np.ndarray, tau: float, start: float) -> np.ndarray:
    """First-order thermal lag of a target temperature."""
    out = np.empty_like(target)
    cur = start
    prev = ts[0] if len(ts) else 0.0
    for i, (t, x) in enumerate(zip(ts, target, strict=True)):
        a = 1.0 - np.exp(-max(t - prev, 0.0) / tau)
        cur += a * (x - cur)
        out[i] = cur
        prev = t
    return out


def _gpu_values(
    plan: Plan, rng: np.random.Generator, host: str, gpu: int, ts: np.ndarray
) -> dict[str, np.ndarray]:
    """Return the metric arrays of one GPU at the times ts (before layout effects)."""
    _label, p_idle, p_busy, p_train, tdp, fb = GPU_MODELS[plan.model]
    clk_idle, clk_max = CLOCK[plan.model]
    mode = gpu_modes(plan, host, gpu, ts)
    n = len(ts)
    noise = rng.normal(0, 1, n)
    bias = float(rng.normal(0, 0.03))
    frac = {IDLE: 0.0, LOAD: 0.3, TRAIN: 1.0, SAVE: 0.12, BUSY: 0.0, ZERO: 0.0, DIP: 0.5}
    f = np.vectorize(frac.get)(mode).astype(float)
    power = p_idle * (1 + 0.02 * noise) + f * (p_train * (1 + bias) - p_idle) * (
        1 + 0.04 * rng.normal(0, 1, n)
    )
    power = np.where(mode == BUSY, p_idle + p_busy * (1 + 0.05 * noise), power)
    power = np.where(mode == ZERO, 0.0, np.minimum(power, tdp))
    util_by = {IDLE: 0.0, LOAD: 35.0, TRAIN: 98.0, SAVE: 6.0, BUSY: 100.0, ZERO: 0.0, DIP: 55.0}
    util = np.vectorize(util_by.get)(mode).astype(float)
    util = np.clip(
        np.round(util + np.where(mode == TRAIN, 1.5 * noise, 0) + np.where(mode == LOAD, 15 * noise, 0)),
        0,
        100,
    )
    clock = np.where(np.isin(mode, (TRAIN, BUSY, SAVE, DIP, LOAD)), clk_max - np.abs(25 * noise), clk_idle)
    clock = np.round(np.where(mode == ZERO, 0.0, clock))
    warm = plan.warm[1] if plan.warm and plan.warm[0] == host else 0.0
    t_target = 31 + warm + 0.055 * power + float(rng.normal(0, 1.5))
    temp = np.round(_lag(t_target, ts, 80.0, float(t_target[0])) + 0.3 * noise)
    in_job = (ts >= plan.load_start + 30) & (ts < plan.job_end) & (mode != ZERO)
    fb_used = np.where(in_job, np.round(fb * 0.91 + 40 * rng.normal(0, 1, n)), 0.0)
    energy = 1e9 * rng.uniform(5, 60) + np.cumsum(power * np.diff(ts, prepend=ts[0] - plan.interval)) * 1000
    tensor = np.where(mode == TRAIN, 0.42 + 0.03 * noise, np.where(mode == DIP, 0.2, 0.0))
    gr = np.clip(util / 100.0 + 0.01 * noise, 0, 1)
    return {
        "DCGM_FI_DEV_POWER_USAGE": np.round(power, 3),
        "DCGM_FI_DEV_GPU_UTIL": util,
        "DCGM_FI_DEV_SM_CLOCK": clock,
        "DCGM_FI_DEV_MEM_CLOCK": np.where(mode == ZERO, 0.0, 2619.0),
        "DCGM_FI_DEV_GPU_TEMP": temp,
        "DCGM_FI_DEV_MEMORY_TEMP": temp + 4,
        "DCGM_FI_DEV_FB_USED": fb_used,
        "DCGM_FI_DEV_FB_FREE": fb - 512 - fb_used,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": np.round(energy),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": np.round(gr, 4),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": np.round(np.clip(tensor, 0, 1), 4),
    }


def _error_values(
    plan: Plan, rng: np.random.Generator, host: str, gpu: int, ts: np.ndarray
) -> dict[str, np.ndarray]:
    """Xid gauge, PCIe replays and ECC / remapped rows of one GPU."""
    xid = np.zeros(len(ts))
    for h, g, t, code in sorted(plan.xids, key=lambda e: e[2]):
        if h == host and g == gpu:
            xid[ts >= t] = code
    sbe = np.full(len(ts), float(rng.integers(0, 3) if rng.random() < 0.2 else 0))
    for h, g, t, per_min in plan.ecc:
        if h == host and g == gpu:
            sbe += np.floor(np.clip(ts - t, 0, None) / 60 * per_min * (1 + 0.1 * np.sin(ts / 37)))
    sbe = np.maximum.accumulate(sbe)
    out = {
        "DCGM_FI_DEV_XID_ERRORS": xid,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": np.full(len(ts), float(rng.integers(0, 4))),
    }
    if plan.layout.ecc_fields == "ecc":
        out["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] = sbe
        out["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] = np.zeros(len(ts))
    else:
        out["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"] = np.minimum(sbe, 1.0) * float(rng.integers(0, 2))
        out["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"] = np.zeros(len(ts))
        out["DCGM_FI_DEV_ROW_REMAP_FAILURE"] = np.zeros(len(ts))
    return out


def _collected(ts: np.ndarray, values: np.ndarray, period: float, t0: float) -> np.ndarray:
    """Values as DCGM collects them: refreshed every `period`, repeated by faster scrapes."""
    bucket = np.floor((ts - t0) / period)
    _, first = np.unique(bucket, return_index=True)
    idx = np.searchsorted(first, np.arange(len(ts)), side="right") - 1
    return values[first[idx]]


def _gpu_labels(plan: Plan, host: str, hi: int, gpu: int) -> dict[str, str]:
    lay = plan.layout
    labels = {
        "gpu": str(gpu),
        "UUID": f"GPU-{plan.seed:04x}{hi:04x}-{gpu:04x}-4e1c-9a0b-{zlib.crc32(host.encode()) * 7919:012x}",
        "device": f"nvidia{gpu}",
        "modelName": GPU_MODELS[plan.model][0],
        "pci_bus_id": f"00000000:{0x18 + 0x10 * gpu:02X}:00.0",
        "DCGM_FI_DRIVER_VERSION": "550.90.07",
        "job": lay.dcgm_job,
        "instance": f"{plan.ips[hi]}:9400",
    }
    if lay.dcgm_host_label:
        labels[lay.dcgm_host_label] = host
    else:
        labels.update(
            {
                "exported_pod": f"llm-train-worker-{hi}",
                "exported_namespace": "training",
                "exported_container": "trainer",
                "pod": f"nvidia-dcgm-exporter-{zlib.crc32(host.encode()) & 0xFFFFF:05x}",
                "namespace": "gpu-operator",
                "container": "nvidia-dcgm-exporter",
            }
        )
    return labels


def add_dcgm(plan: Plan, rng: np.random.Generator, store: Store) -> None:
    """Add every GPU's DCGM series, and `up` for each dcgm-exporter target."""
    for hi, host in enumerate(plan.hosts):
        times, ok = scrape_times(plan, rng, f"dcgm:{host}")
        _add_up(plan, store, plan.layout.dcgm_job, f"{plan.ips[hi]}:9400", times, ok)
        ts = times[ok]
        if len(ts) == 0:
            continue
        for gpu in range(plan.gpus):
            vals = _gpu_values(plan, rng, host, gpu, ts) | _error_values(plan, rng, host, gpu, ts)
            keep = np.ones(len(ts), bool)
            for h, g, t in plan.gpu_gone:
                if h == host and g == gpu:
                    keep &= ts < t
            for name, arr in vals.items():
                arr = _collected(ts, arr, plan.layout.dcgm_collect_s, plan.t0)
                if plan.ghost and plan.ghost[0] == host:
                    frozen = ts >= plan.ghost[1]
                    if frozen.any() and (~frozen).any():
                        arr = np.where(frozen, arr[np.flatnonzero(~frozen)[-1]], arr)
                kind = "counter" if name.endswith("_TOTAL") and "ENERGY" not in name else "gauge"
                store.add(
                    name,
                    "unknown" if kind == "counter" else kind,
                    _gpu_labels(plan, host, hi, gpu),
                    ts[keep],
                    arr[keep],
                )


def _add_up(plan: Plan, store: Store, job: str, instance: str, times: np.ndarray, ok: np.ndarray) -> None:
    labels = {"job": job, "instance": instance}
    store.add("up", "gauge", labels, times, ok.astype(float))
    dur = 0.004 + 0.02 * np.abs(np.sin(times / 97.0))
    store.add("scrape_duration_seconds", "gauge", labels, times[ok], np.round(dur[ok], 5))
