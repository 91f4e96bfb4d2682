"""The data-sources page lists sources with their state and adds Prometheus URLs through the allow-list."""

from __future__ import annotations

import pytest
from django.urls import reverse

from investigations.models import DataSource

pytestmark = pytest.mark.django_db


def test_it_lists_data_sources_with_their_state(alice_client, url_source) -> None:
    DataSource.objects.filter(pk=url_source.pk).update(
        state=DataSource.State.DOWN, state_detail="connection refused"
    )
    response = alice_client.get(reverse("investigations:sources"))
    body = response.content.decode()
    assert response.status_code == 200
    assert "http://127.0.0.1:9" in body
    assert 'class="badge badge-down" title="connection refused"' in body
    assert reverse("investigations:run_start", args=[url_source.pk]) in body


def test_it_says_how_to_get_data_when_there_is_none(alice_client) -> None:
    body = alice_client.get(reverse("investigations:sources")).content.decode()
    assert "No data sources yet" in body
    assert "make demo" in body


def test_it_adds_an_allowed_prometheus_url(alice_client, served_job) -> None:
    url = served_job("healthy")[0].base_url
    response = alice_client.post(reverse("investigations:source_add"), {"address": url + "/"})
    assert response.status_code == 302
    source = DataSource.objects.get()
    assert (source.kind, source.address) == (DataSource.Kind.URL, url)


def test_it_refuses_a_host_outside_the_allow_list_with_a_clear_message(alice_client) -> None:
    response = alice_client.post(reverse("investigations:source_add"), {"address": "http://10.1.2.3:9090"})
    assert response.status_code == 400
    body = response.content.decode()
    assert "Prometheus at 10.1.2.3:9090 is not allowed" in body
    assert "STEPWISE_ALLOWED_PROMETHEUS" in body
    assert not DataSource.objects.exists()
