"""A host read a scrape late is not a thermal straggler; a faint heat in whole degrees is dated where it began (#10).

Held-out data at a 60 s scrape: as the job's GPUs cooled together (an RDMA degradation slowed the job), one
host's exporter read them a scrape after the others, and three of its GPUs were named a thermal straggler
(the verdict was wrong). On a 5-minute grid (the per-GPU queries' grid over a 5-hour job) a peer rule's
5 minutes are one point, and at the point just after the pack's step that host stands where the pack stood
before it. A member is judged beyond the pack only by what exceeds the pack's own move within a scrape
either side (`lag_move`). The generator's opt-in `late_host` variant builds such jobs (the pack cools by
10-16 degC within a scrape for good, one host's exporter a scrape late).

A faint heat (a few degrees, read in whole degrees) was dated 16 scrapes late: the departure fit's noise,
the median absolute deviation of a baseline of two or three whole-degree values, is 0 or 1.5 degrees by
chance of where half the samples fall; it is now read at the data's resolution (`departure.spread`), and
a candidate rise that fits as a fall no longer wins the fit.
"""

from __future__ import annotations

import numpy as np
import pytest

from playbooks.departure import departure, resolution, spread
from playbooks.detectors._pack import lag_move
from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job

LATE = {"nodes": 8, "gpus": 8, "interval": 60.0, "hours": 5.0, "variants": ("late_host",)}


def _late_host(truth: dict) -> str:
    return str(truth["red_herrings"]["late_host"]).split(" ")[0]


@pytest.mark.parametrize(("profile", "seed"), [("nvidia", 2)])
def test_a_host_read_a_scrape_late_as_the_pack_cools_is_no_thermal_straggler(served_job, profile, seed):
    client, truth, job_dir = served_job("rdma-degradation", seed, profile, **LATE)
    late = _late_host(truth)
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    assert result["diagnosis"]["class"] == "rdma-degradation", result["diagnosis"]["summary"]
    hot = [f for f in result["findings"] if f["class"] == "thermal-straggler" and f["severity"] != "info"]
    assert not hot, [(f["title"], late) for f in hot]


@pytest.mark.parametrize("seed", [3, 4])
def test_a_thermal_straggler_beside_a_late_host_is_still_found(served_job, seed):
    """Seed 3: the late host alone caught half the checkpoints' waits on the 5-minute grid; they were taken
    for the job's changes of phase, most GPUs did not follow them and were left out as another tenant's,
    the hot one with them (healthy): a change of the job's phase moves GPUs on most of its hosts."""
    client, truth, job_dir = served_job("thermal-straggler", seed, "nvidia", **LATE)
    diag = run_diagnosis(client, triage=triage_job(job_dir).to_dict())["diagnosis"]
    assert diag["class"] == "thermal-straggler", diag["summary"]
    assert [(c["host"], c["gpu"]) for c in diag["culprits"]] == [
        (c["host"], c["gpu"]) for c in truth["culprits"]
    ]
    assert abs(diag["onset"] - truth["onset"]) / truth["interval_s"] <= 3


def test_the_pack_s_move_within_a_scrape_is_discounted_in_the_direction_judged():
    level = np.array([70.0, 70.0, 70.0, 56.0, 56.0, 56.0])
    judged = np.ones(6, bool)
    up = lag_move(level, judged, 1.0, 1.0)
    # the point after the pack's cooling: a member a scrape late holds the pack's earlier 70
    assert up.tolist() == [0.0, 0.0, 0.0, 14.0, 0.0, 0.0]
    # below the pack (a clock): the point before the fall is where a member read early stands low
    assert lag_move(level, judged, -1.0, 1.0).tolist() == [0.0, 0.0, 14.0, 0.0, 0.0, 0.0]
    # a scrape of four grid points reaches four points back; unjudged neighbours do not count
    fine = np.repeat(level, 4)
    assert lag_move(fine, np.ones(24, bool), 1.0, 4.0)[12:16].tolist() == [14.0] * 4
    assert lag_move(level, judged & (np.arange(6) != 2), 1.0, 1.0)[3] == 0.0


def test_the_spread_of_whole_degrees_is_read_at_their_resolution():
    rng = np.random.default_rng(0)
    for sd in (0.3, 0.5, 0.8, 1.2):
        x = np.round(rng.normal(60.0, sd, 2000))
        assert resolution(x) == 1.0
        # the standard deviation the rounded readings really have (the rounding's own 0.29 included)
        assert spread(x, 1.0) == pytest.approx(np.hypot(sd, 1 / np.sqrt(12)), rel=0.15)
    # a plain MAD of these is 0 (half the samples on one value) or 1.48: neither
    assert spread(np.array([0.0] * 6 + [1.0, -1.0, 1.0]), 1.0) >= 1 / np.sqrt(12) - 1e-9
    assert resolution(rng.normal(0.0, 1.0, 50)) == 0.0


@pytest.mark.parametrize("step", [15.0, 60.0])
def test_a_faint_slow_heat_in_whole_degrees_departs_where_it_began(step):
    """5 degC over 20 min on a pack wandering by 0.8 degC, read in whole degrees against its median: the
    crossing comes halfway up; the departure is dated within 3 scrapes of the truth in most jobs (it was
    often not dated at all, and the onset fell back to the crossing, tens of scrapes late)."""
    t = np.arange(0.0, 5400.0, step)
    on, errs = 2700.0, []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        pack = np.median(np.round(60 + rng.normal(0, 0.8, (31, len(t)))), axis=0)
        y = np.round(60 + rng.normal(0, 0.8, len(t)) + 5 * np.clip((t - on) / 1200, 0, 1)) - pack
        y -= np.median(y)
        cross = int(np.nonzero((t > on) & (y >= 3))[0][0])
        end = min(len(t) - 1, cross + int(300 / step) - 1)
        tau = departure(t, y, end, cross, earliest=on - 3600, levels_off=True)
        errs.append(abs((tau if tau is not None else t[cross]) - on) / step)
    assert float(np.median(errs)) <= 3.5
    assert sum(e <= 3 for e in errs) >= 10
