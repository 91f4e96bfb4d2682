"""Investigation pages: the list (home page), opening one, its page and the regions that update in place."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from investigations import selectors, services
from investigations.access import get_investigation_or_404, visible_investigations
from investigations.forms import InvestigationForm, InvestigationUpdateForm, JobAddForm, LogAttachForm
from investigations.models import DataSource, Investigation, Job
from investigations.services import diagnosis as dx
from investigations.services import discovery, lifecycle, tunnels
from investigations.services import investigations as inv
from investigations.services.runs import run_not_sent
from investigations.tasks import job_triage_task
from investigations.tasks.diagnosis import diagnosis_plan_task
from investigations.tasks.discovery import datasource_discover_task
from investigations.tasks.enqueue import enqueue_on_commit
from reports.services import fields as report_fields

from ._common import HtmxHttpRequest
from ._triage_display import triage_context
from ._verdict import verdict_context

logger = logging.getLogger(__name__)

PAGE_SIZE = 25
#: Regions of the investigation page that htmx may ask for alone (?region=).
DETAIL_REGIONS = ("jobs", "investigation-header")
#: The investigation page shows its owner.
_WITH_OWNER = Investigation.objects.select_related("owner")


def _enqueue_work(job: Job | None) -> None:
    """Once the caller's transaction commits, enqueue the job's triage (which then enqueues discovery),
    or, for a job without a log, its data sources' discovery at once."""
    if job is None:
        return
    if job.triage_status == Job.TriageStatus.QUEUED:
        enqueue_on_commit(job_triage_task, job.pk, not_sent=partial(inv.job_triage_fail, job.pk))
        return
    for source_id in inv.discovery_pending(job):
        enqueue_on_commit(
            datasource_discover_task, source_id, not_sent=partial(discovery.discovery_fail_pending, source_id)
        )


def _diagnose_on_open(investigation: Investigation, job: Job | None, user: Any) -> None:
    """Start the job's diagnosis as the investigation opens, as the demo does: its plan waits for the
    triage (which picks the playbooks) and discovers the source itself. A job without a data source
    (an uploaded log alone) has nothing to diagnose yet."""
    if job is None or job.current_datasource() is None:
        return
    run = dx.diagnosis_start(investigation, job, user=user)
    enqueue_on_commit(diagnosis_plan_task, run.pk, not_sent=partial(run_not_sent, run.pk))


# --- List ----------------------------------------------------------------------------------------


@require_GET
@vary_on_headers("HX-Request")
def home(request: HtmxHttpRequest) -> HttpResponse:
    filters = {
        "status": request.GET.get("status", ""),
        "cluster": request.GET.get("cluster", ""),
        "klass": request.GET.get("class", ""),
        "search": request.GET.get("q", ""),
    }
    rows = visible_investigations(request.user, selectors.investigation_list(**filters))
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    row: Any  # an Investigation annotated by selectors.investigation_list (verdict_culprits)
    for row in page.object_list:
        row.culprits_text = culprits_text(row.verdict_culprits)
    query = {k: v for k, v in request.GET.items() if k != "page" and v and isinstance(v, str)}
    context = {
        "page": page,
        "filters": filters,
        "query": urlencode(query),
        "statuses": Investigation.Status.choices,
        "choices": selectors.investigation_filter_choices(),
        "filtered": any(filters.values()),
    }
    template = "investigations/list.html"
    # A history restore (back button after a cache miss) needs the whole page, not the table.
    if request.htmx and not request.htmx.boosted and not request.htmx.history_restore_request:
        template += "#investigation-table"
    return render(request, template, context)


def culprits_text(culprits: Any, limit: int = 3) -> str:
    """Return a diagnosis' culprits as "tx-hpc-0242 GPU 3, dgx031" (at most `limit`, then "+N")."""
    if not isinstance(culprits, list):
        return ""
    names = [
        f"{c.get('host')}" + (f" GPU {c['gpu']}" if c.get("gpu") not in (None, "") else "")
        for c in culprits
        if isinstance(c, dict) and c.get("host")
    ]
    more = f" +{len(names) - limit}" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


# --- New investigation ---------------------------------------------------------------------------


def _new_page(
    request: HttpRequest, form: InvestigationForm, status: int = 200, browse: str | None = None
) -> HttpResponse:
    listing = inv.job_dir_browse(request.GET.get("browse", "") if browse is None else browse)
    return render(request, "investigations/new.html", {"form": form, "listing": listing}, status=status)


