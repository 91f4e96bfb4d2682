"""Inline edits of an investigation's status, severity, team (htmx POST, the header is swapped)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from .investigation_helpers import HTMX, assert_login_required, make_investigation

pytestmark = pytest.mark.django_db


def test_it_needs_a_login(client) -> None:
    assert_login_required(client, reverse("investigations:update", args=[1]), "post")


def test_it_changes_status_and_severity_and_returns_the_header(alice_client) -> None:
    investigation = make_investigation()
    response = alice_client.post(
        reverse("investigations:update", args=[investigation.pk]),
        {"status": "monitoring", "severity": "sev1"},
        **HTMX,
    )
    investigation.refresh_from_db()
    assert (investigation.status, investigation.severity) == ("monitoring", "sev1")
    assert response.content.decode().lstrip().startswith('<section id="investigation-header"')


def test_only_the_fields_sent_change(alice_client) -> None:
    investigation = make_investigation(team="infra")
    alice_client.post(reverse("investigations:update", args=[investigation.pk]), {"status": "resolved"})
    investigation.refresh_from_db()
    assert (investigation.status, investigation.team, investigation.severity) == ("resolved", "infra", "sev3")


def test_a_bad_value_is_refused_with_a_message(alice_client) -> None:
    investigation = make_investigation()
    response = alice_client.post(
        reverse("investigations:update", args=[investigation.pk]), {"status": "exploded"}, **HTMX
    )
    assert response.status_code == 400 and "exploded" in response.content.decode()
    investigation.refresh_from_db()
    assert investigation.status == "open"


def test_without_htmx_it_redirects_to_the_page(alice_client) -> None:
    investigation = make_investigation()
    response = alice_client.post(
        reverse("investigations:update", args=[investigation.pk]), {"severity": "sev4"}
    )
    assert response["Location"] == reverse("investigations:detail", args=[investigation.pk])


def test_it_gives_the_investigation_to_an_owner_and_takes_it_back(alice_client, alice) -> None:
    investigation = make_investigation()
    url = reverse("investigations:update", args=[investigation.pk])
    body = alice_client.post(url, {"owner": alice.pk}, **HTMX).content.decode()
    investigation.refresh_from_db()
    assert investigation.owner == alice
    assert f'<option value="{alice.pk}" selected>alice</option>' in body
    alice_client.post(url, {"owner": ""}, **HTMX)
    investigation.refresh_from_db()
    assert investigation.owner is None


def test_resolving_refreshes_the_source_card_out_of_band(alice_client) -> None:
    """Resolving may close the job's tunnel: the response carries the source card for an out-of-band swap."""
    investigation = make_investigation()
    response = alice_client.post(
        reverse("investigations:update", args=[investigation.pk]), {"status": "resolved"}, **HTMX
    )
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="investigation-header"')
    assert '<section id="source-state" class="card source-state" hx-swap-oob="true"' in body
