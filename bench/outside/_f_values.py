"""Outside corpus F (#10): what a GPU, a host and a NIC read at given times, from the timeline and effects.

Units here are physical (ratio 0..1, W, degC, MHz, bytes, counts); the exporters convert.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from bench.outside._f_plan import SKUS, Case
from bench.outside._f_time import EVAL, HANG, OFF, PRE, SAVE, SETUP, TRAIN, Effects, Timeline

GIB = 1024.0**3


@dataclass
class Fleet:
    """Per-case constants shared by every series: the timeline, the story's effects, herrings."""

    case: Case
    tl: Timeline
    eff: Effects
    slow_host: str | None
    replica0: list[str]
    mem_total: float
    model_bytes: float
    old_xid: tuple[str, int, int] | None


def _lag(target: np.ndarray, times: np.ndarray, tau: float, start: float) -> np.ndarray:
    out = np.empty_like(target)
    cur = start
    prev = times[0] if len(times) else 0.0
    for i, (x, t) in enumerate(zip(target, times, strict=True)):
        cur += (x - cur) * (1 - math.exp(-max(t - prev, 0.0) / tau))
        out[i] = cur
        prev = t
    return out


def host_phase(fl: Fleet, host: str, times: np.ndarray) -> np.ndarray:
    """The job's phase as this host lived it: nothing runs on a host after it died (or rebooted)."""
    ph = fl.tl.phase(times)
    if host in fl.eff.dead:
        ph = np.where(times >= fl.eff.dead[host], OFF, ph)
    return ph


