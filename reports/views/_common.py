"""What the report's views share: the access check, the page's context and each live region's token."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from investigations.access import not_visible
from investigations.models import Investigation
from investigations.services import investigations as inv
from reports import access, markdown
from reports.models import Report
from reports.services import conversation, findings, pdf, sections, steps
from reports.services.marks import Marks, report_marks


def investigation_for(
    request: HttpRequest, investigation_id: int, action: str = "view"
) -> tuple[Investigation, str]:
    """Return the investigation and the user's role; 404 when it is not visible to them, 403 when the
    role does not allow `action` (a viewer editing)."""
    rows = access.with_restricted(Investigation.objects.select_related("owner"))
    investigation = rows.filter(pk=investigation_id).first()
    role = access.role_for(request.user, investigation) if investigation is not None else None
    if investigation is None or role is None:
        raise not_visible(investigation_id)  # missing or hidden: the same words
    if not access.allows(role, action):
        raise PermissionDenied(f"Your role ({role}) on this investigation does not allow this.")
    return investigation, role


def report_of(request: HttpRequest, investigation_id: int, action: str = "view") -> tuple[Report, str]:
    investigation, role = investigation_for(request, investigation_id, action)
    return sections.report_for(investigation), role


def tokens(report: Report, marks: Marks | None = None) -> dict[str, str]:
    """Return {region: a string that changes when the region's content changes}, for the live poll."""
    m = marks or report_marks(report)
    return {
        "header": f"{m.row.get('version')}:{m.row.get('inv_updated')}",
        "comments": f"{m.comments[0]}:{m.comments[1]}",
        "findings": f"{m.verdicts[0]}:{m.humans}:{m.running}:{m.row.get('fingerprint')}",
        "actions": str(m.actions),
    }


def page_context(report: Report, role: str, user) -> dict[str, Any]:
    investigation = report.investigation
    job = inv.investigation_primary_job(investigation)
    humans = list(report.human_findings.select_related("created_by", "chart"))
    for h in humans:
        findings.human_finding_freeze(h)
    section_rows = list(report.sections.select_related("updated_by"))
    finding_rows = findings.report_findings(report)
    lookup = steps.StepLookup()
    charts = list(investigation.pinned_charts.select_related("created_by").defer("figure"))
    tickets = list(investigation.ticket_links.all())
    marks = report_marks(
        report, tickets=[t.pk for t in tickets], charts=[c.pk for c in charts], humans=humans
    )
    comments = conversation.comments_tree(report)
    # Every Markdown text the page shows, read from the shared cache at once (rendered once for everyone).
    markdown.warm(
        [s.body for s in section_rows]
        + [c.body for thread in comments.values() for top in thread for c in (top, *top.thread)]
        + [v.note for _, v in finding_rows if v is not None]
        + [h.body for h in humans]
    )
    anchors = [("report", "the report")] + [(f"section:{s.key}", s.title) for s in section_rows]
    anchors += [(f"finding:{findings.finding_key(f)}", f"finding: {f.title[:60]}") for f, _ in finding_rows]
    anchors += [(f"human:{h.pk}", f"finding: {h.title[:60]}") for h in humans]
    return {
        "investigation": investigation,
        "report": report,
        "role": role,
        "can_edit": access.allows(role, "edit"),
        "can_manage": access.allows(role, "manage"),
        "restricted": access.is_restricted(investigation),
        "sections": section_rows,
        "findings": finding_rows,
        "human_findings": humans,
        "charts": charts,
        # Where each finding's and pinned chart's permalink points: absolute time and training step.
        "moments": {f.pk: steps.finding_moment(investigation.pk, f, lookup) for f, _ in finding_rows},
        "chart_moments": {c.pk: steps.chart_moments(investigation.pk, c, lookup) for c in charts},
        "log_matches": ((job.triage or {}).get("matches") or [])[:200] if job is not None else [],
        "action_items": list(report.action_items.select_related("owner")),
        "users": get_user_model().objects.filter(is_active=True).order_by("username"),
        "comments": comments,
        "anchors": anchors,
        "presence": [p for p in conversation.presence_list(report) if p.user_id != user.pk],
        "tickets": tickets,
        "tokens": tokens(report, marks),
        "statuses": Report.Status.choices,
        "pdf_export": pdf.pdf_current(report, marks),
    }
