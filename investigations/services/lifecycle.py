"""Ending an investigation's life: deleting it (owner only, confirmed, audited), and finding its twins.

Deleting an investigation removes what belongs to it (its job links, runs, findings, pinned charts) and
keeps the jobs and their data sources, which other investigations may share. Every deletion is recorded
in the admin's action log (`django.contrib.admin.models.LogEntry`, shown under Admin → Recent actions and
kept after the row is gone) and in the `stepwise.audit` log.
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.admin.models import DELETION, LogEntry
from django.db import transaction

from investigations.models import Investigation, InvestigationJob

audit = logging.getLogger("stepwise.audit")


class DeleteRefused(Exception):
    """The user may not delete this investigation, or did not confirm it; the message says which."""


def may_delete(investigation: Investigation, user: Any) -> bool:
    """Return True when `user` owns the investigation (only its owner may delete it)."""
    return bool(getattr(user, "is_authenticated", False)) and investigation.owner_id == user.pk


def investigation_delete(investigation: Investigation, user: Any, confirmation: str) -> str:
    """Delete the investigation for its owner once `confirmation` is its number; return its title.

    Raises DeleteRefused when `user` is not the owner or the confirmation does not match.
    """
    if not may_delete(investigation, user):
        owner = investigation.owner.get_username() if investigation.owner else "nobody"
        raise DeleteRefused(f"Only the investigation's owner ({owner}) can delete it.")
    if confirmation.strip().lstrip("#") != str(investigation.pk):
        raise DeleteRefused(f"Type the investigation's number, {investigation.pk}, to confirm.")
    title = investigation.title
    jobs = ", ".join(
        InvestigationJob.objects.filter(investigation=investigation).values_list("job__job_id", flat=True)
    )
    with transaction.atomic():
        locked = Investigation.objects.select_for_update().filter(pk=investigation.pk)
        LogEntry.objects.log_actions(
            user.pk,
            locked,
            DELETION,
            change_message=f"Deleted investigation #{investigation.pk} “{title}” (jobs: {jobs or 'none'}).",
            single_object=True,
        )
        locked.delete()
    audit.info(
        "investigation %s %r deleted by %s (jobs: %s)",
        investigation.pk,
        title,
        user.get_username(),
        jobs or "none",
    )
    return title


def same_job_investigations(investigation: Investigation) -> list[Investigation]:
    """Return the other investigations whose primary job is this one's primary job, newest first."""
    primary = InvestigationJob.objects.filter(
        investigation=investigation, role=InvestigationJob.Role.PRIMARY
    ).values("job_id")
    return list(
        Investigation.objects.filter(
            job_links__job_id__in=primary, job_links__role=InvestigationJob.Role.PRIMARY
        )
        .exclude(pk=investigation.pk)
        .only("pk", "title", "status")
        .order_by("-created")[:5]
    )
