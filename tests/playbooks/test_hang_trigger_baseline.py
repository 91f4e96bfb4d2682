"""A hang's network trigger is judged against a baseline of healthy training (issue 10).

A short job (17 min of training before it hangs) has a judged window (30 min before the stall) that reaches
back into the idle minutes before its first step, where no traffic flows and the transmit-wait counter every
host ticks during training reads 0 (or nothing at all, while Prometheus was down). Those minutes are no
healthy level: against them every host's ordinary training ticks would be a change, the pack's background 0,
and the one host whose link fails minutes before the stall lost among the seven that only train.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from playbooks.anomaly import Grid
from playbooks.context import Context, Timeline
from playbooks.detectors import evaluate
from playbooks.loader import load_playbooks

STEP = 15.0
WINDOW = 60.0
T0 = 1_777_000_000.0
HOSTS = [f"n{i:02d}" for i in range(8)]
TRAIN = 40  # grid index of the first step (10 min of data before it)
STALL = 112  # grid index of the last advance (18 min of training)
BURST = STALL - 12  # the culprit's link fails 3 min before the stall
N = STALL + 16


def _waits(rng: np.random.Generator, culprit: str, outage: bool) -> np.ndarray:
    """Transmit-wait ticks per second: none before training, ~7/s with a few 1-min bumps to 20-35/s on every
    host while it trains, and on the culprit a burst of ~1e5/s from BURST on."""
    rows = []
    for h in HOSTS:
        x = np.zeros(N)
        x[TRAIN:] = rng.normal(7.0, 1.0, N - TRAIN).clip(1.5)
        for a in rng.choice(np.arange(TRAIN + 4, STALL - 4), size=3, replace=False):
            x[a : a + 4] = rng.uniform(20.0, 35.0)
        if h != culprit and rng.random() < 0.5:  # a short blip before training (another job's last minutes)
            a = int(rng.integers(2, TRAIN - 8))
            x[a : a + 4] = rng.uniform(10.0, 25.0)
        if h == culprit:
            x[BURST:] = rng.uniform(3e4, 1.4e5, N - BURST)
        if outage:  # Prometheus down for 2.5 min before the first step: no sample of any series
            x[10:20] = np.nan
        rows.append(x)
    return np.array(rows)


def _context(values: np.ndarray) -> Context:
    t = T0 + STEP * np.arange(N)
    tl = Timeline(
        start=float(t[0]),
        end=float(t[-1]),
        train_start=float(t[TRAIN]),
        last_advance=float(t[STALL]),
        stalled=True,
        step_s=25.0,
        warm_end=float(t[TRAIN + 8]),
    )
    grid = Grid(t=t, labels=[{"host": h} for h in HOSTS], values=values)
    return Context(
        results={"rdma_wait": grid},
        meta={"rdma_wait": {"promql": "rdma_wait", "window_s": WINDOW}},
        timeline=tl,
        triage=None,
        source=None,
        gpu=None,
    )


@pytest.mark.parametrize("outage", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_transmit_wait_burst_before_the_hang_of_a_short_job_names_its_host(seed, outage):
    """The pre-training zeros (or the outage's missing samples) are no host's background: the burst stands
    out against the pack's training ticks by three orders of magnitude, on its host alone, dated at its start."""
    rng = np.random.default_rng(seed)
    culprit = HOSTS[int(rng.integers(len(HOSTS)))]
    ctx = _context(_waits(rng, culprit, outage))
    pb = load_playbooks()["hang"]
    pb = dataclasses.replace(pb, rules=tuple(r for r in pb.rules if r.id == "network_trigger_wait"))
    found = evaluate(ctx, [pb])
    assert [f.hosts for f in found] == [[culprit]]
    assert found[0].klass == "network-hang"
    assert abs(found[0].onset - ctx.timeline.start - BURST * STEP) <= 2 * STEP


def _trickle(rng: np.random.Generator, ticks: int) -> dict[str, np.ndarray]:
    """ACK timeouts that tick now and then on every host while it trains (one increment of 3-6 on one scrape,
    which rate() spreads over its 1-min window: 4 grid points), half of them with a link error recovery at
    the same scrape, and the traffic that flows until the stall."""
    out: dict[str, list[np.ndarray]] = {"rdma_ack": [], "rdma_link_err": [], "rdma_tx": []}
    for _ in HOSTS:
        ack, err = np.zeros(N), np.zeros(N)
        for a in rng.choice(np.arange(TRAIN, N - 4), size=ticks, replace=False):
            ack[a : a + 4] = rng.integers(3, 7) / WINDOW
            if rng.random() < 0.5:
                err[a : a + 4] = 1.0 / WINDOW
        tx = np.zeros(N)
        tx[TRAIN : STALL + 1] = 4e9
        out["rdma_ack"].append(ack)
        out["rdma_link_err"].append(err)
        out["rdma_tx"].append(tx)
    return {k: np.array(v) for k, v in out.items()}


@pytest.mark.parametrize("seed", range(1, 11))
def test_ack_timeouts_every_host_ticks_now_and_then_are_no_trigger(seed):
    """A clean hang in a job whose hosts all count a few ACK timeouts now and then, with a link error
    recovery at the same scrape: each host's first tick is no change from the silence before it, the pack's
    background is the size of those ticks, and no host stands out against it (a tick is 1-2x the floor,
    never 10x the pack): no network event, whatever the ticks' timing."""
    rng = np.random.default_rng(seed)
    series = _trickle(rng, 2)
    t = T0 + STEP * np.arange(N)
    ctx = _context(series["rdma_ack"])
    for name in ("rdma_link_err", "rdma_tx"):
        ctx.results[name] = Grid(t=t, labels=[{"host": h} for h in HOSTS], values=series[name])
        ctx.meta[name] = {"promql": name, "window_s": WINDOW}
    ctx.results["rdma_ack"], ctx.meta["rdma_ack"] = ctx.results.pop("rdma_wait"), ctx.meta.pop("rdma_wait")
    pb = load_playbooks()["hang"]
    pb = dataclasses.replace(pb, rules=tuple(r for r in pb.rules if r.id == "network_trigger_ack"))
    assert [f.hosts for f in evaluate(ctx, [pb])] == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_burst_seen_one_coarse_scrape_after_the_stall_on_a_second_host_is_part_of_the_trigger(seed):
    """At a 30 s scrape one fabric event shows on two hosts a scrape or two apart: the rate of the second
    rises only a minute after the last step (a late scrape and a rate window that had to fill). Both stood out by orders of magnitude from the stall on: both are the trigger's
    hosts (a burst that began well after the stall, a consequence, is not: see the next test)."""
    global STEP
    rng = np.random.default_rng(seed)
    first, second = (HOSTS[i] for i in rng.choice(len(HOSTS), size=2, replace=False))
    values = _waits(rng, first, outage=False)
    values[HOSTS.index(first), : STALL - 1] = values[HOSTS.index(second), : STALL - 1]
    values[HOSTS.index(first), STALL - 1 :] = rng.uniform(3e4, 1.4e5, N - STALL + 1)
    values[HOSTS.index(second), STALL + 2 :] = rng.uniform(3e4, 1.4e5, N - STALL - 2)
    old, STEP = STEP, 30.0
    try:
        ctx = _context(values)
    finally:
        STEP = old
    pb = load_playbooks()["hang"]
    pb = dataclasses.replace(pb, rules=tuple(r for r in pb.rules if r.id == "network_trigger_wait"))
    found = evaluate(ctx, [pb])
    assert [sorted(f.hosts) for f in found] == [sorted([first, second])]
    assert abs(found[0].onset - ctx.timeline.last_advance) <= 2 * 30.0


def test_a_burst_that_begins_minutes_after_the_stall_is_no_trigger():
    """A host whose rate leaves the pack five minutes after the last step is a consequence, not the trigger."""
    rng = np.random.default_rng(7)
    culprit, late = HOSTS[2], HOSTS[5]
    values = _waits(rng, culprit, outage=False)
    values[HOSTS.index(late), STALL + 10 :] = rng.uniform(3e4, 1.4e5, N - STALL - 10)
    ctx = _context(values)
    pb = load_playbooks()["hang"]
    pb = dataclasses.replace(pb, rules=tuple(r for r in pb.rules if r.id == "network_trigger_wait"))
    found = evaluate(ctx, [pb])
    assert [f.hosts for f in found] == [[culprit]]
