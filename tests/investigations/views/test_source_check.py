"""Check now: the data source's state is refreshed from the server itself."""

from __future__ import annotations

import pytest
from django.urls import reverse

from investigations.models import DataSource

from .investigation_helpers import HTMX, assert_login_required, closed_port_url, make_investigation

pytestmark = pytest.mark.django_db


def test_it_needs_a_login(client) -> None:
    assert_login_required(client, reverse("investigations:source_check", args=[1]), "post")


def test_a_closed_port_is_reported_down(alice_client) -> None:
    investigation = make_investigation(source={"kind": "url", "address": closed_port_url(), "state": "up"})
    body = alice_client.post(
        reverse("investigations:source_check", args=[investigation.pk]), **HTMX
    ).content.decode()
    assert DataSource.objects.get().state == "down"
    assert ">Down<" in body


def test_a_live_prometheus_is_reported_up(alice_client, served_job) -> None:
    client, _, _ = served_job("healthy")
    investigation = make_investigation(source={"kind": "url", "address": client.base_url, "state": "down"})
    response = alice_client.post(reverse("investigations:source_check", args=[investigation.pk]))
    assert response.status_code == 302
    ds = DataSource.objects.get()
    assert ds.state == "up" and ds.state_detail.startswith("Prometheus 2.")
