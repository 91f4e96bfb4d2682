"""Corpus E: a job's timeline: steps, checkpoint saves, evaluations, the story's events and the truth (#10).

Everything is in unix seconds. The story decides when (and whether) steps stop, slow down or the job dies;
`Timeline.truth` is what the contract says the answer is.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from bench.outside._e_plan import Case


@dataclass
class Step:
    """One completed step: number, end time, seconds, loss, grad norm."""

    n: int
    end: float
    seconds: float
    loss: float
    grad_norm: float


@dataclass
class Timeline:
    """A job's time course.

    Attributes:
        t0, t1: the scrape window; start: job start; train_start: first step begins; end: processes gone.
        steps: completed steps; phases: (start, end, kind) with kind ckpt | eval.
        hang: time the collective hang began (steps stop), or None; crash: time the job died, or None.
        exit: how the job ended (completed | cancelled | failed | hang-open); ev: story events by name.
        culprits: [(host, gpu|None)]; onset: the root cause's start; story: one sentence.
    """

    t0: float
    t1: float
    start: float
    train_start: float
    end: float
    steps: list[Step] = field(default_factory=list)
    phases: list[tuple[float, float, str]] = field(default_factory=list)
    hang: float | None = None
    crash: float | None = None
    exit: str = "completed"
    ev: dict[str, float] = field(default_factory=dict)
    culprits: list[tuple[str, int | None]] = field(default_factory=list)
    onset: float | None = None
    story: str = ""
    first_step: int = 0
    step_s: float = 5.0
    ckpt_every: int = 0
    eval_every: int = 0
    hb_timeout: int = 0
    accused: list[str] = field(default_factory=list)
    slow: list[tuple[float, float]] = field(default_factory=list)  # (from, factor)
    save_s: tuple[float, float] = (25.0, 70.0)


def _loss(step: int, rng: random.Random, warm: bool) -> float:
    base = 2.1 + 8.5 * math.exp(-step / 180.0) + 0.35 * math.exp(-step / 2500.0)
    if warm and 15 <= step <= 40:
        base += 1.6 * math.exp(-((step - 24) ** 2) / 30.0)  # warm-up spike, recovers by itself
    return base * (1 + rng.gauss(0, 0.012))


def _slow_at(tl: Timeline, t: float) -> float:
    f = 1.0
    for since, factor in tl.slow:
        if t >= since:
            f *= factor
    return f


def run_steps(tl: Timeline, case: Case, rng: random.Random, stop: float, instab: dict[str, Any]) -> None:
    """Steps from train_start until `stop` (or the window's end), with saves and evaluations."""
    t, n = tl.train_start, tl.first_step
    warm = "warmup" in case.herrings
    while True:
        sec = tl.step_s * _slow_at(tl, t) * (1 + rng.gauss(0, 0.025))
        if n == tl.first_step:
            sec = tl.step_s * rng.uniform(4, 9)  # first step: compile / warm caches
        if t + sec > stop:
            break
        t += sec
        loss, gn = _loss(n, rng, warm), abs(rng.gauss(1.1, 0.12))
        if instab and t >= instab["at"]:
            k = (t - instab["at"]) / 60.0
            if instab["kind"] == "nan" and k > instab["nan_after"]:
                loss, gn = math.nan, math.nan
            elif instab["kind"] == "grad_spike" and k < 1.5:
                gn *= 20 + 60 * k  # the gradient norm moves first; the loss follows a minute or two later
            else:
                loss *= 1 + instab["rate"] * (1 + k) ** 1.6
                gn *= 8 + 30 * k
        tl.steps.append(Step(n, t, sec, loss, gn))
        if tl.ckpt_every and n > tl.first_step and n % tl.ckpt_every == 0:
            dur = rng.uniform(*tl.save_s)
            tl.phases.append((t, min(t + dur, stop), "ckpt"))
            t += dur
        elif tl.eval_every and n > tl.first_step and n % tl.eval_every == 0:
            dur = rng.uniform(40, 100)
            tl.phases.append((t, min(t + dur, stop), "eval"))
            t += dur
        n += 1
        if instab and instab["kind"] == "nan" and loss != loss and t > instab["at"] + 90:
            break


def last_step_before(tl: Timeline, t: float) -> float:
    """End time of the last step completed at or before t (the train start when none)."""
    done = [s.end for s in tl.steps if s.end <= t]
    return done[-1] if done else tl.train_start


def base_timeline(case: Case, rng: random.Random) -> Timeline:
    """Window, setup and cadence of a case (no story yet)."""
    start = case.start
    t0 = start - rng.uniform(6, 12) * 60
    t1 = start + case.minutes * 60
    setup = rng.uniform(2.0, 5.5) * 60
    tl = Timeline(t0=t0, t1=t1, start=start, train_start=start + setup, end=t1)
    tl.step_s = rng.choice((1.8, 3.2, 4.5, 6.0, 9.5, 14.0))
    per_min = 60.0 / tl.step_s
    if "ckpt" in case.herrings:
        tl.ckpt_every = max(20, int(per_min * rng.uniform(7, 14)) // 10 * 10)
    if "eval" in case.herrings:
        tl.eval_every = max(25, int(per_min * rng.uniform(9, 16)) // 10 * 10 + 5)
    return tl


def frac(tl: Timeline, rng: random.Random, lo: float = 0.45, hi: float = 0.75) -> float:
    """A time at a fraction of the training part of the window."""
    return tl.train_start + (tl.t1 - tl.train_start) * rng.uniform(lo, hi)
