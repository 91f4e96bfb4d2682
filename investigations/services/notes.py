"""People's notes on the timeline (issue 13): a note at a step or a time, kept in the investigation.

A note is stored at a time (unix seconds) with the step the job was at then, read from the job's step
axis (the timeline's shared context, cached): it is drawn at the same place whether the x-axis shows
steps or time. Everyone who can view the investigation sees the notes; editors add and delete them
(the views check the role). Adding and deleting are kept in the note's history, which the activity
stream reads (`note_events`).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from investigations.models import Investigation, Job, TimelineNote
from investigations.times import parse_time, utc
from playbooks import timeline as tl

from .timeline_session import timeline_open
from .timeline_view import TimelineView, TimelineViewError

MAX_TEXT = 500
#: How much of a note its mark's label shows (the whole text is in the list under the toolbar).
LABEL_CHARS = 40
_STEP = re.compile(r"^\s*(?:step\s*)?(\d[\d,_]*(?:\.\d+)?)\s*$", re.IGNORECASE)


class NoteError(Exception):
    """A note cannot be added: no text, a place that is neither a step nor a time, or outside the job."""


@dataclass(frozen=True)
class Where:
    """Where a note goes: a step, or a time (unix seconds)."""

    step: float | None = None
    at: float | None = None


def where_parse(text: str) -> Where:
    """Return the place a person typed: "1200" or "step 1200" is a step; a date and time (UTC unless it
    says otherwise, "UTC" accepted) or unix seconds with a decimal point are a time."""
    text = (text or "").strip()
    if not text:
        raise NoteError("Say where the note goes: a step (1200) or a time (2026-05-09 20:12:00 UTC).")
    found = _STEP.match(text)
    if found and "." not in found[1]:
        return Where(step=float(found[1].replace(",", "").replace("_", "")))
    try:
        return Where(at=parse_time(re.sub(r"\s*UTC$", "", text, flags=re.IGNORECASE)))
    except ValueError:
        raise NoteError(f"{text!r} is neither a step (1200) nor a time (2026-05-09 20:12:00 UTC).") from None


def _axis_place(job: Job | None, where: Where) -> tuple[float, float | None]:
    """Return (time, step) of the place through the job's step axis (step None when it has none)."""
    ds = job.current_datasource() if job is not None else None
    try:
        session = timeline_open(ds, TimelineView())
    except TimelineViewError as exc:
        if where.at is None:
            raise NoteError(f"A step needs the job's step axis, which cannot be read now: {exc}") from exc
        return where.at, None  # a time is a place without the data source
    try:
        axis = session.ctx.axis
        if where.step is not None:
            at = float("nan") if axis.empty else float(axis.time_at(where.step))
            if not math.isfinite(at):
                raise NoteError(f"Step {where.step:g} is not in this job's data.")
            return at, where.step
        assert where.at is not None  # where_parse sets either step or at
        step = None if axis.empty else float(axis.step_at(where.at))
        return float(where.at), (round(step, 1) if step is not None and math.isfinite(step) else None)
    finally:
        session.close()


def note_add(
    investigation: Investigation, job: Job | None, *, where: str, text: str, user: Any
) -> TimelineNote:
    """Return a new note on the job's timeline at `where` (a step or a time). Raises NoteError."""
    text = " ".join((text or "").split())
    if not text:
        raise NoteError("Write the note.")
    if len(text) > MAX_TEXT:
        raise NoteError(f"A note holds at most {MAX_TEXT} characters.")
    at, step = _axis_place(job, where_parse(where))
    person = user if getattr(user, "is_authenticated", False) else None
    note = TimelineNote(investigation=investigation, job=job, at=at, step=step, text=text, created_by=person)
    note._history_user = person  # who added it, in the history the activity stream reads
    note.save()
    return note


def note_delete(investigation: Investigation, note_id: int, *, user: Any = None) -> bool:
    """Return True if the note was removed from the investigation (the history says who removed it)."""
    note = TimelineNote.objects.filter(investigation=investigation, pk=note_id).first()
    if note is None:
        return False
    note._history_user = user if getattr(user, "is_authenticated", False) else None
    note.delete()
    return True


def notes_of(investigation: Investigation, job: Job | None) -> list[TimelineNote]:
    """Return the notes on this job's timeline (and those of no job), in time order."""
    rows = TimelineNote.objects.filter(investigation=investigation).select_related("created_by")
    if job is not None:
        rows = rows.filter(Q(job=job) | Q(job__isnull=True))
    return list(rows.order_by("at", "pk"))


def note_marks(investigation: Investigation, job: Job | None) -> list[tl.Annotation]:
    """Return the notes as marks on every panel."""
    out = []
    for note in notes_of(investigation, job):
        label = note.text if len(note.text) <= LABEL_CHARS else note.text[: LABEL_CHARS - 1] + "…"
        out.append(tl.Annotation(kind="note", label=f"✎ {label}", time=note.at, step=note.step))
    return out


def note_place(note: TimelineNote) -> str:
    """Return where a note is, as people read it: "step 1,200 · 2026-05-09 20:12:00 UTC"."""
    when = utc(note.at)
    return f"step {note.step:,.0f} · {when}" if note.step is not None else when


def note_events(investigation: Investigation) -> list[tuple[dt.datetime, str, str, str]]:
    """Return (when, who, what, anchor) of every note added or deleted, for the activity stream."""
    events = []
    records = TimelineNote.history.filter(investigation_id=investigation.pk).select_related("history_user")
    for r in records:
        verb = {"+": "added", "-": "deleted"}.get(r.history_type)
        if verb is None:
            continue
        who = r.history_user.get_username() if r.history_user is not None else ""
        place = f"step {r.step:,.0f}" if r.step is not None else utc(r.at)
        events.append((r.history_date, who, f"{verb} a timeline note at {place}: {r.text[:140]}", ""))
    return events
