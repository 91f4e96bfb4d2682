"""A job on part of each node's GPUs while another tenant keeps the other GPUs busy (corpus E): the generator's
`shared-node` deployment, diagnosed end to end through a served TSDB.

The neighbour's GPUs run at a steady partial load (each at its own level, 40-80 % utilisation, well under
the job's training power) whatever the job does. They never trained for the job: they must not make a
finished job look like a busy-wait, nor a host look odd in a real hang.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job

SHARED = {"exporters": "shared-node", "nodes": 4, "gpus": 4, "hours": 1.0}


def _criticals(result):
    return [f["title"] for f in result["findings"] if f["severity"] == "critical"]


def test_shared_node_adds_a_neighbours_steadily_busy_gpus(served_job):
    """Seed 60: every host reports 8 GPUs; the 4 after the job's stay busy at a partial load after the
    job's end, at under half the job's training power, while the job's own GPUs idle."""
    client, truth, _ = served_job("healthy", 60, "nvidia", variants=("capture_after_end",), **SHARED)
    at = truth["data_range"][1] - 60
    util = client.query("DCGM_FI_DEV_GPU_UTIL", at=at)
    power = client.query("DCGM_FI_DEV_POWER_USAGE", at=at)
    assert len(util) == 4 * 8
    tenant = [s.value for s in util if int(s.labels["gpu"]) >= 4]
    job = [s.value for s in util if int(s.labels["gpu"]) < 4]
    assert all(30 <= u <= 90 for u in tenant) and max(job) < 10
    assert all(s.value < 0.5 * 600 for s in power if int(s.labels["gpu"]) >= 4)


@pytest.mark.parametrize("seed", [60, 61])
def test_a_hang_on_shared_nodes_accuses_no_host_for_the_neighbours_gpus(served_job, job_factory, seed):
    """Seeds 60 and 61: some hosts' neighbour GPUs run at or above the busy-wait's utilisation, others not.
    Only the job's GPUs (those at its training level) describe a host's spinning set, so no host stands
    out for its neighbour's load (seed 61's one culprit spins other GPUs than the rest)."""
    client, truth, job_dir = served_job("collective-hang", seed, "nvidia", **SHARED)
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    diag = result["diagnosis"]
    assert diag["class"] == "collective-hang"
    assert {c["host"] for c in diag["culprits"]} == {c["host"] for c in truth["culprits"]}


@pytest.mark.parametrize("log", ["none", "unreadable", "full"])
@pytest.mark.parametrize("seed", [60, 61])
def test_a_finished_run_on_shared_nodes_is_healthy(served_job, tmp_path: Path, seed, log):
    """The run completes minutes before the capture ends: its GPUs idle while the neighbour's stay busy.
    Without a log, with a log the triage cannot read (no step lines, no summary) or with the full log, the
    job's GPUs going idle after its last step is its end, not GPUs spinning in a collective."""
    client, _, job_dir = served_job("healthy", seed, "nvidia", variants=("capture_after_end",), **SHARED)
    triage = None
    if log == "full":
        triage = triage_job(job_dir).to_dict()
    elif log == "unreadable":
        head = (job_dir / "log").read_text().splitlines()[:3]
        (tmp_path / "log").write_text("\n".join(head) + "\n")
        triage = triage_job(tmp_path).to_dict()
    result = run_diagnosis(client, triage=triage)
    assert result["diagnosis"]["class"] == "healthy"
    assert _criticals(result) == []
