"""Hangs and training instabilities that read healthy under deployments corpus D showed (#10), each
reproduced by the generator and diagnosed end to end through a served TSDB.

- DCGM with a counter set of profiling fields only: no DCGM_FI_DEV_GPU_UTIL, the engine's activity as
  DCGM_FI_PROF_GR_ENGINE_ACTIVE (a 0-1 ratio). The busy-wait signature is read from it.
- an elastic restart (the steps go back to a checkpoint, a gap, the losses logged again) before a training
  instability: the new run is judged against its own history, in the TSDB's step gauge and in the log.
- a loss jump early in a run, against the little the run has learned, where only the log carries the loss.
- a loss that turns NaN, which only the log reports.
"""

from __future__ import annotations

import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job


def _diagnose(served_job, scenario, seed, profile, **kw):
    client, truth, job_dir = served_job(scenario, seed, profile, **kw)
    return run_diagnosis(client, triage=triage_job(job_dir).to_dict()), truth


def _scrapes(result, truth):
    return abs(result["diagnosis"]["onset"] - truth["onset"]) / truth["interval_s"]


@pytest.mark.parametrize("seed", [1, 3])
def test_a_hang_under_dcgm_profiling_fields_only_is_a_collective_hang(served_job, seed):
    """Seed 3 hangs before step 0 (2-3 spinning GPU indices a host), seed 1 after steps: both busy-wait in
    GR_ENGINE_ACTIVE at idle power, and the host that spins other GPUs is named."""
    result, truth = _diagnose(served_job, "collective-hang", seed, "nvidia", exporters="dcgm-profiling")
    diag = result["diagnosis"]
    assert diag["class"] == "collective-hang"
    assert {c["host"] for c in diag["culprits"]} == {c["host"] for c in truth["culprits"]}
    assert _scrapes(result, truth) <= 3


@pytest.mark.parametrize("exporters", ["plain", "no-trainer-gauges"])
def test_an_elastic_restart_before_an_instability_is_nobodys_fault(served_job, exporters):
    """Seed 1: the workers restart 18 min before the instability and re-run 40+ steps from a checkpoint, so
    the loss goes back up to that step's level; the onset is the loss leaving the new run's own level
    (step gauge or log alike), not the restart."""
    result, truth = _diagnose(
        served_job,
        "training-instability",
        1,
        "nvidia",
        exporters=exporters,
        variants=("elastic_restart",),
    )
    assert truth["restart"] is not None and truth["restart"][0] < truth["onset"] - 600
    diag = result["diagnosis"]
    assert diag["class"] == "training-instability"
    assert _scrapes(result, truth) <= 3


def test_a_loss_jump_early_in_a_run_without_trainer_gauges_is_judged_against_its_progress(served_job):
    """Seed 50: only the log's untimed step lines carry the loss (no training_* gauges, so no gradient norm);
    the loss jumps from 8.9 to 9.8 an hour into a run that started at 10: under a tenth of its level, yet
    nearly all of what the run had learned. Judged against that progress, it is a training instability."""
    result, truth = _diagnose(
        served_job,
        "training-instability",
        50,
        "nvidia",
        exporters="no-trainer-gauges",
        nodes=8,
        gpus=4,
        hours=1.0,
    )
    diag = result["diagnosis"]
    assert diag["class"] == "training-instability"
    assert _scrapes(result, truth) <= 3


@pytest.mark.parametrize("exporters", ["plain", "no-trainer-gauges"])
def test_a_loss_that_turns_nan_is_a_training_instability_from_its_step(served_job, exporters):
    """Seed 1 `nan_stop`: the loss is NaN at the onset's step, the trainer says so and raises two steps later.
    No jump precedes it (a loss gauge never shows the NaN); the log's report of it dates the instability."""
    result, truth = _diagnose(
        served_job, "training-instability", 1, "nvidia", exporters=exporters, variants=("nan_stop",)
    )
    diag = result["diagnosis"]
    assert diag["class"] == "training-instability"
    assert _scrapes(result, truth) <= 1


@pytest.mark.parametrize("seed", [1, 3])
def test_a_loss_that_climbs_into_nan_is_dated_where_it_left_its_level(served_job, seed):
    """Corpus F seed 33 case 20 (NeMo, no loss gauge, 6-s steps on 10-s scrapes): the loss diverged for six
    steps, then NaN; the log-built series saw too few points to confirm a jump, and the NaN's step (3
    scrapes late) dated the instability. Here `climb_to_nan` (5 climbing steps of 15 s, 60-s scrapes, the
    loss only in the log): the climb the log printed dates it, within a step."""
    result, truth = _diagnose(
        served_job,
        "training-instability",
        seed,
        "nvidia",
        exporters="no-trainer-gauges",
        variants=("climb_to_nan",),
        nodes=8,
        gpus=4,
        hours=1.0,
        interval=60.0,
    )
    diag = result["diagnosis"]
    assert diag["class"] == "training-instability"
    assert abs(diag["onset"] - truth["onset"]) <= 20.0  # a step (the generator's take 14-18 s)
