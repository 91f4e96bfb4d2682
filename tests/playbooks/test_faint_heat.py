"""A thermal straggler whose heat is faint against a pack read in whole degrees (#10).

Corpus F seed 31 10 read healthy: the hot GPU ran some 8 degC above a pack whose temperatures DCGM reads in
whole degrees, which about doubles the pack's measured spread, so the heat stood at z 5 under the bar of 6,
while the same GPU's clock stood 30 % below its pack's (z 30) at the same instants: the thermal story is
heat and throttle together, and a GPU whose clock stands out corroborates its heat. Jobs are built by the
generator with its opt-in `faint_heat` variant (5-7 degC of heat, a pack wandering by 0.6-0.8 degC),
served by a real Prometheus and diagnosed end to end.
"""

from __future__ import annotations

import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job


@pytest.mark.parametrize("seed", [1, 2])
def test_a_faint_heat_with_a_throttled_clock_is_a_thermal_straggler(served_job, seed):
    client, truth, job_dir = served_job(
        "thermal-straggler", seed, "nvidia", variants=("faint_heat",), nodes=8, gpus=8, hours=None
    )
    assert "faint_heat" in truth["variants"]
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    diag = result["diagnosis"]
    assert diag["class"] == "thermal-straggler", diag["summary"]
    assert [(c["host"], c["gpu"]) for c in diag["culprits"]] == [
        (c["host"], c["gpu"]) for c in truth["culprits"]
    ]
