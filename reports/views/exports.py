"""Exports (Markdown, JSON, HTML, PDF), the ticket block, ticket links, the share link, the export zone."""

from __future__ import annotations

import json
import secrets
import zoneinfo

from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import IntegrityError, transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.text import slugify
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from investigations.views._common import HtmxHttpRequest
from reports import access
from reports.models import PdfExport, Report, TicketLink
from reports.services import exports, pdf

from ._common import page_context, report_of

_URL = URLValidator(schemes=["http", "https"])


def _base(request) -> str:
    return request.build_absolute_uri("/").rstrip("/")


def download_name(report: Report, ext: str) -> str:
    return f"stepwise-{report.investigation_id}-{slugify(report.investigation.title)[:40] or 'report'}.{ext}"


def download_response(body, content_type: str, filename: str, *, attachment: bool = True) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'{"attachment" if attachment else "inline"}; filename="{filename}"'
    return response


@require_GET
@never_cache
def export(request: HtmxHttpRequest, investigation_id: int, fmt: str) -> HttpResponse:
    report, _ = report_of(request, investigation_id)
    base = _base(request)
    if fmt == "md":
        return download_response(
            exports.report_markdown(report, base_url=base),
            "text/markdown; charset=utf-8",
            download_name(report, "md"),
        )
    if fmt == "json":
        body = json.dumps(exports.report_json(report, base_url=base), indent=2, default=str)
        return download_response(body, "application/json", download_name(report, "json"))
    if fmt == "html":
        return download_response(
            exports.report_html(report, base_url=base),
            "text/html; charset=utf-8",
            download_name(report, "html"),
        )
    if (
        fmt == "pdf"
    ):  # built by the worker (views/pdf.py): served once built, else the page offers to build it
        built = pdf.pdf_current(report)
        if built is None or built.status != built.Status.DONE:
            return redirect(reverse("reports:page", args=[investigation_id]) + "#pdf-export")
        built = PdfExport.objects.get(pk=built.pk)
        assert built.pdf is not None  # a DONE export holds its PDF (services.pdf sets both in one update)
        return download_response(bytes(built.pdf), "application/pdf", download_name(report, "pdf"))
    raise Http404("Unknown export format.")


@require_GET
@never_cache
def ticket(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    report, _ = report_of(request, investigation_id)
    return HttpResponse(
        exports.ticket_block(report, base_url=_base(request)), content_type="text/plain; charset=utf-8"
    )


def _links_region(request, report, role, error: str = "", status: int = 200) -> HttpResponse:
    if not request.htmx:
        return redirect("reports:page", investigation_id=report.investigation_id)
    context = page_context(report, role, request.user) | {
        "links_error": error,
        "ticket_text": exports.ticket_block(report, base_url=_base(request)),
        "base_url": _base(request),
    }
    return render(request, "reports/report.html#links-region", context, status=status)


@require_POST
def ticket_add(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    report, role = report_of(request, investigation_id, "edit")
    url = request.POST.get("url", "").strip()
    try:
        _URL(url)
        with transaction.atomic():
            TicketLink.objects.create(investigation=report.investigation, url=url, added_by=request.user)
    except ValidationError:
        return _links_region(request, report, role, "A ticket link is an http(s) URL.", status=400)
    except IntegrityError:
        return _links_region(request, report, role, "That ticket is already linked.", status=400)
    return _links_region(request, report, role)


@require_POST
def ticket_remove(request: HtmxHttpRequest, investigation_id: int, link_id: int) -> HttpResponse:
    report, role = report_of(request, investigation_id, "edit")
    get_object_or_404(TicketLink, pk=link_id, investigation=report.investigation).delete()
    return _links_region(request, report, role)


@require_POST
def share(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Create (action=create, a new token each time) or revoke (action=revoke) the read-only share link."""
    report, role = report_of(request, investigation_id, "manage")
    token = secrets.token_urlsafe(32) if request.POST.get("action") == "create" else ""
    Report.objects.filter(pk=report.pk).update(share_token=token)
    report.share_token = token
    return _links_region(request, report, role)


@require_POST
def restrict(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """An owner makes the investigation visible to its team only, or to everyone again."""
    report, role = report_of(request, investigation_id, "manage")
    if not report.investigation.team:
        return _links_region(request, report, role, "Give the investigation a team first.", status=400)
    access.restrict(report.investigation, request.POST.get("restricted") == "1")
    return _links_region(request, report, role)


@require_POST
def delete(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """An owner deletes the investigation (its report, findings and runs); the jobs stay registered."""
    report, role = report_of(request, investigation_id, "manage")
    title = report.investigation.title
    if request.POST.get("confirm", "").strip() != title:
        return _links_region(
            request, report, role, "Type the investigation's title to delete it.", status=400
        )
    report.investigation.delete()
    messages.success(request, f"Deleted “{title}”.")
    if request.htmx:
        response = HttpResponse(status=204)
        response["HX-Redirect"] = reverse("investigations:home")
        return response
    return redirect("investigations:home")


@require_POST
def export_zone(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    report, role = report_of(request, investigation_id, "edit")
    name = request.POST.get("export_tz", "").strip() or "UTC"
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return _links_region(
            request, report, role, f"{name!r} is not a time zone (e.g. Europe/Paris, UTC).", 400
        )
    Report.objects.filter(pk=report.pk).update(export_tz=name)
    report.export_tz = name
    return _links_region(request, report, role)


@login_not_required
@require_GET
@never_cache
def shared(request: HttpRequest, token: str) -> HttpResponse:
    """The report for people without an account: read only, no raw queries; 404 once revoked."""
    if len(token) < 32:
        raise Http404("No such report.")
    report = Report.objects.filter(share_token=token).select_related("investigation").first()
    if report is None or not secrets.compare_digest(report.share_token, token):
        raise Http404("No such report.")
    response = HttpResponse(exports.report_html(report, base_url=_base(request), public=True))
    response["X-Robots-Tag"] = "noindex"
    response["Referrer-Policy"] = "no-referrer"
    return response
