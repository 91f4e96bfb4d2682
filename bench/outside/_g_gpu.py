"""Corpus G's dcgm-exporter (#10): per-GPU series from the job's phases and a story's effects.

Fields are those of dcgm-exporter's default-counters.csv (clocks, temperatures, power, energy, PCIe
replays, utilisation, XID, frame buffer, NVLink bandwidth, remapped rows), with the 3.3+/4.x names when
`fleet.dcgm_new` (CLOCK_EVENT_REASONS, XID `err_code`/`err_msg` labels, driver-version label) and the
DCP profiling and ECC fields of dcp-metrics-included.csv when `fleet.dcp`.
"""

from __future__ import annotations

import random

import numpy as np

from bench.outside._g_fleet import Fleet, pci_bus
from bench.outside._g_time import CKPT, EVAL, HANG, INIT, STALL, TRAIN, Effects, Timeline
from bench.outside._g_tsdb import Om, grid, target

THROTTLE_AFTER_S = 40.0  # a failing fan: the GPU reaches its slowdown temperature this long after t_on
XID_MSG = {
    0: "No Error",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    48: "DBE (Double Bit Error) ECC Error",
    63: "Row remapping event",
    64: "Row remapping failure",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "GSP RPC Timeout",
    109: "Context Switch Timeout Error",
}


def _slow(eff: Effects, t: np.ndarray) -> np.ndarray:
    f = np.ones_like(t)
    for t_from, factor in eff.slow:
        f[t >= t_from] = factor
    return f


def _lag(target_temp: np.ndarray, t: np.ndarray, tau: float) -> np.ndarray:
    out = np.empty_like(target_temp)
    out[0] = target_temp[0]
    dt = np.diff(t, prepend=t[0])
    a = 1.0 - np.exp(-dt / tau)
    for i in range(1, len(t)):
        out[i] = out[i - 1] + a[i] * (target_temp[i] - out[i - 1])
    return out


def scrape_state(fl: Fleet, tl: Timeline, eff: Effects, hi: int, rng: random.Random):
    """(times, ok mask, scrape durations, frozen-from index or None) of a host's dcgm-exporter."""
    t = grid(tl.t0, tl.t1, fl.scrape_s, rng, eff.prom_gap)
    ok = np.ones(len(t), bool)
    n = len(t)
    dur = np.array([abs(rng.gauss(0.09, 0.02)) + 0.02 * fl.gpu.per_host / 8 for _ in range(n)])
    if hi in eff.dead:
        ok &= t < eff.dead[hi]
    if (hi, "dcgm") in eff.outage:
        a, b = eff.outage[(hi, "dcgm")]
        ok &= (t < a) | (t >= b)
    if hi in eff.exporter_restart:
        a = eff.exporter_restart[hi]
        ok &= (t < a) | (t >= a + rng.uniform(25, 50))
    for tf in eff.scrape_fail.get(hi, []):
        i = int(np.searchsorted(t, tf))
        if i < n:
            ok[i] = False
            for j in (i - 1, i + 1):
                if 0 <= j < n:
                    dur[j] = rng.uniform(0.55, 0.9) * fl.timeout_s
    dur[~ok] = fl.timeout_s
    frozen = None
    if hi in eff.ghost:
        frozen = int(np.searchsorted(t, eff.ghost[hi]))
        if frozen < n:
            dur[frozen:] = dur[frozen]
    return t, ok, dur, frozen