def since_boot(fl: Fleet, host: str, times: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A kernel counter: it starts again from zero when the host reboots."""
    back = fl.eff.back.get(host)
    if back is None or not (times >= back).any():
        return values
    return np.where(times >= back, values - values[times >= back][0], values)


def gpu(fl: Fleet, hi: int, g: int, times: np.ndarray, rng: random.Random) -> dict[str, np.ndarray]:
    """util (0..1), power W, temp degC, clock MHz, mem bytes, sbe/dbe counters, xid gauge at `times`."""
    case, eff = fl.case, fl.eff
    host = case.hosts[hi]
    _, idle_w, train_w, max_mhz, idle_mhz, mem_gib = SKUS[case.sku[hi]]
    nrng = np.random.default_rng(rng.randrange(1 << 30))
    ph = host_phase(fl, host, times)
    n = len(times)
    noise = nrng.normal(0, 1, n)
    util = np.select(
        [ph == TRAIN, ph == SAVE, ph == EVAL, ph == HANG, ph == SETUP],
        [
            0.97 + 0.02 * noise,
            0.12 + 0.05 * noise,
            0.72 + 0.05 * noise,
            np.ones(n),
            0.15 + 0.1 * np.abs(noise),
        ],
        default=np.zeros(n),
    )
    frac = np.select(
        [ph == TRAIN, ph == SAVE, ph == EVAL, ph == HANG, ph == SETUP],
        [0.93 + 0.03 * noise, 0.12, 0.6, 0.07, 0.08],
        default=0.0,
    )
    power = idle_w + (train_w - idle_w) * frac + 4 * nrng.normal(0, 1, n)
    clock = np.where(
        (ph == TRAIN) | (ph == HANG) | (ph == EVAL), max_mhz - 15 * np.abs(noise), idle_mhz + 0 * noise
    )
    clock = np.where(ph == SAVE, max_mhz * 0.9, clock)
    if eff.slow and host != fl.slow_host:
        slowed = (times >= eff.slow[0]) & (ph == TRAIN)
        power = np.where(slowed, power - (train_w - idle_w) * 0.12, power)
    if host == fl.slow_host:
        power = np.where(ph == TRAIN, power * 0.95, power)
        util = np.where(ph == TRAIN, util - 0.03, util)
    if (host, g) in eff.idle_in_hang:
        util = np.where(ph == HANG, 0.0, util)
        power = np.where(ph == HANG, idle_w + 3 * noise, power)
    extra_temp = np.zeros(n)
    if (host, g) in eff.hot:
        ramp = np.clip((times - eff.hot[(host, g)]) / 300.0, 0, 1)
        extra_temp = 15 * ramp
        busy = (ph == TRAIN) | (ph == EVAL)
        clock = np.where(busy, clock * (1 - 0.3 * ramp), clock)
        power = np.where(busy, power * (1 - 0.15 * ramp), power)
    temp = _lag(29 + 0.085 * power, times, 70.0, 29 + 0.085 * idle_w) + extra_temp + g * 0.7 + noise * 0.4
    mem = np.where((ph == PRE) | (ph == OFF), 0.5 * GIB, mem_gib * GIB * 0.86)
    sbe = np.cumsum(nrng.random(n) < 0.003) + rng.randrange(0, 4)
    dbe = np.zeros(n)
    xid = np.zeros(n)
    if fl.old_xid and fl.old_xid[:2] == (host, g):
        xid[:] = fl.old_xid[2]
    for h, gg, t, code in eff.xid:
        if (h, gg) == (host, g):
            xid = np.where(times >= t, code, xid)
    for h, gg, t in eff.ecc_ue:
        if (h, gg) == (host, g):
            dbe = dbe + np.where(times >= t, 1, 0) + np.where(times >= t + 40, 1, 0)
    return {
        "util": np.clip(util, 0, 1),
        "power": np.clip(power, 0, None),
        "temp": np.round(temp),
        "clock": np.round(clock),
        "mem": mem,
        "sbe": sbe.astype(float),
        "dbe": dbe.astype(float),
        "xid": xid.astype(float),
    }


def _mem_used(fl: Fleet, host: str, times: np.ndarray, ph: np.ndarray) -> np.ndarray:
    """Host memory in use: base + data loaders, save bumps on replica-0 hosts, the fatal rise."""
    tl, eff = fl.tl, fl.eff
    used = np.where((ph == PRE) | (ph == OFF), 40 * GIB, 180 * GIB)
    if host in fl.replica0:
        bump = fl.model_bytes * 2.0
        if host in eff.near_limit:
            bump = fl.mem_total * 0.9 - 180 * GIB
        for a, b, _ in tl.saves:
            inside = (times >= a - 5) & (times < b + 20)
            used = np.where(inside, used + bump * np.clip((times - a + 5) / 30.0, 0, 1), used)
    if host in eff.oom:
        rise, kill = eff.oom[host]
        floor_from = [a for a, _, _ in tl.saves if a < rise]
        if floor_from:  # an earlier save left memory behind: a higher floor, not the cause
            used = np.where((times >= floor_from[0] + 60) & (times < kill), used + 0.2 * fl.mem_total, used)
        frac = np.clip((times - rise) / max(kill - rise, 1.0), 0, 1)
        top = fl.mem_total - 1.5 * GIB
        used = np.where((times >= rise) & (times < kill), used + (top - used) * frac, used)
        used = np.where(times >= kill, 30 * GIB, used)
    return np.minimum(used, fl.mem_total - 1.2 * GIB)


def node(fl: Fleet, hi: int, times: np.ndarray, rng: random.Random) -> dict[str, np.ndarray]:
    """procs running, load1, memory available, OOM kills, TCP retransmits, eth0 bytes (counters cumulate)."""
    case, eff = fl.case, fl.eff
    host = case.hosts[hi]
    nrng = np.random.default_rng(rng.randrange(1 << 30))
    ph = host_phase(fl, host, times)
    n = len(times)
    busy = (ph == TRAIN) | (ph == EVAL) | (ph == HANG) | (ph == SETUP)
    saving = ph == SAVE
    procs = 3 + np.where(busy, case.gpus * 1.25, 0) + np.where(saving, 14, 0) + nrng.poisson(1.5, n)
    if eff.extra_procs:
        procs = procs + np.where(busy | saving, eff.extra_procs + nrng.normal(0, 0.6, n), 0)
    load = _lag(procs.astype(float), times, 60.0, 2.0)
    used = _mem_used(fl, host, times, ph)
    oom = np.zeros(n)
    if host in eff.oom:
        oom = np.where(times >= eff.oom[host][1], 1.0, 0.0)
    dt = np.diff(times, prepend=times[0])
    retr = np.cumsum(dt * np.where(saving, 900.0, 2.0) * nrng.uniform(0.6, 1.4, n)) + rng.randrange(
        10**4, 10**6
    )
    tx = np.cumsum(dt * np.where(saving, 1.4e9, np.where(busy, 6e7, 2e6)) * nrng.uniform(0.8, 1.2, n))
    return {
        "procs": np.round(procs),
        "load1": np.round(load, 2),
        "mem_avail": fl.mem_total - used - nrng.uniform(0, 2 * GIB, n),
        "oom": since_boot(
            fl, host, times, oom + (3 if rng.random() < 0.1 else 0)
        ),  # old kills on a few hosts
        "retrans": since_boot(fl, host, times, np.round(retr)),
        "tx": since_boot(fl, host, times, np.round(tx + 1e12)),
    }


def nic(fl: Fleet, hi: int, k: int, times: np.ndarray, rng: random.Random) -> dict[str, np.ndarray]:
    """InfiniBand hw counters of one NIC: trickles everywhere, a burst where the story put one."""
    host = fl.case.hosts[hi]
    nrng = np.random.default_rng(rng.randrange(1 << 30))
    n = len(times)
    trickle = np.where(nrng.random(n) < 0.01, nrng.integers(3, 40, n), 0)
    seqerr = np.where(nrng.random(n) < 0.01, nrng.integers(1, 15, n), 0)
    ack = np.zeros(n)
    burst = fl.eff.rdma.get(host)
    if burst:
        a, b, rate = burst
        dt = np.diff(times, prepend=times[0])
        on = (times >= a) & (times < b)
        trickle = trickle + np.where(on, nrng.poisson(rate * dt * (1.0 if k % 2 == 0 else 0.3)), 0)
        ack = np.where(on, nrng.poisson(rate * dt * 0.05), 0)
    ph = host_phase(fl, host, times)
    dt = np.diff(times, prepend=times[0])
    data = np.cumsum(dt * np.where(ph == TRAIN, 2.2e9, 1e6)) / 4.0
    return {
        "out_of_sequence": np.cumsum(trickle) + rng.randrange(0, 5000),
        "packet_seq_err": np.cumsum(seqerr) + rng.randrange(0, 800),
        "local_ack_timeout_err": np.cumsum(ack) + rng.randrange(0, 30),
        "xmit_bytes": np.round(data + 4e14),
    }
