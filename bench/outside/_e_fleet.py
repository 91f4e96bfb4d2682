"""Corpus E: per-GPU and per-host state on the scrape grid, from a timeline and its story (#10).

Arrays are (hosts, 8, T) for GPUs and (hosts, T) for hosts; all eight GPUs of a node are present (a job on
four of them shares the node with another tenant's busy GPUs).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from bench.outside._e_plan import GPUS, Case
from bench.outside._e_time import Timeline


@dataclass
class Fleet:
    """State arrays on the grid.

    Attributes:
        grid: scrape times; act: compute activity 0..1; tensor: tensor-pipe fraction of a healthy step;
        bw: 1 where a GPU busy-waits in a collective; temp, clock: GPU temperature and SM clock;
        job_on: the training processes are alive; ckpt, evalp: inside a save / an evaluation;
        procs, mem_used, io_rate, net_rate: host gauges and rates; retx: RDMA retransmit rate per host;
        ib_wait: IB transmit-wait rate per host; tcp_retx: TCP retransmits per second per host.
    """

    grid: np.ndarray
    act: np.ndarray
    tensor: np.ndarray
    bw: np.ndarray
    temp: np.ndarray
    clock: np.ndarray
    job_on: np.ndarray
    ckpt: np.ndarray
    evalp: np.ndarray
    procs: np.ndarray
    mem_used: np.ndarray
    mem_total: float
    io_rate: np.ndarray
    net_rate: np.ndarray
    retx: np.ndarray
    ib_wait: np.ndarray
    tcp_retx: np.ndarray
    slow: np.ndarray


def _mask(grid: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return (grid >= lo) & (grid < hi)


def _phase_masks(tl: Timeline, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ckpt = np.zeros(grid.size, bool)
    evalp = np.zeros(grid.size, bool)
    for lo, hi, kind in tl.phases:
        (ckpt if kind == "ckpt" else evalp)[_mask(grid, lo, hi)] = True
    return ckpt, evalp, _mask(grid, tl.start, tl.end)


def _slow(tl: Timeline, grid: np.ndarray) -> np.ndarray:
    f = np.ones(grid.size)
    for since, factor in tl.slow:
        f[grid >= since] *= factor
    return f


def _gpu_activity(case: Case, tl: Timeline, grid: np.ndarray, rng: np.random.Generator) -> tuple:
    h, t = len(case.hosts), grid.size
    ckpt, evalp, job_on = _phase_masks(tl, grid)
    training = _mask(grid, tl.train_start, tl.end)
    hang = tl.hang if tl.hang is not None else np.inf
    train_now = training & (grid < hang) & ~ckpt & ~evalp
    if case.variant == "before_first_step":
        train_now[:] = False
    act = np.zeros((h, 8, t))
    level = 0.9 + rng.normal(0, 0.02, (h, 8, 1))
    act += np.where(train_now, 1.0, 0.0) * level
    act += np.where(evalp & training, 0.45, 0.0) + np.where(ckpt & training, 0.04, 0.0)
    setup = _mask(grid, tl.start, tl.train_start)
    act += np.where(setup, 0.12, 0.0)
    act *= 1 + rng.normal(0, 0.02, act.shape)
    bw = np.zeros((h, 8, t))
    bw[:, :, (grid >= hang) & job_on] = 1.0
    slow = _slow(tl, grid)
    tensor = np.where(train_now, 1.0 / slow, 0.0) * np.ones((h, 8, 1))
    tensor[act < 0.5] = act[act < 0.5] * 0.2
    others = [g for g in range(8) if g not in case.gpus]
    for g in others:  # another tenant: its own busy, bursty load
        walk = np.clip(0.6 + np.cumsum(rng.normal(0, 0.05, (h, t)), axis=1) * 0.3, 0.15, 0.98)
        act[:, g, :], tensor[:, g, :], bw[:, g, :] = walk, walk * 0.8, 0.0
    return act, tensor, bw, ckpt, evalp, job_on, slow


def _apply_gpu_story(case: Case, tl: Timeline, grid: np.ndarray, act, tensor, bw) -> None:
    ev = tl.ev
    if "odd_host" in ev:
        h = int(ev["odd_host"])
        for g in case.gpus[1:3]:
            bw[h, g, :] = 0.0
            act[h, g, grid >= (tl.hang or 0)] = 0.0
    if "death" in ev:
        h = int(ev["dead_host"])
        bw[h, :, grid >= ev["death"]] = 0.0
    if "kill" in ev:
        pass  # the processes die at kill; job_on handles the others
    if "hw" in ev and case.variant == "xid79_gpu":
        h, g = int(ev["hw_host"]), int(ev["hw_gpu"])
        act[h, g, grid >= ev["hw"]] = 0.0
    if "instab" in ev and case.variant != "nan":
        after = grid >= ev["instab"] + 90
        act[:, case.gpus, :] *= np.where(after, 0.82, 1.0)
        tensor[:, case.gpus, :] *= np.where(after, 0.7, 1.0)


def _thermal(case: Case, tl: Timeline, grid: np.ndarray, act, rng: np.random.Generator) -> tuple:
    spec = GPUS[case.gpu_model]
    h, t = len(case.hosts), grid.size
    power_frac = np.clip(act, 0, 1)
    ema = np.zeros_like(power_frac)
    for i in range(t):  # the die warms and cools over a few scrapes
        k = min(1.0, case.scrape_s / 90.0)
        prev = ema[:, :, i - 1] if i else power_frac[:, :, 0]
        ema[:, :, i] = prev + k * (power_frac[:, :, i] - prev)
    off = rng.normal(0, 2.0, (h, 8, 1))
    temp = 31.0 + off + 38.0 * ema + rng.normal(0, 0.4, (h, 8, t))
    if "hot_rack" in case.herrings:
        temp[rng.integers(h)] += 9.0  # rack position: hot all the time, no slowdown
    clock = np.where(act > 0.08, spec[4], 345.0 if spec[4] > 1500 else 210.0) * np.ones((h, 8, t))
    clock -= np.where(act > 0.5, rng.choice([0.0, 15.0, 30.0], (h, 8, t), p=[0.7, 0.2, 0.1]), 0.0)
    if "hot" in tl.ev:
        hh, g, since = int(tl.ev["hot_host"]), int(tl.ev["hot_gpu"]), tl.ev["hot"]
        ramp = np.clip((grid - since) / 240.0, 0, 1)
        lift = ramp * (act[hh, g] > 0.3)  # hot while it works; it cools when the job ends
        target = rng.uniform(87, 92)
        temp[hh, g] += lift * (np.maximum(target - temp[hh, g], 0) + rng.normal(0, 0.6, t))
        hot = lift >= 0.6
        clock[hh, g, hot] = spec[4] * (1 / tl.ev["hot_amp"]) * rng.uniform(0.78, 0.84)
    return temp, clock


def _host_state(case: Case, tl: Timeline, grid: np.ndarray, act, ckpt, job_on, rng) -> dict[str, np.ndarray]:
    h, t = len(case.hosts), grid.size
    busy = act[:, case.gpus, :].mean(axis=1)
    n_gpu = len(case.gpus)
    procs = 2 + rng.poisson(1.0, (h, t)) + np.where(job_on, n_gpu * 1.25 + 3, 0)
    procs = procs + (np.where(busy > 0.5, 2.0, 0.0) if len(case.gpus) == 8 else 6.0)
    if case.leak:
        procs = procs + np.where(grid >= tl.train_start, tl.ev.get("leak", 16.0), 0.0)
    total = 2.0 * 2**40 if case.gpu_model != "A100" else 1.0 * 2**40
    used = total * (0.05 + np.where(job_on, 0.2, 0.0)) * (1 + rng.normal(0, 0.01, (h, t)))
    used = used + total * 0.06 * ckpt
    io = 2e6 + rng.exponential(1e6, (h, t)) + ckpt * 1.6e9 * (1 + rng.normal(0, 0.1, (h, t)))
    net = busy * rng.uniform(18e9, 24e9) * (1 + rng.normal(0, 0.03, (h, t)))
    tcp = rng.exponential(1.2, (h, t)) + ckpt * rng.uniform(150, 600)
    retx = rng.exponential(0.02, (h, t)) * (rng.random((h, t)) < 0.3)
    ib_wait = busy * 2e5 * (1 + rng.normal(0, 0.15, (h, t)))
    return {
        "procs": procs,
        "used": used,
        "total": np.array(total),
        "io": io,
        "net": net,
        "tcp": tcp,
        "retx": retx,
        "ib_wait": ib_wait,
    }


def _apply_host_story(case: Case, tl: Timeline, grid: np.ndarray, st: dict, rng: random.Random) -> None:
    ev, total = tl.ev, float(st["total"])
    for key, hosts_key, rate in (("net", "net_hosts", 1.0), ("rdma", "rdma_hosts", 0.35)):
        if key not in ev:
            continue
        idx = [i for i in range(len(case.hosts)) if int(ev[hosts_key]) >> i & 1]
        on = grid >= ev[key]
        if key == "net":
            on &= grid < (tl.hang or np.inf) + 120
        for i in idx:
            amp = rng.uniform(40, 400) * rate
            st["retx"][i] += on * amp * (1 + np.abs(np.random.default_rng(i).normal(0, 0.4, grid.size)))
            st["ib_wait"][i] += on * amp * 4e4
            st["tcp"][i] += on * amp * 0.02
    if "kill" in ev:
        n = int(ev["oom_hosts"])
        saves = [p for p in tl.phases if p[2] == "ckpt"]
        for i in range(n):
            floor = 0.27
            for lo, hi, _ in saves:
                fatal = lo == ev["fatal_save"]
                m = _mask(grid, lo, hi + case.scrape_s)
                peak = 0.995 if fatal else rng.uniform(0.6, 0.75)
                ramp = np.clip((grid - lo) / max(hi - lo, 1.0), 0, 1)
                st["used"][i, m] = total * (floor + (peak - floor) * ramp[m])
                if case.variant == "two_saves" and not fatal:
                    floor += rng.uniform(0.1, 0.16)
                st["used"][i, grid >= hi + case.scrape_s] = total * floor
            st["used"][i, grid >= ev["kill"]] = total * 0.05
            st["used"][i] *= 1 + np.random.default_rng(i).normal(0, 0.004, grid.size)


def build(case: Case, tl: Timeline) -> Fleet:
    """The fleet's state arrays for a case's timeline."""
    rng = np.random.default_rng(case.seed)
    prng = random.Random(case.seed + 1)
    grid = np.arange(tl.t0, tl.t1 + 1e-6, case.scrape_s, dtype=float)
    act, tensor, bw, ckpt, evalp, job_on, slow = _gpu_activity(case, tl, grid, rng)
    _apply_gpu_story(case, tl, grid, act, tensor, bw)
    temp, clock = _thermal(
        case, tl, grid, np.maximum(act * (0.25 + 0.75 * np.clip(tensor, 0, 1)), bw * 0.1), rng
    )
    st = _host_state(case, tl, grid, act, ckpt, job_on, rng)
    _apply_host_story(case, tl, grid, st, prng)
    return Fleet(
        grid=grid,
        act=np.clip(act, 0, 1),
        tensor=np.clip(tensor, 0, 1),
        bw=bw,
        temp=temp,
        clock=clock,
        job_on=job_on,
        ckpt=ckpt,
        evalp=evalp,
        procs=st["procs"],
        mem_used=st["used"],
        mem_total=float(st["total"]),
        io_rate=st["io"],
        net_rate=st["net"],
        retx=st["retx"],
        ib_wait=st["ib_wait"],
        tcp_retx=st["tcp"],
        slow=slow,
    )
