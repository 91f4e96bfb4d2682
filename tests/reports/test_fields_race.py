"""The investigation's fields: only the changed field is written; a stale write is refused, saying what changed."""

from __future__ import annotations

import pytest
from django.urls import reverse

from investigations.models import Investigation

from .conftest import HTMX

pytestmark = pytest.mark.django_db


def _post(client, investigation, **fields):
    shown = {"status": "open", "severity": "sev3", "owner": "", "team": ""} | fields.pop("shown", {})
    data = {f"base_{k}": v for k, v in shown.items()} | shown | fields
    return client.post(reverse("investigations:update", args=[investigation.pk]), data, **HTMX)


def test_two_people_change_two_fields_from_the_same_page_and_both_changes_stay(
    case, alice_client, bob_client
) -> None:
    # Alice sets Monitoring; Bob, whose page still shows Open, sets SEV1: his form also sends status=open.
    assert _post(alice_client, case, status="monitoring").status_code == 200
    response = _post(bob_client, case, severity="sev1")
    assert response.status_code == 200
    case.refresh_from_db()
    assert (case.status, case.severity) == ("monitoring", "sev1")
    # Bob's answer shows Alice's status: his view is up to date.
    assert '<option value="monitoring" selected>' in response.content.decode()


def test_changing_a_field_someone_else_changed_meanwhile_is_refused_with_what_changed(
    case, alice_client, bob_client
) -> None:
    _post(alice_client, case, status="monitoring")
    response = _post(bob_client, case, status="resolved")
    assert response.status_code == 400
    body = response.content.decode()
    assert "Not saved" in body and "status is now Monitoring (was Open)" in body and "by alice" in body
    case.refresh_from_db()
    assert case.status == "monitoring"


def test_every_field_change_is_kept_in_the_history(case, alice_client, alice) -> None:
    _post(alice_client, case, status="monitoring")
    _post(alice_client, case, severity="sev2", shown={"status": "monitoring"})
    records = Investigation.history.filter(id=case.pk).order_by("history_date")
    assert [r.status for r in records][-2:] == ["monitoring", "monitoring"]
    assert records.last().severity == "sev2" and records.last().history_user == alice
