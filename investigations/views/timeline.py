"""The timeline of an investigation's job: the region (lazy), one JSON figure per panel, pinning.

The region lists the panels of the job's metric profile; `static/timeline.js` loads each panel when it
scrolls into view, keeps panels, range and x-axis mode in the URL, re-queries on zoom, and pins charts.
Pinned charts render from their stored figure, without the data source.
"""

from __future__ import annotations

import logging

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from playbooks import timeline as tl

from ..models import Investigation, InvestigationJob, Job
from ..services import timeline as svc
from ..services.investigations import investigation_primary_job, job_datasource
from ._common import HtmxHttpRequest

logger = logging.getLogger(__name__)


# Every signed-in user may read every investigation: there are no teams yet. These helpers are the one
# place to add that check, and the partial and JSON views go through them too.
def _get_investigation(request: HttpRequest, investigation_id: int) -> Investigation:
    return get_object_or_404(Investigation, pk=investigation_id)


def _get_job(investigation: Investigation, raw: str | None) -> Job | None:
    """Return the job `raw` (a pk) of the investigation, else its primary job; a foreign job is a 404."""
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


def _finding_url(investigation: Investigation) -> str:
    """Return the finding page URL with 0 for the finding id, or "" when that page does not exist."""
    try:
        return reverse("investigations:finding_detail", args=[investigation.pk, 0])
    except NoReverseMatch:
        return ""


def _region_context(investigation: Investigation, job: Job | None) -> dict:
    return {
        "investigation": investigation,
        "job": job,
        "datasource": job_datasource(job),
        "finding_url": _finding_url(investigation),
        "xmodes": tl.XMODES,
        # The investigation's other jobs, which the toolbar offers to draw over the panels by step.
        "compare_jobs": svc.compare_choices(investigation, job),
    }


@require_GET
def page(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Return the timeline as a page of its own (the same region as on the investigation page)."""
    investigation = _get_investigation(request, investigation_id)
    job = _get_job(investigation, request.GET.get("job"))
    return render(request, "investigations/timeline.html", _region_context(investigation, job))


@require_GET
@never_cache
def region(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Return the timeline region: toolbar and one empty slot per panel of the job's profile."""
    investigation = _get_investigation(request, investigation_id)
    job = _get_job(investigation, request.GET.get("job"))
    context = _region_context(investigation, job)
    try:
        context["timeline"] = svc.timeline_panels(context["datasource"])
    except svc.TimelineError as exc:
        context["timeline_error"] = str(exc)
    return render(request, "investigations/_timeline.html#timeline-region", context)


@require_GET
@never_cache
def panel(request: HtmxHttpRequest, investigation_id: int, panel: str) -> JsonResponse:
    """Return one panel's Plotly figure for the range, x-axis mode, hosts and compared jobs of the query string.

    `compare=<job pk>[,<job pk>]` draws other jobs of this investigation over the panel by step: a job that
    is not one of them is a 404, the job shown itself a 400.
    """
    investigation = _get_investigation(request, investigation_id)
    job = _get_job(investigation, request.GET.get("job"))
    if panel not in tl.PANELS:
        return JsonResponse({"error": f"Unknown panel {panel!r}."}, status=404)
    try:
        view = svc.timeline_view_parse(request.GET)
    except svc.TimelineError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    try:
        svc.compare_links(investigation, job, view.compare)
    except svc.CompareError as exc:
        return JsonResponse({"error": str(exc)}, status=exc.status)
    try:
        built = svc.timeline_figures(investigation, job, job_datasource(job), view, panels=[panel])
    except svc.TimelineError as exc:
        # The data source is down, empty or the range holds nothing: the panel says so in place.
        return JsonResponse({"error": str(exc)}, status=503)
    body = {
        "figure": built["figures"][panel],
        "start": built["start"],
        "end": built["end"],
        "queries": built["queries"],
    }
    return JsonResponse(body, json_dumps_params={"separators": (",", ":"), "allow_nan": False})


def _pinned_response(request: HtmxHttpRequest, investigation: Investigation, error: str = "") -> HttpResponse:
    context = {"investigation": investigation, "pin_error": error}
    return render(
        request, "investigations/_timeline.html#pinned-charts", context, status=400 if error else 200
    )


@require_POST
@vary_on_headers("HX-Request")
def pin(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Freeze a panel's figure, as the posted view draws it, into the investigation."""
    investigation = _get_investigation(request, investigation_id)
    job = _get_job(investigation, request.POST.get("job"))
    error = ""
    try:
        view = svc.timeline_view_parse(request.POST)
        svc.chart_pin(
            investigation,
            job,
            job_datasource(job),
            view,
            request.POST.get("panel", ""),
            user=request.user,
            note=request.POST.get("note", ""),
        )
    except svc.TimelineError as exc:
        error = str(exc)
    if request.htmx:
        return _pinned_response(request, investigation, error)
    if error:
        return HttpResponse(error, status=400, content_type="text/plain; charset=utf-8")
    return redirect("investigations:detail", investigation_id=investigation.pk)


@require_POST
@vary_on_headers("HX-Request")
def unpin(request: HtmxHttpRequest, investigation_id: int, chart_id: int) -> HttpResponse:
    """Remove a pinned chart from the investigation."""
    investigation = _get_investigation(request, investigation_id)
    if not svc.chart_unpin(investigation, chart_id):
        raise Http404("no such pinned chart")
    if request.htmx:
        return _pinned_response(request, investigation)
    return redirect("investigations:detail", investigation_id=investigation.pk)