def _labels(fl: Fleet, hi: int, g: int, cotenant: bool) -> dict[str, str]:
    h = fl.hosts[hi]
    lab = {
        "gpu": str(g),
        "UUID": fl.extra["uuid"][h.name][g],
        "pci_bus_id": pci_bus(fl, g),
        "device": f"nvidia{g}",
        "modelName": fl.gpu.name,
        "Hostname": h.name,
    }
    if fl.dcgm_new:
        lab["DCGM_FI_DRIVER_VERSION"] = fl.extra["driver"]
    if fl.layout == "k8s":
        if cotenant:
            lab.update(
                exported_container="worker",
                exported_namespace="inference",
                exported_pod=f"vllm-serve-{fl.extra['uuid'][h.name][g][4:9]}",
            )
        else:
            lab.update(
                exported_container="pytorch",
                exported_namespace=fl.namespace,
                exported_pod=f"{fl.job_name}-worker-{hi}",
            )
        lab.update(
            container="nvidia-dcgm-exporter",
            endpoint="gpu-metrics",
            instance=h.dcgm_instance,
            job="nvidia-dcgm-exporter",
            namespace="gpu-operator",
            node=h.name,
            pod=h.exporter_pod,
            service="nvidia-dcgm-exporter",
        )
    else:
        lab.update(instance=h.dcgm_instance, job="dcgm")
    return lab


def _job_gpu(fl: Fleet, tl: Timeline, eff: Effects, hi: int, g: int, t, ph, nr) -> dict[str, np.ndarray]:
    """Utilisation, power, SM clock and clock-event bits of a GPU the job owns."""
    gp = fl.gpu
    n = len(t)
    p_train = gp.tdp * 0.86
    slow = _slow(eff, t)
    util = np.zeros(n)
    power = gp.idle + nr.normal(0, 3, n)
    sm = np.full(n, gp.sm_idle)
    ev = np.ones(n)
    tr = ph == TRAIN
    util[tr] = np.clip(nr.normal(97.5, 2.0, tr.sum()) - eff.util_off.get(hi, 0.0), 60, 100)
    power[tr] = gp.idle + (p_train - gp.idle) * (0.3 + 0.7 / slow[tr]) + nr.normal(0, gp.tdp * 0.03, tr.sum())
    sm[tr] = gp.sm_max - nr.choice([0, 0, 0, 15, 30, 105], tr.sum())
    ev[tr] = nr.choice([0, 0, 0, 0, 4], tr.sum())
    for code, u, pw in ((EVAL, 72.0, 0.55), (CKPT, 2.0, 0.12), (STALL, 1.0, 0.05), (INIT, 25.0, 0.2)):
        m = ph == code
        util[m] = np.clip(nr.normal(u, u * 0.3 + 1, m.sum()), 0, 100)
        power[m] = gp.idle + (p_train - gp.idle) * pw * nr.uniform(0.6, 1.4, m.sum())
        sm[m] = np.where(util[m] > 5, gp.sm_max, gp.sm_idle)
        ev[m] = np.where(util[m] > 5, 0, 1)
    hang = ph == HANG
    if hang.any():
        busy = g in eff.hang_sets.get(hi, eff.hang_gpus_default or fl.owned)
        util[hang] = 100.0 if busy else 0.0
        power[hang] = gp.idle + (45.0 if busy else 8.0) + nr.normal(0, 4, hang.sum())
        sm[hang] = gp.sm_max if busy else gp.sm_idle
        ev[hang] = 0 if busy else 1
    return {"util": util, "power": power, "sm": sm, "ev": ev}


