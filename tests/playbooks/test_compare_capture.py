"""A comparison whose TSDBs hold only part of their jobs (a Prometheus started late, a retention that dropped
the start): the logs' overlapping steps may have no data in one of them. Generated jobs served by a real
Prometheus; the longer job's TSDB holds only its last minutes (`tsdb_last_minutes`)."""

from __future__ import annotations

import pytest

from playbooks.compare import CompareJob, compare_jobs
from playbooks.synth import Exporters
from playbooks.triage import triage_job

#: compared every time: one GPU, one host and one training-free row
ROWS = {"gpu_power", "procs_running", "mem_used"}


def _compare(job_factory, served_job, gauges: bool, last_minutes: float) -> dict:
    """A 1.3 h job against the same job run for 2.6 h whose TSDB holds only its last minutes."""
    ex = Exporters(trainer_gauges=gauges)
    a, _ = job_factory("healthy", 1, "nvidia", exporters=ex)
    b, _ = job_factory("healthy", 1, "nvidia", exporters=ex, hours=2.6, tsdb_last_minutes=last_minutes)
    return compare_jobs([CompareJob(served_job.dir(d), triage_job(d).to_dict()) for d in (a, b)])


def _titles(result: dict) -> list[str]:
    return [f["title"] for f in result["findings"]]


@pytest.mark.parametrize("gauges", [True, False], ids=["step-gauge", "log-steps"])
def test_no_step_in_every_tsdb_is_said_with_both_ranges_and_the_whole_data_compared(
    job_factory, served_job, gauges
):
    """The logs overlap on steps 0-137, the longer job's TSDB holds only its steps from ~270 on: no step has
    data in both. Said so, with each job's log steps and data; each job's whole data is compared (it said
    every signal was missing)."""
    result = _compare(job_factory, served_job, gauges, 50)
    assert result["comparison"]["overlap_steps"] is None
    (note,) = [f for f in result["findings"] if f["title"].startswith("No step has data in every job's TSDB")]
    assert [e["value"].split(";")[0] for e in note["evidence"]] == ["log steps 0-137", "log steps 0-333"]
    assert "TSDB steps" in note["evidence"][1]["value"] and "UTC" in note["evidence"][1]["interpretation"]
    assert {m["name"] for m in result["comparison"]["metrics"]} >= ROWS
    assert not any(t.startswith("Not compared (a job has no sample") for t in _titles(result))
    missing = next((t for t in _titles(result) if t.startswith("Not compared (signal missing")), "")
    assert not any(r in missing for r in ROWS)


def test_the_steps_every_tsdb_holds_are_compared(job_factory, served_job):
    """The longer job's TSDB holds its steps from ~60 on: steps ~60-137 are compared, and said to be fewer
    than the logs' overlap."""
    result = _compare(job_factory, served_job, True, 110)
    lo, hi = result["comparison"]["overlap_steps"]
    assert 10 < lo < hi == 137
    assert any(
        t.startswith(f"Steps {lo}-{hi} compared: the logs overlap on steps 0-137") for t in _titles(result)
    )
    assert {m["name"] for m in result["comparison"]["metrics"]} >= ROWS
    assert result["diagnosis"]["class"] == "healthy"
