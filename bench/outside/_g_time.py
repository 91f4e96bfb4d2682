"""Corpus G's job timelines (#10): when the job starts, steps, pauses, hangs and stops.

A `Timeline` holds the step completion times and the job-wide phases (init, training, checkpoint and
evaluation pauses, data-loader stalls, a busy-wait hang, the end). `phase_at` maps sample times to
phase codes that the exporters' models turn into GPU and host values. `Effects` are the per-host and
per-GPU departures a story adds (a dead host, a hot GPU, a frozen exporter, retransmits...).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

OFF, INIT, TRAIN, CKPT, EVAL, STALL, HANG = range(7)


@dataclass
class Timeline:
    """The job's clock.

    Attributes:
        t_launch: first log line (container start); t_train: first step begins.
        step_no / step_t: completed steps and their completion times (unix s).
        pauses: (t0, t1, phase) checkpoint / eval / stall windows between steps.
        hang: (t0, t1) busy-wait window, or None. t_stop: the training processes end.
        t0 / t1: the monitoring window (a few minutes either side of the job).
        step_s: nominal step time; ckpt_every / eval_every: periods in steps; first_step: first step number.
        loss: loss per completed step; gnorm: gradient norm per step.
        ckpt_steps: steps after which a checkpoint was saved.
    """

    t_launch: float
    t_train: float
    step_no: np.ndarray
    step_t: np.ndarray
    pauses: list[tuple[float, float, int]]
    hang: tuple[float, float] | None
    t_stop: float
    t0: float
    t1: float
    step_s: float
    ckpt_every: int
    eval_every: int
    first_step: int
    total_steps: int
    loss: np.ndarray = field(default_factory=lambda: np.zeros(0))
    gnorm: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ckpt_steps: list[int] = field(default_factory=list)
    ckpt_s: float = 60.0

    def phase_at(self, t: np.ndarray) -> np.ndarray:
        """Phase code at each time."""
        ph = np.full(t.shape, OFF, dtype=np.int8)
        ph[(t >= self.t_launch) & (t < self.t_stop)] = INIT
        last = self.step_t[-1] if len(self.step_t) else self.t_train
        ph[(t >= self.t_train) & (t < min(self.t_stop, last + self.step_s * 1.5))] = TRAIN
        for a, b, code in self.pauses:
            ph[(t >= a) & (t < b)] = code
        if self.hang:
            ph[(t >= self.hang[0]) & (t < self.hang[1])] = HANG
        return ph

    def step_at(self, t: np.ndarray) -> np.ndarray:
        """Last completed step at each time (first_step - 1 before the first)."""
        idx = np.searchsorted(self.step_t, t, side="right") - 1
        out = np.where(idx >= 0, self.step_no[np.clip(idx, 0, None)], self.first_step - 1)
        return out.astype(float)


@dataclass
class Effects:
    """What a story changes on some hosts or GPUs (all times unix s; hosts by index)."""

    slow: list[tuple[float, float]] = field(default_factory=list)  # (from t, step-time factor)
    dead: dict[int, float] = field(default_factory=dict)
    ghost: dict[int, float] = field(default_factory=dict)  # dcgm-exporter frozen from t
    thermal: tuple[int, int, float] | None = None  # host, gpu, ramp start
    retx: dict[int, tuple[float, float, float]] = field(default_factory=dict)  # host: (t0, t1, rate/s)
    trickle: float = 0.0  # background retransmits/s on every host
    trickle_hosts: dict[int, float] = field(default_factory=dict)
    mem_rises: dict[int, list[tuple[float, float, float, float]]] = field(
        default_factory=dict
    )  # t0,t1,GiB,keep
    oom_kill: dict[int, float] = field(default_factory=dict)
    hang_sets: dict[int, list[int]] = field(default_factory=dict)  # host: GPUs that busy-wait (others idle)
    hang_gpus_default: list[int] | None = None
    xids: list[tuple[int, int, float, int]] = field(default_factory=list)  # host, gpu, t, xid
    old_xids: dict[tuple[int, int], int] = field(default_factory=dict)
    uncorrectable: list[tuple[int, int, float]] = field(default_factory=list)  # host, gpu, t (remap/DBE)
    sbe_tick: dict[tuple[int, int], float] = field(default_factory=dict)  # per-hour correctable ECC
    scrape_fail: dict[int, list[float]] = field(default_factory=dict)  # dcgm scrape timeouts on host
    gpu_gone: dict[tuple[int, int], float] = field(default_factory=dict)  # GPU vanishes from dcgm at t
    outage: dict[tuple[int, str], tuple[float, float]] = field(default_factory=dict)  # (host, exporter)
    prom_gap: tuple[float, float] | None = None
    exporter_restart: dict[int, float] = field(default_factory=dict)
    extra_procs: float = 0.0
    warm: dict[int, float] = field(default_factory=dict)  # host: +°C ambient
    util_off: dict[int, float] = field(default_factory=dict)  # host: util offset (slow but healthy)
    cotenant: dict[int, list[int]] = field(default_factory=dict)  # host: GPUs of another job
    gpu_warm: dict[tuple[int, int], float] = field(default_factory=dict)


def build(
    rng: random.Random,
    t_launch: float,
    minutes: float,
    step_s: float,
    eff: Effects,
    *,
    first_step: int = 0,
    hang_at: float | None = None,
    stop_at: float | None = None,
    init_s: float | None = None,
) -> Timeline:
    """Steps from the end of init until `minutes` after launch, a hang at `hang_at`, or `stop_at`."""
    init_s = init_s if init_s is not None else rng.uniform(150, 420)
    t_train = t_launch + init_s
    t_end_job = t_launch + minutes * 60.0
    ckpt_every = rng.choice([100, 200, 250, 500]) if step_s < 4 else rng.choice([50, 100, 120])
    eval_every = rng.choice([0, ckpt_every // 2, ckpt_every])
    ckpt_s = rng.uniform(25, 90)
    total = first_step + int((t_end_job - t_train) / step_s * rng.uniform(1.6, 3.0)) // 100 * 100 + 100
    steps, times, pauses, ckpts = [], [], [], []
    t, k = t_train, first_step
    stop = min(x for x in (t_end_job, hang_at, stop_at) if x is not None)
    while True:
        factor = 1.0
        for t_from, f in eff.slow:
            if t >= t_from:
                factor = f
        dur = step_s * factor * rng.gauss(1.0, 0.025) * (1.35 if k == first_step else 1.0)
        if t + dur > stop:
            break
        t += dur
        steps.append(k)
        times.append(t)
        if k > first_step and ckpt_every and k % ckpt_every == 0:
            pause = ckpt_s * rng.uniform(0.85, 1.2)
            pauses.append((t, t + pause, CKPT))
            ckpts.append(k)
            t += pause
        elif k > first_step and eval_every and k % eval_every == 0:
            pause = rng.uniform(20, 60)
            pauses.append((t, t + pause, EVAL))
            t += pause
        k += 1
    hang = None
    if hang_at is not None and (stop_at is None or hang_at < stop_at):
        t_stop = stop_at if stop_at is not None else t_end_job
        hang = (times[-1] if times else t_train, t_stop)
    else:
        t_stop = stop if stop_at is not None else (times[-1] if times else t_train) + rng.uniform(20, 60)
    pad = rng.uniform(180, 420)
    return Timeline(
        t_launch=t_launch,
        t_train=t_train,
        step_no=np.array(steps, dtype=int),
        step_t=np.array(times),
        pauses=pauses,
        hang=hang,
        t_stop=t_stop,
        t0=t_launch - pad,
        t1=t_stop + rng.uniform(240, 600),
        step_s=step_s,
        ckpt_every=ckpt_every,
        eval_every=eval_every,
        first_step=first_step,
        total_steps=total,
        ckpt_steps=ckpts,
        ckpt_s=ckpt_s,
    )


def during(tl: Timeline, rng: random.Random, lo: float, hi: float) -> float:
    """A random time between fractions lo and hi of the training span."""
    span = tl.t_stop - tl.t_train
    return rng.uniform(tl.t_train + lo * span, tl.t_train + hi * span)


def add_stall(tl: Timeline, rng: random.Random) -> None:
    """A data-loader stall that recovers: one long step, GPUs idle meanwhile (shifts later steps)."""
    if len(tl.step_t) < 40:
        return
    i = rng.randint(len(tl.step_t) // 3, len(tl.step_t) * 2 // 3)
    gap = rng.uniform(40, 100)
    start = tl.step_t[i]
    tl.pauses.append((start, start + gap, STALL))
    tl.step_t[i + 1 :] += gap
    tl.pauses = [
        (a + gap, b + gap, c) if a > start + 1e-6 and c != STALL else (a, b, c) for a, b, c in tl.pauses
    ]
    over = tl.step_t > tl.t_stop - 1
    if over.any():
        keep = ~over
        tl.step_no, tl.step_t = tl.step_no[keep], tl.step_t[keep]


def losses(tl: Timeline, rng: random.Random, spike_at: int | None = None) -> None:
    """A falling loss curve with noise; from `spike_at` (a step index) it diverges to NaN."""
    n = len(tl.step_no)
    s = tl.step_no.astype(float) + 50.0
    base = 1.9 + 9.0 / np.sqrt(s / 8.0)
    tl.loss = base + np.array([rng.gauss(0, 0.025) for _ in range(n)])
    tl.gnorm = np.array([abs(rng.gauss(0.9, 0.12)) + 0.2 for _ in range(n)])
    if spike_at is not None and spike_at < n:
        for j in range(spike_at, n):
            d = j - spike_at
            tl.loss[j] = tl.loss[j] * (1.0 + 0.18 * d + 0.02 * d * d)
            tl.gnorm[j] = tl.gnorm[j] * (4.0 * 1.8**d)
        if n - spike_at > 6:
            tl.loss[-3:] = np.nan
            tl.gnorm[-3:] = np.nan
