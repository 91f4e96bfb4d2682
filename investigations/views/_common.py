"""What every view module shares: the typed request, the job of a region (?job=), and what the diagnosis
and comparison regions share (Cancel, the poll that sees a run finished)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django_htmx.middleware import HtmxDetails

from investigations.models import DiagnosisRun, Investigation, InvestigationJob, Job
from investigations.services.investigations import investigation_primary_job
from investigations.services.runs import run_cancel as cancel_run


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails
    # LoginRequiredMiddleware: every view but the few marked login_not_required sees a signed-in user.
    user: User


def investigation_job_or_404(investigation: Investigation, raw: str | None) -> Job | None:
    """Return the job `raw` (a pk, from ?job=) of the investigation, else its primary job (None: it has none).

    A job outside the investigation is a 404, never someone else's data.
    """
    if not raw:
        return investigation_primary_job(investigation)
    try:
        pk = int(raw)
    except ValueError:
        raise Http404("no such job") from None
    link = (
        InvestigationJob.objects.filter(investigation=investigation, job_id=pk).select_related("job").first()
    )
    if link is None:
        raise Http404("no such job in this investigation")
    return link.job


def finished_context(context: dict[str, Any]) -> dict[str, Any]:
    """Return a region's context for the poll that sees its run finished: with the page header's class.

    The region then also carries the header's incident class as an out-of-band swap (`class_oob`), read
    again here: the run that just finished set it after this request had loaded the investigation.
    """
    from ._verdict import verdict_context  # it reads the diagnosis helpers, which import this module

    context["investigation"].refresh_from_db(fields=["incident_class"])
    # ... and the header's verdict, which the finished run may have changed (views/_verdict.py)
    return {**context, "class_oob": True, **verdict_context(context["investigation"])}


def run_cancel(
    request: HtmxHttpRequest, run: DiagnosisRun, noun: str, region: Callable[..., HttpResponse]
) -> HttpResponse:
    """Return the answer to Cancel on a diagnosis or comparison run: (htmx) its region, else the page.

    The queued or running run becomes cancelled, and its task stops at its next checkpoint. A run that
    had already finished is left as it is, and the answer says so.
    """
    note = "" if cancel_run(run, request.user) else f"The {noun} had already finished."
    if request.htmx:
        return region(start_error=note)
    if note:
        messages.info(request, note)
    return redirect("investigations:detail", investigation_id=run.investigation_id)
