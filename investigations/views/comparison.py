"""The comparison region of the investigation page: the investigation's jobs side by side.

The region (`investigations/_comparison.html#comparison`) is rendered here. "Compare jobs" starts a
comparison run (services.comparison); while it is active its status polls `status`, and the response
that sees it finished returns the whole region (result included), which carries no polling trigger,
so polling stops, and the page header's incident class out of band. Cancel works as the diagnosis's.
"""

from __future__ import annotations

import logging
import math
from functools import partial
from typing import Any

from django.contrib import messages
from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import reswap, retarget, trigger_client_event

from investigations.access import get_investigation_or_404
from investigations.models import DiagnosisRun, Investigation
from investigations.services import comparison as cmp
from investigations.services.runs import run_not_sent
from investigations.tasks.comparison import comparison_execute_task
from investigations.tasks.enqueue import enqueue_on_commit
from investigations.times import utc
from playbooks.compare import WITHIN_NOISE, delta_text, metric_signals
from playbooks.timeline import PANELS

from ._common import HtmxHttpRequest, finished_context, run_cancel
from ._units import format_value, metric_meta

logger = logging.getLogger(__name__)

REGION = "investigations/_comparison.html#comparison"
STATUS = "investigations/_comparison.html#comparison-status"


def _columns(
    overview: dict[str, Any], run: DiagnosisRun | None, result: dict[str, Any]
) -> list[dict[str, Any]]:
    """Return one column per compared job: id, role, restored-from, steps, baseline flag."""
    links = {link.job.pk: link for link, _ in overview["links"]}
    order = [int(pk) for pk in ((run.request or {}).get("jobs") or [])] if run else []
    baseline = (result.get("comparison") or {}).get("baseline")
    out = []
    for i, found in enumerate(result.get("jobs") or []):
        link = links.get(order[i]) if i < len(order) else None
        triage = (link.job.finished_triage() or {}) if link else {}
        out.append(
            {
                "id": found.get("id") or (link.job.job_id if link else f"job {i + 1}"),
                "role": link.get_role_display() if link else "",
                "restored_from": ((triage.get("progress") or {}).get("restored_from")),
                "first_step": found.get("first_step"),
                "last_step": found.get("last_step"),
                "status": found.get("status"),
                "baseline": i == baseline,
            }
        )
    return out


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _delta(name: str, ref: Any, value: Any, delta: Any) -> str:
    """Return one job's change against the reference as a report shows it, or "—"."""
    if not (_finite(ref) and _finite(value) and _finite(delta)):
        return "—"
    return delta_text({"name": name, "values": [ref, value], "delta_pct": delta})


def _job_id(ids: list[str], i: int) -> str:
    """Return the id of the comparison's i-th job, as its column names it."""
    return ids[i] if i < len(ids) else f"job {i + 1}"


def _metric_rows(result: dict[str, Any], ids: list[str]) -> list[dict[str, Any]]:
    """Return the metric table: each job's value by name and unit, its change against the reference
    (with three or more jobs, each compared pair's), and the primary's pair's delta and likely cause.
    A cell carries its job's id (`ids`, the columns'): a phone shows it before the value."""
    comparison = result.get("comparison") or {}
    ref = int(comparison.get("baseline") or 0)
    pairs = result.get("pairs") or []
    primary = pairs[0]["jobs"][1] if pairs else None
    rows = []
    for m in comparison.get("metrics") or []:
        name = str(m.get("name") or "")
        values = list(m.get("values") or [])
        deltas = m.get("deltas") or []
        other = primary if primary is not None and primary < len(values) else len(values) - 1
        cause = m.get("likely_cause") or ""
        meta = metric_meta(name)
        delta = _delta(name, values[ref] if ref < len(values) else None, values[other] if values else None,
                       m.get("delta_pct"))  # fmt: skip
        rows.append(
            {
                "name": name,
                "label": meta["label"],
                "values": [format_value(v, meta["unit"]) for v in values],
                # (job id, value, its change against the reference: shown when more than one pair was compared)
                "cells": [
                    (
                        _job_id(ids, i),
                        format_value(v, meta["unit"]),
                        _delta(name, values[ref], v, deltas[i])
                        if len(pairs) > 1 and i != ref and i < len(deltas)
                        else "",
                    )
                    for i, v in enumerate(values)
                ],
                "delta_pct": delta,
                # the engine's own judgment: a difference beyond the metric's floors has a likely cause
                "highlight": delta != "—" and bool(cause) and cause != WITHIN_NOISE,
                "likely_cause": cause,
            }
        )
    return rows


