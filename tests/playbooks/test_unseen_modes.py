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


def _gauge_last_step(client, truth):
    """The last step the trainer's training_step gauge ever showed (the TSDB's, not the log's)."""
    at = truth["data_range"][1]
    span = int(at - truth["data_range"][0]) + 60
    return max(s.value for s in client.query(f"max_over_time(training_step[{span}s])", at=at))


@pytest.mark.parametrize("scenario", ["collective-hang", "heartbeat-false-positive"])
def test_a_step_gauge_refreshed_less_often_than_steps_lags_the_log(served_job, scenario):
    """Mode 8: the trainer refreshes its gauges every 10 min, so the gauge stops well before the log's last
    step (a crash) or shows the last step only at its next refresh (a hang); the stall time comes from the
    most advanced source and the gauge's lag is no sign of another job's Prometheus."""
    client, truth, job_dir = served_job(scenario, 1, "nvidia", exporters="lagging-gauge")
    if truth["crash_time"] is not None:
        assert _gauge_last_step(client, truth) < truth["last_step"]
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    diag = result["diagnosis"]
    assert diag["class"] == truth["class"]
    assert _hosts(diag["culprits"]) == _hosts(truth["culprits"])
    assert _scrapes(result, truth) <= 3
    assert not diag["summary"].startswith("Check the data source first")


def test_a_lagging_step_gauge_without_the_log_is_no_stall_while_gpus_train(served_job):
    """Mode 8 without a log: the gauge stops before the data ends while the GPUs stay at training power;
    the stall needs corroboration, so no hang is reported and the job's own fault is found."""
    client, truth, _ = served_job("thermal-straggler", 8, "nvidia", exporters="lagging-gauge")
    assert _gauge_last_step(client, truth) < truth["last_step"]
    at = truth["data_range"][1]
    (stamp,) = client.query(
        f"max_over_time(training_last_step_timestamp_seconds[{int(at - truth['data_range'][0])}s])", at=at
    )
    assert at - stamp.value >= 300  # the gauge's last step is older than a stall needs, without a log
    result = run_diagnosis(client, triage=None)
    assert result["diagnosis"]["class"] == "thermal-straggler"
    assert not [f for f in result["findings"] if "stopped advancing" in f["title"]]


def test_a_lagging_step_gauge_refresh_is_no_checkpoint_save(served_job):
    """Mode 8 under a 10-min gauge (bench/diagnosis_robustness.py seed 40, 10 s scrapes): each refresh jumps
    past a multiple of the checkpoint period, but the save lies anywhere in the hold before it; taken as a
    save at the refresh, it hid the hot GPU's first minute and the onset came 6.5 scrapes late."""
    result, truth = _diagnose(
        served_job, "thermal-straggler", 40, "nvidia", exporters="lagging-gauge", interval=10.0, hours=1.0
    )
    diag = result["diagnosis"]
    assert diag["class"] == "thermal-straggler"
    assert _hosts(diag["culprits"]) == _hosts(truth["culprits"])
    assert _scrapes(result, truth) <= 3


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
def test_an_uncorrectable_error_in_the_last_seconds_of_data_is_seen(served_job, profile):
    """Mode 10: the uncorrectable error comes 12 s before the data ends (the trainer aborts, the capture
    stops): grids end at the data's end and the error is dated on the fine grid, on its GPU."""
    result, truth = _diagnose(served_job, "gpu-hardware-fault", 16, profile)
    assert truth["variants"]["error_at_end"] < 60
    assert truth["data_range"][1] - truth["onset"] < 60
    diag = result["diagnosis"]
    assert diag["class"] == "gpu-hardware-fault"
    assert [(c["host"], c["gpu"]) for c in diag["culprits"]] == [
        (c["host"], c["gpu"]) for c in truth["culprits"]
    ]
    assert _scrapes(result, truth) <= 3


def test_a_gradient_jump_during_a_checkpoint_save_is_dated_when_it_starts():
    """A training-level series is what each step computed: a checkpoint save does not move it, so a jump
    that starts during a save's window is dated then, not when the window ends."""
    import numpy as np

    from playbooks.anomaly import Grid
    from playbooks.context import Context, Timeline
    from playbooks.detectors import evaluate
    from playbooks.loader import load_playbooks

    t = np.arange(0.0, 3600.0, 10.0)
    grad = 0.6 + np.random.default_rng(3).normal(0, 0.03, len(t))
    grad[t >= 2000] *= 8.0
    tl = Timeline(start=0.0, end=float(t[-1]), train_start=0.0, step_s=10.0, warm_end=200.0)
    tl.checkpoints = [(1950.0, 2150.0)]

    class _Src:
        hosts = ("h0",)

    ctx = Context(
        results={"grad_norm": Grid(t=t, labels=[{}], values=grad[None, :])},
        meta={},
        timeline=tl,
        triage=None,
        source=_Src(),
        gpu=None,
    )
    (found,) = [f for f in evaluate(ctx, [load_playbooks()["training"]]) if f.rule == "grad_norm_jump"]
    assert abs(found.onset - 2000) <= 20


@pytest.mark.parametrize("seed", [1, 42])
def test_staircase_memory_onset_holds_with_one_minute_scrapes(served_job, seed):
    """Mode 2 at a 60 s scrape: the fatal save's rise is barely sampled and an earlier save's bump may be
    the highest sample; the onset is still the start of the rise that ended at the kill."""
    result, truth = _diagnose(served_job, "host-oom", seed, "nvidia", interval=60.0, hours=1.5)
    assert "staircase" in truth["variants"]
    diag = result["diagnosis"]
    assert diag["class"] == "host-oom"
    assert _hosts(diag["culprits"]) == _hosts(truth["culprits"])
    assert _scrapes(result, truth) <= 2


def test_two_close_trickle_ticks_in_a_short_job_are_no_burst_before_the_hang(served_job):
    """Mode 1: 17 min of training, then a clean hang; one host's trickle has two large ticks close together
    half an hour before (2 min above the floor once rate() spreads them). Judged against the pack's ticks,
    that is no network event: a collective hang."""
    result, truth = _diagnose(served_job, "collective-hang", 60, "amd", nodes=8, hours=1.2)
    diag = result["diagnosis"]
    assert diag["class"] == "collective-hang"
    assert _hosts(diag["culprits"]) == _hosts(truth["culprits"])
    assert not [f for f in result["findings"] if f["class"] == "network-hang" and f["severity"] != "info"]


@pytest.mark.parametrize(("profile", "seed"), [("amd", 1), ("nvidia", 2)])
def test_a_node_that_dies_in_the_last_scrapes_is_a_node_death(served_job, profile, seed):
    """Item b: the node dies a scrape or two before the capture ends (variant death_at_end; seed 2 is the
    death Slurm reports). Too short a silence to stand alone, it is the death the log reports on that host:
    node-death from the data, on that host, dated on the fine grid. Without the log it is not called."""
    client, truth, job_dir = served_job("node-death", seed, profile, variants=("death_at_end",))
    assert truth["data_range"][1] - truth["onset"] < 2.5 * truth["interval_s"]
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    diag = result["diagnosis"]
    assert diag["class"] == "node-death"
    assert _hosts(diag["culprits"]) == _hosts(truth["culprits"])
    assert _scrapes(result, truth) <= 3
    from_data = [
        f for f in result["findings"] if f["class"] == "node-death" and "(job log)" not in f["title"]
    ]
    assert [f["hosts"] for f in from_data] == [[c["host"] for c in truth["culprits"]]]
    blind = run_diagnosis(client, triage=None)
    assert not [f for f in blind["findings"] if f["class"] == "node-death"]
