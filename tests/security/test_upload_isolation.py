"""Item 6: an upload never takes over another investigation's job. Uploading a log whose header names an
existing job's JOB_ID attached it to that Job, whose triage then preferred the upload."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from investigations.models import Investigation, InvestigationJob, Job
from investigations.services.investigations import SourceRequest, investigation_create

pytestmark = pytest.mark.django_db


def test_an_upload_naming_an_existing_job_gets_its_own_record(settings, tmp_path: Path, alice) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"
    theirs = Job.objects.create(job_id="81234", name="llama", job_dir="/jobs/81234-llama",
                                triage={"state": "done", "job": {"status": "failed"}})  # fmt: skip
    other = Investigation.objects.create(title="someone else's")
    InvestigationJob.objects.create(investigation=other, job=theirs, role="primary")

    log = SimpleUploadedFile("x.log", b"JOB_ID=81234\nJOB_NAME=evil\n0: completed step: 1\n")
    mine = investigation_create(title="mine", source=SourceRequest(kind="upload", log=log), owner=alice)

    theirs.refresh_from_db()
    assert not theirs.log_upload and theirs.name == "llama" and theirs.triage["job"]["status"] == "failed"
    assert list(other.jobs.all()) == [theirs]
    (uploaded,) = mine.jobs.all()
    assert uploaded.pk != theirs.pk and uploaded.log_upload
    assert uploaded.job_id.startswith("81234~upload-") and uploaded.name == "evil"
