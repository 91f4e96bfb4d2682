"""The whole report as Markdown, JSON (schema in the README), self-contained HTML and PDF (WeasyPrint),
plus the "Copy for ticket" block. Times name their zone: the report's export zone (`Report.export_tz`)."""

from __future__ import annotations

import base64
import datetime as dt
import zoneinfo
from typing import Any

from django.core.cache import cache
from django.template.loader import render_to_string
from django.utils import timezone

from investigations.models import Investigation
from investigations.services.verdict import investigation_verdict
from reports.models import Report

from . import activity, autofill, charts, conversation, findings, remedies, steps

SCHEMA = "stepwise.report/1"


def zone(report: Report) -> zoneinfo.ZoneInfo:
    try:
        return zoneinfo.ZoneInfo(report.export_tz or "UTC")
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return zoneinfo.ZoneInfo("UTC")


def when(value: Any, tz: zoneinfo.ZoneInfo) -> str | None:
    """Return a datetime or unix seconds as ISO 8601 in `tz`, with its offset (None stays None)."""
    if value is None or value == "":
        return None
    if not isinstance(value, dt.datetime):
        value = dt.datetime.fromtimestamp(float(value), tz=dt.UTC)
    return value.astimezone(tz).isoformat(timespec="seconds")


def shown(value: Any, tz: zoneinfo.ZoneInfo) -> str:
    """Return a time for people: '2026-11-23 21:04:05 UTC+01:00 (Europe/Paris)'."""
    if value is None or value == "":
        return "—"
    if not isinstance(value, dt.datetime):
        value = dt.datetime.fromtimestamp(float(value), tz=dt.UTC)
    local = value.astimezone(tz)
    if tz.key == "UTC":
        return f"{local:%Y-%m-%d %H:%M:%S} UTC"
    off = local.strftime("%z")
    return f"{local:%Y-%m-%d %H:%M:%S} UTC{off[:3]}:{off[3:]} ({tz.key})"


def _user(u) -> str | None:
    return u.get_username() if u is not None else None


def report_json(report: Report, *, base_url: str = "") -> dict[str, Any]:
    """Return the whole investigation as one JSON object (the README's "Report JSON" schema)."""
    tz, inv, lookup = zone(report), report.investigation, steps.StepLookup()
    diagnosis = (autofill.gather(inv).result or {}).get("diagnosis")
    return {
        "schema": SCHEMA,
        "exported_at": when(timezone.now(), tz),
        "time_zone": tz.key,
        "permalink": f"{base_url}/investigations/{inv.pk}/report/",
        "investigation": {
            "id": inv.pk,
            "title": inv.title,
            "status": inv.status,
            "severity": inv.severity,
            "team": inv.team,
            "owner": _user(inv.owner),
            "incident_class": inv.incident_class,
            "created": when(inv.created, tz),
            "tickets": list(inv.ticket_links.values_list("url", flat=True)),
        },
        "diagnosis": diagnosis,
        "report": {
            "status": report.status,
            "version": report.version,
            "export_tz": report.export_tz,
            "sections": [
                {
                    "key": s.key,
                    "title": s.title,
                    "body": s.body,
                    "version": s.version,
                    "edited": s.edited,
                    "updated_by": _user(s.updated_by),
                    "updated": when(s.updated, tz),
                }
                for s in report.sections.select_related("updated_by")
            ],
        },
        "findings": [_finding_json(f, v, tz, lookup) for f, v in findings.report_findings(report)],
        "human_findings": [
            {
                "id": h.pk,
                "title": h.title,
                "body": h.body,
                "severity": h.severity,
                "kind": h.kind,
                "evidence": h.evidence,
                "created_by": _user(h.created_by),
                "created": when(h.created, tz),
            }
            for h in report.human_findings.select_related("created_by")
        ],
        "action_items": [
            {
                "id": a.pk,
                "text": a.text,
                "owner": _user(a.owner),
                "due": a.due.isoformat() if a.due else None,
                "done": a.done,
            }
            for a in report.action_items.select_related("owner")
        ],
        "comments": [
            {
                "id": c.pk,
                "anchor": c.anchor,
                "parent": c.parent_id,
                "author": _user(c.author),
                "body": c.body,
                "created": when(c.created, tz),
            }
            for c in report.comments.select_related("author")
        ],
        "history": [
            {"when": when(e.when, tz), "who": e.who or None, "what": e.what, "anchor": e.anchor or None}
            for e in activity.activity(report, limit=10_000)
        ],
    }


def _finding_json(f, v, tz, lookup: steps.StepLookup) -> dict[str, Any]:
    return {
        "key": findings.finding_key(f),
        "playbook": f.playbook,
        "rule": f.rule,
        "class": f.incident_class,
        "severity": f.severity,
        "title": f.title,
        "hosts": f.hosts,
        "gpus": f.gpus,
        "onset": when(f.onset, tz),
        "onset_unix": f.onset,
        "onset_step": lookup.at(f.job_id, f.onset),
        "evidence": f.evidence,
        "verdict": {
            "value": v.value,
            "reason": v.reason,
            "note": v.note,
            "by": _user(v.updated_by),
            "at": when(v.updated, tz),
        }
        if v is not None
        else None,
    }


