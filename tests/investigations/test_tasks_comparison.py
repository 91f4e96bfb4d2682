"""The comparison task: claims its run, compares the jobs' served TSDBs to done, is safe to run twice, retries
transient Prometheus errors and records every failure on the run."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings as django_settings

from investigations import services
from investigations.models import (
    DataSource,
    DiagnosisRun,
    Finding,
    Investigation,
    InvestigationJob,
    Job,
    TaskStatus,
)
from investigations.services import comparison as cmp
from investigations.tasks import comparison_execute_task
from playbooks.prometheus import PrometheusUnreachable
from playbooks.triage import triage_job

pytestmark = pytest.mark.django_db

DEAD_URL = "http://127.0.0.1:9"  # a loopback port where nothing listens


@pytest.fixture
def registered_pair(job_factory, synth_root: Path, view_root: Path, settings):
    """Return (investigation, restored, baseline): both registered from their job dirs (kind job_tsdb)."""
    settings.STEPWISE_JOB_ROOTS = [synth_root]
    settings.STEPWISE_TSDB_VIEWS = view_root
    restored_dir, truth = job_factory("restore-resource-leak")
    jobs = []
    for job_dir in (restored_dir, Path(truth["compare_with"])):
        job, source = services.job_register(job_dir)
        assert source.kind == DataSource.Kind.JOB_TSDB
        job.triage = triage_job(job_dir).to_dict() | {"state": "done"}
        job.save()
        jobs.append(job)
    restored, baseline = jobs
    investigation = Investigation.objects.create(title="slower after restore")
    InvestigationJob.objects.create(
        investigation=investigation, job=restored, role=InvestigationJob.Role.PRIMARY
    )
    InvestigationJob.objects.create(
        investigation=investigation, job=baseline, role=InvestigationJob.Role.BASELINE, position=1
    )
    return investigation, restored, baseline


def _dead_pair() -> DiagnosisRun:
    investigation = Investigation.objects.create(title="t")
    for i, role in enumerate((InvestigationJob.Role.PRIMARY, InvestigationJob.Role.BASELINE)):
        job = Job.objects.create(job_id=f"8123{i}")
        DataSource.objects.create(job=job, kind=DataSource.Kind.URL, address=DEAD_URL)
        InvestigationJob.objects.create(investigation=investigation, job=job, role=role, position=i)
    return cmp.comparison_start(investigation)


def test_it_compares_a_restored_job_with_its_baseline_to_done(registered_pair) -> None:
    investigation, restored, _ = registered_pair
    run = cmp.comparison_start(investigation)
    comparison_execute_task(run.pk)
    run.refresh_from_db()
    assert run.status == TaskStatus.DONE, run.error
    assert run.started is not None and run.finished is not None
    assert run.result["diagnosis"]["class"] == "restore-resource-leak"
    procs = next(m for m in run.result["comparison"]["metrics"] if m["name"] == "procs_running")
    assert procs["delta_pct"] > 5
    assert Finding.objects.filter(
        investigation=investigation,
        job=restored,
        playbook="comparison",
        incident_class="restore-resource-leak",
    ).exists()
    investigation.refresh_from_db()
    assert investigation.incident_class == "restore-resource-leak"

    # A second delivery of the same message (acks_late) leaves the finished run alone.
    finished = run.finished
    comparison_execute_task(run.pk)
    run.refresh_from_db()
    assert run.status == TaskStatus.DONE and run.finished == finished


def test_it_requeues_then_fails_the_run_when_prometheus_stays_unreachable(db) -> None:
    run = _dead_pair()
    # Called directly, Task.retry() re-raises the error instead of scheduling the retry.
    with pytest.raises(PrometheusUnreachable):
        comparison_execute_task(run.pk)
    run.refresh_from_db()
    assert run.status == TaskStatus.QUEUED
    assert run.error.startswith("Attempt 1 failed: ") and run.error.endswith("(retrying in 2 s)")
    retries = django_settings.STEPWISE_TASK_MAX_RETRIES
    comparison_execute_task.apply(args=[run.pk], retries=retries)
    run.refresh_from_db()
    assert run.status == TaskStatus.FAILED
    assert run.error.startswith(f"Gave up after {retries + 1} attempts: ") and "127.0.0.1:9" in run.error
    assert run.result == {} and not Finding.objects.exists()


def test_a_job_that_lost_its_data_source_fails_the_run_without_retrying(db) -> None:
    run = _dead_pair()
    DataSource.objects.filter(job__job_id="81231").delete()
    comparison_execute_task(run.pk)
    run.refresh_from_db()
    assert run.status == TaskStatus.FAILED
    assert run.error == "Job 81231 has no data source any more; add it again and re-run."


def test_a_cancelled_comparison_is_left_alone(db) -> None:
    run = _dead_pair()
    DiagnosisRun.objects.filter(pk=run.pk).update(status=TaskStatus.CANCELLED)
    comparison_execute_task(run.pk)
    run.refresh_from_db()
    assert run.status == TaskStatus.CANCELLED and run.started is None
