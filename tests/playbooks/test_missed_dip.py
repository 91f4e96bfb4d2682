"""A member out of step with its pack while the pack's level moves is no straggler (#10).

Corpus E seed 21 17 (a frozen exporter elsewhere) read as 'GPU 4 on node0049 runs hot': the pack cooled by
some 10 degC for a few minutes, and one host's GPUs held their level; seed 22 01 named such a host next to
the real straggler. The peer rules dated a departure only where the pack holds its level, yet judged
excess everywhere. Jobs are built by the generator with its opt-in `missed_dip` variant (every host's
GPUs but one host's cool for 3-5 minutes), served by a real Prometheus and diagnosed end to end.
"""

from __future__ import annotations

from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job


def _diagnose(served_job, scenario, seed, profile):
    client, truth, job_dir = served_job(
        scenario, seed, profile, variants=("missed_dip",), nodes=8, gpus=8, hours=None
    )
    assert "missed_dip" in truth["variants"]
    return run_diagnosis(client, triage=triage_job(job_dir).to_dict()), truth


def test_a_host_that_misses_the_packs_dip_reads_healthy(served_job):
    """The spared host's GPUs stand above the cooled pack only while its level is away: no finding (DCGM's
    whole degrees; nvidia seed 4 named two of its GPUs a thermal straggler before)."""
    result, _ = _diagnose(served_job, "healthy", 4, "nvidia")
    diag = result["diagnosis"]
    assert diag["class"] == "healthy", diag["summary"]
    assert not [f["title"] for f in result["findings"] if f["class"] == "thermal-straggler"]


def test_a_straggler_is_named_alone_beside_a_host_that_missed_a_dip(served_job):
    """The hot GPU, judged only where the pack holds its level, is still the culprit, dated within three
    scrapes."""
    result, truth = _diagnose(served_job, "thermal-straggler", 2, "nvidia")
    diag = result["diagnosis"]
    assert diag["class"] == "thermal-straggler", diag["summary"]
    assert [(c["host"], c["gpu"]) for c in diag["culprits"]] == [
        (c["host"], c["gpu"]) for c in truth["culprits"]
    ]
    assert abs(diag["onset"] - truth["onset"]) / truth["interval_s"] <= 3
