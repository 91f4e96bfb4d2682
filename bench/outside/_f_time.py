"""Outside corpus F (#10): a job's timeline (setup, steps, saves, evaluations, the stop) and what a story did.

Codes of the job's phase at a time: PRE (nothing launched), SETUP (loading, compiling), TRAIN, SAVE
(checkpoint write), EVAL, HANG (GPUs busy-wait in a collective), OFF (the processes are gone).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

PRE, SETUP, TRAIN, SAVE, EVAL, HANG, OFF = range(7)


@dataclass
class Effects:
    """What the story did to the fleet (absolute unix times).

    Attributes:
        dead: host -> time it went silent (all its exporters gone).
        back: host -> time a dead host came back from a reboot (GPUs idle, kernel counters from zero).
        idle_in_hang: (host, gpu) pairs that sit idle while the others busy-wait.
        hot: (host, gpu) -> time its temperature began to climb.
        rdma: host -> (start, end, retransmits per second per NIC) of a retransmit burst.
        ghost: host -> (time, exporter) its exporter's values froze ("gpu" or "node").
        driver: host -> time GPU driver trouble began (scrape timeouts, gaps).
        xid: (host, gpu, time, code) Xid events.
        ecc_ue: (host, gpu, time) uncorrectable ECC errors.
        oom: host -> (rise start, kill time) of the fatal host-memory rise.
        near_limit: hosts whose saves come near the memory limit without a kill.
        extra_procs: runnable processes added on every host (a restore's leak).
        slow: the job's step-time factor from a time on (start, factor).
        exporter_restart: host -> time its node exporter restarted (counter reset).
    """

    dead: dict[str, float] = field(default_factory=dict)
    back: dict[str, float] = field(default_factory=dict)
    idle_in_hang: set[tuple[str, int]] = field(default_factory=set)
    hot: dict[tuple[str, int], float] = field(default_factory=dict)
    rdma: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    ghost: dict[str, tuple[float, str]] = field(default_factory=dict)
    driver: dict[str, float] = field(default_factory=dict)
    xid: list[tuple[str, int, float, int]] = field(default_factory=list)
    ecc_ue: list[tuple[str, int, float]] = field(default_factory=list)
    oom: dict[str, tuple[float, float]] = field(default_factory=dict)
    near_limit: set[str] = field(default_factory=set)
    extra_procs: float = 0.0
    slow: tuple[float, float] | None = None
    exporter_restart: dict[str, float] = field(default_factory=dict)


@dataclass
class Step:
    """One logged training step (end time, seconds, loss, grad norm)."""

    n: int
    t: float
    secs: float
    loss: float
    grad: float


@dataclass
class Timeline:
    """When things happened (unix seconds).

    Attributes:
        t0: the first scrape; launch: job start (first log line); begin: first step starts.
        steps: steps completed; saves, evals: (start, end, step) pauses.
        stop: the time steps stopped (None: ran to the end); hang: busy-wait from `stop` to `end`.
        end: the processes ended; t1: the last scrape.
        total: steps the job was configured for.
    """

    t0: float
    launch: float
    begin: float
    steps: list[Step]
    saves: list[tuple[float, float, int]]
    evals: list[tuple[float, float, int]]
    stop: float | None
    hang: bool
    end: float
    t1: float
    total: int
    ckpt_every: int
    segments: list[tuple[float, float, int]] = field(default_factory=list)

    def phase(self, times: np.ndarray) -> np.ndarray:
        """The phase code at each time."""
        starts = np.array([s[0] for s in self.segments])
        codes = np.array([s[2] for s in self.segments])
        idx = np.searchsorted(starts, times, side="right") - 1
        return np.where(idx < 0, PRE, codes[np.clip(idx, 0, None)])


def loss_at(step: int, rng: random.Random, warm_spikes: set[int]) -> tuple[float, float]:
    """A plausible loss and grad norm for a step (warm-up spikes included)."""
    loss = 2.1 + 7.5 * math.exp(-step / 180.0) + rng.gauss(0, 0.04)
    grad = 0.6 + 3.0 * math.exp(-step / 120.0) + abs(rng.gauss(0, 0.08))
    if step in warm_spikes:
        loss += rng.uniform(0.6, 1.8)
        grad *= rng.uniform(3, 6)
    return loss, grad


def build(
    rng: random.Random,
    launch: float,
    setup_s: float,
    step_s: float,
    stop_after: float | None,
    hang: bool,
    tail_s: float,
    first_step: int = 0,
    loss_fn: Callable[[int], tuple[float, float] | None] | None = None,
    slow: tuple[float, float] | None = None,
    ckpt_every: int | None = None,
) -> Timeline:
    """Steps from `launch + setup_s` until `stop_after` seconds of training (or the configured total)."""
    ckpt_every = ckpt_every or rng.choice((100, 200, 250, 500))
    eval_every = rng.choice((0, 150, 300))
    save_s, eval_s = rng.uniform(25, 80), rng.uniform(15, 45)
    begin = launch + setup_s
    total = first_step + rng.choice((1000, 2000, 5000))
    budget = stop_after if stop_after is not None else rng.uniform(1500, 2400)
    warm = {first_step + rng.randrange(5, 60) for _ in range(2)}
    steps: list[Step] = []
    saves: list[tuple[float, float, int]] = []
    evals: list[tuple[float, float, int]] = []
    t, n = begin, first_step
    while t - begin < budget:
        secs = step_s * (1 + rng.gauss(0, 0.015)) * (1.6 if n < first_step + 3 else 1.0)
        if slow and t >= slow[0]:
            secs *= slow[1]
        if t + secs - begin > budget:
            break
        t += secs
        got = loss_fn(n) if loss_fn else None
        loss, grad = got if got else loss_at(n, rng, warm)
        steps.append(Step(n, t, secs, loss, grad))
        if got and not math.isfinite(got[0]):
            break
        if n > first_step and n % ckpt_every == 0:
            saves.append((t, t + save_s, n))
            t += save_s
        elif eval_every and n > first_step and n % eval_every == 0:
            evals.append((t, t + eval_s, n))
            t += eval_s
        n += 1
    stopped = stop_after is not None
    stop = begin + stop_after if stopped and stop_after is not None else None
    if stop is not None and steps:
        stop = max(stop, steps[-1].t)
    end = (stop if stop is not None else t) + tail_s
    tl = Timeline(
        t0=launch - rng.uniform(240, 600),
        launch=launch,
        begin=begin,
        steps=steps,
        saves=saves,
        evals=evals,
        stop=stop,
        hang=hang,
        end=end,
        t1=end + rng.uniform(300, 720),
        total=total,
        ckpt_every=ckpt_every,
    )
    tl.segments = _segments(tl)
    return tl


def _segments(tl: Timeline) -> list[tuple[float, float, int]]:
    seg = [(tl.t0, tl.launch, PRE), (tl.launch, tl.begin, SETUP)]
    last = tl.stop if tl.stop is not None else (tl.steps[-1].t if tl.steps else tl.begin)
    pauses = sorted([(a, b, SAVE) for a, b, _ in tl.saves] + [(a, b, EVAL) for a, b, _ in tl.evals])
    cur = tl.begin
    for a, b, code in pauses:
        if a >= last:
            break
        seg.append((cur, a, TRAIN))
        seg.append((a, min(b, last), code))
        cur = min(b, last)
    seg.append((cur, last, TRAIN))
    seg.append((last, tl.end, HANG if tl.hang else OFF))
    seg.append((tl.end, tl.t1 + 3600, OFF))
    return [s for s in seg if s[1] > s[0]]


def truncate(tl: Timeline, stop: float, hang: bool, tail_s: float) -> Timeline:
    """The same run, stopped at `stop`: later steps and pauses gone, busy-wait (or nothing) until `end`."""
    tl.steps = [s for s in tl.steps if s.t <= stop]
    tl.saves = [p for p in tl.saves if p[0] < stop]
    tl.evals = [p for p in tl.evals if p[0] < stop]
    tl.stop, tl.hang = stop, hang
    tl.end = stop + tail_s
    tl.t1 = tl.end + 420.0
    tl.segments = _segments(tl)
    return tl
