"""Teams in the app: a member sees their team's members and roles; owners (and staff) invite by user name,
change roles and remove members (`services.teams` has the rules)."""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from investigations.views._common import HtmxHttpRequest
from reports import access
from reports.models import Membership, Role, Team
from reports.services import teams as svc


def _team_for(request: HtmxHttpRequest, team_id: int, *, manage: bool = False) -> tuple[Team, str]:
    """Return the team and the user's role in it: 404 for a non-member, 403 when managing needs an owner."""
    team = get_object_or_404(Team, pk=team_id)
    role = svc.team_role(request.user, team)
    if role is None:
        raise Http404("No such team.")
    if manage and role != Role.OWNER:
        raise PermissionDenied("Only the team's owners manage its members.")
    return team, role


def _context(request: HtmxHttpRequest, team: Team, role: str, error: str = "") -> dict:
    investigations = access.visible(request.user).filter(team=team.name).order_by("-created")[:50]
    return {
        "team": team,
        "role": role,
        "can_manage": role == Role.OWNER,
        "memberships": team.memberships.select_related("user").order_by("user__username"),
        "roles": Role.choices,
        "investigations": investigations,
        "members_error": error,
    }


def _members(request: HtmxHttpRequest, team: Team, role: str, change: Callable[[], object]) -> HttpResponse:
    """Make one membership change and answer with the members region (or the page without htmx)."""
    error, status = "", 200
    try:
        change()
    except svc.TeamError as exc:
        error, status = str(exc), 400
    if request.htmx:
        context = _context(request, team, role, error)
        return render(request, "reports/team.html#team-members", context, status=status)
    if error:
        return _page(request, team, role, error, status)
    return redirect("reports:team", team_id=team.pk)


def _page(request, team, role, error: str = "", status: int = 200) -> HttpResponse:
    return render(request, "reports/team.html", _context(request, team, role, error), status=status)


@require_GET
@never_cache
def team_list(request: HtmxHttpRequest) -> HttpResponse:
    teams = svc.teams_visible(request.user).prefetch_related("memberships")
    own = dict(Membership.objects.filter(user=request.user).values_list("team_id", "role"))
    return render(request, "reports/teams.html", {"teams": teams, "own": own})


@require_GET
@never_cache
def team(request: HtmxHttpRequest, team_id: int) -> HttpResponse:
    team, role = _team_for(request, team_id)
    return _page(request, team, role)


@require_POST
def member_add(request: HtmxHttpRequest, team_id: int) -> HttpResponse:
    team, role = _team_for(request, team_id, manage=True)
    username, new_role = request.POST.get("username", ""), request.POST.get("role", Role.VIEWER)
    return _members(
        request,
        team,
        role,
        lambda: svc.member_add(team, username=username, role=new_role, actor=request.user),
    )


@require_POST
def member_role(request: HtmxHttpRequest, team_id: int, membership_id: int) -> HttpResponse:
    team, role = _team_for(request, team_id, manage=True)
    membership = get_object_or_404(Membership, pk=membership_id, team=team)
    new_role = request.POST.get("role", "")
    return _members(
        request, team, role, lambda: svc.member_set_role(membership.pk, role=new_role, actor=request.user)
    )


@require_POST
def member_remove(request: HtmxHttpRequest, team_id: int, membership_id: int) -> HttpResponse:
    team, role = _team_for(request, team_id, manage=True)
    membership = get_object_or_404(Membership, pk=membership_id, team=team)
    return _members(request, team, role, lambda: svc.member_remove(membership.pk, actor=request.user))