def _cotenant_gpu(fl: Fleet, t, nr) -> dict[str, np.ndarray]:
    """Another job's GPU: bursts of inference load independent of the training job."""
    gp, n = fl.gpu, len(t)
    level = np.repeat(nr.choice([0.0, 35.0, 70.0, 95.0], n // 20 + 1), 20)[:n]
    util = np.clip(level + nr.normal(0, 6, n), 0, 100)
    power = gp.idle + (gp.tdp * 0.7 - gp.idle) * util / 100
    return {
        "util": util,
        "power": power,
        "sm": np.where(util > 5, gp.sm_max, gp.sm_idle),
        "ev": (util < 5) * 1.0,
    }


def gpu_series(om: Om, fl: Fleet, tl: Timeline, eff: Effects, hi: int, rng: random.Random) -> None:
    """All dcgm-exporter series (and its target's up/scrape series) of host `hi`."""
    t, ok, dur, frozen = scrape_state(fl, tl, eff, hi, rng)
    nr = np.random.default_rng(rng.randrange(1 << 30))
    ph = tl.phase_at(t)
    gp = fl.gpu
    ambient = 24.0 + rng.uniform(-2, 2) + eff.warm.get(hi, 0.0)
    cot = eff.cotenant.get(hi, [])
    n_fields = 0
    for g in range(gp.per_host):
        v = _cotenant_gpu(fl, t, nr) if g in cot else _job_gpu(fl, tl, eff, hi, g, t, ph, nr)
        warm = ambient + eff.gpu_warm.get((hi, g), 0.0) + rng.uniform(-1.5, 1.5)
        if eff.thermal and eff.thermal[:2] == (hi, g):
            _thermal(v, t, eff.thermal[2], gp, nr)
        temp = _lag(warm + 8 + 44 * v["power"] / gp.tdp + v.get("heat", 0.0), t, 75.0) + nr.normal(
            0, 0.4, len(t)
        )
        fields = _fields(fl, tl, eff, hi, g, t, ph, v, temp, nr, rng)
        gone = eff.gpu_gone.get((hi, g))
        keep = ok & (t < gone) if gone else ok
        lab = _labels(fl, hi, g, g in cot)
        for name, extra, val in fields:
            val = val.astype(float).copy()
            if frozen is not None and frozen < len(t):
                val[frozen:] = val[frozen]
            val[~keep] = np.nan
            om.add(name, {**lab, **extra}, t, val)
        n_fields = len(fields)
    h = fl.hosts[hi]
    tlab = (
        {
            "instance": h.dcgm_instance,
            "job": "nvidia-dcgm-exporter",
            "namespace": "gpu-operator",
            "node": h.name,
            "pod": h.exporter_pod,
            "service": "nvidia-dcgm-exporter",
            "endpoint": "gpu-metrics",
            "container": "nvidia-dcgm-exporter",
        }
        if fl.layout == "k8s"
        else {"instance": h.dcgm_instance, "job": "dcgm"}
    )
    target(om, tlab, t, ok, dur, n_fields * gp.per_host)


def _thermal(v: dict, t: np.ndarray, t_on: float, gp, nr) -> None:
    """A GPU whose cooling fails at t_on: heat builds over a minute, the clock is pulled down after 40 s."""
    ramp = np.clip((t - t_on) / 60.0, 0, 1)
    v["heat"] = 38.0 * ramp
    hot = (t >= t_on + THROTTLE_AFTER_S) & (v["util"] > 50)
    v["sm"] = np.where(hot, gp.sm_max * nr.uniform(0.58, 0.7, len(t)), v["sm"])
    v["power"] = np.where(hot, v["power"] * 0.72, v["power"])
    v["ev"] = np.where(hot, 0x40 | 0x20, v["ev"])


def _fields(fl, tl, eff, hi, g, t, ph, v, temp, nr, rng) -> list[tuple[str, dict, np.ndarray]]:
    gp = fl.gpu
    n = len(t)
    live = (t >= tl.t_launch) & (t < tl.t_stop)
    ramp = np.clip((t - tl.t_launch) / max(tl.t_train - tl.t_launch, 1), 0, 1)
    used = np.where(live, gp.fb_mib * (0.05 + 0.83 * ramp) + nr.normal(0, 40, n), 0.0)
    if g in eff.cotenant.get(hi, []):
        used = np.full(n, gp.fb_mib * 0.6)
    used = np.clip(used, 0, gp.fb_mib - 600).round()
    dt = np.diff(t, prepend=t[0] - fl.scrape_s)
    energy = rng.uniform(2e9, 9e10) + np.cumsum(v["power"] * dt * 1000.0)
    nvl = np.cumsum(np.where(v["util"] > 50, 1.1e7, 2e3) * dt)
    if hi in eff.exporter_restart:
        nvl = np.where(
            t >= eff.exporter_restart[hi], nvl - nvl[np.searchsorted(t, eff.exporter_restart[hi]) - 1], nvl
        )
    xid = np.full(n, float(eff.old_xids.get((hi, g), 0)))
    unc = np.zeros(n)
    replay = np.full(n, float(rng.choice([0, 0, 0, 2, 7])))
    for h_, g_, tx, code in eff.xids:
        if (h_, g_) == (hi, g):
            xid[t >= tx] = code
    for h_, g_, tu in eff.uncorrectable:
        if (h_, g_) == (hi, g):
            unc[t >= tu] = 1 + (t[t >= tu] >= tu + 2 * fl.scrape_s)
            replay[t >= tu] += 40
    corr = float(rng.choice([0, 0, 0, 1, 2]))
    out = [
        ("DCGM_FI_DEV_SM_CLOCK", {}, np.round(v["sm"])),
        ("DCGM_FI_DEV_MEM_CLOCK", {}, np.full(n, gp.mem_clock)),
        ("DCGM_FI_DEV_MEMORY_TEMP", {}, np.round(temp + 6)),
        ("DCGM_FI_DEV_GPU_TEMP", {}, np.round(temp)),
        ("DCGM_FI_DEV_POWER_USAGE", {}, np.round(np.clip(v["power"], gp.idle * 0.8, gp.tdp * 1.02), 3)),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", {}, np.round(energy)),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", {}, replay),
        ("DCGM_FI_DEV_GPU_UTIL", {}, np.round(v["util"])),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", {}, np.round(v["util"] * 0.38)),
        ("DCGM_FI_DEV_FB_FREE", {}, gp.fb_mib - 590 - used),
        ("DCGM_FI_DEV_FB_USED", {}, used),
        ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", {}, np.round(nvl)),
        ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", {}, unc),
        ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", {}, np.full(n, corr)),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", {}, np.zeros(n)),
    ]
    out += _xid_fields(fl, xid, n)
    if fl.dcgm_new:
        out.append(("DCGM_FI_DEV_CLOCK_EVENT_REASONS", {}, v["ev"]))
    if fl.dcp:
        busy_wait = (ph == HANG) & (v["util"] > 50)
        out += [
            ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", {}, np.round(np.clip(v["util"] / 100 * 0.97, 0, 1), 4)),
            (
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                {},
                np.round(np.where(busy_wait, 0.0, v["util"] / 100 * nr.uniform(0.38, 0.5, n)), 4),
            ),
            ("DCGM_FI_PROF_DRAM_ACTIVE", {}, np.round(np.where(busy_wait, 0.01, v["util"] / 100 * 0.33), 4)),
            ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", {}, _sbe(eff, hi, g, t)),
            ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", {}, unc * 2),
        ]
    if fl.xid_count:
        out += _xid_count(eff, hi, g, t)
    return out


