"""The data source's state badge polls while something may change it and stops at a final state."""

from __future__ import annotations

import pytest
from django.urls import reverse

from .investigation_helpers import HTMX, assert_login_required, make_investigation

pytestmark = pytest.mark.django_db


def test_it_needs_a_login(client) -> None:
    assert_login_required(client, reverse("investigations:source_state", args=[1]))


def test_a_starting_source_polls(alice_client) -> None:
    investigation = make_investigation(source={"kind": "job_tsdb", "address": "/jobs/1", "state": "starting"})
    body = alice_client.get(
        reverse("investigations:source_state", args=[investigation.pk]), **HTMX
    ).content.decode()
    assert 'hx-trigger="every 2s"' in body and "Starting" in body


@pytest.mark.parametrize("state, label", [("up", "Up"), ("down", "Down"), ("error", "Error")])
def test_a_final_state_stops_polling(alice_client, state: str, label: str) -> None:
    investigation = make_investigation(
        source={"kind": "url", "address": "http://127.0.0.1:9", "state": state, "state_detail": "why"}
    )
    body = alice_client.get(
        reverse("investigations:source_state", args=[investigation.pk]), **HTMX
    ).content.decode()
    assert "every 2s" not in body and f">{label}<" in body and "why" in body


def test_an_unknown_state_polls_while_discovery_is_pending(alice_client) -> None:
    investigation = make_investigation(
        source={"kind": "job_tsdb", "address": "/jobs/1", "discovery_status": "queued"}
    )
    body = alice_client.get(
        reverse("investigations:source_state", args=[investigation.pk]), **HTMX
    ).content.decode()
    assert "every 2s" in body


def test_no_source_says_so(alice_client) -> None:
    investigation = make_investigation()
    body = alice_client.get(
        reverse("investigations:source_state", args=[investigation.pk]), **HTMX
    ).content.decode()
    assert "No Prometheus for this job" in body
