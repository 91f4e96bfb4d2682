"""Teams and roles: owners manage, editors edit, viewers read and comment; restricted investigations are
visible to their team only (404 for everyone else, never data)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from reports import access
from reports.models import Membership, Restriction, Team
from reports.services import sections

from .conftest import HTMX

pytestmark = pytest.mark.django_db


@pytest.fixture
def red(db, alice, bob, django_user_model):
    """Team red: alice edits, bob views; carol is on team blue."""
    carol = django_user_model.objects.create_user("carol", password="pw-carol-12345")
    red, blue = Team.objects.create(name="red"), Team.objects.create(name="blue")
    Membership.objects.create(team=red, user=alice, role="editor")
    Membership.objects.create(team=red, user=bob, role="viewer")
    Membership.objects.create(team=blue, user=carol, role="owner")
    return {"carol": carol}


def test_roles_follow_membership_ownership_and_restriction(case, red, alice, bob) -> None:
    carol = red["carol"]
    case.team = "red"
    case.save()
    assert access.role_for(alice, case) == "editor" and access.role_for(bob, case) == "viewer"
    assert access.role_for(carol, case) == "editor"  # not restricted: open to every signed-in user
    Restriction.objects.create(investigation=case)
    assert access.role_for(carol, case) is None
    assert case not in access.visible(carol) and case in access.visible(bob)
    case.owner = carol
    case.save()
    assert access.role_for(carol, case) == "owner" and case in access.visible(carol)


def test_a_viewer_reads_and_comments_but_cannot_edit(case, red, bob_client) -> None:
    case.team = "red"
    case.save()
    report = sections.report_for(case)
    page = bob_client.get(reverse("reports:page", args=[case.pk])).content.decode()
    assert 'data-testid="role">viewer' in page and 'data-testid="edit"' not in page
    s = report.sections.get(key="summary")
    response = bob_client.post(
        reverse("reports:section_save", args=[case.pk, "summary"]),
        {"base_version": s.version, "body": "viewer's words"},
        **HTMX,
    )
    assert response.status_code == 403
    s.refresh_from_db()
    assert s.body != "viewer's words"
    assert (
        bob_client.post(
            reverse("reports:comment", args=[case.pk]), {"body": "a viewer's question"}, **HTMX
        ).status_code
        == 200
    )


def test_the_share_link_is_for_owners(case, red, alice_client) -> None:
    case.team = "red"
    case.save()
    sections.report_for(case)
    assert (
        alice_client.post(reverse("reports:share", args=[case.pk]), {"action": "create"}, **HTMX).status_code
        == 403
    )


def test_an_owner_restricts_the_investigation_to_its_team(case, red, alice, alice_client, bob_client) -> None:
    case.team, case.owner = "red", alice
    case.save()
    sections.report_for(case)
    assert (
        bob_client.post(reverse("reports:restrict", args=[case.pk]), {"restricted": "1"}, **HTMX).status_code
        == 403
    )
    alice_client.post(reverse("reports:restrict", args=[case.pk]), {"restricted": "1"}, **HTMX)
    assert access.is_restricted(case)
    carol = Client()
    carol.force_login(red["carol"])
    assert carol.get(reverse("reports:page", args=[case.pk])).status_code == 404
    alice_client.post(reverse("reports:restrict", args=[case.pk]), {"restricted": "0"}, **HTMX)
    assert carol.get(reverse("reports:page", args=[case.pk])).status_code == 200


def test_only_an_owner_deletes_and_only_with_the_title_typed(
    case, red, alice, alice_client, bob_client
) -> None:
    from investigations.models import Investigation

    case.team = "red"
    case.save()
    sections.report_for(case)
    url = reverse("reports:delete", args=[case.pk])
    assert alice_client.post(url, {"confirm": case.title}, **HTMX).status_code == 403  # an editor
    case.owner = alice
    case.save()
    assert alice_client.post(url, {"confirm": "wrong"}, **HTMX).status_code == 400
    response = alice_client.post(url, {"confirm": case.title}, **HTMX)
    assert response.status_code == 204 and response["HX-Redirect"] == "/"
    assert not Investigation.objects.filter(pk=case.pk).exists()
