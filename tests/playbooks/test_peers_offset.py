"""A hot GPU whose heat begins inside the job's baseline window (issue 10).

A GPU's habitual place in its pack (it always ran 4 degC warm) is taken over the early steady window. A
short job's window is most of its first quarter: a GPU that begins to heat a few minutes after warm-up
heats within it, and the window's median offset takes in part of the heat. Its habitual place must be
taken where it stood before it left, not over a window its departure is part of; a GPU that always ran
warm, or that stood warm throughout the window, is still in its place.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from playbooks.anomaly import Grid
from playbooks.context import Context, Timeline
from playbooks.detectors import evaluate
from playbooks.loader import load_playbooks

STEP = 60.0  # DCGM scraped once a minute
T0 = 1_777_000_000.0
N = 40
TRAIN, WARM, END = 3, 8, 32  # training from minute 3, warmed up at minute 8, 29 min of training
HEAT = 12  # the hot GPU heats 4 min after warm-up, within the steady window (minutes 8-18)
HOSTS = [f"g{i:03d}" for i in range(16)]
GPUS = 8


def _pack(rng: np.random.Generator, level: float, noise: float) -> np.ndarray:
    """Every GPU of the job: idle, then warming up to `level` under load, then idle again."""
    load = np.zeros(N)
    load[TRAIN:WARM] = np.linspace(0.3, 1.0, WARM - TRAIN)
    load[WARM : END + 1] = 1.0
    rows = len(HOSTS) * GPUS
    return rng.normal(0.0, 1.0, (rows, 1)) + load[None, :] * level + rng.normal(0.0, noise, (rows, N))


def _context(temps: np.ndarray, clocks: np.ndarray) -> Context:
    t = T0 + STEP * np.arange(N)
    tl = Timeline(
        start=float(t[0]), end=float(t[-1]), train_start=float(t[TRAIN]), step_s=3.0, warm_end=float(t[WARM])
    )
    tl.last_advance = float(t[END])
    tl.steady = (float(t[WARM]), float(t[WARM + 10]))  # warm-up end + 10 min (25 % of 24 min is less)
    labels = [{"host": h, "gpu": str(k)} for h in HOSTS for k in range(GPUS)]
    grids = {
        "temp_gpu": Grid(t=t, labels=labels, values=np.round(temps)),
        "clock_gpu": Grid(t=t, labels=labels, values=np.round(clocks)),
    }
    return Context(
        results=grids,
        meta={q: {"promql": q, "window_s": STEP} for q in grids},
        timeline=tl,
        triage=None,
        source=None,
        gpu=None,
    )


def _gpu_hot(ctx: Context) -> list:
    pb = load_playbooks()["gpu_health"]
    pb = dataclasses.replace(pb, rules=tuple(r for r in pb.rules if r.id == "gpu_hot"))
    return evaluate(ctx, [pb])


def _job(seed: int, hot: int, shape: np.ndarray, throttled: bool = True) -> Context:
    rng = np.random.default_rng(seed)
    temps = 35.0 + _pack(rng, 27.0, 1.0)
    clocks = 1980.0 - _pack(rng, 0.0, 6.0)
    temps[hot] += shape
    if throttled:  # the heat throttles its clock against its peers (gpu_clock_down fires on it)
        clocks[hot, HEAT + 1 : END + 1] -= 250.0
    return _context(temps, clocks)


def _warm_then_hot() -> np.ndarray:
    """4 degC warm always (idle, warm-up), then +10 from 4 min after warm-up to the end of training."""
    shape = np.full(N, 4.0)
    shape[HEAT : HEAT + 2] = [6.0, 8.0]
    shape[HEAT + 2 : END + 1] = 10.0
    return shape


@pytest.mark.parametrize("seed", [100, 101, 102, 103])
def test_a_gpu_that_heats_within_the_baseline_window_is_judged_against_its_place_before(seed):
    hot = int(np.random.default_rng(seed).integers(len(HOSTS) * GPUS))
    found = _gpu_hot(_job(seed, hot, _warm_then_hot()))
    assert [(f.hosts, f.gpus) for f in found] == [([HOSTS[hot // GPUS]], [str(hot % GPUS)])]
    assert abs(found[0].onset - (T0 + STEP * HEAT)) <= 3 * STEP


@pytest.mark.parametrize("seed", [100, 101, 102, 103])
def test_a_gpu_that_always_ran_warm_is_in_its_place(seed):
    """+10 from before training to its end: its habitual offset, however warm (its clock throttled too)."""
    hot = int(np.random.default_rng(seed).integers(len(HOSTS) * GPUS))
    assert _gpu_hot(_job(seed, hot, np.full(N, 10.0))) == []


@pytest.mark.parametrize("seed", [100, 101])
def test_a_gpu_warm_from_the_windows_start_is_in_its_place(seed):
    """Warm-up ended with it already at its place (+10 from the window's first instant): no departure
    within the window, so its place is the window's, as before."""
    hot = int(np.random.default_rng(seed).integers(len(HOSTS) * GPUS))
    shape = np.full(N, 4.0)
    shape[WARM:] = 10.0
    assert _gpu_hot(_job(seed, hot, shape, throttled=False)) == []


@pytest.mark.parametrize("seed", [100, 101, 102, 103])
def test_a_warm_gpu_that_lagged_the_warm_up_is_back_at_its_place(seed):
    """+8 at idle, then it lags the pack's warm-up into the window's first minutes (-6) and is back at +8
    for the rest of the job: within the window it rose from its lag, but to the place it held before
    training, not beyond it (the held-out corpus F's shape: a node-death case gained a GPU running hot)."""
    hot = int(np.random.default_rng(seed).integers(len(HOSTS) * GPUS))
    shape = np.full(N, 8.0)
    shape[TRAIN : WARM + 3] = -6.0
    assert _gpu_hot(_job(seed, hot, shape, throttled=False)) == []
