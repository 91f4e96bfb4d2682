"""A job opened from a URL or tunnel gets its log afterwards: uploaded from the triage region, then triaged."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from investigations.models import Job

from .investigation_helpers import (
    HTMX,
    assert_login_required,
    make_investigation,
    roots,  # noqa: F401 (a fixture, used through usefixtures)
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("roots")]


def test_it_needs_a_login(client) -> None:
    assert_login_required(client, reverse("investigations:log_attach", args=[1]), "post")


def test_a_job_without_a_log_offers_the_upload(alice_client) -> None:
    investigation = make_investigation(
        triage={"state": "none", "error": "This job has no log: upload it to triage it."}
    )
    body = alice_client.get(reverse("investigations:detail", args=[investigation.pk])).content.decode()
    assert reverse("investigations:log_attach", args=[investigation.pk]) in body


def test_it_saves_the_log_and_queues_its_triage(
    alice_client, job_factory, django_capture_on_commit_callbacks
) -> None:
    job_dir, _ = job_factory("healthy")
    investigation = make_investigation(triage={"state": "none"})
    log = SimpleUploadedFile("job.log", (job_dir / "log").read_bytes())
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = alice_client.post(
            reverse("investigations:log_attach", args=[investigation.pk]), {"log": log}, **HTMX
        )
    assert response.status_code == 200
    job = Job.objects.get()
    assert job.log_upload and job.triage["state"] == "queued"
    assert len(callbacks) == 1
    assert 'hx-trigger="every 1s"' in response.content.decode()


def test_an_empty_file_is_refused_with_a_message(alice_client) -> None:
    investigation = make_investigation(triage={"state": "none"})
    response = alice_client.post(
        reverse("investigations:log_attach", args=[investigation.pk]),
        {"log": SimpleUploadedFile("e.log", b"")},
        **HTMX,
    )
    assert response.status_code == 400
    assert "empty" in response.content.decode()
    job = Job.objects.get()
    assert not job.log_upload and job.triage == {"state": "none"}
