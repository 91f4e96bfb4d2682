"""The discovery region of an investigation page: start a discovery, and poll its status while it runs."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from kombu.exceptions import OperationalError as BrokerError

from ..models import Investigation
from ..services import discovery as disc
from ..services import investigations as inv
from ..services import served_copy_live
from ..tasks import datasource_discover_task
from ._common import HtmxHttpRequest
from .investigations import source_final

logger = logging.getLogger(__name__)

_TEMPLATE = "investigations/_discovery.html"


# Every signed-in user may read and change every investigation (no teams yet); the partials go through
# this helper too, so that is where a check would go.
def _get_investigation(request: HttpRequest, investigation_id: int) -> Investigation:
    return get_object_or_404(Investigation, pk=investigation_id)


def _context(investigation: Investigation) -> dict[str, Any]:
    job = inv.investigation_primary_job(investigation)
    datasource = inv.job_datasource(job)
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
    investigation = _get_investigation(request, investigation_id)
    context = _context(investigation)
    datasource = context["datasource"]
    if datasource is not None:
        try:
            with transaction.atomic():
                if disc.discovery_request(datasource, force=True):
                    datasource_discover_task.delay_on_commit(datasource.pk)
        except BrokerError as exc:
            # The row is committed but the task never left: say so instead of leaving it queued forever.
            logger.error("could not enqueue the discovery of data source %s: %s", datasource.pk, exc)
            disc.discovery_fail_pending(datasource.pk, f"Could not reach the task broker: {exc}")
        context = _context(investigation)
    if request.htmx:
        return render(request, f"{_TEMPLATE}#discovery-status", context)
    return redirect("investigations:detail", investigation_id=investigation.pk)


@require_GET
@never_cache
@vary_on_headers("HX-Request")
def discovery_status(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Return the discovery region (it polls itself while queued or running); a full page load goes home."""
    investigation = _get_investigation(request, investigation_id)
    if not request.htmx:
        return redirect("investigations:detail", investigation_id=investigation.pk)
    return render(request, f"{_TEMPLATE}#discovery-status", _context(investigation))
