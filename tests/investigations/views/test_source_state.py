"""The data source's state badge polls while something may change it and stops at a final state."""

from __future__ import annotations

import pytest
from django.urls import reverse

from investigations import services
from investigations.models import DataSource
from playbooks import tsdb_server

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


def test_a_job_tsdb_whose_copy_was_stopped_is_idle_not_up(alice_client, settings, tmp_path) -> None:
    """Idle copies are stopped (and all at start-up): a recorded URL no live server answers shows "Idle"."""
    settings.STEPWISE_TSDB_VIEWS = tmp_path / "views"
    investigation = make_investigation(
        source={
            "kind": "job_tsdb",
            "address": "/jobs/1",
            "state": "up",
            "served_url": "http://127.0.0.1:9",
            "state_detail": "read-only copy served at http://127.0.0.1:9",
        }
    )
    body = alice_client.get(
        reverse("investigations:source_state", args=[investigation.pk]), **HTMX
    ).content.decode()
    assert ">Idle<" in body and 'data-testid="source-idle"' in body
    assert "http://127.0.0.1:9" not in body  # no stale address offered


def test_a_live_copy_is_up_with_its_address_once(alice_client, settings, tmp_path, job_factory) -> None:
    """A served copy that runs is "Up"; its URL is said once (the detail already names it)."""
    job_dir, _ = job_factory("healthy")
    settings.STEPWISE_JOB_ROOTS = [job_dir.parent]
    settings.STEPWISE_TSDB_VIEWS = tmp_path / "views"
    investigation = make_investigation(source={"kind": "job_tsdb", "address": str(job_dir)})
    ds = DataSource.objects.get()
    try:
        services.datasource_check(ds)
        ds.refresh_from_db()
        assert ds.state == "up" and ds.served_url
        body = alice_client.get(
            reverse("investigations:source_state", args=[investigation.pk]), **HTMX
        ).content.decode()
        assert ">Up<" in body and "source-idle" not in body
        assert body.count(ds.served_url) == 1  # once, where the detail does not already name it
    finally:
        tsdb_server.reap_leftovers(settings.STEPWISE_TSDB_VIEWS)
