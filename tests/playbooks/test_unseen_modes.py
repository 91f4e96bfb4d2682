"""Diagnosis on generator variants the engine was not first written against (issue 10), each built by the
generator, served by a real Prometheus and diagnosed end to end.

Seeds are chosen for the variant they carry (playbooks/synth/_variants.py draws each from its own stream):
rdma-degradation 0 and 5 are fabric faults that degrade most of the job's hosts at once.
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


def _hosts(items):
    return {c["host"] for c in items}


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
def test_rdma_degradation_on_most_hosts_is_judged_against_each_host_history(served_job, profile):
    """Item 1: 3 of 4 hosts degrade, so the pack's level over the job is the degraded one; each host left its
    own history before the change, and those hosts are the culprits."""
    result, truth = _diagnose(served_job, "rdma-degradation", 0, profile)
    assert truth["variants"].get("majority_degraded") and len(truth["culprits"]) == 3
    diag = result["diagnosis"]
    assert diag["class"] == "rdma-degradation"
    assert _hosts(diag["culprits"]) == _hosts(truth["culprits"])
    assert _scrapes(result, truth) <= 3


def test_one_fabric_event_on_most_hosts_of_a_larger_job_is_rdma_degradation(served_job):
    """Item 1: 5 of 8 hosts leave their own history at the same time: one fabric event, not a background
    every host shows; every degraded host is named."""
    result, truth = _diagnose(served_job, "rdma-degradation", 5, "amd", nodes=8)
    assert truth["variants"].get("majority_degraded") and len(truth["culprits"]) == 5
    diag = result["diagnosis"]
    assert diag["class"] == "rdma-degradation"
    assert _hosts(diag["culprits"]) == _hosts(truth["culprits"])
    assert _scrapes(result, truth) <= 3
