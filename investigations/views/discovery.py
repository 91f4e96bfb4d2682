"""The discovery region of an investigation page: start a discovery, and poll its status while it runs."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from investigations.access import get_investigation_or_404
from investigations.models import Investigation
from investigations.services import discovery as disc
from investigations.services import investigations as inv
from investigations.services import served_copy_live
from investigations.tasks import datasource_discover_task
from investigations.tasks.enqueue import enqueue_on_commit

from ._common import HtmxHttpRequest
from .investigations import source_final

logger = logging.getLogger(__name__)

_TEMPLATE = "investigations/_discovery.html"


def _context(investigation: Investigation) -> dict[str, Any]:
    job = inv.investigation_primary_job(investigation)
    datasource = job.current_datasource() if job else None
    stuck = datasource is not None and disc.discovery_stuck(datasource)
    return {
        "investigation": investigation,
        "job": job,
        "datasource": datasource,
        "discovery_stuck": stuck,
        "source_final": source_final(job, datasource),
        "served_live": served_copy_live(datasource),
        "source_oob": True,
    }


@require_POST
def discovery_start(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Queue a discovery of the primary job's data source (again), enqueued once the row is committed."""
    investigation = get_investigation_or_404(request.user, investigation_id, action="edit")
    context = _context(investigation)
    datasource = context["datasource"]
    if datasource is not None:
        with transaction.atomic():
            if disc.discovery_request(datasource, force=True):
                enqueue_on_commit(
                    datasource_discover_task,
                    datasource.pk,
                    not_sent=partial(disc.discovery_fail_pending, datasource.pk),
                )
        context = _context(investigation)
    if request.htmx:
        return render(request, f"{_TEMPLATE}#discovery-status", context)
    return redirect("investigations:detail", investigation_id=investigation.pk)


@require_GET
@never_cache
@vary_on_headers("HX-Request")
def discovery_status(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Return the discovery region (it polls itself while queued or running); a full page load goes home."""
    investigation = get_investigation_or_404(request.user, investigation_id)
    if not request.htmx:
        return redirect("investigations:detail", investigation_id=investigation.pk)
    return render(request, f"{_TEMPLATE}#discovery-status", _context(investigation))
