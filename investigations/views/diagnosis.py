"""The diagnosis region of the investigation page: start, live status, cancel, and a finding's evidence.

The region (`investigations/_diagnosis.html#diagnosis`) is rendered here, for one job of the
investigation (`?job=<pk>`, default the primary job). While a run is active its status partial polls
`status`; the response that sees it finished returns the whole region instead (findings included), which
carries no polling trigger, so polling stops, and the page header's incident class out of band.
Cancel and that header swap are shared with the comparison region (views/_common.py).
"""

from __future__ import annotations

import logging
import math
from functools import partial
from typing import Any, cast

from django import forms
from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import reswap, retarget, trigger_client_event

from investigations.access import get_investigation_or_404
from investigations.forms import DiagnosisStartForm, form_errors
from investigations.models import DiagnosisRun, Finding, Investigation, Job, TaskStatus
from investigations.services import diagnosis as dx
from investigations.services.deadruns import dead_runs_reap
from investigations.services.diagnosis_overview import crash_time, diagnosis_overview
from investigations.services.runs import run_not_sent
from investigations.services.verdict import finding_role
from investigations.tasks.diagnosis import diagnosis_plan_task
from investigations.tasks.enqueue import enqueue_on_commit
from investigations.times import relative, utc
from playbooks.profiles import vendor_mismatch
from playbooks.report import diagnosis_markdown
from playbooks.report_compare import compare_markdown
from playbooks.timeline import finding_panels

from ._common import HtmxHttpRequest, finished_context, investigation_job_or_404, run_cancel

logger = logging.getLogger(__name__)

REGION = "investigations/_diagnosis.html#diagnosis"
STATUS = "investigations/_diagnosis.html#diagnosis-status"


def _choices(name: str) -> Any:
    """The choices of a ChoiceField of DiagnosisStartForm (both profile and gpu_model are ChoiceFields)."""
    return cast(forms.ChoiceField, DiagnosisStartForm.base_fields[name]).choices


def _get_run(investigation: Investigation, run_id: int) -> DiagnosisRun:
    return get_object_or_404(
        DiagnosisRun.objects.select_related("job"), pk=run_id, investigation=investigation
    )


def _gpu_model_shown(decided: DiagnosisRun | None) -> dict[str, Any]:
    """Return the GPU model whose priors the verdict used, and a warning when the user's choice is of
    another vendor than the exporters (an H100 set on an AMD seed-system job)."""
    result = (decided.result or {}) if decided else {}
    shown = dict(result.get("gpu_model") or {})
    if shown.get("set_by_user"):
        mismatch = vendor_mismatch(shown.get("name") or "", (result.get("source") or {}).get("profile") or "")
        if mismatch:
            shown["mismatch"] = mismatch
    return shown


def _get_finding(investigation: Investigation, finding_id: int) -> Finding:
    return get_object_or_404(
        Finding.objects.select_related("job", "run", "run__datasource"),
        pk=finding_id,
        investigation=investigation,
    )


# --- Display helpers -----------------------------------------------------------------------------


def _evidence_row(row: dict[str, Any]) -> dict[str, Any]:
    """Return an evidence row with its value written for people (numbers to 4 significant digits)."""
    value = row.get("value")
    if isinstance(value, bool) or not isinstance(value, int | float):
        shown = "" if value is None else str(value)
    elif not math.isfinite(value):
        shown = str(value)
    else:
        shown = f"{value:.4g}" if abs(value) < 1e6 else f"{value:.6g}"
    labels = row.get("labels") if isinstance(row.get("labels"), dict) else {}
    return {
        "query": str(row.get("query") or ""),
        "labels": labels,
        "value": shown,
        "interpretation": str(row.get("interpretation") or ""),
    }


def _execution_rows(executions: list[Any]) -> list[dict[str, Any]]:
    """Return the progress rows of executions annotated by services.diagnosis.execution_progress."""
    rows = []
    for e in executions:
        total = int(e.total or 0)
        done = total if e.done is None and e.status == TaskStatus.DONE else int(e.done or 0)
        shared = e.shared or {}
        rows.append(
            {
                "execution": e,
                "done": min(done, total),
                "total": total,
                "unavailable": e.unavailable or [],
                "shared": len(shared),
                "shared_with": sorted(set(shared.values())),
            }
        )
    return rows


