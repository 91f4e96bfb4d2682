"""A node that died and came back (a reboot) mid-hang is node-death (#10, corpus F seed 35 case 5): it went
silent as the steps stopped, stayed silent for minutes while the others reported, and when it reported again
its GPUs idled while the others busy-waited in their collectives. On small canned arrays."""

from __future__ import annotations

import dataclasses

import numpy as np

from playbooks.analysis import evaluate
from playbooks.loader import load_playbooks

from .test_analysis import NOW, STEP, N, _ctx, _grid

HOSTS = "abcde"
STALL = 120  # the steps stop here; the others busy-wait from then on


def _evaluate(back_idle: bool, *, stalled: bool = True, killed: int | None = None):
    samples = {(h, None): np.full(N, 16.0) for h in HOSTS}
    up = {(h, None): np.ones(N) for h in HOSTS}
    power = {(h, None): np.r_[np.full(STALL, 600.0), np.full(N - STALL, 180.0)] for h in HOSTS}
    util = {(h, None): np.r_[np.full(STALL, 95.0), np.full(N - STALL, 100.0)] for h in HOSTS}
    if not stalled:
        power = {k: np.full(N, 600.0) for k in power}
        util = {k: np.full(N, 95.0) for k in util}
    gone = slice(STALL + 1, STALL + 25)  # six minutes without a sample, its target down
    samples[("c", None)][gone] = np.nan
    up[("c", None)][gone] = 0.0
    power[("c", None)][gone] = np.nan
    util[("c", None)][gone] = np.nan
    if back_idle:  # back from the reboot: its GPUs idle, in no collective
        power[("c", None)][gone.stop :] = 60.0
        util[("c", None)][gone.stop :] = 0.0
    if killed is not None:  # the watchdog kills the job: every GPU idles to the data's end
        for h in HOSTS:
            power[(h, None)][killed:] = 60.0
            util[(h, None)][killed:] = 0.0
    results = {
        "gpu_samples": _grid(samples),
        "up_host": _grid(up),
        "power_by_host": _grid(power),
        "util_by_host": _grid(util),
    }
    last = NOW + STALL * STEP if stalled else NOW + (N - 1) * STEP
    ctx = _ctx(results, last_advance=last, stalled=stalled)
    pb = load_playbooks()["node"]
    pb = dataclasses.replace(pb, rules=tuple(r for r in pb.rules if r.id == "host_silent"))
    return evaluate(ctx, [pb])


def test_a_node_that_rebooted_as_the_job_hung_is_node_death():
    [f] = _evaluate(back_idle=True)
    assert f.klass == "node-death" and f.hosts == ["c"]
    assert abs(f.onset - (NOW + (STALL + 1) * STEP)) <= 2 * STEP


def test_a_node_back_idle_a_few_scrapes_before_the_job_was_killed_is_node_death():
    """The others busy-waited four scrapes after it came back, then the watchdog killed the job and every GPU
    idled for longer than that to the data's end: judged while the others still spun, it never rejoined."""
    [f] = _evaluate(back_idle=True, killed=STALL + 29)
    assert f.klass == "node-death" and f.hosts == ["c"]


def test_a_host_whose_exporter_paused_and_that_busy_waits_with_the_others_is_no_death():
    """Back from the pause its GPUs spin with the others: it never left the job (a monitoring pause)."""
    assert _evaluate(back_idle=False) == []


def test_a_pause_of_one_exporter_while_the_job_trains_on_is_no_death():
    """Six minutes without its samples mid-training, then it trains with the others again."""
    assert _evaluate(back_idle=False, stalled=False) == []
