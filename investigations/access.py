"""Who may do what to an investigation: the one place every view fetches one.

Every view that takes an investigation id goes through `get_investigation_or_404`, partials and JSON
endpoints included, so an access rule added here holds on every page. Today every signed-in user may
view, edit and manage every investigation (there are no teams yet); the login itself is enforced by
the middleware, and this helper refuses anonymous users too so that it never relies on it alone.
"""

from __future__ import annotations

from typing import Any, Literal

from django.db.models import QuerySet
from django.http import Http404

from .models import Investigation

#: What a caller wants to do: read it, change its fields and jobs or run work on it, or change who
#: owns it (status, owner and team changes, deleting).
Action = Literal["view", "edit", "manage"]
ACTIONS: tuple[str, ...] = ("view", "edit", "manage")


def investigation_allowed(user: Any, investigation: Investigation, action: Action = "view") -> bool:
    """Return True if `user` may do `action` to `investigation`."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}: use one of {', '.join(ACTIONS)}")
    if not (getattr(user, "is_authenticated", False) and getattr(user, "is_active", False)):
        return False
    # Teams and roles (owner/editor/viewer, restricted investigations) live with the report.
    from reports import access as roles

    return roles.allows(roles.role_for(user, investigation), action)


def visible_investigations(
    user: Any, queryset: QuerySet[Investigation] | None = None
) -> QuerySet[Investigation]:
    """Return the investigations `user` may see (every list and search goes through this)."""
    from reports import access as roles

    return roles.visible(user, queryset)


def get_investigation_or_404(
    user: Any,
    pk: int,
    *,
    action: Action = "view",
    queryset: QuerySet[Investigation] | None = None,
) -> Investigation:
    """Return the investigation `pk` if `user` may do `action` to it; otherwise raise Http404.

    A refusal is a 404, not a 403: it does not tell whether the investigation exists. `queryset` lets
    a view add its `select_related`; it must be a queryset of investigations.
    """
    investigation = (queryset if queryset is not None else Investigation.objects).filter(pk=pk).first()
    if investigation is None or not investigation_allowed(user, investigation, action):
        raise not_visible(pk)
    return investigation


def not_visible(pk: object) -> Http404:
    """Return the 404 of an investigation that is missing or hidden from the user: one message for both (the
    404 page shows it), so it does not tell which."""
    return Http404(
        f"No investigation #{pk} that you can see: it was deleted, or its team has not shared it with you."
    )
