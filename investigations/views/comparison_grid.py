"""Small multiples of an investigation's jobs (issue 13): one column per job, the same panels, each drawn
on its own job's step axis, every row sharing one x-range and one y-range (static/comparison_grid.js).

Each cell is the job's own timeline panel (the panel view, its cache and its source's budget); this view
only lays the grid out. A phone stacks the columns.
"""

from __future__ import annotations

from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.views.decorators.http import require_GET

from investigations.access import get_investigation_or_404
from investigations.models import InvestigationJob
from investigations.services.timeline_view import MAX_COMPARE
from playbooks.timeline import PANELS

from ._common import HtmxHttpRequest

DEFAULT_PANELS = ("step_time", "tokens_per_sec")


def _ids(raw: str) -> list[int] | None:
    items = [p.strip() for p in raw.split(",") if p.strip()]
    return [int(p) for p in items] if all(p.isdigit() for p in items) else None


@require_GET
def grid(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Return the grid for `jobs` (pks, default every job of the investigation) and `panels` (keys)."""
    investigation = get_investigation_or_404(request.user, investigation_id)
    links = list(InvestigationJob.objects.filter(investigation=investigation).select_related("job"))
    links.sort(key=lambda link: (link.role != InvestigationJob.Role.PRIMARY, link.position, link.pk))
    wanted = _ids(request.GET.get("jobs", ""))
    if wanted is None:
        return HttpResponseBadRequest("jobs lists job ids of this investigation, e.g. jobs=3,4.")
    if wanted:
        by_pk = {link.job_id: link for link in links}
        if any(pk not in by_pk for pk in wanted):
            raise Http404("no such job in this investigation")
        links = [by_pk[pk] for pk in dict.fromkeys(wanted)]
    links = links[: MAX_COMPARE + 1]
    keys = [p.strip() for p in request.GET.get("panels", "").split(",") if p.strip()] or list(DEFAULT_PANELS)
    unknown = [k for k in keys if k not in PANELS]
    if unknown:
        return HttpResponseBadRequest(f"Unknown panel(s): {', '.join(unknown)}.")
    panels = [(k, PANELS[k].title) for k in PANELS if k in keys]
    context = {"investigation": investigation, "links": links, "panels": panels}
    return render(request, "investigations/comparison_grid.html", context)
