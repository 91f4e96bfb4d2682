"""The engine on generated jobs whose trainers keep the habits the triage reads (#10): a step line every 10th
step (without training gauges: the log alone tells the loss), Ray Train's and absl's end lines, an undated
traceback of a NaN loss. Built by the generator, served by a real Prometheus, diagnosed end to end."""

from __future__ import annotations

import numpy as np
import pytest

from playbooks.anomaly import change_points
from playbooks.diagnose import run_diagnosis
from playbooks.log_series import enough_points
from playbooks.triage import triage_job


def _diagnose(served_job, scenario, seed, **kw):
    client, truth, job_dir = served_job(scenario, seed, "nvidia", **kw)
    return run_diagnosis(client, triage=triage_job(job_dir).to_dict()), truth


def _scrapes(result, truth):
    return abs(result["diagnosis"]["onset"] - truth["onset"]) / truth["interval_s"]


def test_a_loss_printed_every_tenth_step_jumps_against_its_fall_not_against_the_fall_itself():
    """A loss falling 0.15 between two prints (ten steps' progress) and noisy by 0.02 jumps 0.5 at one print:
    the steady fall is no noise, the jump stands out of the scatter about it (30 of it). The old scale, the
    typical size of the changes (the fall itself), saw 2 of it. A steady rise stays quiet (a climb's)."""
    rng = np.random.default_rng(0)
    t = np.arange(160) * 15.0
    printed = 10.7 - 0.015 * np.arange(160) + np.repeat(rng.normal(0, 0.02, 16), 10)
    x = printed[(np.arange(160) // 10) * 10]  # held between prints, as a gauge grid of the log's points
    x[90:120] += 0.5
    valid = np.arange(160) >= 20
    assert change_points(x, t, valid, window=1200, z=10, min_rel=0.1, origin=10.7)[0] == 90
    assert change_points(10.7 + 0.015 * np.arange(160), t, valid, window=1200, z=10, min_rel=0.1) == []


def test_a_log_printing_every_tenth_step_counts_the_steps_its_points_stand_for():
    every_tenth = {"job": {"first_step": 0, "last_step": 140}, "details": {"steps_logged": 15}}
    every_step = {"job": {"first_step": 0, "last_step": 14}, "details": {"steps_logged": 15}}
    assert enough_points(every_tenth, 15) and not enough_points(every_step, 15)
    assert not enough_points({"job": {"first_step": 0, "last_step": 900}}, 5)  # too few points whatever


@pytest.mark.parametrize("seed", [1, 4])  # 15 prints; 9 (steps of 40 s)
def test_a_loss_jump_between_two_prints_is_an_instability_dated_within_them(served_job, seed):
    """No training gauges and a step line every 10th step (9-15 of them an hour): the jump is seen at one
    print and dated midway between it and the print before (the steps between are unseen)."""
    result, truth = _diagnose(served_job, "training-instability", seed, exporters="log-every-10-no-gauges")
    assert result["diagnosis"]["class"] == "training-instability"
    assert _scrapes(result, truth) <= 6  # half a print interval (10 steps of 15-23 s) and a scrape


@pytest.mark.parametrize("exporters", ["plain", "log-every-10-no-gauges"])
def test_an_undated_nan_traceback_is_an_instability_from_its_step(served_job, exporters):
    """The trainer raises in the step whose loss is NaN: an undated traceback, no step line for it. Dated at
    the last dated line before it, or (a print every 10th step) midway to the next print or the crash."""
    result, truth = _diagnose(
        served_job, "training-instability", 3, exporters=exporters, variants=("nan_traceback",)
    )
    assert result["diagnosis"]["class"] == "training-instability"
    assert _scrapes(result, truth) <= (1 if exporters == "plain" else 6)  # half a print interval, a scrape


def test_trainer_end_lines_keep_the_verdicts(served_job):
    """Ray Train's `Training errored after ...` dates a host OOM's end (its culprit still the killed host);
    a run ending with `Training completed after ...` or absl's `Training finished.` is healthy, quiet."""
    result, truth = _diagnose(served_job, "host-oom", 2, exporters="ray-train-end")
    assert result["diagnosis"]["class"] == "host-oom"
    assert {c["host"] for c in result["diagnosis"]["culprits"]} == {c["host"] for c in truth["culprits"]}
    for exporters in ("ray-train-end", "absl-end"):
        result, _ = _diagnose(served_job, "healthy", 2, exporters=exporters)
        assert result["diagnosis"]["class"] == "healthy"
        assert not [f for f in result["findings"] if f.get("severity") in ("warning", "critical")]