def report_markdown(report: Report, *, base_url: str = "") -> str:
    """Return the whole report as Markdown (sections, findings with verdicts, action items)."""
    tz, inv = zone(report), report.investigation
    lines = [
        f"# {inv.title}",
        "",
        f"**Report status:** {report.get_status_display()}  ",
        f"**Investigation:** {inv.get_status_display()}, "
        f"{inv.get_severity_display()}, team {inv.team or '—'}  ",
        f"**Permalink:** {base_url}/investigations/{inv.pk}/report/  ",
        f"**Times:** {tz.key}; exported {shown(timezone.now(), tz)}",
        "",
    ]
    for s in report.sections.all():
        lines += [f"## {s.title}", "", s.body.strip() or "—", ""]
    lines += ["## Findings and verdicts", ""]
    lookup = steps.StepLookup()
    for f, v in findings.report_findings(report):
        verdict = v.get_value_display() if v else "Not judged"
        step = lookup.at(f.job_id, f.onset)
        lines.append(
            f"- **{f.severity}** {f.title} (onset {'' if step is None else f'step {step}, '}"
            f"{shown(f.onset, tz)}) — {verdict}"
            + (f": {v.reason}" if v and v.reason else "")
            + (f" — {v.note}" if v and v.note else "")
        )
    for h in report.human_findings.all():
        lines.append(
            f"- **{h.severity}** {h.title} (by {_user(h.created_by) or '—'}, {h.get_kind_display()})"
            + (f": {h.body}" if h.body else "")
        )
    lines += ["", "## Action items", ""]
    lines += [
        f"- [{'x' if a.done else ' '}] {a.text} — {_user(a.owner) or 'unassigned'}"
        + (f", due {a.due:%Y-%m-%d}" if a.due else "")
        for a in report.action_items.select_related("owner")
    ]
    tickets = list(inv.ticket_links.values_list("url", flat=True))
    if tickets:
        lines += ["", "## Tickets", "", *[f"- {u}" for u in tickets]]
    return "\n".join(lines).rstrip() + "\n"


def ticket_block(report: Report, *, base_url: str = "", summary: str | None = None) -> str:
    """Return the "Copy for ticket" Markdown: class, culprits, onset (of the investigation's verdict, the
    diagnosis reconciled with the comparison), summary (the summary section's body, read when not
    given), permalink."""
    inv: Investigation = report.investigation
    d = _ticket_verdict(report)
    if summary is None:
        summary = report.sections.filter(key="summary").values_list("body", flat=True).first()
    summary = summary or d["summary"]
    return (
        "\n".join(
            [
                f"**Stepwise: {inv.title}** ({inv.get_severity_display()}, {inv.get_status_display()})",
                "",
                f"- Class: `{d['class'] or inv.incident_class or 'unknown'}`",
                f"- Culprits: {d['culprits']}",
                f"- Onset: {shown(d['onset'], zoneinfo.ZoneInfo('UTC'))}",
                f"- Report: {base_url}/investigations/{inv.pk}/report/",
                "",
                summary.strip()[:1500],
            ]
        )
        + "\n"
    )


def _ticket_verdict(report: Report) -> dict[str, Any]:
    """Return what the ticket block takes from the investigation's verdict (class, culprits, onset,
    summary). The verdict follows from the finished runs alone, which the report's machine fingerprint
    stands for (current once `sections.report_for` gave the report): read once per fingerprint from the
    runs' results, then from the shared cache, by every process."""
    key = f"report-ticket:{report.investigation_id}:{report.fingerprint}"
    facts = cache.get(key) if report.fingerprint else None
    if facts is None:
        verdict = investigation_verdict(report.investigation)
        d = verdict.diagnosis if verdict is not None else {}
        facts = {
            "class": d.get("class"),
            "culprits": remedies.culprits_text(d),
            "onset": d.get("onset"),
            "summary": d.get("summary", ""),
        }
        if report.fingerprint:
            cache.set(key, facts, timeout=TICKET_TTL_S)
    return facts


#: How long the shared cache keeps a ticket block's verdict after its last write (a new fingerprint is a
#: new key: the old one is only left to expire).
TICKET_TTL_S = 7 * 24 * 3600


def report_html(report: Report, *, base_url: str = "", public: bool = False) -> str:
    """Return the report as one self-contained HTML page (styles inline, charts as PNG data URIs).

    `public` (the share link) leaves out raw queries, the evidence's PromQL and the data source."""
    tz = zone(report)
    chart_rows = list(report.investigation.pinned_charts.all())
    images = charts.charts_png([c.figure for c in chart_rows])
    context = {
        "report": report,
        "investigation": report.investigation,
        "tz": tz.key,
        "public": public,
        "exported": shown(timezone.now(), tz),
        "base_url": base_url,
        "sections": list(report.sections.all()),
        "findings": [(f, v, shown(f.onset, tz)) for f, v in findings.report_findings(report)],
        "human_findings": list(report.human_findings.select_related("created_by")),
        "action_items": list(report.action_items.select_related("owner")),
        "comments": conversation.comments_tree(report) if not public else {},
        "charts": [
            {"title": c.title, "note": c.note, "src": _data_uri(png)}
            for c, png in zip(chart_rows, images, strict=True)
        ],
    }
    return render_to_string("reports/export.html", context)


def _data_uri(png: bytes | None) -> str | None:
    return "data:image/png;base64," + base64.b64encode(png).decode() if png else None


def report_pdf(report: Report, *, base_url: str = "") -> bytes:
    """Return the report as PDF: the HTML export laid out by WeasyPrint, charts as PNG images."""
    from weasyprint import HTML

    return HTML(string=report_html(report, base_url=base_url), base_url=base_url or None).write_pdf()