def _sbe(eff: Effects, hi: int, g: int, t: np.ndarray) -> np.ndarray:
    rate = eff.sbe_tick.get((hi, g), 0.0)
    return np.floor(np.maximum(t - t[0], 0) / 3600.0 * rate) + (3.0 if rate else 0.0)


def _xid_fields(fl: Fleet, xid: np.ndarray, n: int) -> list[tuple[str, dict, np.ndarray]]:
    if not fl.dcgm_new:
        return [("DCGM_FI_DEV_XID_ERRORS", {}, xid)]
    out = []
    for code in sorted(set(xid.tolist())):
        m = xid == code
        val = np.where(m, code, np.nan)
        out.append(
            (
                "DCGM_FI_DEV_XID_ERRORS",
                {"err_code": str(int(code)), "err_msg": XID_MSG.get(int(code), "Unknown")},
                val,
            )
        )
    del n
    return out


def _xid_count(eff: Effects, hi: int, g: int, t: np.ndarray) -> list[tuple[str, dict, np.ndarray]]:
    """The experimental collector: Xids of each code seen in the last 5 minutes (from the first one on)."""
    mine = [(tx, code) for h_, g_, tx, code in eff.xids if (h_, g_) == (hi, g)]
    out = []
    for code in sorted({c for _, c in mine}):
        times = np.array(sorted(tx for tx, c in mine if c == code))
        val = (
            np.searchsorted(times, t, side="right") - np.searchsorted(times, t - 300.0, side="right")
        ).astype(float)
        val[t < times[0]] = np.nan
        out.append(("DCGM_EXP_XID_ERRORS_COUNT", {"window_size_in_ms": "300000", "xid": str(code)}, val))
    return out
