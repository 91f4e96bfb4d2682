"""Multi-job comparison on generated jobs served by a real Prometheus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from playbooks.compare import CompareError, CompareJob, compare_jobs, config_diff, delta_text, metric_signals
from playbooks.triage import triage_job

PROFILES = ("amd", "nvidia")


def _compare(served_job, *dirs: Path) -> dict:
    jobs = [CompareJob(served_job.dir(d), triage_job(d).to_dict()) for d in dirs]
    return compare_jobs(jobs)


def _pair(job_factory, profile: str) -> tuple[Path, Path, dict]:
    restored, truth = job_factory("restore-resource-leak", profile=profile)
    baseline = Path(truth["compare_with"])
    assert baseline == restored.with_name(restored.name + "-baseline")
    return restored, baseline, truth


def _metric(result: dict, name: str) -> dict:
    return next(m for m in result["comparison"]["metrics"] if m["name"] == name)


@pytest.mark.parametrize("profile", PROFILES)
def test_restored_job_against_its_fresh_baseline_is_a_restore_resource_leak(job_factory, served_job, profile):
    """A restored job with a uniform extra runnable-process load vs its fresh baseline is a restore leak."""
    restored, baseline, truth = _pair(job_factory, profile)
    result = _compare(served_job, baseline, restored)
    diag = result["diagnosis"]
    assert diag["class"] == "restore-resource-leak"
    assert diag["root_cause_family"] == "cpu-contention"
    assert diag["culprits"] == []
    assert diag["onset"] is not None and abs(diag["onset"] - truth["onset"]) < 300
    assert result["comparison"]["baseline"] == 0
    procs = _metric(result, "procs_running")
    assert procs["values"][1] > procs["values"][0]
    assert procs["delta_pct"] > 30
    assert "restore" in procs["likely_cause"]
    assert result["comparison"]["config_diff"] == {}
    warnings = [f for f in result["findings"] if f["severity"] != "info"]
    assert [f["class"] for f in warnings] == ["restore-resource-leak"]
    assert all(f["playbook"] == "comparison" for f in result["findings"])


def test_the_baseline_is_the_fresh_start_whatever_the_order(job_factory, served_job):
    """Given restored first, the comparison still measures the restored job against the fresh one."""
    restored, baseline, _ = _pair(job_factory, "amd")
    result = _compare(served_job, restored, baseline)
    assert result["comparison"]["baseline"] == 1
    assert result["diagnosis"]["class"] == "restore-resource-leak"
    procs = _metric(result, "procs_running")
    assert procs["values"][0] > procs["values"][1]
    assert procs["delta_pct"] > 30
    assert [j["first_step"] for j in result["jobs"]] == [1, 0]


@pytest.mark.parametrize("profile", PROFILES)
def test_two_healthy_jobs_compare_healthy_without_warning(job_factory, served_job, profile):
    """Two healthy runs with different seeds differ in config but carry no contention difference."""
    a, _ = job_factory("healthy", seed=1, profile=profile)
    b, _ = job_factory("healthy", seed=2, profile=profile)
    result = _compare(served_job, a, b)
    assert result["diagnosis"]["class"] == "healthy"
    assert result["diagnosis"]["root_cause_family"] == "none"
    assert [f for f in result["findings"] if f["severity"] in ("warning", "critical")] == []
    for m in result["comparison"]["metrics"]:
        if m["name"] in ("procs_running", "procs_blocked"):
            assert m["likely_cause"] == "within noise"


def test_the_result_has_the_contract_shape(job_factory, served_job):
    """The comparison is JSON with jobs, source, diagnosis, findings, timings and comparison."""
    restored, baseline, _ = _pair(job_factory, "amd")
    result = json.loads(json.dumps(_compare(served_job, baseline, restored), allow_nan=False))
    assert {"jobs", "source", "diagnosis", "findings", "timings", "comparison"} <= set(result)
    assert len(result["jobs"]) == 2
    assert set(result["jobs"][0]) == {"id", "status", "triage_class", "first_step", "last_step", "crash_time"}
    assert set(result["source"]) == {"url", "profile", "hosts", "gpus_per_host", "time_range"}
    lo, hi = result["comparison"]["overlap_steps"]
    assert (
        max(j["first_step"] for j in result["jobs"])
        == lo
        <= hi
        == min(j["last_step"] for j in result["jobs"])
    )
    names = {m["name"] for m in result["comparison"]["metrics"]}
    assert {
        "step_time",
        "tokens_per_sec",
        "gpu_power",
        "gpu_temp",
        "gpu_clock",
        "gpu_util",
        "procs_running",
        "procs_blocked",
        "mem_used",
        "rdma_retransmits",
        "tcp_retransmits",
        "io_pressure",
    } <= names
    for m in result["comparison"]["metrics"]:
        assert len(m["values"]) == 2 and isinstance(m["delta_pct"], float) and m["likely_cause"]
    assert result["timings"]["queries"] > 0


def test_a_comparison_needs_two_jobs(served_job):
    """One job is not a comparison."""
    client, _, job_dir = served_job("healthy")
    with pytest.raises(CompareError, match="at least two"):
        compare_jobs([CompareJob(client, triage_job(job_dir).to_dict())])


@pytest.mark.parametrize(
    ("configs", "expected"),
    [
        ([{"JOB_ID": "1", "steps": "100"}, {"JOB_ID": "2", "steps": "100"}], {}),
        ([{"JOB_NODELIST": "a[1-4]", "RAY_PORT": "1"}, {"JOB_NODELIST": "b[1-4]", "RAY_PORT": "2"}], {}),
        ([{"tensorboard_dir": "/out/a/tb"}, {"tensorboard_dir": "/out/b/tb"}], {}),
        ([{"NNODES": "8", "steps": "100"}, {"NNODES": "16", "steps": "100"}], {"NNODES": ["8", "16"]}),
        ([{"quantization": "int8"}, {}], {"quantization": ["int8", None]}),
        (
            [{"model_id": "a", "SLURM_JOB_ID": "1"}, {"model_id": "b", "SLURM_JOB_ID": "2"}],
            {"model_id": ["a", "b"]},
        ),
        (
            [{"checkpoint_period": "100"}, {"checkpoint_period": "100"}, {"checkpoint_period": "50"}],
            {"checkpoint_period": ["100", "100", "50"]},
        ),
    ],
)
def test_config_diff_keeps_only_differences_that_are_not_run_specific(configs, expected):
    """Job ids, node names, ports and paths never count as config differences; real ones do."""
    assert config_diff(configs) == expected


def test_three_jobs_give_one_value_per_job_and_the_leak_whatever_its_place(job_factory, served_job):
    """Three jobs: three values per metric, delta_pct of the last job vs the baseline, the restored job still found."""
    restored, baseline, _ = _pair(job_factory, "amd")
    other, _ = job_factory("healthy", seed=2)
    result = _compare(served_job, restored, baseline, other)
    assert len(result["jobs"]) == 3
    assert result["comparison"]["baseline"] == 1
    for m in result["comparison"]["metrics"]:
        assert len(m["values"]) == 3
        base, last = m["values"][1], m["values"][2]
        if abs(base) > 1.0:
            assert m["delta_pct"] == pytest.approx(100.0 * (last - base) / abs(base), abs=0.02)
    assert result["diagnosis"]["class"] == "restore-resource-leak"


def test_without_logs_the_step_gauge_tells_the_restored_job(job_factory, served_job):
    """No triage: the run whose step gauge starts past 0 is the restored one, the other the baseline."""
    restored, baseline, _ = _pair(job_factory, "nvidia")
    result = compare_jobs([CompareJob(served_job.dir(restored)), CompareJob(served_job.dir(baseline))])
    assert result["comparison"]["baseline"] == 1
    assert result["diagnosis"]["class"] == "restore-resource-leak"
    assert result["comparison"]["config_diff"] == {}
    assert result["jobs"][0]["id"] is None and result["jobs"][0]["first_step"] > 0


@pytest.mark.parametrize(
    ("metric", "shown"),
    [
        ({"name": "step_time", "values": [30.19, 30.54], "delta_pct": 1.16}, "+1.2 %"),
        # a retransmit rate near zero: the percentage against the floor says "-0.1 %", the change says more
        ({"name": "rdma_retransmits", "values": [0.0014, 0.0004], "delta_pct": -0.1}, "-0.001 (absolute)"),
        ({"name": "procs_running", "values": [9.5, 25.5], "delta_pct": 168.42}, "+168.4 %"),
    ],
)
def test_a_report_shows_a_near_zero_baseline_as_an_absolute_change(metric, shown):
    """delta_text: a percentage, unless the baseline is below the metric's percentage floor."""
    assert delta_text(metric) == shown


