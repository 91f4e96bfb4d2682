"""The report's tasks: the PDF export, built by the worker (reports.services.pdf has the rules)."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

import stepwise.celery  # noqa: F401 (the app every shared_task below binds to; see stepwise/__init__.py)
from reports.services import pdf

logger = logging.getLogger(__name__)


@shared_task(
    name="reports.tasks.report_pdf_task",
    ignore_result=True,
    soft_time_limit=settings.STEPWISE_REPORT_PDF_TIME_LIMIT,
    time_limit=settings.STEPWISE_REPORT_PDF_TIME_LIMIT + 30,
)
def report_pdf_task(export_id: int) -> None:
    """Build a queued PDF export and store it, or record on the export why it failed."""
    if not pdf.pdf_claim(export_id):
        logger.info("PDF export %s is not queued: another worker got there first, or it ended", export_id)
        return
    try:
        if not pdf.pdf_build(export_id):
            logger.info("PDF export %s was failed while it was being built; its result is dropped", export_id)
    except SoftTimeLimitExceeded:
        pdf.pdf_fail(export_id, f"Building the PDF took longer than its time limit of {pdf.time_limit()} s.")
    except Exception as exc:  # the reason goes on the page; Celery's log keeps the traceback
        pdf.pdf_fail(export_id, f"Building the PDF failed: {type(exc).__name__}: {exc}")
        raise
