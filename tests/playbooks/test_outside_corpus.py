"""Diagnosis on jobs of the outside generator A (bench/outside/gen_a.py, issue #10), written without reading
the engine: each job is built by that generator, served by a real Prometheus and diagnosed end to end.

Plans are drawn from the generator's seeds and then set to the deployment under test, so the case does not
hang on which layout a seed happens to draw.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.outside._a_plan import Plan
from bench.outside.gen_a import make_plan, write_job
from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job


@pytest.fixture(scope="module")
def outside_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("outside")


def _diagnose(
    served_job,
    root: Path,
    cls: str,
    variant: int,
    index: int,
    plan: Plan | None = None,
    seed: int = 3,
    **layout,
):
    plan = plan or make_plan(seed, index, cls, variant)
    for k, v in layout.items():
        setattr(plan.layout, k, v)
    truth = write_job(plan, index, root)
    job_dir = root / plan.name
    client = served_job.dir(job_dir)
    return run_diagnosis(client, triage=triage_job(job_dir).to_dict()), truth


def _hosts(items):
    return {c["host"] for c in items}


def test_a_job_without_training_gauges_reads_its_steps_from_the_log(served_job, outside_root):
    """The trainer exports no training_* gauges (many do not): the log's timed steps are the timeline, so a
    job that trained to its last step, with loader dips and saves, is no hang before the first step."""
    result, truth = _diagnose(served_job, outside_root, "healthy", 0, 28, trainer_gauges=False)
    assert truth["class"] == "healthy"
    assert result["diagnosis"]["class"] == "healthy"
    assert not [f for f in result["findings"] if f["severity"] in ("warning", "critical")]


def test_a_hang_without_training_gauges_is_dated_by_the_log(served_job, outside_root):
    """Without step gauges a mid-run hang stops at the log's last step, and the host that spins on fewer
    GPUs is still the culprit."""
    result, truth = _diagnose(served_job, outside_root, "collective-hang", 1, 27, trainer_gauges=False)
    diag = result["diagnosis"]
    assert diag["class"] == "collective-hang"
    assert _hosts(diag["culprits"]) == _hosts(truth["culprits"])
    assert abs(diag["onset"] - truth["onset"]) / truth["scrape_s"] <= 3


def test_a_burst_that_starts_just_before_the_stall_is_the_hang_trigger_on_both_hosts(
    served_job, outside_root
):
    """Retransmits burst on two hosts only 20-30 s (two scrapes) before the collectives stall and go on after:
    every host's traffic stops with the hang, so the burst is judged after the stall too, and its first
    scrapes are no part of the host's own background. Both hosts are named, the onset is the burst."""
    plan = make_plan(3, 51, "network-hang", 1)
    for fault, lead in zip(plan.rdma, (30.0, 20.0), strict=True):
        fault.start = plan.active_end - lead
    plan.onset = plan.rdma[0].start
    result, truth = _diagnose(served_job, outside_root, "network-hang", 1, 51, plan=plan)
    diag = result["diagnosis"]
    assert diag["class"] == "network-hang"
    assert _hosts(diag["culprits"]) == _hosts(truth["culprits"]) and len(truth["culprits"]) == 2
    assert abs(diag["onset"] - truth["onset"]) / truth["scrape_s"] <= 3


def test_one_missed_scrape_of_an_accused_host_is_no_silence(served_job, outside_root):
    """Seed 7's job 24 as the generator draws it: the coordinator kills the job accusing two hosts that
    trained to the end; one of them misses a single node_exporter scrape (up = 0 once) shortly before the
    heartbeat-stop time and reports again right after. That is an exporter hiccup, not a host gone silent:
    the kill is a heartbeat false positive, not a hang."""
    result, truth = _diagnose(served_job, outside_root, "heartbeat-false-positive", 1, 24, seed=7)
    assert truth["class"] == "heartbeat-false-positive"
    diag = result["diagnosis"]
    assert diag["class"] == "heartbeat-false-positive"
    assert diag["culprits"] == []
    assert abs(diag["onset"] - truth["onset"]) / truth["scrape_s"] <= 3


def test_a_hang_before_the_first_step_settles_when_the_power_falls(served_job, outside_root):
    """Seed 8's job 10 as drawn: the GPUs compute the first step at full power for over a minute, then spin in its first collective:
    utilisation stays high throughout, so the busy-wait settled when the power fell, not when utilisation
    rose. The host spinning on fewer GPUs is the culprit."""
    result, truth = _diagnose(served_job, outside_root, "collective-hang", 3, 10, seed=8)
    diag = result["diagnosis"]
    assert diag["class"] == "collective-hang"
    assert _hosts(diag["culprits"]) == _hosts(truth["culprits"])
    assert abs(diag["onset"] - truth["onset"]) / truth["scrape_s"] <= 2


def test_a_restored_job_with_a_busy_runnable_background_is_healthy_without_a_baseline(
    served_job, outside_root
):
    """Seed 8's job 6 as drawn: a restored job that trains to its end on hosts whose usual runnable background
    (loader workers, proxy threads) is above the engine's prior for their GPUs. Without the fresh start's own
    level that is a hint (info), not a restore leak: the verdict is compare's."""
    result, truth = _diagnose(served_job, outside_root, "healthy", 0, 6, seed=8)
    assert truth["class"] == "healthy" and truth["layout"]["first_step"] > 0
    assert result["diagnosis"]["class"] == "healthy"
    assert not [f for f in result["findings"] if f["severity"] in ("warning", "critical")]
    assert any(f["class"] == "restore-resource-leak" for f in result["findings"])  # still said, as a hint


def test_a_checkpoint_save_seen_by_one_host_alone_is_no_sign_it_stopped(served_job, outside_root):
    """Seed 10's job 23 as drawn: 60 s scrapes, each exporter on its own offset, and a checkpoint save at the
    heartbeat-stop time that only the accused host's sample fell into. The step gauge (polled every 60 s)
    skips the checkpoint step itself, so the save is found where its samples cross a multiple of the
    period, and instants within a save are not used to judge the accused: a heartbeat false positive."""
    result, truth = _diagnose(served_job, outside_root, "heartbeat-false-positive", 0, 23, seed=10)
    assert truth["class"] == "heartbeat-false-positive" and truth["scrape_s"] == 60
    diag = result["diagnosis"]
    assert diag["class"] == "heartbeat-false-positive"
    assert diag["culprits"] == []
    assert abs(diag["onset"] - truth["onset"]) / truth["scrape_s"] <= 3


def test_a_leaf_fault_on_a_third_of_the_hosts_names_every_one_of_them(served_job, outside_root):
    """Seed 9's job 28 as drawn: 4 of 12 hosts (one leaf switch) start retransmitting together about 10 min
    into training, at 5 s scrapes; the 8 others stay clean. Their history is too short for their own
    background, but a clean stretch of training came first: one fabric event, all four named (the ACK
    timeouts stand out on three of them only)."""
    result, truth = _diagnose(served_job, outside_root, "rdma-degradation", 1, 28, seed=9)
    assert len(truth["culprits"]) == 4
    diag = result["diagnosis"]
    assert diag["class"] == "rdma-degradation"
    assert _hosts(diag["culprits"]) == _hosts(truth["culprits"])
    assert abs(diag["onset"] - truth["onset"]) / truth["scrape_s"] <= 3
