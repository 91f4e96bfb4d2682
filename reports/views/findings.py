"""Verdicts on the machine's findings and people's own findings with evidence."""

from __future__ import annotations

import datetime as dt

from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from investigations.models import Finding
from investigations.views._common import HtmxHttpRequest
from reports.services import findings as svc
from reports.services.sections import ReportError

from ._common import page_context, report_of


def _region(request, report, role, error: str = "", status: int = 200) -> HttpResponse:
    if not request.htmx:
        return redirect(f"/investigations/{report.investigation_id}/report/#findings")
    context = page_context(report, role, request.user) | {"findings_error": error}
    return render(request, "reports/report.html#findings-region", context, status=status)


@require_POST
def verdict(request: HtmxHttpRequest, investigation_id: int, finding_id: int) -> HttpResponse:
    report, role = report_of(request, investigation_id, "edit")
    finding = get_object_or_404(Finding, pk=finding_id, investigation=report.investigation)
    try:
        svc.verdict_set(
            report,
            finding,
            value=request.POST.get("value", "open"),
            reason=request.POST.get("reason", ""),
            note=request.POST.get("note"),
            user=request.user,
        )
    except ReportError as exc:
        return _region(request, report, role, str(exc), status=400)
    return _region(request, report, role)


def _time(value: str) -> float | None:
    """Parse an ISO 8601 time (a zone-less one is UTC) or unix seconds; None when empty."""
    value = (value or "").strip()
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError as exc:
        raise ReportError(f"{value!r} is not a time (ISO 8601 or unix seconds).") from exc
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).timestamp()


@require_POST
def add(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    report, role = report_of(request, investigation_id, "edit")
    post = request.POST
    try:
        svc.human_finding_add(
            report,
            title=post.get("title", ""),
            body=post.get("body", ""),
            severity=post.get("severity", "warning"),
            kind=post.get("kind", "note"),
            chart_id=post.get("chart") or None,
            log_lines=post.getlist("log_line"),
            promql=post.get("promql", ""),
            start=_time(post.get("start", "")),
            end=_time(post.get("end", "")),
            step=float(post["step"]) if post.get("step") else None,
            user=request.user,
        )
    except (ReportError, ValueError) as exc:
        return _region(request, report, role, str(exc), status=400)
    return _region(request, report, role)
