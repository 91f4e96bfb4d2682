"""The report's summary, next steps and ticket block say the investigation's verdict (the page header's), which
takes a finished comparison into account: a restored job's diagnosis alone is unsure (45 %, confirm with a
comparison); the real comparison with its fresh-start baseline settles it, and the report follows."""

from __future__ import annotations

from pathlib import Path

import pytest

from investigations.models import DataSource, Investigation, InvestigationJob, Job, TaskStatus
from investigations.services import comparison as cmp
from investigations.services import runs
from investigations.services.verdict import investigation_verdict
from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job
from reports.services import exports, sections

from .conftest import store_diagnosis

pytestmark = pytest.mark.django_db


def _job(served_job, job_dir: Path, name: str) -> Job:
    triage = triage_job(job_dir).to_dict() | {"state": "done"}
    job = Job.objects.create(job_id=name, name=name, job_dir=str(job_dir), triage=triage)
    DataSource.objects.create(job=job, kind=DataSource.Kind.URL, address=served_job.dir(job_dir).base_url)
    return job


@pytest.fixture
def restored_case(served_job, job_factory) -> tuple[Investigation, Job]:
    """A restored job (primary, diagnosed by the engine on its served TSDB) and its fresh-start baseline."""
    restored_dir, truth = job_factory("restore-resource-leak")
    restored = _job(served_job, restored_dir, "restored")
    baseline = _job(served_job, Path(truth["compare_with"]), "baseline")
    investigation = Investigation.objects.create(title="slower after restore")
    InvestigationJob.objects.create(investigation=investigation, job=restored, role="primary")
    InvestigationJob.objects.create(investigation=investigation, job=baseline, role="baseline", position=1)
    result = run_diagnosis(served_job.dir(restored_dir), triage=restored.triage)
    store_diagnosis(investigation, restored, result)
    return investigation, restored


def test_the_summary_follows_the_verdict_once_the_comparison_changes_it(restored_case) -> None:
    investigation, _ = restored_case
    alone = investigation_verdict(investigation)
    assert alone is not None and alone.source.kind == "diagnosis"
    summary = sections.report_for(investigation).sections.get(key="summary")
    assert f"confidence {alone.confidence:.0%}" in summary.body and "From the diagnosis" in summary.body

    run = cmp.comparison_start(investigation)
    assert runs.run_claim(run.pk)
    assert cmp.comparison_execute(run.pk).status == TaskStatus.DONE
    verdict = investigation_verdict(investigation)
    assert verdict.klass == "restore-resource-leak"
    assert verdict.confidence > alone.confidence  # the comparison changed the verdict

    report = sections.report_for(investigation)
    summary = report.sections.get(key="summary")
    assert summary.version == 2  # refreshed: nobody had edited it
    assert f"confidence {verdict.confidence:.0%}" in summary.body
    assert f"confidence {alone.confidence:.0%}" not in summary.body
    assert verdict.diagnosis["summary"][:60] in summary.body  # the comparison's words, not the diagnosis'
    assert verdict.origin in summary.body
    steps = report.sections.get(key="next_steps").body
    assert all(step in steps for step in verdict.next_steps)
    assert ("Confirm before acting" in steps) == (verdict.confidence < 0.6)
    ticket = exports.ticket_block(report)
    assert "`restore-resource-leak`" in ticket and verdict.diagnosis["summary"][:60] in ticket
