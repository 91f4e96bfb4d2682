"""A job on part of each node's GPUs while another tenant keeps the other GPUs busy (corpus E): the generator's
`shared-node` deployment, diagnosed end to end through a served TSDB.

The neighbour's GPUs run at a steady partial load (each at its own level, 40-80 % utilisation, well under
the job's training power) whatever the job does. They never trained for the job: they must not make a
finished job look like a busy-wait, nor a host look odd in a real hang.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from playbooks.detectors import _tenant, hang
from playbooks.detectors._tenant import job_gpus
from playbooks.diagnose import run_diagnosis
from playbooks.synth._deploy import Exporters
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


VARYING = {"exporters": "shared-node-varying", "nodes": 4, "gpus": 4, "hours": 1.3}


def _job_indices(truth) -> dict[str, set[str]]:
    """Return, per host, the GPU indices the job holds (the generator's record)."""
    return {h: {str(i) for i in x} for h, x in truth["red_herrings"]["job_gpus"].items()}


def test_a_varying_tenant_holds_other_indices_on_some_hosts(served_job):
    """Seed 65: every host reports 8 GPUs; the job holds 4 of each, indices 0-3 on some hosts and a scattered
    subset on others; the tenant's GPUs heat and cool with a load of their own."""
    client, truth, _ = served_job("healthy", 65, "nvidia", **VARYING)
    held = _job_indices(truth)
    assert all(len(x) == 4 for x in held.values())
    assert any(x != {"0", "1", "2", "3"} for x in held.values())
    temps = client.query_range("DCGM_FI_DEV_GPU_TEMP", *truth["data_range"], 60.0)
    assert len(temps) == 4 * 8
    tenant = [s.values for s in temps if s.labels["gpu"] not in held[s.labels["Hostname"]]]
    assert max(float(np.nanmax(v) - np.nanmin(v)) for v in tenant) > 8.0


@pytest.mark.parametrize("seed", [63, 64, 65, 67])
def test_a_healthy_job_beside_a_wandering_tenant_reads_healthy(served_job, seed):
    """Seeds 63-67 called the tenant's GPUs (heating and cooling with their own job) hot against the job's
    before: only the job's GPUs (those that follow its phases) make the pack. No warning at all."""
    client, _, job_dir = served_job("healthy", seed, "nvidia", **VARYING)
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    assert result["diagnosis"]["class"] == "healthy"
    assert [f["title"] for f in result["findings"] if f["severity"] in ("warning", "critical")] == []


@pytest.mark.parametrize("seed", [63, 64, 65, 67])
def test_a_thermal_straggler_beside_a_tenant_names_only_its_gpu(served_job, seed):
    """Before, hosts whose tenant GPUs wandered were named with the straggler's, and the onset was that of
    a tenant's move (16-104 scrapes early): now the straggler's host and GPU alone, dated within 3 scrapes."""
    client, truth, job_dir = served_job("thermal-straggler", seed, "nvidia", **VARYING)
    diag = run_diagnosis(client, triage=triage_job(job_dir).to_dict())["diagnosis"]
    assert diag["class"] == "thermal-straggler"
    assert [(c["host"], c["gpu"]) for c in diag["culprits"]] == [
        (c["host"], c["gpu"]) for c in truth["culprits"]
    ]
    assert abs(diag["onset"] - truth["onset"]) <= 3 * truth["interval_s"]


def test_the_logs_gpus_come_first(served_job, tmp_path: Path):
    """A log that prints each host's SLURM_STEP_GPUS tells the job's GPUs: the triage reads them and the
    diagnosis of the straggler is the same."""
    client, truth, job_dir = served_job("thermal-straggler", 65, "nvidia", **VARYING)
    held = _job_indices(truth)
    lines = [f"{h}: SLURM_STEP_GPUS={','.join(sorted(x, key=int))}" for h, x in sorted(held.items())]
    text = (job_dir / "log").read_text().splitlines()
    (tmp_path / "log").write_text("\n".join(text[:1] + lines + text[1:]) + "\n")
    triage = triage_job(tmp_path).to_dict()
    assert triage["details"]["job_gpus"]["source"] == "SLURM_STEP_GPUS"
    assert {h: set(map(str, x)) for h, x in triage["details"]["job_gpus"]["hosts"].items()} == held
    diag = run_diagnosis(client, triage=triage)["diagnosis"]
    assert [(c["host"], c["gpu"]) for c in diag["culprits"]] == [
        (c["host"], c["gpu"]) for c in truth["culprits"]
    ]


def test_a_hang_beside_a_scattered_tenant_accuses_no_host_for_its_indices(served_job):
    """Seed 62: the job holds other indices on some hosts; its ranks are compared by their place among
    each host's job GPUs, so no host stands out for holding other indices."""
    client, truth, job_dir = served_job("collective-hang", 62, "nvidia", **VARYING)
    diag = run_diagnosis(client, triage=triage_job(job_dir).to_dict())["diagnosis"]
    assert diag["class"] == "collective-hang"
    assert {c["host"] for c in diag["culprits"]} == {c["host"] for c in truth["culprits"]}


def test_a_log_in_another_numbering_yields_to_the_data(served_job, tmp_path: Path):
    """A log that prints a container's view (CUDA_VISIBLE_DEVICES=0,1,2,3 on every host) where the job holds
    other indices on some hosts: there the data's phases tell otherwise, and the data decides."""
    client, truth, job_dir = served_job("thermal-straggler", 65, "nvidia", **VARYING)
    text = (job_dir / "log").read_text().splitlines()
    (tmp_path / "log").write_text("\n".join(text[:1] + ["CUDA_VISIBLE_DEVICES=0,1,2,3"] + text[1:]) + "\n")
    triage = triage_job(tmp_path).to_dict()
    assert triage["details"]["job_gpus"]["all"] == [0, 1, 2, 3]
    diag = run_diagnosis(client, triage=triage)["diagnosis"]
    assert [(c["host"], c["gpu"]) for c in diag["culprits"]] == [
        (c["host"], c["gpu"]) for c in truth["culprits"]
    ]


def test_a_hang_before_the_first_step_accuses_no_host_for_a_busy_tenant(served_job):
    """Seed 7 hangs before the first step (no step, no training level to tell GPUs apart): a neighbour GPU
    at >= 70 % from the data's start made its host's spinning set differ (dgx031 was named). The job's
    GPUs sat idle before the job began; a GPU busy all along is another tenant's."""
    client, truth, job_dir = served_job("collective-hang", 7, "nvidia", **SHARED)
    assert "pre_step" in truth["variants"]
    diag = run_diagnosis(client, triage=triage_job(job_dir).to_dict())["diagnosis"]
    assert diag["class"] == "collective-hang"
    assert {c["host"] for c in diag["culprits"]} == {c["host"] for c in truth["culprits"]}


def test_phases_misplaced_by_the_log_leave_no_host_without_job_gpus(served_job, monkeypatch):
    """Corpus F seed 32 case 05 (node-death, 128 hosts): NeMo's undated steps were dated from the log's last
    stamp, minutes before the GPUs trained, and the GPU exporter collected every other scrape: the steady
    window straddled training's start, and half the hosts, a scrape late, had no GPU at the job's level and
    none found to be the job's (47 hosts were then named in a collective hang). A host the log names holds
    some of the job's GPUs: there the level over its whole training decides."""
    ex = Exporters(trainer_gauges=False, gpu_collect_s=120.0)
    client, truth, job_dir = served_job(
        "node-death",
        1,
        "nvidia",
        nodes=8,
        gpus=4,
        interval=60.0,
        hours=1.0,
        exporters=ex,
        log_format="srun-nemo",
    )
    triage = triage_job(job_dir).to_dict()
    early = 540.0  # the log's steps placed minutes before the GPUs ran them
    # and not said to be placed (test_undated_steps: then the GPUs date them): the phases stay misplaced
    triage["details"].pop("last_step_time_estimated", None)
    triage["details"]["first_step_time"] -= early
    triage["progress"]["last_step_time"] -= early
    triage["details"]["log_loss"] = [[t - early, x] for t, x in triage["details"]["log_loss"]]
    decided: list[set | None] = []

    def spy(*args, **kw):
        decided.append(out := job_gpus(*args, **kw))
        return out

    monkeypatch.setattr(hang, "job_gpus", spy)
    monkeypatch.setattr(_tenant, "job_gpus", spy)
    diag = run_diagnosis(client, triage=triage)["diagnosis"]
    assert decided
    for mine in decided:
        assert mine is None or {h for h, _ in mine} == set(truth["hosts"])
    assert diag["class"] == "node-death"
    assert {c["host"] for c in diag["culprits"]} == {c["host"] for c in truth["culprits"]}


def test_the_job_gpus_are_told_once_for_every_rule_that_asks(served_job, monkeypatch):
    """Each peer rule (temperature, clock, utilisation) and the hang's ask which GPUs are the job's of the same
    per-GPU power: the data's phases are read once a decision (1,024 GPUs: 0.1 s each time), and the
    verdict is the one read afresh for each rule gives (class, culprits, onset, findings)."""
    client, truth, job_dir = served_job("thermal-straggler", 63, "nvidia", **VARYING)
    triage = triage_job(job_dir).to_dict()
    read: list[int] = []
    from_data = _tenant._from_data

    def counting(tl, g, trained_ratio):
        read.append(id(g))
        return from_data(tl, g, trained_ratio)

    monkeypatch.setattr(_tenant, "_from_data", counting)
    once = run_diagnosis(client, triage=triage)
    assert len(read) == len(set(read)) == 1
    monkeypatch.setattr(
        _tenant,
        "_phases",
        lambda ctx, g, r: _tenant._every_host_holds_some(ctx, g, _tenant._from_data(ctx.timeline, g, r), r),
    )
    afresh = run_diagnosis(client, triage=triage)
    assert len(read) > 2
    assert once["diagnosis"] == afresh["diagnosis"] and once["diagnosis"]["class"] == truth["class"]
    assert once["findings"] == afresh["findings"]
