"""Job.triage_status: the state of the log triage as a column, kept with Job.triage, and what reads it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from investigations import selectors
from investigations.models import Investigation, InvestigationJob, Job
from investigations.services import job_triage

pytestmark = pytest.mark.django_db

CONTRACT = {"job": {"job_id": "7", "status": "failed", "triage_class": "host-oom"}, "matches": []}


@pytest.mark.parametrize(
    ("triage", "status"),
    [
        ({}, ""),
        ({"state": "queued", "queued": "2026-11-20T14:05:00+00:00"}, "queued"),
        ({"state": "running", "last_good": CONTRACT}, "running"),
        (CONTRACT | {"state": "done"}, "done"),
        ({"state": "failed", "error": "unreadable"}, "failed"),
        ({"state": "none", "error": "no log"}, "none"),
        (CONTRACT, "done"),  # a contract stored without a state is a finished triage
    ],
)
def test_saving_a_job_sets_the_column_from_the_json(triage: dict, status: str) -> None:
    job = Job.objects.create(job_id="7", triage=triage)
    assert Job.objects.get(pk=job.pk).triage_status == status


def test_a_save_of_some_fields_that_include_the_triage_writes_the_column_too() -> None:
    job = Job.objects.create(job_id="7")
    job.triage = {"state": "failed", "error": "boom"}
    job.save(update_fields=["triage", "updated"])
    assert Job.objects.get(pk=job.pk).triage_status == Job.TriageStatus.FAILED


def test_the_last_good_triage_is_read_by_the_column() -> None:
    job = Job.objects.create(job_id="7", triage={"state": "failed", "error": "boom", "last_good": CONTRACT})
    assert job.finished_triage() == CONTRACT
    Job.objects.filter(pk=job.pk).update(triage_status=Job.TriageStatus.DONE)  # the column decides
    job.refresh_from_db()
    assert job.finished_triage() is None  # the JSON itself is no contract


def test_in_progress_means_queued_or_running_and_not_stalled(settings) -> None:
    now = timezone.now()
    old = (now - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 120)).isoformat()
    fresh = Job.objects.create(job_id="1", triage={"state": "running", "started": now.isoformat()})
    stalled = Job.objects.create(job_id="2", triage={"state": "queued", "queued": old})
    done = Job.objects.create(job_id="3", triage=CONTRACT | {"state": "done", "started": old})
    assert fresh.triage_in_progress() and not fresh.triage_stalled()
    assert stalled.triage_stalled() and not stalled.triage_in_progress()
    assert not done.triage_in_progress() and not done.triage_stalled()


def test_claiming_moves_the_column_to_running_with_the_json(tmp_path) -> None:
    job = Job.objects.create(job_id="7", log_path=str(tmp_path / "x.log"))
    job.triage = {"state": "queued", "queued": timezone.now().isoformat()}
    job.save()
    assert job_triage.job_triage_claim(job.pk)
    job.refresh_from_db()
    assert job.triage_status == job.triage["state"] == "running"
    assert not job_triage.job_triage_claim(job.pk)  # no longer queued


def test_the_investigation_list_reads_the_primary_jobs_status() -> None:
    investigation = Investigation.objects.create(title="oom")
    job = Job.objects.create(job_id="7", triage={"state": "running", "started": timezone.now().isoformat()})
    InvestigationJob.objects.create(investigation=investigation, job=job, role=InvestigationJob.Role.PRIMARY)
    row = next(r for r in selectors.investigation_list() if r.pk == investigation.pk)
    assert row.primary_triage_state == "running"