@require_GET
def new(request: HtmxHttpRequest) -> HttpResponse:
    initial = {k: request.GET[k] for k in ("source", "job_dir") if request.GET.get(k)}
    return _new_page(request, InvestigationForm(initial=initial))


@require_POST
def create(request: HtmxHttpRequest) -> HttpResponse:
    form = InvestigationForm(request.POST, request.FILES)
    if not form.is_valid():
        return _new_page(request, form, status=400)
    data = form.cleaned_data
    try:
        with transaction.atomic():
            investigation = inv.investigation_create(
                title=data["title"],
                severity=data["severity"],
                team=data["team"],
                owner=request.user,
                source=form.source_request(),
            )
            job = inv.investigation_primary_job(investigation)
            assert job is not None  # investigation_create returns the investigation with its primary job
            _enqueue_work(job)
            _diagnose_on_open(investigation, job, request.user)
    except inv.InvestigationError as exc:
        field = {"tunnel": "tunnel_command"}.get(exc.field or "", exc.field)
        form.add_error(field if field in form.fields else None, str(exc))
        # The job root typed as a job directory: open the browser on it, to pick the job from.
        root = inv.job_root_of(data.get("job_dir") or "") if data.get("source") == "job_dir" else None
        return _new_page(request, form, status=400, browse=str(root) if root else None)
    messages.success(request, f"Opened “{investigation.title}”.")
    for other in lifecycle.same_job_investigations(investigation):
        messages.warning(request, f"Job {job.job_id} is already investigated in #{other.pk} “{other.title}”.")
    return redirect("investigations:detail", investigation_id=investigation.pk)


@require_GET
@vary_on_headers("HX-Request")
def browse(request: HtmxHttpRequest) -> HttpResponse:
    """Return the directory browser for `path` (htmx), or the new-investigation page browsing it."""
    path = request.GET.get("path", "")
    if not request.htmx:
        return redirect(f"{reverse('investigations:new')}?{urlencode({'source': 'job_dir', 'browse': path})}")
    return render(request, "investigations/_dir_browser.html", {"listing": inv.job_dir_browse(path)})


# --- Investigation page --------------------------------------------------------------------------


def _detail_context(investigation: Investigation) -> dict[str, Any]:
    job = inv.investigation_primary_job(investigation)
    datasource = job.current_datasource() if job else None
    links = list(selectors.investigation_jobs(investigation))
    return {
        "investigation": investigation,
        "job": job,
        "datasource": datasource,
        "links": links,
        "jobs_pending": any(link.job.triage_in_progress() for link in links),
        "triage": triage_context(job),
        "source_final": source_final(job, datasource),
        "served_live": services.served_copy_live(datasource),
        "statuses": Investigation.Status.choices,
        "severities": Investigation.Severity.choices,
        "users": selectors.user_choices(),
        "duplicates": lifecycle.same_job_investigations(investigation),
    } | verdict_context(investigation)


def source_final(job: Job | None, ds: DataSource | None) -> bool:
    """Return True when the data source's badge will not change without someone acting.

    A triage or discovery in progress can change it whatever its state (a discovery clears an error or
    brings a source up), unless that work is stuck; a source starting (a server, a tunnel) will change.
    """
    if ds is None:
        return True
    triage_pending = job is not None and job.triage_in_progress()
    discovery_pending = ds.discovery_status in ("queued", "running") and not discovery.discovery_stuck(ds)
    return ds.state != DataSource.State.STARTING and not triage_pending and not discovery_pending


