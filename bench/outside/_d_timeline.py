"""Corpus D: a case's plan and its training timeline (steps, saves, evaluations, restarts, stall).

Times are seconds from the data's start (`Plan.t0`, unix seconds); the scrape grid is `k * scrape`.
The timeline is the ground truth both the log and the TSDB are drawn from.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np

from bench.outside._d_fleet import GpuModel, Host, Layout

IDLE, TRAIN, SAVE, EVAL, BUSY, GONE = 0, 1, 2, 3, 4, 5


@dataclass
class Plan:
    """Everything a case is built from; stories fill the incident fields."""

    name: str
    cls: str
    family: str
    rng: random.Random
    hosts: list[Host]
    gpus: int
    model: GpuModel
    layout: Layout
    scrape: int
    dur: float
    t0: int
    setup_s: float
    step_s: float
    ckpt_period: int
    save_s: float
    eval_period: int
    eval_s: float
    first_step: int = 0
    planned_steps: int = 0  # 0: the job completes at the end of the data
    stop_at: float | None = None  # steps stop (hang or crash)
    after_stop: str = "idle"  # busy (collective wait) | idle (processes gone)
    busy_for: float = 620.0  # busy-wait until the NCCL watchdog (600 s) tears the job down
    pre_step_hang: bool = False
    slow: list[tuple[float, float]] = field(default_factory=list)
    restart_at: float | None = None
    capped: list[int] = field(default_factory=list)  # power-capped rack (host indices)
    hb_timeout: int = 0
    culprits: list[dict] = field(default_factory=list)
    onset: float | None = None  # offset; truth converts to unix
    story: list[str] = field(default_factory=list)
    log_style: str = "glog"
    status: str = "completed"
    exit_code: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def ticks(self) -> np.ndarray:
        return np.arange(0.0, self.dur + 1e-6, self.scrape)


@dataclass
class Timeline:
    """Step completions and the job-wide phase at each tick."""

    step_t: list[float]  # completion offset of each logged step
    step_n: list[int]
    step_dur: list[float]
    saves: list[tuple[float, float, int]]  # (start, end, step)
    evals: list[tuple[float, float, int]]
    restart: tuple[float, float, int] | None  # (kill, resume, resumed step)
    job_end: float
    phase: np.ndarray  # per tick
    total_steps: int


def loss_at(step: int) -> float:
    """The loss curve (the same for the log and the gauge; the noise is a function of the step)."""
    noise = math.sin(step * 12.9898) * 43758.5453 % 1.0 - 0.5
    return 1.85 + 2.6 * math.exp(-step / 900.0) + 0.04 * noise


def step_losses(plan: Plan, steps: list[int]) -> list[float]:
    """Loss of each logged step; an instability story adds its divergence (`extra["loss_add"]`)."""
    add = plan.extra.get("loss_add")
    return [loss_at(s) + (add(s) if add else 0.0) for s in steps]


def _factor(plan: Plan, t: float) -> float:
    f = 1.0
    for at, k in plan.slow:
        if t >= at:
            f = k
    return f


def simulate(plan: Plan) -> Timeline:
    """Walk the job: steps, checkpoint saves, evaluations, an elastic restart, the stop."""
    rng = random.Random(f"{plan.name}/steps")
    end_train = plan.dur - rng.uniform(120, 240)
    stop = plan.stop_at if plan.stop_at is not None else end_train
    t, step = plan.setup_s, plan.first_step
    st, sn, sd, saves, evals = [], [], [], [], []
    restart = None
    last_ckpt = plan.first_step - 1
    if not plan.pre_step_hang:
        while True:
            d = plan.step_s * _factor(plan, t) * (1 + rng.gauss(0, 0.015))
            if step == plan.first_step:
                d += rng.uniform(20, 45)  # first step compiles
            if t + d > stop:
                break
            t += d
            st.append(t), sn.append(step), sd.append(d)
            if plan.restart_at is not None and restart is None and t >= plan.restart_at:
                resume = t + rng.uniform(70, 140)
                restart = (t, resume, last_ckpt + 1)
                t, step = resume, last_ckpt + 1
                continue
            if (step + 1) % plan.ckpt_period == 0 and step > plan.first_step:
                s0 = t
                t += plan.save_s * rng.uniform(0.85, 1.15)
                saves.append((s0, t, step))
                last_ckpt = step
            elif plan.eval_period and (step + 1) % plan.eval_period == 0:
                e0 = t
                t += plan.eval_s * rng.uniform(0.9, 1.1)
                evals.append((e0, t, step))
            step += 1
    completed = plan.stop_at is None
    job_end = (
        (st[-1] + rng.uniform(15, 40))
        if completed
        else stop + (plan.busy_for if plan.after_stop == "busy" else rng.uniform(5, 20))
    )
    job_end = min(job_end, plan.dur)
    total = plan.planned_steps or (sn[-1] + 1 if completed and sn else 100000)
    ticks = plan.ticks
    phase = np.full(len(ticks), IDLE, dtype=np.int8)
    first = plan.setup_s
    phase[(ticks >= first) & (ticks < (stop if not completed else job_end))] = TRAIN
    if plan.pre_step_hang:  # the first step's compute, then every rank waits in its first collective
        phase[(ticks >= first) & (ticks < first + plan.extra.get("first_compute", 40.0))] = TRAIN
    for a, b, _ in saves:
        phase[(ticks >= a) & (ticks < b)] = SAVE
    for a, b, _ in evals:
        phase[(ticks >= a) & (ticks < b)] = EVAL
    if restart:
        phase[(ticks >= restart[0]) & (ticks < restart[1])] = IDLE
    if not completed and plan.after_stop == "busy":
        busy_from = stop if not plan.pre_step_hang else first + plan.extra.get("first_compute", 40.0)
        phase[(ticks >= busy_from) & (ticks < job_end)] = BUSY
    phase[ticks >= job_end] = IDLE
    return Timeline(st, sn, sd, saves, evals, restart, job_end, phase, total)


def step_gauges(plan: Plan, tl: Timeline) -> dict[str, np.ndarray]:
    """The trainer's gauges at each tick (NaN before the first step); a slow poll lags the log."""
    ticks = plan.ticks
    poll = plan.layout.trainer_poll_s
    seen = ticks if not poll else np.floor(ticks / poll) * poll
    idx = np.searchsorted(np.asarray(tl.step_t), seen, side="right") - 1
    losses = np.array(step_losses(plan, tl.step_n) or [0.0])
    steps = np.asarray(tl.step_n or [0], dtype=float)
    durs = np.asarray(tl.step_dur or [1.0])
    times = np.asarray(tl.step_t or [0.0]) + plan.t0
    ok = idx >= 0
    j = np.clip(idx, 0, None)
    nan = np.full(len(ticks), np.nan)
    tokens = plan.extra.get("tokens_per_step", 4.0e6)
    return {
        "training_step": np.where(ok, steps[j], nan),
        "training_loss": np.where(ok, losses[j], nan),
        "training_step_time_seconds": np.where(ok, durs[j], nan),
        "training_tokens_per_second": np.where(ok, tokens / durs[j], nan),
        "training_last_step_timestamp_seconds": np.where(ok, times[j], nan),
    }
