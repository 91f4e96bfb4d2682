"""The report page, its live poll (others' edits, comments, presence) and its status."""

from __future__ import annotations

import re

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from investigations.views._common import HtmxHttpRequest
from reports.services import activity, conversation, exports, findings
from reports.services import sections as svc

from ._common import page_context, report_of, tokens

#: Regions the live poll re-renders out of band when their token changed.
LIVE_REGIONS = ("header", "comments", "findings", "actions")


@require_GET
@never_cache
def page(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    report, role = report_of(request, investigation_id)
    conversation.presence_touch(report, request.user)
    base = request.build_absolute_uri("/").rstrip("/")
    context = page_context(report, role, request.user)
    summary = next((s.body for s in context["sections"] if s.key == "summary"), "")
    context |= {
        "base_url": base,
        "ticket_text": exports.ticket_block(report, base_url=base, summary=summary),
        "link_moment": _link_moment(request.GET),
    }
    return render(request, "reports/report.html", context)


_AT = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2})?( ?UTC|Z|[+-]00:?00)?")


def _link_moment(params) -> str:
    """Return where a permalink points, for its preview ("step 1200, 2026-05-13 00:30:15 UTC"), or ""."""
    at, step = params.get("at", "").strip(), params.get("step", "").strip()
    parts = [f"step {step}"] if step.isdigit() and len(step) <= 12 else []
    if _AT.fullmatch(at):
        parts.append(at if "UTC" in at else f"{at} UTC")
    return ", ".join(parts)


@require_GET
@never_cache
def live(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Poll (every few seconds): record presence, return what changed since the page's tokens, out of band.

    The page sends `v_<section>` (the version it shows) for each section it displays, `editing` (a section
    open in an editor, which is never replaced) and `t_<region>` tokens."""
    report, role = report_of(request, investigation_id)  # refreshed from the machine's inputs if they changed
    for pending in report.human_findings.filter(kind="query", evidence__state="running"):
        findings.human_finding_freeze(pending)  # a query the worker finished: its result is frozen now
    editing = request.GET.get("editing", "")
    conversation.presence_touch(report, request.user, editing)
    shown = {k[2:]: v for k, v in request.GET.items() if k.startswith("v_")}
    versions = dict(report.sections.values_list("key", "version"))
    changed = {key for key, version in versions.items() if key in shown and shown[key] != str(version)} - {
        editing
    }
    current = tokens(report)
    regions = [r for r in LIVE_REGIONS if request.GET.get(f"t_{r}") not in (None, current[r])]
    if not changed and not regions:  # the usual answer: only who is here (cheap, every 3 s per reader)
        presence = [p for p in conversation.presence_list(report) if p.user_id != request.user.pk]
        return render(request, "reports/_live.html", {"presence": presence, "oob": True})
    context = page_context(report, role, request.user)
    context |= {
        "changed_sections": [s for s in context["sections"] if s.key in changed],
        "regions": regions,
        "oob": True,
    }
    return render(request, "reports/_live.html", context)


@require_POST
def status(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    report, role = report_of(request, investigation_id, "edit")
    try:
        svc.report_set_status(
            report.pk,
            status=request.POST.get("status", ""),
            base_version=int(request.POST.get("base_version") or 0),
            user=request.user,
        )
        error = ""
    except svc.ReportError as exc:
        error = str(exc)
    report.refresh_from_db()
    if not request.htmx:
        if error:
            messages.error(request, error)
        return redirect("reports:page", investigation_id=investigation_id)
    context = page_context(report, role, request.user) | {"status_error": error}
    return render(request, "reports/report.html#report-header", context, status=400 if error else 200)


@require_GET
@never_cache
def activity_view(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    report, _ = report_of(request, investigation_id)
    return render(request, "reports/_activity.html", {"report": report, "events": activity.activity(report)})
