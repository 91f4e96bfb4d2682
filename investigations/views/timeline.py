"""The timeline of an investigation's job: the region (lazy), one JSON figure per panel, pinning.

The region lists the panels of the job's metric profile; `static/timeline.js` loads each panel when it
scrolls into view, keeps panels, range and x-axis mode in the URL, re-queries on zoom, and pins charts.
Pinned charts render from their stored figure, without the data source.
"""

from __future__ import annotations

import logging

from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from investigations.access import get_investigation_or_404
from investigations.models import Investigation, Job
from investigations.services import timeline as svc
from playbooks import timeline as tl

from ._common import HtmxHttpRequest, investigation_job_or_404
from .timeline_notes import notes_context

logger = logging.getLogger(__name__)


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
        "datasource": job.current_datasource() if job else None,
        "finding_url": _finding_url(investigation),
        "xmodes": tl.XMODES,
        # The investigation's other jobs, which the toolbar offers to draw over the panels by step.
        "compare_jobs": svc.compare_choices(investigation, job),
    }


@require_GET
def page(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Return the timeline as a page of its own (the same region as on the investigation page)."""
    investigation = get_investigation_or_404(request.user, investigation_id)
    job = investigation_job_or_404(investigation, request.GET.get("job"))
    return render(request, "investigations/timeline.html", _region_context(investigation, job))


@require_GET
@never_cache
def region(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Return the timeline region: toolbar and one empty slot per panel of the job's profile."""
    investigation = get_investigation_or_404(request.user, investigation_id)
    job = investigation_job_or_404(investigation, request.GET.get("job"))
    context = _region_context(investigation, job) | notes_context(request, investigation, job)
    try:
        context["timeline"] = svc.timeline_panels(context["datasource"])
    except svc.TimelineViewError as exc:
        context["timeline_error"] = str(exc)
    return render(request, "investigations/_timeline.html#timeline-region", context)


@require_GET
@never_cache
def panel(request: HtmxHttpRequest, investigation_id: int, panel: str) -> JsonResponse:
    """Return one panel's Plotly figure for the range, x-axis mode, hosts and compared jobs of the query string.

    `compare=<job pk>[,<job pk>]` draws other jobs of this investigation over the panel by step: a job that
    is not one of them is a 404, the job shown itself a 400.
    """
    investigation = get_investigation_or_404(request.user, investigation_id)
    job = investigation_job_or_404(investigation, request.GET.get("job"))
    if panel not in tl.PANELS:
        return JsonResponse({"error": f"Unknown panel {panel!r}."}, status=404)
    try:
        view = svc.timeline_view_parse(request.GET)
    except svc.TimelineViewError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    try:
        svc.compare_links(investigation, job, view.compare)
    except svc.TimelineCompareError as exc:
        return JsonResponse({"error": str(exc)}, status=exc.status)
    try:
        datasource = job.current_datasource() if job else None
        built = svc.timeline_figures(investigation, job, datasource, view, panels=[panel])
    except svc.TimelineViewError as exc:
        # The data source is down, empty or the range holds nothing: the panel says so in place.
        return JsonResponse({"error": str(exc)}, status=503)
    body = {
        "figure": built["figures"][panel],
        "start": built["start"],
        "end": built["end"],
        "queries": built["queries"],
    }
    return JsonResponse(body, json_dumps_params={"separators": (",", ":"), "allow_nan": False})


@require_GET
@never_cache
def promql(request: HtmxHttpRequest, investigation_id: int) -> JsonResponse:
    """Return a free PromQL expression (`q`) drawn as a panel for the view of the query string.

    The expression only ever becomes the `query` of one range query against the job's own source, through
    the read-only, budgeted client; a bad expression is a 400 with Prometheus's message.
    """
    investigation = get_investigation_or_404(request.user, investigation_id)
    job = investigation_job_or_404(investigation, request.GET.get("job"))
    try:
        view = svc.timeline_view_parse(request.GET)
    except svc.TimelineViewError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    try:
        datasource = job.current_datasource() if job else None
        built = svc.promql_figure(investigation, job, datasource, view, request.GET.get("q", ""))
    except svc.PromqlError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    except svc.TimelineViewError as exc:
        return JsonResponse({"error": str(exc)}, status=503)
    return JsonResponse(built, json_dumps_params={"separators": (",", ":"), "allow_nan": False})


def _pinned_response(request: HtmxHttpRequest, investigation: Investigation, error: str = "") -> HttpResponse:
    context = {"investigation": investigation, "pin_error": error}
    return render(
        request, "investigations/_timeline.html#pinned-charts", context, status=400 if error else 200
    )


@require_POST
@vary_on_headers("HX-Request")
def pin(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Freeze a panel's figure, as the posted view draws it, into the investigation."""
    investigation = get_investigation_or_404(request.user, investigation_id, action="edit")
    job = investigation_job_or_404(investigation, request.POST.get("job"))
    error = ""
    try:
        view = svc.timeline_view_parse(request.POST)
        svc.chart_pin(
            investigation,
            job,
            job.current_datasource() if job else None,
            view,
            request.POST.get("panel", ""),
            user=request.user,
            note=request.POST.get("note", ""),
        )
    except svc.TimelineViewError as exc:
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
    investigation = get_investigation_or_404(request.user, investigation_id, action="edit")
    if not svc.chart_unpin(investigation, chart_id):
        raise Http404("no such pinned chart")
    if request.htmx:
        return _pinned_response(request, investigation)
    return redirect("investigations:detail", investigation_id=investigation.pk)
