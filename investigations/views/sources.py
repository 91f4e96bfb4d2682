"""Pages. Thin: fetch through a helper that 404s, call one service or selector, render."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from django.contrib import messages
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from investigations import selectors, services
from investigations.forms import DataSourceURLForm
from investigations.models import DataSource, QueryRun
from investigations.services.sources import url_source_store
from investigations.tasks import queryrun_execute_task
from investigations.tasks.enqueue import enqueue_on_commit
from reports import access as roles

from ._common import HtmxHttpRequest

logger = logging.getLogger(__name__)


# Every signed-in user may read and query every data source: there are no teams yet. The helpers
# are the one place to add that check, and partials go through them too.
def _get_datasource(request: HttpRequest, source_id: int) -> DataSource:
    datasource = DataSource.objects.select_related("job").filter(pk=source_id).first()
    # A restricted investigation's job: the same words as a missing one (they do not tell which).
    if datasource is None or not roles.datasource_visible(request.user, datasource):
        raise Http404(f"No data source #{source_id} that you can see.")
    return datasource


def _get_run(request: HttpRequest, run_id: int) -> QueryRun:
    run = QueryRun.objects.select_related("datasource__job").filter(pk=run_id).first()
    if run is None or not roles.run_visible(request.user, run):
        raise Http404(f"No run #{run_id} of sample queries that you can see.")
    return run


def _page(request: HttpRequest, form: DataSourceURLForm, status: int = 200) -> HttpResponse:
    context = {
        # Only what the user may see: a restricted investigation's jobs and runs are left out.
        "datasources": one_per_address(roles.visible_datasources(request.user, selectors.datasource_list())),
        "runs": roles.visible_runs(request.user, selectors.queryrun_recent(limit=None))[:10],
        "form": form,
    }
    return render(request, "investigations/sources.html", context, status=status)


def one_per_address(sources: Any) -> list[DataSource]:
    """Return one data source per (kind, address): a job directory opened under two clusters (the demo's
    and a user's) is one TSDB. The row kept is the one last created; `also` lists the other jobs."""
    kept: dict[tuple[str, str], DataSource] = {}
    for ds in sorted(sources, key=lambda d: d.pk, reverse=True):
        key = (ds.kind, ds.address)
        if key in kept:
            if ds.job is not None and ds.job != kept[key].job:
                kept[key].also.append(ds.job)
            continue
        ds.also = []
        kept[key] = ds
    order = {ds.pk: i for i, ds in enumerate(sources)}
    return sorted(kept.values(), key=lambda d: order[d.pk])


@require_GET
def index(request: HtmxHttpRequest) -> HttpResponse:
    return _page(request, DataSourceURLForm())


@require_POST
def source_add(request: HtmxHttpRequest) -> HttpResponse:
    form = DataSourceURLForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    with transaction.atomic():
        url_source_store(form.source)  # probed by the form, outside this transaction
    messages.success(request, f"Added {form.cleaned_data['address']}.")
    return redirect("investigations:sources")


@require_POST
def run_start(request: HtmxHttpRequest, source_id: int) -> HttpResponse:
    datasource = _get_datasource(request, source_id)
    with transaction.atomic():
        run = services.queryrun_create(datasource, services.SAMPLE_QUERIES, created_by=request.user)
        enqueue_on_commit(queryrun_execute_task, run.pk, not_sent=partial(services.queryrun_not_sent, run.pk))
    return redirect("investigations:run_detail", run_id=run.pk)


@require_GET
@never_cache
@vary_on_headers("HX-Request")
def run_detail(request: HtmxHttpRequest, run_id: int) -> HttpResponse:
    run = _get_run(request, run_id)
    template = "investigations/run_detail.html"
    if request.htmx:
        template += "#run-status"
    return render(request, template, {"run": run, "results": selectors.queryresult_list(run)})


@require_POST
def run_cancel(request: HtmxHttpRequest, run_id: int) -> HttpResponse:
    run = _get_run(request, run_id)
    if not services.queryrun_cancel(run):
        messages.info(request, "The run had already finished.")
    return redirect("investigations:run_detail", run_id=run.pk)
