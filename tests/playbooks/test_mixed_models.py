"""A job on GPUs of two models (corpus F seed 33 case 01: one H200 host among A100 hosts): the bigger
model's GPUs draw about twice the power in every phase, so the job's busiest GPUs are that host's alone.

Every GPU that follows the job's phases drops by the same share of its own training power, whatever its
model: judged against the busiest GPUs' absolute move or level, the smaller model's GPUs looked like another
tenant's, a host's spinning set was read from a few of its GPUs, and the host whose GPUs never entered the
collective went unnamed (or the bigger model's host was named)."""

from __future__ import annotations

import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job

MIXED = {"variants": ("mixed_models",), "nodes": 8, "gpus": 8, "hours": 1.0}


@pytest.mark.parametrize("seed", [1, 4, 5])
def test_a_hang_on_two_gpu_models_names_only_the_host_that_never_entered(served_job, seed):
    """Seeds 4 and 5: one host's GPUs never entered the collective (it went unnamed); seed 1: a uniform
    deadlock (the bigger model's host was named, its GPUs alone counted as the job's)."""
    client, truth, job_dir = served_job("collective-hang", seed, "nvidia", **MIXED)
    assert "mixed_models" in truth["red_herrings"]
    diag = run_diagnosis(client, triage=triage_job(job_dir).to_dict())["diagnosis"]
    assert diag["class"] == "collective-hang"
    assert {c["host"] for c in diag["culprits"]} == {c["host"] for c in truth["culprits"]}


def test_a_healthy_job_on_two_gpu_models_reads_healthy(served_job):
    client, truth, job_dir = served_job("healthy", 2, "nvidia", **MIXED)
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    assert result["diagnosis"]["class"] == "healthy"
    assert not [f for f in result["findings"] if f["severity"] != "info"]
