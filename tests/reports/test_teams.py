"""Team membership in the app (/teams/): owners (or staff) invite by user name, change roles and remove
members; the last owner stays; every change is audited in the activity stream of the team's investigations;
viewers, editors and other teams' users cannot manage (403 / 404); a viewer added here reads a restricted
investigation of the team but cannot edit it."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from reports.models import Membership, Restriction, Team
from reports.services import activity, sections

from .conftest import HTMX

pytestmark = pytest.mark.django_db


@pytest.fixture
def red(alice) -> Team:
    team = Team.objects.create(name="red")
    Membership.objects.create(team=team, user=alice, role="owner")
    return team


@pytest.fixture
def secret(case, red):
    """The thermal investigation, of team red and restricted to it."""
    case.team = "red"
    case.save()
    Restriction.objects.create(investigation=case)
    return case


def _add(client: Client, team: Team, username: str, role: str = "viewer"):
    return client.post(
        reverse("reports:member_add", args=[team.pk]), {"username": username, "role": role}, **HTMX
    )


def _member(team: Team, user) -> Membership:
    return Membership.objects.get(team=team, user=user)


def _events(case) -> list[tuple[str, str]]:
    return [(e.who, e.what) for e in activity.activity(sections.report_for(case))]


def test_an_owner_invites_by_user_name_and_the_viewer_reads_but_cannot_edit(
    secret, red, alice, alice_client, bob, bob_client
) -> None:
    report_url = reverse("reports:page", args=[secret.pk])
    assert bob_client.get(report_url).status_code == 404  # restricted, and bob is of no team yet
    response = _add(alice_client, red, "bob")
    assert response.status_code == 200 and 'data-user="bob"' in response.content.decode()
    assert _member(red, bob).role == "viewer"
    assert bob_client.get(report_url).status_code == 200
    summary = sections.report_for(secret).sections.get(key="summary")
    save = reverse("reports:section_save", args=[secret.pk, "summary"])
    assert bob_client.post(save, {"base_version": summary.version, "body": "x"}, **HTMX).status_code == 403
    assert ("alice", "added bob to team red as viewer") in _events(secret)


def test_a_role_change_and_a_removal_are_audited_and_take_effect(
    secret, red, alice, alice_client, bob, bob_client
) -> None:
    _add(alice_client, red, "bob")
    membership = _member(red, bob)
    alice_client.post(
        reverse("reports:member_role", args=[red.pk, membership.pk]), {"role": "editor"}, **HTMX
    )
    assert _member(red, bob).role == "editor"
    summary = sections.report_for(secret).sections.get(key="summary")
    save = reverse("reports:section_save", args=[secret.pk, "summary"])
    assert bob_client.post(save, {"base_version": summary.version, "body": "ours"}, **HTMX).status_code == 200
    alice_client.post(reverse("reports:member_remove", args=[red.pk, membership.pk]), **HTMX)
    assert not Membership.objects.filter(team=red, user=bob).exists()
    assert bob_client.get(reverse("reports:page", args=[secret.pk])).status_code == 404
    events = _events(secret)
    assert ("alice", "changed bob's role in team red from viewer to editor") in events
    assert ("alice", "removed bob from team red") in events
    page = alice_client.get(reverse("reports:activity", args=[secret.pk])).content.decode()
    assert "removed bob from team red" in page


def test_the_last_owner_can_be_neither_removed_nor_demoted(red, alice, alice_client, bob) -> None:
    own = _member(red, alice)
    response = alice_client.post(reverse("reports:member_remove", args=[red.pk, own.pk]), **HTMX)
    assert response.status_code == 400 and "last owner of red" in response.content.decode()
    response = alice_client.post(
        reverse("reports:member_role", args=[red.pk, own.pk]), {"role": "viewer"}, **HTMX
    )
    assert response.status_code == 400 and _member(red, alice).role == "owner"
    _add(alice_client, red, "bob", "owner")  # with a second owner, the first may step down
    response = alice_client.post(
        reverse("reports:member_role", args=[red.pk, own.pk]), {"role": "viewer"}, **HTMX
    )
    assert response.status_code == 200 and _member(red, alice).role == "viewer"


def test_unknown_users_duplicates_and_bad_roles_are_refused_with_a_message(red, alice_client, bob) -> None:
    assert "No active user is named “nobody”" in _add(alice_client, red, "nobody").content.decode()
    assert _add(alice_client, red, "bob", "admin").status_code == 400
    assert _add(alice_client, red, "bob").status_code == 200
    response = _add(alice_client, red, "bob")
    assert response.status_code == 400 and "already a member" in response.content.decode()
    assert Membership.objects.filter(team=red).count() == 2


@pytest.mark.parametrize("role", ["viewer", "editor"])
def test_viewers_and_editors_see_the_team_but_cannot_manage_it(red, alice, bob, bob_client, role) -> None:
    Membership.objects.create(team=red, user=bob, role=role)
    page = bob_client.get(reverse("reports:team", args=[red.pk]))
    assert page.status_code == 200 and 'data-testid="invite"' not in page.content.decode()
    own = _member(red, alice)
    assert _add(bob_client, red, "bob", "owner").status_code == 403
    assert (
        bob_client.post(reverse("reports:member_role", args=[red.pk, own.pk]), {"role": "viewer"}).status_code
        == 403
    )
    assert bob_client.post(reverse("reports:member_remove", args=[red.pk, own.pk])).status_code == 403
    assert _member(red, alice).role == "owner" and _member(red, bob).role == role


def test_another_teams_user_gets_404_and_staff_manage_every_team(
    red, alice, bob, bob_client, django_user_model
) -> None:
    blue = Team.objects.create(name="blue")
    Membership.objects.create(team=blue, user=bob, role="owner")
    own = _member(red, alice)
    assert bob_client.get(reverse("reports:team", args=[red.pk])).status_code == 404
    assert _add(bob_client, red, "bob", "owner").status_code == 404
    assert bob_client.post(reverse("reports:member_remove", args=[red.pk, own.pk])).status_code == 404
    assert (
        bob_client.post(reverse("reports:member_role", args=[red.pk, own.pk]), {"role": "viewer"}).status_code
        == 404
    )
    assert (
        bob_client.post(reverse("reports:member_remove", args=[blue.pk, own.pk])).status_code == 404
    )  # not blue's
    listing = bob_client.get(reverse("reports:teams")).content.decode()
    assert "blue" in listing and ">red<" not in listing
    staff = django_user_model.objects.create_user("sam", password="pw-sam-12345", is_staff=True)
    client = Client()
    client.force_login(staff)
    assert _add(client, red, "bob", "editor").status_code == 200 and _member(red, bob).role == "editor"
