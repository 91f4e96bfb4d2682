"""Running the triage again queues it and enqueues the task after commit."""

from __future__ import annotations

import pytest
from django.urls import reverse

from investigations.models import Job

from .investigation_helpers import HTMX, assert_login_required, make_investigation

pytestmark = pytest.mark.django_db


def test_it_needs_a_login(client) -> None:
    assert_login_required(client, reverse("investigations:triage_rerun", args=[1]), "post")


def test_it_queues_the_triage_again(alice_client, django_capture_on_commit_callbacks) -> None:
    investigation = make_investigation(triage={"state": "failed", "error": "x"})
    Job.objects.update(log_path="/jobs/1.log")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = alice_client.post(reverse("investigations:triage_rerun", args=[investigation.pk]), **HTMX)
    assert Job.objects.get().triage["state"] == "queued"
    assert len(callbacks) == 1
    assert 'hx-trigger="every 1s"' in response.content.decode()


def test_a_job_without_a_log_says_so(alice_client, django_capture_on_commit_callbacks) -> None:
    investigation = make_investigation()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        body = alice_client.post(
            reverse("investigations:triage_rerun", args=[investigation.pk]), **HTMX
        ).content.decode()
    assert "no log" in body and not callbacks