def _region_context(investigation: Investigation, job: Job | None, **extra: Any) -> dict[str, Any]:
    overview = diagnosis_overview(investigation, job)
    crash = overview["crash_time"]
    for finding in overview["findings"]:
        finding.onset_utc = utc(finding.onset)
        finding.onset_relative = relative(finding.onset, crash)
        finding.role_label, finding.order_note = finding_role(finding, overview["diagnosis"])
    diagnosis = overview["diagnosis"] or None
    if diagnosis:
        onset = diagnosis.get("onset")
        diagnosis = {
            **diagnosis,
            "onset_utc": utc(onset),
            "onset_relative": relative(onset, crash),
            "confidence_pct": round(100 * float(diagnosis.get("confidence") or 0)),
            # effects the engine's chain does not already tell
            "effects": [
                f
                for f in overview["findings"]
                if f.role_label == "effect"
                and not any(f.title in str(link) for link in diagnosis.get("chain") or [])
            ],
        }
    return {
        "investigation": investigation,
        "job": job,
        "datasource": job.current_datasource() if job else None,
        "dx": {
            **overview,
            "diagnosis": diagnosis,
            "executions": _execution_rows(overview["executions"]),
            "active": overview["run"] is not None and not overview["run"].is_finished,
            "gpu_model": _gpu_model_shown(overview["decided"]),
            "profile_choices": _choices("profile"),
            "gpu_model_choices": _choices("gpu_model"),
        },
        **extra,
    }


def _region(
    request: HttpRequest, investigation: Investigation, job: Job | None, **extra: Any
) -> HttpResponse:
    return render(request, REGION, _region_context(investigation, job, **extra))


# --- Views ---------------------------------------------------------------------------------------