@require_GET
@never_cache
@vary_on_headers("HX-Request")
def detail(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    investigation = get_investigation_or_404(request.user, investigation_id, queryset=_WITH_OWNER)
    context = _detail_context(investigation) | {"job_add_form": JobAddForm()}
    template = "investigations/detail.html"
    if request.htmx and request.GET.get("region") in DETAIL_REGIONS:
        template += "#" + request.GET["region"]
    return render(request, template, context)


@require_POST
def update(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    # Only the fields changed on this page are written; a field someone else changed meanwhile is refused.
    # a parsed form's values are strings (the stubs allow an empty list, which parsing never gives)
    bases = {
        k.removeprefix("base_"): v
        for k, v in request.POST.items()
        if k.startswith("base_") and isinstance(v, str)
    }
    investigation = get_investigation_or_404(
        request.user,
        investigation_id,
        # who owns it and which team it belongs to are the manager's to change; the rest anyone's who edits
        action="manage" if {"owner", "team"} & report_fields.changing(request.POST, bases) else "edit",
        queryset=_WITH_OWNER,
    )
    form = InvestigationUpdateForm(request.POST)
    error = ""
    if form.is_valid():
        try:
            report_fields.fields_update(investigation.pk, form.changes(), bases)
        except (inv.InvestigationError, report_fields.StaleWrite) as exc:
            error = str(exc)
    else:
        error = " ".join(str(e) for errors in form.errors.values() for e in errors)
    if not request.htmx:
        if error:
            messages.error(request, error)
        return redirect("investigations:detail", investigation_id=investigation.pk)
    investigation.refresh_from_db()
    context = _detail_context(investigation) | {"update_error": error, "source_oob": True}
    return render(
        request, "investigations/detail.html#investigation-header", context, status=400 if error else 200
    )


@require_GET
@never_cache
def triage(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Return the triage region; once finished, tell the page (HX-Trigger) so other regions refresh."""
    investigation = get_investigation_or_404(request.user, investigation_id, queryset=_WITH_OWNER)
    context = _detail_context(investigation)
    response = render(request, "investigations/_triage.html", context)
    if context["triage"]["finished"]:
        response["HX-Trigger"] = "triage-finished"
    return response


@require_POST
def triage_rerun(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    investigation = get_investigation_or_404(
        request.user, investigation_id, action="edit", queryset=_WITH_OWNER
    )
    job = inv.investigation_primary_job(investigation)
    if job is not None:
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=job.pk)
            inv.job_triage_queue(job)
            _enqueue_work(job)
    if request.htmx:
        return render(request, "investigations/_triage.html", _detail_context(investigation))
    return redirect("investigations:detail", investigation_id=investigation.pk)


@require_POST
def log_attach(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Attach an uploaded log to the primary job (opened from a URL or tunnel) and triage it."""
    investigation = get_investigation_or_404(
        request.user, investigation_id, action="edit", queryset=_WITH_OWNER
    )
    job = inv.investigation_primary_job(investigation)
    form = LogAttachForm(request.POST, request.FILES)
    error = ""
    if job is None:
        error = "This investigation has no job to attach a log to."
    elif not form.is_valid():
        error = " ".join(str(e) for errors in form.errors.values() for e in errors)
    else:
        try:
            with transaction.atomic():
                job = inv.job_log_attach(job, form.cleaned_data["log"])
                _enqueue_work(job)
        except inv.InvestigationError as exc:
            error = str(exc)
    if not request.htmx:
        if error:
            messages.error(request, error)
        return redirect("investigations:detail", investigation_id=investigation.pk)
    context = _detail_context(investigation) | {"log_error": error}
    return render(request, "investigations/_triage.html", context, status=400 if error else 200)


@require_GET
@never_cache
def source_state(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    investigation = get_investigation_or_404(request.user, investigation_id, queryset=_WITH_OWNER)
    return render(request, "investigations/_source_state.html", _detail_context(investigation))


@require_POST
def source_check(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    investigation = get_investigation_or_404(
        request.user, investigation_id, action="edit", queryset=_WITH_OWNER
    )
    job = inv.investigation_primary_job(investigation)
    datasource = job.current_datasource() if job else None
    if datasource is not None and datasource.kind == DataSource.Kind.SSH_TUNNEL:
        tunnels.tunnel_check(datasource)  # reads only: reopening is the worker's job
    elif datasource is not None:
        services.datasource_check(datasource)
    if request.htmx:
        return render(request, "investigations/_source_state.html", _detail_context(investigation))
    return redirect("investigations:detail", investigation_id=investigation.pk)


@require_POST
def job_add(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    investigation = get_investigation_or_404(
        request.user, investigation_id, action="edit", queryset=_WITH_OWNER
    )
    form = JobAddForm(request.POST)
    if form.is_valid():
        try:
            with transaction.atomic():
                link = inv.investigation_job_add(
                    investigation, job_dir=form.cleaned_data["job_dir"], role=form.cleaned_data["role"]
                )
                _enqueue_work(link.job)
        except inv.InvestigationError as exc:
            form.add_error("job_dir", str(exc))
        else:
            messages.success(request, f"Added job {link.job} as {link.get_role_display().lower()}.")
            return redirect("investigations:detail", investigation_id=investigation.pk)
    context = _detail_context(investigation) | {"job_add_form": form}
    return render(request, "investigations/detail.html", context, status=400)
