"""People's notes on the timeline: the list under the toolbar, add (editors) and delete (editors).

The notes are marks on every panel (`services/timeline._figures`); `static/timeline.js` redraws the
panels when the list changes, and a click on a chart fills the form's place with the step or time.
"""

from __future__ import annotations

from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from investigations.access import get_investigation_or_404, investigation_allowed
from investigations.models import Investigation, Job
from investigations.services import notes as svc

from ._common import HtmxHttpRequest, investigation_job_or_404


def notes_context(request: HtmxHttpRequest, investigation: Investigation, job: Job | None) -> dict:
    """Return what the notes list needs: the notes with their places, and whether the user may edit."""
    rows = [(note, svc.note_place(note)) for note in svc.notes_of(investigation, job)]
    return {
        "investigation": investigation,
        "job": job,
        "notes": rows,
        "can_edit_notes": investigation_allowed(request.user, investigation, "edit"),
    }


def _notes_response(
    request: HtmxHttpRequest, investigation: Investigation, job: Job | None, *, error: str = "", typed=None
) -> HttpResponse:
    context = notes_context(request, investigation, job) | {"note_error": error, "typed": typed or {}}
    return render(
        request, "investigations/_timeline.html#timeline-notes", context, status=400 if error else 200
    )


@require_GET
@never_cache
def notes(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Return the notes list of the job's timeline (?job=)."""
    investigation = get_investigation_or_404(request.user, investigation_id)
    job = investigation_job_or_404(investigation, request.GET.get("job"))
    return _notes_response(request, investigation, job)


@require_POST
@vary_on_headers("HX-Request")
def note_add(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Add a note at a step or a time (`where`) on the job's timeline (`job`)."""
    investigation = get_investigation_or_404(request.user, investigation_id, action="edit")
    job = investigation_job_or_404(investigation, request.POST.get("job"))
    typed = {"where": request.POST.get("where", ""), "text": request.POST.get("text", "")}
    try:
        svc.note_add(investigation, job, where=typed["where"], text=typed["text"], user=request.user)
    except svc.NoteError as exc:
        if request.htmx:
            return _notes_response(request, investigation, job, error=str(exc), typed=typed)
        return HttpResponse(str(exc), status=400, content_type="text/plain; charset=utf-8")
    if request.htmx:
        return _notes_response(request, investigation, job)
    return redirect("investigations:timeline", investigation_id=investigation.pk)


@require_POST
@vary_on_headers("HX-Request")
def note_delete(request: HtmxHttpRequest, investigation_id: int, note_id: int) -> HttpResponse:
    """Delete a note of the investigation."""
    investigation = get_investigation_or_404(request.user, investigation_id, action="edit")
    job = investigation_job_or_404(investigation, request.POST.get("job"))
    if not svc.note_delete(investigation, note_id, user=request.user):
        raise Http404("no such note")
    if request.htmx:
        return _notes_response(request, investigation, job)
    return redirect("investigations:timeline", investigation_id=investigation.pk)
