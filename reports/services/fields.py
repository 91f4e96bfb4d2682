"""The investigation's own fields (status, severity, owner, team) changed by several people at once.

The page's form sends every field on each change, plus the value each field had when the page showed it
(`base_<name>`). Only the fields whose value differs from their base are written, so a change of severity
never writes back a status someone else changed meanwhile; a field whose stored value no longer equals
its base was changed by someone else, and that write is refused, saying what changed (and who changed it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from investigations.models import Investigation
from investigations.services import investigations as inv

FIELDS = ("title", "status", "severity", "owner", "team")


@dataclass
class StaleWrite(Exception):
    """Fields changed by someone else since the page showed them: {name: (what the page showed, now)}."""

    changed: dict[str, tuple[str, str]]
    by: str = ""

    def __str__(self) -> str:
        what = "; ".join(
            f"{name} is now {now or '—'} (was {was or '—'})" for name, (was, now) in self.changed.items()
        )
        who = f" by {self.by}" if self.by else ""
        return f"Not saved: changed{who} since you loaded the page: {what}. Your view is now up to date."


def _text(investigation: Investigation, name: str) -> str:
    if name == "owner":
        return str(investigation.owner_id or "")
    return str(getattr(investigation, name) or "")


def _display(investigation: Investigation, name: str) -> str:
    if name == "owner":
        return investigation.owner.get_username() if investigation.owner else ""
    if name in ("status", "severity"):
        return getattr(investigation, f"get_{name}_display")()
    return str(getattr(investigation, name) or "")


def _submitted_text(value: Any) -> str:
    if value is None:
        return ""
    return str(getattr(value, "pk", value)).strip()


def changing(submitted: Any, bases: dict[str, str]) -> set[str]:
    """Return the names of the fields `submitted` (a form's data) changes from what its page showed."""
    return {
        name
        for name in FIELDS
        if name in submitted
        and (name not in bases or str(submitted.get(name, "")).strip() != bases[name].strip())
    }


def fields_update(investigation_id: int, changes: dict[str, Any], bases: dict[str, str]) -> list[str]:
    """Write the submitted `changes` ({name: cleaned value}) whose value differs from `bases[name]` (the
    value shown); return the names written. A field without a base is written as sent (a client that
    sends one field). Raises StaleWrite, writing nothing, when a field to write changed meanwhile."""
    with transaction.atomic():
        investigation = (
            Investigation.objects.select_for_update().select_related("owner").get(pk=investigation_id)
        )
        write = {
            name: value
            for name, value in changes.items()
            if name in FIELDS and (name not in bases or _submitted_text(value) != bases[name].strip())
        }
        stale = {
            name: (bases[name], _text(investigation, name))
            for name in write
            if name in bases and _text(investigation, name) != bases[name].strip()
        }
        if stale:
            shown = {
                name: (_base_display(name, was), _display(investigation, name))
                for name, (was, _) in stale.items()
            }
            raise StaleWrite(shown, by=_last_changer(investigation))
        if write:
            inv.investigation_update(investigation, **write)
        return list(write)


def _base_display(name: str, value: str) -> str:
    if name == "owner" and value:
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.filter(pk=value).first()
        return user.get_username() if user else value
    if name == "status":
        return dict(Investigation.Status.choices).get(value, value)
    if name == "severity":
        return dict(Investigation.Severity.choices).get(value, value)
    return value


def _last_changer(investigation: Investigation) -> str:
    history = getattr(investigation, "history", None)
    record = history.order_by("-history_date").first() if history is not None else None
    user = getattr(record, "history_user", None)
    return user.get_username() if user is not None else ""
