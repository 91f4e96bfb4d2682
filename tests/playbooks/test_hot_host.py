"""A host that runs warmer as a whole (#14): its rack's inlet air or a fan warms every GPU of the host by a
similar offset. That is the host's environment, context for a diagnostician, not a thermal straggler
(corpus E seed 23 08 read a healthy run as 'GPU 1, 2, 3, 5, 7 on node0025 runs hot'). A straggler on such
a host still stands out from its warm siblings and is named alone. Jobs are built by the generator with
its opt-in `hot_host` variant, served by a real Prometheus and diagnosed end to end.
"""

from __future__ import annotations

import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job


def _diagnose(served_job, scenario, seed, profile):
    client, truth, job_dir = served_job(scenario, seed, profile, variants=("hot_host",))
    assert "hot_host" in truth["variants"]
    return run_diagnosis(client, triage=triage_job(job_dir).to_dict()), truth


@pytest.mark.parametrize(("profile", "seed"), [("nvidia", 1), ("amd", 2), ("nvidia", 3)])
def test_a_host_warm_on_all_its_gpus_reads_healthy(served_job, profile, seed):
    result, truth = _diagnose(served_job, "healthy", seed, profile)
    diag = result["diagnosis"]
    assert diag["class"] == "healthy", diag["summary"]
    assert not [f["title"] for f in result["findings"] if "runs hot" in f["title"]]
    note = next(f for f in result["findings"] if "above its peers on all its GPUs" in f["title"])
    assert note["severity"] == "info" and note["hosts"] == [truth["red_herrings"]["hot_host"].split()[0]]


@pytest.mark.parametrize(
    ("profile", "seed", "scrapes"), [("nvidia", 1, 3), ("amd", 2, 3), ("nvidia", 3, 3), ("nvidia", 4, 8)]
)
def test_a_straggler_on_a_warm_host_is_named_alone(served_job, profile, seed, scrapes):
    """Judged against its warm siblings, the hot GPU alone stands out, dated where it left them. Seed 4's
    host warms 49 s after the GPU starts to heat: while its siblings warm too, which share of its rise is
    its own cannot be told, and the onset comes within the siblings' warming (5.8 scrapes late)."""
    result, truth = _diagnose(served_job, "thermal-straggler", seed, profile)
    diag = result["diagnosis"]
    assert diag["class"] == "thermal-straggler", diag["summary"]
    assert [(c["host"], c["gpu"]) for c in diag["culprits"]] == [
        (c["host"], c["gpu"]) for c in truth["culprits"]
    ]
    assert abs(diag["onset"] - truth["onset"]) / truth["interval_s"] <= scrapes