@require_GET
@never_cache
@vary_on_headers("HX-Request")
def region(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Return the diagnosis region of one job; outside htmx, the investigation page that holds it."""
    investigation = get_investigation_or_404(request.user, investigation_id)
    job = investigation_job_or_404(investigation, request.GET.get("job"))
    if not request.htmx:
        return redirect("investigations:detail", investigation_id=investigation.pk)
    return _region(request, investigation, job)


@require_POST
def start(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    investigation = get_investigation_or_404(request.user, investigation_id, action="edit")
    job = investigation_job_or_404(investigation, request.POST.get("job"))
    form = DiagnosisStartForm(request.POST)
    error = ""
    if job is None:
        error = "This investigation has no job to diagnose."
    elif not form.is_valid():
        error = form_errors(form)
    else:
        playbooks = list(dx.ALL_PLAYBOOKS) if form.cleaned_data["scope"] == "all" else None
        try:
            with transaction.atomic():
                run = dx.diagnosis_start(
                    investigation,
                    job,
                    playbooks=playbooks,
                    window=form.cleaned_data["window"],
                    profile=form.cleaned_data.get("profile") or "auto",
                    gpu_model=form.cleaned_data.get("gpu_model") or "auto",
                    user=request.user,
                )
                enqueue_on_commit(diagnosis_plan_task, run.pk, not_sent=partial(run_not_sent, run.pk))
        except dx.DiagnosisRunError as exc:
            error = str(exc)
    if request.htmx:
        # 200 even on refusal: htmx swaps only 2xx responses, and the region shows the reason.
        return _region(request, investigation, job, start_error=error)
    if error:
        messages.error(request, error)
    return redirect("investigations:detail", investigation_id=investigation.pk)


@require_GET
@never_cache
@vary_on_headers("HX-Request")
def status(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Return the progress partial; a poll (`poll=1`) that finds the run finished gets the whole region."""
    investigation = get_investigation_or_404(request.user, investigation_id)
    job = investigation_job_or_404(investigation, request.GET.get("job"))
    dead_runs_reap()  # a run whose worker died shows as failed, with the reason, on the next poll
    context = _region_context(investigation, job)
    if request.GET.get("poll") and not context["dx"]["active"]:
        response = render(request, REGION, finished_context(context))
        # The findings and the diagnosis changed too: replace the region the status sits in, and tell
        # the rest of the page (the timeline draws the findings' onsets) with a `diagnosis-finished` event.
        trigger_client_event(response, "diagnosis-finished", {"job": job.pk if job else None})
        return reswap(retarget(response, "#diagnosis"), "outerHTML")
    return render(request, STATUS, context)


@require_POST
def cancel(request: HtmxHttpRequest, investigation_id: int, run_id: int) -> HttpResponse:
    investigation = get_investigation_or_404(request.user, investigation_id, action="edit")
    run = _get_run(investigation, run_id)
    return run_cancel(
        request, run, "diagnosis", lambda **extra: _region(request, investigation, run.job, **extra)
    )


@require_GET
@vary_on_headers("HX-Request")
def finding_detail(request: HtmxHttpRequest, investigation_id: int, finding_id: int) -> HttpResponse:
    """Return a finding with its evidence table: the whole page, or (htmx) the evidence that expands a row."""
    investigation = get_investigation_or_404(request.user, investigation_id)
    finding = _get_finding(investigation, finding_id)
    crash = crash_time(finding.job, finding.run) if finding.job else None
    finding.onset_utc = utc(finding.onset)
    finding.onset_relative = relative(finding.onset, crash)
    template = "investigations/finding_detail.html"
    if request.htmx:
        template += "#finding-evidence"
    context = {
        "investigation": investigation,
        "finding": finding,
        "evidence": [_evidence_row(row) for row in finding.evidence or [] if isinstance(row, dict)],
        "crash_time": crash,
        "crash_utc": utc(crash),
        "timeline_url": finding_timeline_url(investigation, finding),
        "bound": _finding_binding(finding),
    }
    return render(request, template, context)


#: How much of the job a finding's timeline link shows either side of its onset.
FINDING_VIEW_S = 1800.0


def finding_timeline_url(investigation: Investigation, finding: Finding) -> str:
    """Return the absolute link to the timeline that shows a finding's evidence.

    Its panels (step time, then the signals its rule reads), its hosts highlighted, and the hour around
    its onset in absolute UTC seconds, clipped to the data the run saw, so a ticket that pastes the link
    gets the same view next month.
    """
    query: dict[str, str] = {"x": "time-utc"}
    if finding.job_id:
        query["job"] = str(finding.job_id)
    panels = finding_panels(finding.playbook, finding.rule)
    if panels:
        query["panels"] = ",".join(panels)
    hosts = [h for h in finding.hosts or [] if h and h != "all"]
    if hosts:
        query["hosts"] = ",".join(hosts)
    if finding.onset is not None and math.isfinite(finding.onset):
        lo, hi = finding.onset - FINDING_VIEW_S, finding.onset + FINDING_VIEW_S
        span = ((finding.run.result or {}).get("source") or {}).get("time_range") if finding.run else None
        if span and len(span) == 2:
            lo, hi = max(lo, float(span[0])), min(hi, float(span[1]))
        if hi > lo:
            query["start"], query["end"] = f"{lo:.0f}", f"{hi:.0f}"
    return reverse("investigations:timeline", args=[investigation.pk]) + "?" + urlencode(query)


def _finding_binding(finding: Finding) -> dict[str, Any] | None:
    """Return what the finding was computed from: the run, its data source and the data's time range."""
    run = finding.run
    if run is None:
        return None
    source = (run.result or {}).get("source") or {}
    span = source.get("time_range") or []
    ds = run.datasource
    return {
        "run": run,
        "finished_utc": utc(run.finished.timestamp()) if run.finished else "",
        "source": f"{ds.get_kind_display()} {ds.address}" if ds else "deleted data source",
        "url": source.get("url") or "",
        "profile": source.get("profile") or "",
        "range_utc": f"{utc(span[0])} – {utc(span[1])}" if len(span) == 2 else "",
    }


@require_GET
def run_report(request: HttpRequest, investigation_id: int, run_id: int) -> HttpResponse:
    """Return a finished diagnosis or comparison as Markdown (what `diagnose`/`compare --format markdown`
    print), to paste into a ticket; a run that has not finished is a 409 that says so."""
    investigation = get_investigation_or_404(request.user, investigation_id)
    run = _get_run(investigation, run_id)
    result = run.result or {}
    if run.status != TaskStatus.DONE or "diagnosis" not in result:
        return HttpResponse(
            f"Run #{run.pk} is {run.get_status_display().lower()}: its report exists once it is done.\n",
            status=409,
            content_type="text/plain; charset=utf-8",
        )
    text = compare_markdown(result) if run.is_comparison else diagnosis_markdown(result)
    response = HttpResponse(text, content_type="text/markdown; charset=utf-8")
    kind = run.kind
    response["Content-Disposition"] = f'inline; filename="stepwise-{investigation.pk}-{kind}-{run.pk}.md"'
    return response
