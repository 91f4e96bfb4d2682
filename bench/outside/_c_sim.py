"""Corpus C: the simulated job (what every host, GPU, NIC and the trainer did, on the scrape grid).

A `World` holds the time grid, the step timeline and per-host/per-GPU state arrays. Scenarios
(`_c_scen.py`) set its controls (stop, slowdown, special modes) before `run_steps`/`fill`, then edit
values after; `_c_lay.py` turns it into exporter series and `_c_log.py` into a job log.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from bench.outside._c_plan import Spec

IDLE, TRAIN, SAVE, EVAL, SPIN, ZERO = 0, 1, 2, 3, 4, 5

GPU_KIND = {  # idle W, training W, clock MHz, VRAM GiB, idle temp
    "NVIDIA H100 80GB HBM3": (72.0, 610.0, 1980.0, 80.0, 34.0),
    "NVIDIA H200": (78.0, 640.0, 1980.0, 141.0, 35.0),
    "NVIDIA A100-SXM4-80GB": (58.0, 355.0, 1410.0, 80.0, 31.0),
    "MI300X": (140.0, 640.0, 2100.0, 192.0, 38.0),
    "MI355X": (260.0, 900.0, 2400.0, 288.0, 40.0),
}


@dataclass
class World:
    """One job's simulated state."""

    spec: Spec
    rng: np.random.Generator
    t: np.ndarray
    t_train: float
    end_t: float
    stop_t: float | None = None  # steps stop advancing here (hang or crash)
    crash_t: float | None = None  # processes gone from here on (GPUs idle)
    first_step: int = 0
    slow: np.ndarray = field(default_factory=lambda: np.zeros(0))
    steps: list[tuple[int, float, float, float]] = field(default_factory=list)  # step, done at, seconds, loss
    saves: list[tuple[float, float, int]] = field(default_factory=list)
    evals: list[tuple[float, float]] = field(default_factory=list)
    ckpt_period: int = 100
    save_s: float = 40.0
    eval_every: int = 0
    hb_timeout: float = 300.0
    writers: list[int] = field(default_factory=lambda: [0])
    loss_fn: object = None
    arr: dict[str, np.ndarray] = field(default_factory=dict)
    node_ok: np.ndarray = field(default_factory=lambda: np.zeros(0))  # [H, T] node exporter answered
    gpu_ok: np.ndarray = field(default_factory=lambda: np.zeros(0))  # [H, T] GPU exporter answered
    train_ok: np.ndarray = field(default_factory=lambda: np.zeros(0))  # [T] trainer gauges answered
    frozen: dict[str, int] = field(default_factory=dict)  # "gpu:<h>" / "node:<h>" -> first frozen index
    resets: list[tuple[str, int, int]] = field(default_factory=list)  # (target kind, host, index)
    culprits: list[tuple[str, str | None]] = field(default_factory=list)
    onset: float | None = None
    story: str = ""
    log: dict = field(default_factory=dict)  # what the log module needs beyond the steps

    @property
    def H(self) -> int:
        return len(self.spec.hosts)

    @property
    def G(self) -> int:
        return self.spec.gpus

    @property
    def T(self) -> int:
        return len(self.t)

    @property
    def iv(self) -> float:
        return self.spec.interval

    def idx(self, when: float) -> int:
        """Index of the first grid time at or after `when` (clamped)."""
        return int(min(self.T - 1, max(0, math.ceil((when - self.t[0]) / self.iv - 1e-9))))


