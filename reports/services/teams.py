"""Team membership managed in the app: a team's owners (or staff) invite members by user name, change their
role (owner, editor, viewer) and remove them; the last owner can be neither removed nor demoted.

Every change is kept by django-simple-history on Membership (who, when, what, with a reason), and the
activity stream of each investigation of the team shows it (`services.activity`).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import QuerySet

from reports.models import Membership, Role, Team


class TeamError(Exception):
    """A membership change that cannot be made (the message says why, for the person who tried)."""


def team_role(user, team: Team) -> str | None:
    """Return the user's role in the team (staff and superusers manage every team), or None: not a member."""
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    if user.is_staff or user.is_superuser:
        return Role.OWNER
    return Membership.objects.filter(team=team, user=user).values_list("role", flat=True).first()


def teams_visible(user) -> QuerySet[Team]:
    """Return the teams the user may open: their own, every team for staff."""
    if user.is_staff or user.is_superuser:
        return Team.objects.all()
    return Team.objects.filter(memberships__user=user).distinct()


def _save(membership: Membership, actor, reason: str) -> None:
    membership._history_user = actor
    membership._change_reason = reason
    membership.save()


def _locked(membership_id: int) -> Membership:
    """Return the membership, its team's owner rows locked: two owners demoting each other at once cannot
    leave the team without one."""
    membership = Membership.objects.select_related("team", "user").get(pk=membership_id)
    list(Membership.objects.select_for_update().filter(team_id=membership.team_id, role=Role.OWNER))
    return Membership.objects.select_for_update().select_related("team", "user").get(pk=membership_id)


def _check_not_last_owner(membership: Membership) -> None:
    others = Membership.objects.filter(team_id=membership.team_id, role=Role.OWNER).exclude(pk=membership.pk)
    if membership.role == Role.OWNER and not others.exists():
        raise TeamError(
            f"{membership.user.get_username()} is the last owner of {membership.team.name}: "
            "make someone else an owner first."
        )


def member_add(team: Team, *, username: str, role: str, actor) -> Membership:
    """Add the user named `username` to the team with `role`."""
    if role not in Role.values:
        raise TeamError(f"“{role}” is not a role (owner, editor or viewer).")
    user = get_user_model().objects.filter(username=username.strip(), is_active=True).first()
    if user is None:
        raise TeamError(f"No active user is named “{username.strip()}”.")
    with transaction.atomic():
        if Membership.objects.select_for_update().filter(team=team, user=user).exists():
            raise TeamError(f"{user.get_username()} is already a member of {team.name}.")
        membership = Membership(team=team, user=user, role=role)
        _save(membership, actor, f"added {user.get_username()} to team {team.name} as {role}")
    return membership


def member_set_role(membership_id: int, *, role: str, actor) -> Membership:
    """Change a member's role; the team's last owner keeps theirs."""
    if role not in Role.values:
        raise TeamError(f"“{role}” is not a role (owner, editor or viewer).")
    with transaction.atomic():
        membership = _locked(membership_id)
        if membership.role == role:
            return membership
        _check_not_last_owner(membership)
        old = membership.role
        membership.role = role
        _save(
            membership,
            actor,
            f"changed {membership.user.get_username()}'s role in team {membership.team.name} from {old} to {role}",
        )
    return membership


def member_remove(membership_id: int, *, actor) -> None:
    """Remove a member from the team; the last owner stays."""
    with transaction.atomic():
        membership = _locked(membership_id)
        _check_not_last_owner(membership)
        membership._history_user = actor
        membership._change_reason = (
            f"removed {membership.user.get_username()} from team {membership.team.name}"
        )
        membership.delete()
