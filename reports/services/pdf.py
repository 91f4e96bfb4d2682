"""The report's PDF, built by the worker, never in a web request (charts through Chromium take seconds).

1. `pdf_request` (the view) finds or creates the PdfExport of the report's current revision; the view
   enqueues `reports.tasks.report_pdf_task` after commit only when a build is needed: a revision already
   built (or building) is reused, so a second download of an unchanged report builds nothing.
2. The task claims the row (queued -> building), lays out the HTML export with WeasyPrint (`pdf_build`) and
   stores the PDF in the row (the database is shared by every web process and worker; a data folder need
   not be), or records why it failed (`pdf_fail`).
3. A worker killed mid-build (or a build past its time limit) never leaves the row "building": the status
   poll calls `pdf_expire`, which fails a build older than STEPWISE_REPORT_PDF_TIME_LIMIT plus a grace, and
   a queued one that no worker took within the task time limit on top of it.
"""

from __future__ import annotations

import datetime as dt
import hashlib

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from reports.models import PdfExport, Report

from . import exports
from .marks import Marks, report_marks

#: Seconds past the time limit before a building export is failed (the hard limit comes 30 s after the soft).
GRACE_SECONDS = 45


def time_limit() -> int:
    return int(settings.STEPWISE_REPORT_PDF_TIME_LIMIT)


def report_revision(report: Report, marks: Marks | None = None) -> str:
    """Return a short key that changes whenever anything the PDF shows changes (sections, verdicts, people's
    findings, action items, comments, tickets, pinned charts, the investigation's fields, the zone)."""
    m = marks or report_marks(report)
    parts = [m.row, m.human_states, m.tickets, m.charts]
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:32]


def pdf_request(report: Report, *, user, base_url: str) -> tuple[PdfExport, bool]:
    """Return the export of the report's current revision and whether the worker must build it (a new
    revision, or one whose last build failed); a done or active one is returned as it is."""
    revision = report_revision(report)
    with transaction.atomic():
        export, created = PdfExport.objects.select_for_update().get_or_create(
            report=report, revision=revision, defaults={"requested_by": user, "base_url": base_url[:300]}
        )
        if created:
            return export, True
    export = pdf_expire(export)
    if export.status != PdfExport.Status.FAILED:
        return export, False
    retried = PdfExport.objects.filter(pk=export.pk, status=PdfExport.Status.FAILED).update(
        status=PdfExport.Status.QUEUED,
        error="",
        started=None,
        finished=None,
        requested_by=user,
        created=timezone.now(),
    )
    export.refresh_from_db()
    return export, retried == 1


def pdf_current(report: Report, marks: Marks | None = None) -> PdfExport | None:
    """Return the export of the report's current revision, if one was asked for (stale builds failed)."""
    revision = report_revision(report, marks)
    export = PdfExport.objects.filter(report=report, revision=revision).defer("pdf").first()
    return pdf_expire(export) if export is not None else None


def pdf_expire(export: PdfExport) -> PdfExport:
    """Fail an export whose worker stopped (killed, out of memory, past its time limit) or that no worker took;
    return the export as it is now."""
    now, limit = timezone.now(), time_limit()
    if export.status == PdfExport.Status.BUILDING and export.started is not None:
        overdue = now - export.started > dt.timedelta(seconds=limit + GRACE_SECONDS)
        reason = (
            f"The worker stopped building this PDF: no result {limit + GRACE_SECONDS} s after it began "
            f"(killed, out of memory, or past its time limit of {limit} s). Build it again."
        )
    elif export.status == PdfExport.Status.QUEUED:
        wait = limit + int(settings.CELERY_TASK_TIME_LIMIT)
        overdue = now - export.created > dt.timedelta(seconds=wait)
        reason = f"No worker took this PDF within {wait} s (is the worker running?). Build it again."
    else:
        return export
    if overdue:
        PdfExport.objects.filter(pk=export.pk, status=export.status).update(
            status=PdfExport.Status.FAILED, error=reason, finished=now
        )
        export.refresh_from_db()
    return export


def pdf_claim(export_id: int) -> bool:
    """Take a queued export for building; False when another worker took it or it ended meanwhile."""
    return (
        PdfExport.objects.filter(pk=export_id, status=PdfExport.Status.QUEUED).update(
            status=PdfExport.Status.BUILDING, started=timezone.now()
        )
        == 1
    )


def pdf_build(export_id: int) -> bool:
    """Lay out the PDF of a claimed export and store it; older revisions' PDFs of the report are dropped.
    Return False when the export was failed meanwhile (its result is then discarded)."""
    export = PdfExport.objects.select_related("report__investigation").defer("pdf").get(pk=export_id)
    data = exports.report_pdf(export.report, base_url=export.base_url)
    with transaction.atomic():
        stored = PdfExport.objects.filter(pk=export_id, status=PdfExport.Status.BUILDING).update(
            status=PdfExport.Status.DONE, pdf=data, size=len(data), finished=timezone.now()
        )
        if stored:
            PdfExport.objects.filter(report_id=export.report_id).exclude(pk=export_id).filter(
                status__in=(PdfExport.Status.DONE, PdfExport.Status.FAILED)
            ).delete()
    return stored == 1


def pdf_fail(export_id: int, reason: str) -> None:
    """Record why an export failed (shown on the page), unless it already ended."""
    PdfExport.objects.filter(
        pk=export_id, status__in=(PdfExport.Status.QUEUED, PdfExport.Status.BUILDING)
    ).update(status=PdfExport.Status.FAILED, error=reason[:2000], finished=timezone.now())