def new_world(spec: Spec) -> World:
    """The grid and the defaults of a job; no steps yet."""
    rng = np.random.default_rng(spec.seed)
    n = int(spec.hours * 3600 / spec.interval)
    t = spec.start + spec.interval * np.arange(n)
    setup = float(rng.uniform(180, 480))
    w = World(spec=spec, rng=rng, t=t, t_train=spec.start + setup, end_t=float(t[-1]))
    w.slow = np.ones(n)
    w.ckpt_period = int(rng.choice([50, 100, 200, 250]))
    w.save_s = float(rng.uniform(25, 90))
    w.hb_timeout = float(rng.choice([100, 300, 600, 900]))
    replicas = int(rng.choice([4, 8, 16]))
    w.writers = list(range(max(1, len(spec.hosts) // replicas)))
    base_loss, decay = float(rng.uniform(1.8, 2.6)), float(rng.uniform(150, 600))
    w.loss_fn = lambda s: base_loss + 6.0 * math.exp(-s / decay)
    return w


def slow_at(w: World, when: float) -> float:
    return float(w.slow[w.idx(when)])


def run_steps(w: World) -> None:
    """The step timeline from training start to the stop (or the data end, less a short tail)."""
    rng, spec = w.rng, w.spec
    now = w.t_train + float(rng.uniform(60, 240))  # compile before the first step completes
    limit = w.stop_t if w.stop_t is not None else w.end_t - float(rng.uniform(120, 300))
    step = w.first_step
    while True:
        secs = spec.step_s * slow_at(w, now) * float(1 + rng.normal(0, 0.02))
        if step == w.first_step:
            secs += float(rng.uniform(20, 60))
        if now + secs > limit:
            break
        now += secs
        loss = w.loss_fn(step) + float(rng.normal(0, 0.01))  # type: ignore[operator]
        w.steps.append((step, now, secs, loss))
        if step > w.first_step and step % w.ckpt_period == 0 and now + w.save_s < limit:
            w.saves.append((now, now + w.save_s, step))
            now += w.save_s
        if w.eval_every and step > w.first_step and step % w.eval_every == 0 and now + 240 < limit:
            dur = float(rng.uniform(150, 300))
            w.evals.append((now, now + dur))
            now += dur
        step += 1
    if w.stop_t is None:
        w.log.setdefault("completed", True)


def _mode(w: World) -> np.ndarray:
    m = np.full((w.H, w.G, w.T), IDLE, dtype=np.int8)
    if not w.steps:
        return m
    a = w.idx(w.t_train)
    b = w.idx(w.steps[-1][1]) if w.stop_t is None else w.idx(w.stop_t)
    m[:, :, a : b + 1] = TRAIN
    for t0, t1, _ in w.saves:
        m[:, :, w.idx(t0) : w.idx(t1)] = SAVE
    for t0, t1 in w.evals:
        m[:, :, w.idx(t0) : w.idx(t1)] = EVAL
    return m


def fill(w: World, mode: np.ndarray | None = None) -> None:
    """Derive every GPU/host value from the mode array (scenarios pass their own modes)."""
    mode = _mode(w) if mode is None else mode
    w.arr["mode"] = mode
    _fill_gpu(w, mode)
    _fill_host(w, mode)
    w.node_ok = np.ones((w.H, w.T), bool)
    w.gpu_ok = np.ones((w.H, w.T), bool)
    w.train_ok = np.ones(w.T, bool)
    late = w.spec.layout.gpu_late_scrapes
    if late:
        w.gpu_ok[:, :late] = False


def _fill_gpu(w: World, mode: np.ndarray) -> None:
    rng = w.rng
    idle_w, train_w, clk, vram, idle_temp = GPU_KIND[w.spec.gpu_model]
    shape = mode.shape
    noise = rng.normal(0, 1, shape)
    gpu_off = rng.normal(0, 2.5, shape[:2])[:, :, None]
    util = np.select(
        [mode == TRAIN, mode == SAVE, mode == EVAL, mode == SPIN],
        [96 + 2 * noise, 25 + 8 * noise, 35 + 6 * noise, 100 + 0 * noise],
        0.0,
    )
    power = np.select(
        [mode == TRAIN, mode == SAVE, mode == EVAL, mode == SPIN, mode == ZERO],
        [
            train_w + 0.04 * train_w * noise,
            idle_w + 0.25 * (train_w - idle_w) + 8 * noise,
            idle_w + 0.35 * (train_w - idle_w) + 10 * noise,
            idle_w + 40 + 3 * noise,
            0.0 * noise,
        ],
        idle_w + 2 * noise,
    )
    target = np.where(
        mode == TRAIN, idle_temp + 30, np.where(mode == SPIN, idle_temp + 8, idle_temp + 12 * (mode >= 2))
    )
    target = target + gpu_off + w.arr.get("host_temp_off", np.zeros((w.H, 1, 1)))
    temp = _smooth(target, w.iv, 180.0) + 0.4 * rng.normal(0, 1, shape)
    clock = np.where((mode == TRAIN) | (mode == SPIN) | (mode == SAVE) | (mode == EVAL), clk, clk * 0.1)
    clock = clock + np.where(mode == TRAIN, rng.integers(-15, 1, shape), 0)
    busy = (mode != IDLE) & (mode != ZERO)
    fb = np.where(busy, vram * 0.9 * 1024 + 200 * rng.normal(0, 1, shape[:2])[:, :, None], 512.0)
    w.arr.update(
        util=np.clip(util, 0, 100).round(),
        power=np.clip(power, 0, None).round(2),
        temp=temp.round(),
        clock=clock.round(),
        fb=fb.round(),
        xid=np.zeros(shape),
        sbe=np.cumsum(rng.random(shape) < 0.0005, axis=2).astype(float),
        dbe=np.zeros(shape),
        remap_c=np.zeros(shape),
        remap_u=np.zeros(shape),
        remap_fail=np.zeros(shape),
        pcie_replay=np.cumsum(rng.random(shape) < 0.002, axis=2).astype(float),
    )


def _smooth(target: np.ndarray, iv: float, tau: float) -> np.ndarray:
    """First-order lag of `target` along the last axis (a temperature following its load)."""
    out = np.empty_like(target, dtype=float)
    a = 1 - math.exp(-iv / tau)
    cur = target[..., 0].astype(float)
    for k in range(target.shape[-1]):
        cur = cur + a * (target[..., k] - cur)
        out[..., k] = cur
    return out


def _fill_host(w: World, mode: np.ndarray) -> None:
    rng, H, T = w.rng, w.H, w.T
    busy = (mode[:, 0, :] != IDLE) & (mode[:, 0, :] != ZERO)
    base_run = rng.uniform(3, 30, H)[:, None]
    running = base_run + np.where(busy, w.G + 2, 0) + rng.poisson(2.0, (H, T))
    blocked = rng.poisson(0.3, (H, T)).astype(float)
    total = float(rng.choice([1.0, 2.0, 2.0])) * 2**40
    used = rng.uniform(0.08, 0.14, H)[:, None] * total + np.where(busy, 0.06 * total, 0.0)
    used = used + rng.normal(0, 2e8, (H, T))
    io_rate = np.full((H, T), 0.01)
    tcp_rate = rng.uniform(0.5, 4.0, (H, T))
    for t0, t1, _ in w.saves:
        a, b = w.idx(t0), w.idx(t1)
        for h in w.writers:
            used[h, a : b + 1] += 0.18 * total
            blocked[h, a : b + 1] += rng.integers(8, 20)
            io_rate[h, a : b + 1] = 0.6
            tcp_rate[h, a : b + 1] = rng.uniform(500, 2500)
    w.arr.update(
        running=running.round(),
        blocked=blocked,
        mem_total=np.full(H, total),
        mem_used=used,
        io_rate=io_rate,
        tcp_rate=tcp_rate,
        oom=np.repeat(rng.integers(0, 4, H)[:, None].astype(float), T, axis=1),
    )
    _fill_nics(w, busy)


def _fill_nics(w: World, busy: np.ndarray) -> None:
    """Per-NIC byte, retransmit, ACK-timeout and transmit-wait rates; a retransmit trickle everywhere."""
    rng, H, T = w.rng, w.H, w.T
    nics = int(rng.choice([2, 4, 8])) if w.G == 8 else int(rng.choice([2, 4]))
    shape = (H, nics, T)
    b = busy[:, None, :]
    w.arr["tx_rate"] = np.where(b, rng.uniform(8e9, 1.2e10, (H, nics, 1)), 2e5) * (
        1 + 0.03 * rng.normal(0, 1, shape)
    )
    trickle = (rng.random(shape) < 0.01) * rng.integers(2, 40, shape)
    w.arr["retx_inc"] = trickle.astype(float)  # packets a scrape
    w.arr["ack_inc"] = ((rng.random(shape) < 0.002) * 1).astype(float)
    w.arr["wait_rate"] = np.where(b, rng.uniform(2e4, 8e4, (H, nics, 1)), 100.0) * (
        1 + 0.1 * rng.normal(0, 1, shape)
    )
    w.arr["port_state"] = np.full(shape, 4.0)


def counter(inc: np.ndarray, start: np.ndarray | float = 0.0) -> np.ndarray:
    """Cumulative counter from per-scrape increments along the last axis."""
    return np.cumsum(inc, axis=-1) + (np.asarray(start)[..., None] if np.ndim(start) else start)
