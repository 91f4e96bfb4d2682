"""Onsets a diagnostician would date (#10): the start of the fatal rise of a memory staircase under coarse
scrapes, the start of a slow ramp that a threshold crosses late, and a dying host's own hardware error
before its silence. Jobs are built by the generator with
its off-by-default variants, served by a real Prometheus and diagnosed end to end; the departure itself is
checked on arrays first.
"""

from __future__ import annotations

import numpy as np
import pytest

from playbooks.departure import departure
from playbooks.diagnose import run_diagnosis
from playbooks.synth import Exporters
from playbooks.triage import triage_job

T = np.arange(0.0, 3600.0, 15.0)


def _scrapes(result, truth):
    return abs(result["diagnosis"]["onset"] - truth["onset"]) / truth["interval_s"]


def _diagnose(served_job, scenario, seed, profile, variant, drawn, **kw):
    client, truth, job_dir = served_job(scenario, seed, profile, variants=(variant,), **kw)
    assert drawn in truth["variants"]
    return run_diagnosis(client, triage=triage_job(job_dir).to_dict()), truth


@pytest.mark.parametrize("start", [1500.0, 1800.0, 2400.0])
def test_a_slow_ramp_departs_where_its_baseline_stops_holding(start):
    """A ramp of 25 units over 30 min on noise of 0.5 crosses +8 about 10 min in; its departure is dated
    within two samples of where it began (the ramp rises by a noise's width in about two samples)."""
    rng = np.random.default_rng(int(start))
    y = 60 + rng.normal(0, 0.5, len(T)) + 25 * np.clip((T - start) / 1800, 0, 1)
    cross = int(np.argmax(y - 60 > 8))
    assert T[cross] - start > 8 * 15  # the threshold alone is many samples late
    tau = departure(T, y, cross, cross - 3, earliest=0.0)
    assert tau is not None and abs(tau - start) <= 2 * 15


def test_a_jump_has_no_break_of_its_own():
    """Any break between a jump's two samples fits alike: the caller dates it as a jump."""
    rng = np.random.default_rng(1)
    y = 1 + rng.normal(0, 0.03, len(T))
    y[T >= 2000] *= 5
    i = int(np.argmax(T >= 2000))
    assert departure(T, y, i, i, earliest=0.0) is None


def test_a_climb_from_a_falling_baseline_departs_where_it_left_the_trend():
    """A loss that falls slowly, then grows exponentially (e-folding in 250 s): the trend is part of the
    baseline. An exponential starts flat, so a straight rise fitted to it breaks a little late: within four
    samples (its first noise width), where the threshold of +0.2 is 17 samples late."""
    rng = np.random.default_rng(2)
    trend = 3 - 0.0002 * T
    y = trend + rng.normal(0, 0.02, len(T)) + 0.1 * np.expm1(np.clip((T - 2000) / 250, 0, 3))
    cross = int(np.argmax((T > 2000) & (y > trend + 0.2)))
    tau = departure(T, y, cross, cross, earliest=T[cross] - 1200)
    assert T[cross] - 2000 > 12 * 15
    assert tau is not None and abs(tau - 2000) <= 4 * 15


def test_noise_has_no_departure():
    y = 1 + np.random.default_rng(3).normal(0, 0.03, len(T))
    assert departure(T, y, 200, 195, earliest=0.0) is None


@pytest.mark.parametrize(("profile", "seed"), [("nvidia", 1), ("amd", 2), ("nvidia", 3)])
def test_a_coarse_staircase_is_dated_at_the_fatal_rise(served_job, profile, seed):
    """Saves that retain memory, each peaking above what 30-60 s scrapes see of the fatal rise: the onset
    is the start of the rise that ended in the kill, not an earlier save's peak."""
    result, truth = _diagnose(
        served_job, "host-oom", seed, profile, "coarse_staircase", "save_peaks", hours=1.5
    )
    assert truth["interval_s"] >= 30
    diag = result["diagnosis"]
    assert diag["class"] == "host-oom"
    assert {c["host"] for c in diag["culprits"]} == {c["host"] for c in truth["culprits"]}
    assert _scrapes(result, truth) <= 1


