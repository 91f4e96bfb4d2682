"""The triage region polls while the triage runs; when finished it stops and tells the page (HX-Trigger)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from .investigation_helpers import HTMX, assert_login_required, make_investigation

pytestmark = pytest.mark.django_db


def test_it_needs_a_login(client) -> None:
    assert_login_required(client, reverse("investigations:triage", args=[1]))


def test_a_queued_triage_keeps_polling(alice_client) -> None:
    investigation = make_investigation(triage={"state": "queued"})
    response = alice_client.get(reverse("investigations:triage", args=[investigation.pk]), **HTMX)
    assert 'hx-trigger="every 1s"' in response.content.decode()
    assert "HX-Trigger" not in response


def test_a_failed_triage_shows_why_and_stops_polling(alice_client) -> None:
    investigation = make_investigation(triage={"state": "failed", "error": "The log could not be read: gone"})
    response = alice_client.get(reverse("investigations:triage", args=[investigation.pk]), **HTMX)
    body = response.content.decode()
    assert "The log could not be read: gone" in body and "every 1s" not in body
    assert response["HX-Trigger"] == "triage-finished"


def test_it_is_404_for_an_unknown_investigation(alice_client) -> None:
    assert alice_client.get(reverse("investigations:triage", args=[999]), **HTMX).status_code == 404


def test_a_triage_no_worker_finished_stops_polling_and_offers_a_rerun(alice_client, settings) -> None:
    long_ago = (timezone.now() - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 120)).isoformat()
    investigation = make_investigation(triage={"state": "running", "started": long_ago})
    body = alice_client.get(
        reverse("investigations:triage", args=[investigation.pk]), **HTMX
    ).content.decode()
    assert "every 1s" not in body and "No worker finished this triage" in body
    assert reverse("investigations:triage_rerun", args=[investigation.pk]) in body
