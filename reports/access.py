"""Teams and roles: who may see and change an investigation.

- An investigation belongs to the team whose name it carries (`Investigation.team`); a team is a Team row
  (managed in the admin). Without such a team, every signed-in user edits it, as before teams existed.
- Members have their role: owner (manage members, delete), editor (edit), viewer (read and comment). The
  investigation's owner is an owner of it; a superuser is an owner of every investigation. An
  investigation of no team is edited by everyone and managed by its owner (by anyone while it has none).
- A restricted investigation (a Restriction row) is visible to its team's members and its owner only;
  everyone else gets 404, never data. An unrestricted one is open to every signed-in user as an editor.
"""

from __future__ import annotations

from django.db.models import Exists, OuterRef, Q, QuerySet

from investigations.models import Investigation

from .models import Membership, Restriction, Role, Team

#: What each action needs, lowest role first.
ACTIONS = {"view": 0, "comment": 0, "edit": 1, "manage": 2}
_RANK: dict[str, int] = {Role.VIEWER: 0, Role.EDITOR: 1, Role.OWNER: 2}


def role_for(user, investigation: Investigation) -> str | None:
    """Return the user's role on the investigation (owner, editor, viewer), or None: not visible."""
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    if user.is_superuser or (investigation.owner_id is not None and investigation.owner_id == user.pk):
        return Role.OWNER
    team = Team.objects.filter(name=investigation.team).first() if investigation.team else None
    if team is None:  # no team: everyone edits; nobody owns it yet, so anyone may take it (manage)
        return Role.OWNER if investigation.owner_id is None else Role.EDITOR
    membership = Membership.objects.filter(team=team, user=user).first()
    if membership is not None:
        return membership.role
    if is_restricted(investigation):
        return None
    return Role.EDITOR


def allows(role: str | None, action: str) -> bool:
    return role is not None and _RANK[role] >= ACTIONS[action]


def visible(user, queryset: QuerySet[Investigation] | None = None) -> QuerySet[Investigation]:
    """Return the investigations the user may see (restricted ones of other teams left out)."""
    queryset = Investigation.objects.all() if queryset is None else queryset
    if user is None or not user.is_authenticated:
        return queryset.none()
    if user.is_superuser:
        return queryset
    teams = Team.objects.filter(memberships__user=user).values("name")
    return queryset.filter(Q(restriction__isnull=True) | Q(team__in=teams) | Q(owner=user))


def restrict(investigation: Investigation, restricted: bool) -> None:
    if restricted:
        Restriction.objects.get_or_create(investigation=investigation)
    else:
        Restriction.objects.filter(investigation=investigation).delete()
    investigation.restricted = restricted  # type: ignore[attr-defined]  # `is_restricted` answers it now


def with_restricted(queryset: QuerySet[Investigation]) -> QuerySet[Investigation]:
    """The investigations, each read with whether it is restricted (`is_restricted` asks nothing more)."""
    return queryset.annotate(restricted=Exists(Restriction.objects.filter(investigation=OuterRef("pk"))))


def is_restricted(investigation: Investigation) -> bool:
    known = getattr(investigation, "restricted", None)  # read with it (`with_restricted`), or set since
    if known is not None:
        return bool(known)
    return Restriction.objects.filter(investigation=investigation).exists()


def visible_jobs(user):
    """Return the jobs the user may see: those of an investigation visible to them, or of none."""
    from investigations.models import Job

    return Job.objects.filter(
        Q(investigation_links__isnull=True) | Q(investigation_links__investigation__in=visible(user))
    ).distinct()


def datasource_visible(user, datasource) -> bool:
    return datasource.job_id is None or visible_jobs(user).filter(pk=datasource.job_id).exists()


def run_visible(user, run) -> bool:
    """A query run is visible when its investigation (if any) and its data source are."""
    if run.investigation_id is not None and not visible(user).filter(pk=run.investigation_id).exists():
        return False
    return datasource_visible(user, run.datasource)


def visible_datasources(user, queryset):
    """Return the data sources of `queryset` whose job the user may see (or that have no job)."""
    return queryset.filter(Q(job__isnull=True) | Q(job__in=visible_jobs(user)))


def visible_runs(user, queryset):
    """Return the query runs of `queryset` the user may see (see `run_visible`)."""
    return queryset.filter(
        Q(investigation__isnull=True) | Q(investigation__in=visible(user)),
        Q(datasource__job__isnull=True) | Q(datasource__job__in=visible_jobs(user)),
    )
