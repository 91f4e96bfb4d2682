"""One activity stream per investigation: people's changes (from the history tables), comments, and the
machine's events (triage done, diagnosis and comparison finished, findings' onsets), newest first."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from investigations.models import DiagnosisRun, Finding, Investigation, TaskStatus
from investigations.services import investigations as inv
from investigations.services.notes import note_events
from reports.models import Membership, Report, Team

LIMIT = 200
_FIELDS = ("title", "status", "severity", "owner", "team")


@dataclass
class Event:
    when: dt.datetime
    who: str  # a user name, or "" for the machine
    what: str
    anchor: str = ""  # where on the report page it points (an element id), if anywhere

    @property
    def machine(self) -> bool:
        return not self.who


def _user(record: Any) -> str:
    user = getattr(record, "history_user", None)
    return user.get_username() if user is not None else ""


def _field_events(investigation: Investigation) -> list[Event]:
    events = []
    records = list(
        investigation.history.order_by("history_date", "history_id").select_related("history_user")
    )
    for prev, record in zip(records, records[1:], strict=False):
        delta = record.diff_against(prev, included_fields=list(_FIELDS))
        changes = [f"{c.field} {c.old or '—'} → {c.new or '—'}" for c in delta.changes]
        if changes:
            events.append(Event(record.history_date, _user(record), "changed " + ", ".join(changes)))
    return events


def _report_events(report: Report) -> list[Event]:
    events = []
    for r in report.sections.model.history.filter(report=report).select_related("history_user"):
        if r.history_type == "+" and not r.history_user_id:
            continue  # the first fill: one event below
        events.append(
            Event(
                r.history_date,
                _user(r),
                f"{r.history_change_reason or 'changed'} “{r.title}” (v{r.version})",
                f"section-{r.key}",
            )
        )
    for r in report.verdicts.model.history.filter(report=report).select_related("history_user"):
        events.append(
            Event(
                r.history_date,
                _user(r),
                f"{r.get_value_display().lower()} finding “{r.finding_title}”"
                + (f": {r.reason}" if r.reason else "")
                + (f" — note: {r.note}" if r.note else ""),
                f"finding-{r.finding_key}",
            )
        )
    for r in report.human_findings.model.history.filter(report=report).select_related("history_user"):
        verb = {"+": "added", "-": "deleted"}.get(r.history_type, "changed")
        events.append(Event(r.history_date, _user(r), f"{verb} finding “{r.title}”", f"human-{r.id}"))
    for r in report.action_items.model.history.filter(report=report).select_related("history_user"):
        events.append(
            Event(
                r.history_date,
                _user(r),
                f"{r.history_change_reason or 'changed'} action item “{r.text}”",
                "section-actions",
            )
        )
    for r in report.history.exclude(history_type="+").select_related("history_user"):
        events.append(Event(r.history_date, _user(r), f"set the report to {r.get_status_display()}"))
    for c in report.comments.select_related("author"):
        who = c.author.get_username() if c.author else "(deleted user)"
        events.append(
            Event(
                c.created,
                who,
                ("replied: " if c.parent_id else "commented: ") + c.body[:140],
                f"comment-{c.pk}",
            )
        )
    events.append(Event(report.created, "", "report opened and filled from the machine's results"))
    return events


def _machine_events(investigation: Investigation) -> list[Event]:
    events = []
    job = inv.investigation_primary_job(investigation)
    triage = (job.triage or {}) if job is not None and job.triage_status == job.TriageStatus.DONE else {}
    if triage.get("finished"):
        finished = dt.datetime.fromisoformat(triage["finished"])
        klass = (triage.get("job") or {}).get("triage_class") or "no class"
        events.append(Event(finished, "", f"log triage done ({klass})"))
    runs = DiagnosisRun.objects.filter(investigation=investigation, finished__isnull=False).exclude(
        status=TaskStatus.QUEUED
    )
    for run in runs.only("pk", "kind", "status", "finished", "result"):
        what = run.kind
        assert run.finished is not None  # finished__isnull=False
        klass = ((run.result or {}).get("diagnosis") or {}).get("class")
        events.append(
            Event(run.finished, "", f"{what} #{run.pk} {run.status}" + (f": {klass}" if klass else ""))
        )
    for f in Finding.objects.filter(investigation=investigation, onset__isnull=False).exclude(
        severity="info"
    ):
        assert f.onset is not None  # onset__isnull=False
        when = dt.datetime.fromtimestamp(f.onset, tz=dt.UTC)
        events.append(Event(when, "", f"onset: {f.title}", f"finding-{f.job_id or 0}:{f.playbook}:{f.rule}"))
    return events


_MEMBER_VERBS = {"+": "added a member to", "~": "changed a member's role in", "-": "removed a member from"}


def _team_events(investigation: Investigation) -> list[Event]:
    """Membership changes of the investigation's team since it was opened (who may read and edit it)."""
    team = Team.objects.filter(name=investigation.team).first() if investigation.team else None
    if team is None:
        return []
    records = Membership.history.filter(team_id=team.pk, history_date__gte=investigation.created)
    return [
        Event(
            r.history_date,
            _user(r),
            r.history_change_reason or f"{_MEMBER_VERBS.get(r.history_type, 'changed')} team {team.name}",
        )
        for r in records.select_related("history_user")
    ]


def activity(report: Report, limit: int = LIMIT) -> list[Event]:
    """Return the investigation's events, newest first (at most `limit`)."""
    investigation = report.investigation
    events = _field_events(investigation) + _report_events(report) + _machine_events(investigation)
    events += _team_events(investigation)
    events += [Event(*e) for e in note_events(investigation)]  # people's notes on the timeline
    events.sort(key=lambda e: e.when, reverse=True)
    return events[:limit]