@pytest.mark.parametrize(("profile", "seed"), [("amd", 1), ("nvidia", 2)])
def test_a_gpu_that_heats_slowly_is_dated_where_it_left_its_level(served_job, profile, seed):
    """A GPU that heats over 25-45 min leaves the pack's spread long after it began to heat. Its temperature
    over 2.5 h is read on a 120 s grid (8 scrapes of 15 s): the departure is dated within half a step of
    it (nvidia seed 2: 54 s early, the sample before the ramp one noise width low; 24 s with the raw
    pack's spread, whose later crossing left more of the ramp to fit)."""
    result, truth = _diagnose(
        served_job, "thermal-straggler", seed, profile, "slow_heating", "slow_heating", hours=2.5
    )
    diag = result["diagnosis"]
    assert diag["class"] == "thermal-straggler"
    assert _scrapes(result, truth) <= 4


@pytest.mark.parametrize(("profile", "seed"), [("amd", 1), ("nvidia", 2)])
def test_a_smooth_divergence_is_dated_where_the_training_metric_left_its_level(served_job, profile, seed):
    """Gradient norm and loss climb exponentially from the onset: they double minutes later."""
    result, truth = _diagnose(
        served_job, "training-instability", seed, profile, "smooth_divergence", "smooth_divergence"
    )
    diag = result["diagnosis"]
    assert diag["class"] == "training-instability"
    assert _scrapes(result, truth) <= 3


@pytest.mark.parametrize(
    ("profile", "seed", "interval"), [("nvidia", 1, 15.0), ("nvidia", 2, 30.0), ("amd", 3, 15.0)]
)
def test_one_remapped_row_before_a_host_goes_silent_dates_its_death(served_job, profile, seed, interval):
    """2-10 min before its host goes silent a GPU remaps one row (one correctable error, under DCGM's
    default fields a remapped row; no Xid, no kernel errors): too little for a rule against the pack, it
    is the dying host's own hardware error, so it dates the node death."""
    kw = {"exporters": Exporters(ecc="remapped")} if profile == "nvidia" else {}
    result, truth = _diagnose(
        served_job,
        "node-death",
        seed,
        profile,
        "remap_before_death",
        "remap_before_death",
        interval=interval,
        **kw,
    )
    assert truth["variants"]["remap_before_death"] >= 120  # minutes of scrapes before the silence
    diag = result["diagnosis"]
    assert diag["class"] == "node-death"
    assert {c["host"] for c in diag["culprits"]} == {c["host"] for c in truth["culprits"]}
    assert _scrapes(result, truth) <= 1.5
    silent = next(f for f in result["findings"] if f["title"].startswith("Host "))
    assert any("correctable errors changed" in e["interpretation"] for e in silent["evidence"])
    # the summary dates the first sign, not the silence: it does not say the host stopped then
    assert "died (its first sign at " in diag["summary"]


@pytest.mark.parametrize(("profile", "seed"), [("nvidia", 1), ("amd", 2), ("nvidia", 3)])
def test_a_hot_gpu_stands_out_from_a_pack_that_is_two_packs(served_job, profile, seed):
    """Half the hosts are power-capped by design (cooler, slower clocks): the pack's median sits between
    two groups and its raw spread is the gap between them. A GPU is judged by how far it leaves its own
    usual place in the pack, against how far the pack's GPUs wander from theirs (corpus D seed 2 12 read
    healthy)."""
    result, truth = _diagnose(served_job, "thermal-straggler", seed, profile, "capped_rack", "capped_rack")
    diag = result["diagnosis"]
    assert diag["class"] == "thermal-straggler", diag["summary"]
    assert [(c["host"], c["gpu"]) for c in diag["culprits"]] == [
        (c["host"], c["gpu"]) for c in truth["culprits"]
    ]
    assert _scrapes(result, truth) <= 3


@pytest.mark.parametrize(
    ("profile", "seed", "interval"), [("nvidia", 1, 30.0), ("amd", 2, 15.0), ("nvidia", 4, 30.0)]
)
def test_a_fleet_wide_cooling_drop_does_not_delay_the_onset(served_job, profile, seed, interval):
    """Every GPU cools by 8-14 degC near the onset, each exporter seeing it up to a scrape and a half late:
    while the pack itself moves, one GPU's place in it is its exporter's timing, not its heat. The hot GPU
    is dated where it left the pack (corpus D seed 1 00 was 4.3 scrapes late)."""
    result, truth = _diagnose(
        served_job, "thermal-straggler", seed, profile, "cooling_drop", "cooling_drop", interval=interval
    )
    diag = result["diagnosis"]
    assert diag["class"] == "thermal-straggler", diag["summary"]
    assert _scrapes(result, truth) <= 1.5, (diag["onset"] - truth["onset"]) / interval