def test_a_metric_row_names_the_signals_it_reads() -> None:
    """The timeline draws a comparison's rows through these (gpu_temp_max is the gpu_temp panel)."""
    assert metric_signals("gpu_temp_max") == ("gpu_temp",)
    assert metric_signals("procs_running") == ("procs_running",)
    assert "rdma_retransmits" in metric_signals("rdma_retransmits")
    assert metric_signals("no_such_row") == ()


@pytest.mark.parametrize(("profile", "seed"), [("nvidia", 3), ("amd", 6)])
def test_a_leak_within_wide_per_host_backgrounds_is_the_shift_of_the_whole_distribution(
    job_factory, served_job, profile, seed
):
    """D3 04: each host's own background spreads over more than twice the leak and is drawn anew per run,
    so few hosts stand out on their own; the hosts' distribution shifted (one-sided rank test at 5 %, its
    lower bound at least one process). Seeds 3 and 6 read healthy when the bound was two-sided."""
    from playbooks.triage import triage_job

    restored, truth = job_factory(
        "restore-resource-leak", seed, profile, nodes=8, variants=("wide_background",)
    )
    assert truth["variants"]["host_background"] >= 35
    base = restored.with_name(restored.name + "-baseline")
    jobs = [CompareJob(served_job.dir(d), triage_job(d).to_dict()) for d in (base, restored)]
    assert compare_jobs(jobs)["diagnosis"]["class"] == "restore-resource-leak"


@pytest.mark.parametrize("profile", PROFILES)
def test_a_leak_up_from_launch_dates_its_onset_at_the_start_of_training(job_factory, served_job, profile):
    """F31 26: the leaked threads run from the processes' launch, minutes before the restore; the comparison
    judges training, so the onset is when the restored run's GPUs began to train (it was the launch)."""
    restored, truth = job_factory("restore-resource-leak", 2, profile, nodes=8, variants=("leak_at_launch",))
    base = restored.with_name(restored.name + "-baseline")
    result = _compare(served_job, base, restored)
    assert result["diagnosis"]["class"] == "restore-resource-leak"
    assert abs(result["diagnosis"]["onset"] - truth["onset"]) <= 2 * truth["interval_s"]
