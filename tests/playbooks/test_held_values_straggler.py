"""A real thermal straggler whose exporter stalls while it heats is still found, dated where it left (#10).

Generated with the thermal-straggler scenario's `culprit_stall` variant: the hot GPU's host's exporter stalls
2-5 minutes while the GPU heats, so its values are held (and then masked) in the middle of its departure.
"""

from __future__ import annotations

import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job


@pytest.mark.parametrize(("profile", "seed"), [("amd", 1), ("nvidia", 2)])
def test_a_straggler_whose_exporter_stalls_while_it_heats_is_found_with_its_onset(served_job, profile, seed):
    client, truth, job_dir = served_job(
        "thermal-straggler", seed, profile, variants=("culprit_stall",), nodes=8
    )
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    d = result["diagnosis"]
    assert d["class"] == "thermal-straggler"
    assert {c["host"] for c in d["culprits"]} == {c["host"] for c in truth["culprits"]}
    assert abs(d["onset"] - truth["onset"]) <= 3 * truth["interval_s"]
