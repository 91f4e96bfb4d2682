"""The comparison glue: starting refuses what cannot run, executing compares the investigation's jobs on their
served TSDBs, stores the contract's result and upserts its findings; the job's diagnosis region ignores it."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

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
from investigations.services import diagnosis as dx
from investigations.services import diagnosis_overview as overview
from investigations.services import runs
from playbooks.triage import triage_job

pytestmark = pytest.mark.django_db


def _job(served_job, job_dir: Path, name: str) -> Job:
    """A job with its triage and a URL data source on its served TSDB."""
    job = Job.objects.create(job_id=name, name=name, job_dir=str(job_dir))
    job.triage = triage_job(job_dir).to_dict() | {"state": "done"}
    job.save()
    DataSource.objects.create(job=job, kind=DataSource.Kind.URL, address=served_job.dir(job_dir).base_url)
    return job


@pytest.fixture
def restore_pair(served_job, job_factory):
    """Return (investigation, restored job, baseline job): the restored job is primary, its baseline added."""
    restored_dir, truth = job_factory("restore-resource-leak")
    baseline_dir = Path(truth["compare_with"])
    assert baseline_dir.name == f"{restored_dir.name}-baseline"
    restored = _job(served_job, restored_dir, f"restored-{Job.objects.count()}")
    baseline = _job(served_job, baseline_dir, f"baseline-{Job.objects.count()}")
    investigation = Investigation.objects.create(title="slower after restore")
    InvestigationJob.objects.create(
        investigation=investigation, job=restored, role=InvestigationJob.Role.PRIMARY
    )
    InvestigationJob.objects.create(
        investigation=investigation, job=baseline, role=InvestigationJob.Role.BASELINE, position=1
    )
    return investigation, restored, baseline


def _run_through(run: DiagnosisRun) -> DiagnosisRun:
    assert runs.run_claim(run.pk)
    return cmp.comparison_execute(run.pk)


def test_it_creates_a_queued_comparison_of_the_primary_job_baseline_first(restore_pair) -> None:
    investigation, restored, baseline = restore_pair
    run = cmp.comparison_start(investigation)
    assert run.status == TaskStatus.QUEUED
    assert run.job == restored
    assert run.kind == DiagnosisRun.Kind.COMPARISON and run.is_comparison
    assert run.request == {"jobs": [baseline.pk, restored.pk]}
    assert run.playbooks == [] and run.window == {} and run.result == {}
    assert run.progress_total == 2


def test_it_refuses_fewer_than_two_jobs_with_a_data_source(db) -> None:
    investigation = Investigation.objects.create(title="one job")
    job = Job.objects.create(job_id="81234")
    DataSource.objects.create(job=job, kind=DataSource.Kind.URL, address="http://127.0.0.1:9")
    InvestigationJob.objects.create(investigation=investigation, job=job)
    other = Job.objects.create(job_id="81235")  # no data source
    InvestigationJob.objects.create(
        investigation=investigation, job=other, role=InvestigationJob.Role.COMPARE
    )
    with pytest.raises(cmp.ComparisonError, match="at least two jobs with a data source.*81235"):
        cmp.comparison_start(investigation)
    assert not DiagnosisRun.objects.exists()


def test_it_refuses_a_second_comparison_while_one_is_active(restore_pair) -> None:
    investigation, *_ = restore_pair
    first = cmp.comparison_start(investigation)
    with pytest.raises(cmp.ComparisonError, match=f"already queued \\(run #{first.pk}\\)"):
        cmp.comparison_start(investigation)
    assert DiagnosisRun.objects.count() == 1


def test_it_finds_the_restore_leak_and_stores_result_and_findings(restore_pair) -> None:
    """The restored job carries extra runnable processes: class restore-resource-leak, on the investigation too."""
    investigation, restored, baseline = restore_pair
    run = _run_through(cmp.comparison_start(investigation))
    assert run.status == TaskStatus.DONE
    assert run.progress_done == 2
    result = run.result
    assert set(result) >= {"jobs", "source", "diagnosis", "findings", "timings", "comparison"}
    assert result["diagnosis"]["class"] == "restore-resource-leak"
    assert result["comparison"]["baseline"] == 0
    assert "procs_running" in [m["name"] for m in result["comparison"]["metrics"]]
    findings = Finding.objects.filter(investigation=investigation, playbook="comparison")
    assert findings.count() == len(result["findings"])
    assert set(findings.values_list("job_id", flat=True)) == {restored.pk}
    assert findings.filter(incident_class="restore-resource-leak", severity="warning").exists()
    # The comparison region shows them; the job's diagnosis table does not show them twice.
    assert overview.diagnosis_overview(investigation, restored)["findings"] == []
    investigation.refresh_from_db()
    assert investigation.incident_class == "restore-resource-leak"

    # A re-run over the same jobs updates the same rows: nothing duplicated.
    before = sorted(findings.values_list("pk", "rule"))
    again = _run_through(cmp.comparison_start(investigation))
    assert again.status == TaskStatus.DONE
    assert sorted(findings.values_list("pk", "rule")) == before
    assert set(findings.values_list("run_id", flat=True)) == {again.pk}


def test_the_diagnosis_region_and_its_active_check_ignore_comparisons(restore_pair) -> None:
    investigation, restored, _ = restore_pair
    comparison = cmp.comparison_start(investigation)
    assert dx.diagnosis_active(restored) is None
    assert overview.diagnosis_overview(investigation, restored)["run"] is None
    run = dx.diagnosis_start(investigation, restored)  # not refused by the queued comparison
    assert run.pk != comparison.pk
    assert overview.diagnosis_overview(investigation, restored)["run"] == run
    assert cmp.comparison_overview(investigation)["run"] == comparison


def test_a_deleted_data_source_fails_clearly_and_stores_nothing(restore_pair) -> None:
    investigation, _, baseline = restore_pair
    run = cmp.comparison_start(investigation)
    baseline.datasources.all().delete()
    assert runs.run_claim(run.pk)
    with pytest.raises(cmp.ComparisonError, match="has no data source"):
        cmp.comparison_execute(run.pk)
    run.refresh_from_db()
    assert run.result == {}
    assert not Finding.objects.exists()


def test_it_waits_for_a_jobs_triage_still_running(restore_pair) -> None:
    """The logs give the restore points and configs: a comparison waits for a triage in progress."""
    investigation, _, baseline = restore_pair
    done = baseline.triage
    Job.objects.filter(pk=baseline.pk).update(
        triage={"state": "running", "started": timezone.now().isoformat()}, triage_status="running"
    )
    run = cmp.comparison_start(investigation)
    assert runs.run_claim(run.pk)
    with pytest.raises(runs.TriagePending, match=f"Waiting for the log triage of job {baseline.job_id}"):
        cmp.comparison_execute(run.pk)
    run.refresh_from_db()
    assert run.result == {} and not Finding.objects.exists()
    Job.objects.filter(pk=baseline.pk).update(triage=done, triage_status="done")
    assert cmp.comparison_execute(run.pk).status == TaskStatus.DONE


def test_finding_rule_is_stable_when_figures_move() -> None:
    a = {"class": "healthy", "title": "gpu power: +3.1 % in job a vs job b"}
    b = {"class": "healthy", "title": "gpu power: +3.4 % in job a vs job b"}
    assert cmp.finding_rule(a) == cmp.finding_rule(b)
    assert cmp.finding_rule({"rule": "uniform_cpu", "title": "x"}) == "uniform_cpu"


def test_a_finished_comparison_is_a_markdown_report(restore_pair, client, django_user_model) -> None:
    """The comparison's report is what `compare --format markdown` prints, served for a ticket."""
    investigation, restored, _ = restore_pair
    run = _run_through(cmp.comparison_start(investigation))
    client.force_login(django_user_model.objects.create_user("sre"))
    response = client.get(reverse("investigations:run_report", args=[investigation.pk, run.pk]))
    assert response.status_code == 200 and response["Content-Type"] == "text/markdown; charset=utf-8"
    body = response.content.decode()
    assert body.startswith("## Multi-Job Comparison:")
    assert "| procs_running |" in body and "restore-resource-leak" in body
