"""The PDF export: asked for here, built by the worker, polled until it can be downloaded."""

from __future__ import annotations

from functools import partial

from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from investigations.tasks.enqueue import enqueue_on_commit
from investigations.views._common import HtmxHttpRequest
from reports.models import PdfExport, Report
from reports.services import pdf
from reports.tasks import report_pdf_task

from ._common import report_of
from .exports import download_name, download_response


def _region(request: HtmxHttpRequest, report: Report, export: PdfExport | None) -> HttpResponse:
    if not request.htmx:
        return redirect(reverse("reports:page", args=[report.investigation_id]) + "#pdf-export")
    context = {"investigation": report.investigation, "pdf_export": export}
    return render(request, "reports/_pdf.html", context)


@require_POST
def build(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Ask the worker for the PDF of the report as it is now (a revision already built is reused)."""
    report, _ = report_of(request, investigation_id)
    base = request.build_absolute_uri("/").rstrip("/")
    export, needed = pdf.pdf_request(report, user=request.user, base_url=base)
    if needed:
        enqueue_on_commit(report_pdf_task, export.pk, not_sent=partial(pdf.pdf_fail, export.pk))
    return _region(request, report, export)


@require_GET
@never_cache
def status(request: HtmxHttpRequest, investigation_id: int, export_id: int) -> HttpResponse:
    report, _ = report_of(request, investigation_id)
    export = get_object_or_404(PdfExport.objects.defer("pdf"), pk=export_id, report=report)
    return _region(request, report, pdf.pdf_expire(export))


@require_GET
@never_cache
def download(request: HtmxHttpRequest, investigation_id: int, export_id: int) -> HttpResponse:
    report, _ = report_of(request, investigation_id)
    export = get_object_or_404(PdfExport, pk=export_id, report=report, status=PdfExport.Status.DONE)
    assert export.pdf is not None  # a DONE export holds its PDF (services.pdf sets both in one update)
    return download_response(bytes(export.pdf), "application/pdf", download_name(report, "pdf"))