def _pair_rows(result: dict[str, Any], columns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return which pairs the comparison compared, each with its verdict ("" names from the columns)."""
    rows = []
    for pair in result.get("pairs") or []:
        names = [columns[i]["id"] if i < len(columns) else f"job {i + 1}" for i in pair.get("jobs") or []]
        roles = [columns[i]["role"] if i < len(columns) else "" for i in pair.get("jobs") or []]
        confidence = pair.get("confidence")
        rows.append(
            {
                "names": names,
                "roles": roles,
                "class": pair.get("class") or "healthy",
                "confidence_pct": round(100 * float(confidence)) if _finite(confidence) else None,
                "summary": pair.get("summary") or "",
            }
        )
    return rows


def _region_context(investigation: Investigation, **extra: Any) -> dict[str, Any]:
    overview = cmp.comparison_overview(investigation)
    run, decided = overview["run"], overview["decided"]
    result = overview["result"] or {}
    diagnosis = dict(result.get("diagnosis") or {})
    if diagnosis:
        diagnosis["confidence_pct"] = round(100 * float(diagnosis.get("confidence") or 0))
        diagnosis["onset_utc"] = utc(diagnosis.get("onset"))
    comparison = result.get("comparison") or {}
    columns = _columns(overview, decided, result) if result else []
    ids = [col["id"] for col in columns]
    for finding in overview["findings"]:
        finding.onset_utc = utc(finding.onset)
    return {
        "investigation": investigation,
        "cmp": {
            **overview,
            "active": run is not None and not run.is_finished,
            "jobs_count": len(overview["links"]),
            "columns": columns,
            "pairs": _pair_rows(result, columns),
            "overlap": comparison.get("overlap_steps"),
            "config_rows": [
                {
                    "key": key,
                    "values": [(_job_id(ids, i), "—" if v is None else v) for i, v in enumerate(values)],
                }
                for key, values in sorted((comparison.get("config_diff") or {}).items())
            ],
            "metrics": _metric_rows(result, ids),
            "diagnosis": diagnosis or None,
            "timings": result.get("timings") or {},
            "timeline_url": _timeline_url(investigation, decided, result),
            "grid_url": _grid_url(investigation, decided, result),
        },
        **extra,
    }


def _compared_view(decided: DiagnosisRun | None, result: dict[str, Any]) -> tuple[int, list[int], list[str]]:
    """Return (primary job pk, the other jobs' pks, panels) a finished comparison draws: step time and every
    metric it judged beyond noise; (0, [], []) without one."""
    if decided is None or not result:
        return 0, [], []
    jobs = [int(pk) for pk in (decided.request or {}).get("jobs") or []]
    others = [pk for pk in jobs if pk != decided.job_id]
    wanted = {"step_time"} | {
        signal
        for m in (result.get("comparison") or {}).get("metrics") or []
        if (m.get("likely_cause") or WITHIN_NOISE) != WITHIN_NOISE
        for signal in metric_signals(str(m.get("name") or ""))
    }
    return decided.job_id, others, [k for k in PANELS if k in wanted]


def _timeline_url(investigation: Investigation, decided: DiagnosisRun | None, result: dict[str, Any]) -> str:
    """Return the timeline that draws the compared jobs by step over the primary's ("" without any)."""
    primary, others, panels = _compared_view(decided, result)
    if not others:
        return ""
    query = {
        "job": str(primary),
        "x": "step",
        "compare": ",".join(map(str, others)),
        "panels": ",".join(panels),
    }
    return reverse("investigations:timeline", args=[investigation.pk]) + "?" + urlencode(query)


def _grid_url(investigation: Investigation, decided: DiagnosisRun | None, result: dict[str, Any]) -> str:
    """Return the small multiples of the same jobs and panels: one column per job ("" without any)."""
    primary, others, panels = _compared_view(decided, result)
    if not others:
        return ""
    query = {"jobs": ",".join(map(str, [primary, *others])), "panels": ",".join(panels)}
    return reverse("investigations:comparison_grid", args=[investigation.pk]) + "?" + urlencode(query)


def _region(request: HtmxHttpRequest, investigation: Investigation, **extra: Any) -> HttpResponse:
    return render(request, REGION, _region_context(investigation, **extra))


@require_GET
@never_cache
@vary_on_headers("HX-Request")
def region(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Return the comparison region; outside htmx, the investigation page that holds it."""
    investigation = get_investigation_or_404(request.user, investigation_id)
    if not request.htmx:
        return redirect("investigations:detail", investigation_id=investigation.pk)
    return _region(request, investigation)


@require_POST
def start(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    investigation = get_investigation_or_404(request.user, investigation_id, action="edit")
    error = ""
    try:
        with transaction.atomic():
            run = cmp.comparison_start(investigation, request.user)
            enqueue_on_commit(comparison_execute_task, run.pk, not_sent=partial(run_not_sent, run.pk))
    except cmp.ComparisonError as exc:
        error = str(exc)
    if request.htmx:
        # 200 even on refusal: htmx swaps only 2xx responses, and the region shows the reason.
        return _region(request, investigation, start_error=error)
    if error:
        messages.error(request, error)
    return redirect("investigations:detail", investigation_id=investigation.pk)


@require_GET
@never_cache
@vary_on_headers("HX-Request")
def status(request: HtmxHttpRequest, investigation_id: int) -> HttpResponse:
    """Return the progress partial; a poll (`poll=1`) that finds the run finished gets the whole region."""
    investigation = get_investigation_or_404(request.user, investigation_id)
    context = _region_context(investigation)
    if request.GET.get("poll") and not context["cmp"]["active"]:
        response = render(request, REGION, finished_context(context))
        # The investigation's class may have changed too: tell the rest of the page.
        run = context["cmp"]["run"]
        trigger_client_event(response, "comparison-finished", {"run": run.pk if run else None})
        return reswap(retarget(response, "#comparison"), "outerHTML")
    return render(request, STATUS, context)


@require_POST
def cancel(request: HtmxHttpRequest, investigation_id: int, run_id: int) -> HttpResponse:
    investigation = get_investigation_or_404(request.user, investigation_id, action="edit")
    # Only this investigation's comparisons: a diagnosis run is cancelled from its own region.
    run = get_object_or_404(cmp.comparison_runs(investigation), pk=run_id)
    return run_cancel(request, run, "comparison", lambda **extra: _region(request, investigation, **extra))
