"""A report's sections: created and refreshed from the machine's text, edited by people concurrently.

Rules:
- A section nobody edited follows the machine: a new diagnosis replaces its body.
- An edited section keeps its body; the machine's newer text waits in `machine_pending`, offered as a diff
  that a person takes (`section_take_machine`) or leaves (`section_leave_machine`).
- Saving carries the version the editor started from. Saving over a newer version never overwrites: the
  edits are merged line by line (merge3, a 3-way merge against the version both started from); when they
  overlap, nothing is saved and the caller shows both texts side by side to resolve.
"""

from __future__ import annotations

from dataclasses import dataclass

import merge3
from django.db import transaction

from investigations.models import Investigation
from reports.models import Report, Section

from . import autofill


class ReportError(Exception):
    """A change that cannot be made (the message says why, for the person who tried)."""


@dataclass
class SaveResult:
    """The outcome of a save: `saved` (as sent), `merged` (with a newer version), or `conflict`.

    For a conflict, `mine` is the text sent, `theirs` the current body (at `section.version`), and
    `merged` the text with conflict markers, to edit into a resolution."""

    outcome: str
    section: Section
    mine: str = ""
    theirs: str = ""
    merged: str = ""
    theirs_by: str = ""


def report_for(investigation: Investigation, user=None) -> Report:
    """Return the investigation's report, created and filled by the machine the first time; refreshed
    when the diagnosis, comparison, triage or pinned charts changed since."""
    report = Report.objects.filter(investigation=investigation).first()
    if report is None:
        with transaction.atomic():
            report, _ = Report.objects.get_or_create(investigation=investigation)
    report.investigation = investigation  # the caller's, with what it selected (its owner): not read again
    report_refresh(report)
    return report


def report_refresh(report: Report, *, force: bool = False) -> bool:
    """Bring the machine's text up to date; return True when anything changed."""
    fp = autofill.fingerprint(report.investigation)
    if fp == report.fingerprint and not force:  # stored with the sections it filled (never empty)
        return False
    texts = autofill.machine_sections(autofill.gather(report.investigation))
    with transaction.atomic():
        locked = Report.objects.select_for_update().get(pk=report.pk)
        if locked.fingerprint == fp and not force and locked.sections.exists():
            return False
        for position, (key, title) in enumerate(autofill.SECTIONS):
            if key in texts:
                _machine_text(locked, key, title, position, texts[key])
        Report.objects.filter(pk=locked.pk).update(fingerprint=fp)
    report.fingerprint = fp
    return True


def _machine_text(report: Report, key: str, title: str, position: int, text: str) -> None:
    section = Section.objects.filter(report=report, key=key).first()
    if section is None:
        section = Section(
            report=report, key=key, title=title, position=position, body=text, machine_body=text
        )
        section._change_reason = "filled by the machine"
        section.save()
        return
    if text == section.machine_body:
        return
    if not section.edited:
        section.body = section.machine_body = text
        section.machine_pending = ""
        section.version += 1
        section.updated_by = None
        section._change_reason = "refreshed by the machine (new diagnosis)"
        section.save()
    else:
        # Saved without a history row: the body did not change, only the offer.
        Section.objects.filter(pk=section.pk).update(machine_pending=text)


def _base_text(section: Section, version: int) -> str | None:
    record = section.history.filter(version=version).order_by("-history_date").first()
    return record.body if record is not None else None


def section_save(section_id: int, *, base_version: int, text: str, user) -> SaveResult:
    """Save `text` into the section the editor opened at `base_version` (see the module's rules)."""
    text = text.replace("\r\n", "\n")
    with transaction.atomic():
        section = Section.objects.select_for_update().get(pk=section_id)
        if base_version > section.version or base_version < 1:
            raise ReportError("That version of the section does not exist; reload the page.")
        if base_version == section.version:
            if text == section.body:
                return SaveResult("saved", section)
            _write(section, text, user, "edited")
            return SaveResult("saved", section)
        base = _base_text(section, base_version)
        merged, conflict = _merge(base if base is not None else "", text, section.body)
        theirs_by = _who(section)
        if conflict or base is None:
            return SaveResult(
                "conflict", section, mine=text, theirs=section.body, merged=merged, theirs_by=theirs_by
            )
        _write(section, merged, user, f"edited (merged with version {section.version})")
        return SaveResult("merged", section, theirs_by=theirs_by)


def _merge(base: str, mine: str, theirs: str) -> tuple[str, bool]:
    """Return (merged text, whether any lines conflict): a line-wise 3-way merge."""
    lines = [s.splitlines(keepends=True) for s in (base, mine, theirs)]
    for group in lines:  # merge3 compares whole lines: a last line without newline differs from one with
        if group and not group[-1].endswith("\n"):
            group[-1] += "\n"
    m3 = merge3.Merge3(lines[0], lines[1], lines[2])
    conflict = any(group[0] == "conflict" for group in m3.merge_groups())
    merged = "".join(m3.merge_lines(name_a="yours", name_b="theirs"))
    return merged.rstrip("\n") if not mine.endswith("\n") else merged, conflict


def _write(section: Section, text: str, user, reason: str) -> None:
    section.body = text
    section.edited = text != section.machine_body
    section.version += 1
    section.updated_by = user
    section._change_reason = reason
    section.save()


def section_take_machine(section_id: int, *, base_version: int, user) -> Section:
    """Replace the body with the machine's newer text (a change, kept in history)."""
    with transaction.atomic():
        section = Section.objects.select_for_update().get(pk=section_id)
        if not section.machine_pending:
            raise ReportError("There is no newer machine text for this section.")
        if base_version != section.version:
            raise ReportError(
                "Someone changed this section meanwhile; review it again before taking the text."
            )
        section.machine_body = section.machine_pending
        section.machine_pending = ""
        _write(section, section.machine_body, user, "took the machine's new text")
        return section


def section_leave_machine(section_id: int, *, user) -> Section:
    """Keep the people's text and drop the offer (until the machine's text changes again)."""
    with transaction.atomic():
        section = Section.objects.select_for_update().get(pk=section_id)
        if section.machine_pending:
            Section.objects.filter(pk=section.pk).update(
                machine_body=section.machine_pending, machine_pending=""
            )
            section.refresh_from_db()
        return section


def section_restore(section_id: int, *, history_id: int, base_version: int, user) -> Section:
    """Restore the body of an older version; the restore is a new version, kept in history."""
    with transaction.atomic():
        section = Section.objects.select_for_update().get(pk=section_id)
        record = section.history.filter(history_id=history_id).first()
        if record is None:
            raise ReportError("No such version of this section.")
        if base_version != section.version:
            raise ReportError("Someone changed this section meanwhile; look at its history again.")
        _write(section, record.body, user, f"restored version {record.version}")
        return section


def report_set_status(report_id: int, *, status: str, base_version: int, user) -> Report:
    """Change the report's status (draft, in review, final); refused over a newer version."""
    if status not in Report.Status.values:
        raise ReportError(f"Unknown report status {status!r}.")
    with transaction.atomic():
        report = Report.objects.select_for_update().get(pk=report_id)
        if base_version != report.version:
            raise ReportError(f"{_who(report)} set the report to {report.get_status_display()} meanwhile.")
        if report.status != status:
            report.status, report.updated_by = status, user
            report.version += 1
            report.save()
        return report


def _who(obj) -> str:
    user = getattr(obj, "updated_by", None)
    return user.get_username() if user is not None else "Someone"
