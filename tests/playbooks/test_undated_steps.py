"""Undated step lines date no stall earlier than the GPUs say (#10, corpus F seed 32 case 05).

NeMo prints its step lines without a time: the triage places each its own duration after the log's last
dated line, the earliest it can have ended, and says so (`last_step_time_estimated`). A trainer that then
builds its data loaders or compiles for minutes without a line leaves every step placed that much early: a
node that died as the steps stopped read as a hang that began six minutes before it. Here the generator's
NeMo log (srun's labels, no training gauges in the TSDB) is placed early as such a setup would leave it, and
the job's GPUs (their training level until the stall) move the stall back to when it happened. Built by the
generator, served by a real Prometheus."""

from __future__ import annotations

import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.synth import Exporters
from playbooks.triage import triage_job

EARLY = 360.0  # seconds of setup between the log's last dated line and the first step, unlogged


def _placed_early(job_dir, early: float) -> dict:
    triage = triage_job(job_dir).to_dict()
    assert triage["details"].get("last_step_time_estimated")  # NeMo's step lines carry no time
    triage["details"]["first_step_time"] -= early
    triage["progress"]["last_step_time"] -= early
    triage["details"]["log_loss"] = [[t - early, x] for t, x in triage["details"]["log_loss"]]
    return triage


@pytest.mark.parametrize(("scenario", "seed"), [("node-death", 2), ("node-death", 3), ("collective-hang", 2)])
def test_steps_the_log_did_not_date_are_placed_no_earlier_than_the_gpus_trained(served_job, scenario, seed):
    interval = 30.0
    client, truth, job_dir = served_job(
        scenario,
        seed,
        "nvidia",
        nodes=8,
        gpus=4,
        interval=interval,
        hours=1.0,
        exporters=Exporters(trainer_gauges=False),
        log_format="srun-nemo",
    )
    diag = run_diagnosis(client, triage=_placed_early(job_dir, EARLY))["diagnosis"]
    assert diag["class"] == scenario
    assert {c["host"] for c in diag["culprits"]} == {c["host"] for c in truth["culprits"]}
    assert abs(diag["onset"] - truth["onset"]) <= 2 * interval
