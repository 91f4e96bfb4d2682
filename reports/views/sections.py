"""One section of the report: shown, edited (merge or conflict), the machine's new text, history, restore."""

from __future__ import annotations

from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from investigations.views._common import HtmxHttpRequest
from reports.models import Report, Section
from reports.services import sections as svc
from reports.services.diff import line_diff

from ._common import report_of


def _section(report: Report, key: str) -> Section:
    section = report.sections.select_related("updated_by").filter(key=key).first()
    if section is None:
        raise Http404("No such section.")
    return section


def _render(
    request, report: Report, role: str, section: Section, *, mode: str = "show", status: int = 200, **extra
) -> HttpResponse:
    if not request.htmx:
        return redirect(f"/investigations/{report.investigation_id}/report/#section-{section.key}")
    context = {
        "report": report,
        "investigation": report.investigation,
        "section": section,
        "mode": mode,
        "can_edit": role in ("owner", "editor"),
    } | extra
    return render(request, "reports/_section.html", context, status=status)


@require_GET
@never_cache
def show(request: HtmxHttpRequest, investigation_id: int, key: str) -> HttpResponse:
    report, role = report_of(request, investigation_id)
    mode = request.GET.get("mode", "show")
    if mode == "edit" and role not in ("owner", "editor"):
        mode = "show"
    return _render(
        request, report, role, _section(report, key), mode=mode if mode in ("show", "edit") else "show"
    )


@require_POST
def save(request: HtmxHttpRequest, investigation_id: int, key: str) -> HttpResponse:
    report, role = report_of(request, investigation_id, "edit")
    section = _section(report, key)
    try:
        result = svc.section_save(
            section.pk,
            base_version=int(request.POST.get("base_version") or 0),
            text=request.POST.get("body", ""),
            user=request.user,
        )
    except (svc.ReportError, ValueError) as exc:
        return _render(request, report, role, section, mode="edit", status=400, error=str(exc))
    if result.outcome == "conflict":
        return _render(request, report, role, result.section, mode="conflict", status=409, result=result)
    note = f"Merged with {result.theirs_by}'s newer version." if result.outcome == "merged" else ""
    return _render(request, report, role, result.section, note=note)


@require_POST
def machine(request: HtmxHttpRequest, investigation_id: int, key: str) -> HttpResponse:
    """Take (action=take) or leave (action=leave) the machine's newer text of an edited section."""
    report, role = report_of(request, investigation_id, "edit")
    section = _section(report, key)
    try:
        if request.POST.get("action") == "take":
            section = svc.section_take_machine(
                section.pk, base_version=int(request.POST.get("base_version") or 0), user=request.user
            )
        else:
            section = svc.section_leave_machine(section.pk, user=request.user)
    except (svc.ReportError, ValueError) as exc:
        return _render(request, report, role, section, status=409, error=str(exc))
    return _render(request, report, role, section)


@require_GET
@never_cache
def history(request: HtmxHttpRequest, investigation_id: int, key: str) -> HttpResponse:
    report, role = report_of(request, investigation_id)
    section = _section(report, key)
    records = list(
        section.history.select_related("history_user").order_by("-history_date", "-history_id")[:50]
    )
    versions = []
    for newer, older in zip(records, records[1:] + [None], strict=False):
        versions.append({"record": newer, "diff": line_diff(older.body if older else "", newer.body)})
    return _render(request, report, role, section, mode="history", versions=versions)


@require_POST
def restore(request: HtmxHttpRequest, investigation_id: int, key: str, history_id: int) -> HttpResponse:
    report, role = report_of(request, investigation_id, "edit")
    section = _section(report, key)
    try:
        section = svc.section_restore(
            section.pk,
            history_id=history_id,
            user=request.user,
            base_version=int(request.POST.get("base_version") or 0),
        )
    except (svc.ReportError, ValueError) as exc:
        return _render(request, report, role, section, status=409, error=str(exc))
    return _render(request, report, role, section, note="Restored; the restore is a new version.")
