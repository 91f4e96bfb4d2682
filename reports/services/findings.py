"""People's judgement of the machine's findings (confirm, reject with a reason, annotate) and their own
findings, each bound to frozen evidence: a pinned chart, log lines from the triage, or a PromQL query run
against the job's source whose result is copied into the finding once the worker has it."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from django.db import transaction
from django.urls import reverse
from kombu.exceptions import OperationalError as BrokerError

from investigations import services as inv_services
from investigations.models import DataSource, Finding, PinnedChart, QueryRun
from investigations.services import investigations as inv
from reports.models import HumanFinding, Report, Verdict

from .sections import ReportError

logger = logging.getLogger(__name__)

MAX_LOG_LINES = 50


def finding_key(finding: Finding) -> str:
    """Return the finding's stable key: the same rule of the same job and playbook across re-runs."""
    return f"{finding.job_id or 0}:{finding.playbook}:{finding.rule}"


def verdict_set(
    report: Report, finding: Finding, *, value: str, reason: str = "", note: str | None = None, user=None
) -> Verdict:
    """Record a person's verdict on a machine finding; a rejection needs a reason."""
    if value not in Verdict.Value.values:
        raise ReportError(f"Unknown verdict {value!r}.")
    reason = reason.strip()
    if value == Verdict.Value.REJECTED and not reason:
        raise ReportError("Say why the finding is rejected.")
    with transaction.atomic():
        key = finding_key(finding)
        verdict = Verdict.objects.select_for_update().filter(
            report=report, finding_key=key
        ).first() or Verdict(report=report, finding_key=key)
        verdict.finding, verdict.finding_title = finding, finding.title[:300]
        verdict.value = value
        verdict.reason = reason if value == Verdict.Value.REJECTED else ""
        if note is not None:
            verdict.note = note.strip()
        verdict.updated_by = user
        verdict._change_reason = f"{value}" + (f": {verdict.reason}" if verdict.reason else "")
        verdict.save()
        return verdict


def verdicts_by_key(report: Report) -> dict[str, Verdict]:
    return {v.finding_key: v for v in report.verdicts.select_related("updated_by")}


def report_findings(report: Report) -> list[tuple[Finding, Verdict | None]]:
    """Return the investigation's machine findings (causal story first), each with its verdict."""
    verdicts = verdicts_by_key(report)
    rows = Finding.objects.filter(investigation=report.investigation).order_by("onset", "pk")
    order = {"critical": 0, "warning": 0, "info": 1}
    ordered = sorted(rows, key=lambda f: (order.get(f.severity, 1), f.onset is None, f.onset or 0, f.pk))
    return [(f, verdicts.get(finding_key(f))) for f in ordered]


def _chart_evidence(report: Report, chart_id: Any) -> tuple[PinnedChart, dict[str, Any]]:
    chart = PinnedChart.objects.filter(pk=chart_id, investigation=report.investigation).first()
    if chart is None:
        raise ReportError("Pick one of this investigation's pinned charts.")
    return chart, {"chart_id": chart.pk, "title": chart.title, "view": chart.view, "figure": chart.figure}


def _log_evidence(report: Report, lines: list[Any]) -> dict[str, Any]:
    job = inv.investigation_primary_job(report.investigation)
    matches = ((job.triage or {}).get("matches") or []) if job is not None else []
    wanted = {str(n) for n in lines}
    picked = [
        {"line": m.get("line"), "class": m.get("class"), "text": m.get("text", "")}
        for m in matches
        if str(m.get("line")) in wanted
    ][:MAX_LOG_LINES]
    if not picked:
        raise ReportError("Pick at least one log line from the triage.")
    assert job is not None  # no job, no triage lines: refused just above
    return {"job": job.job_id, "log": job.log_path or job.log_upload.name, "lines": picked}


def human_finding_add(
    report: Report,
    *,
    title: str,
    body: str = "",
    severity: str = Finding.Severity.WARNING,
    kind: str = HumanFinding.Kind.NOTE,
    chart_id: Any = None,
    log_lines: list[Any] | None = None,
    promql: str = "",
    start: float | None = None,
    end: float | None = None,
    step: float | None = None,
    user=None,
) -> HumanFinding:
    """Add a person's finding with its evidence; a query is run by the worker and frozen when done."""
    title = title.strip()
    if not title:
        raise ReportError("A finding needs a title.")
    if severity not in Finding.Severity.values or kind not in HumanFinding.Kind.values:
        raise ReportError("Unknown severity or evidence kind.")
    finding = HumanFinding(
        report=report, title=title[:300], body=body, severity=severity, kind=kind, created_by=user
    )
    if kind == HumanFinding.Kind.CHART:
        finding.chart, finding.evidence = _chart_evidence(report, chart_id)
    elif kind == HumanFinding.Kind.LOG:
        finding.evidence = _log_evidence(report, log_lines or [])
    with transaction.atomic():
        if kind == HumanFinding.Kind.QUERY:
            finding.evidence = _query_start(report, promql, start, end, step, user)
        finding.save()
    return finding


def _query_start(report: Report, promql: str, start, end, step, user) -> dict[str, Any]:
    from investigations.tasks import queryrun_execute_task

    job = inv.investigation_primary_job(report.investigation)
    ds: DataSource | None = job.current_datasource() if job is not None else None
    if ds is None:
        raise ReportError("This investigation's job has no data source to query.")
    kind = "range" if start is not None and end is not None else "instant"
    spec = {
        "name": "evidence",
        "promql": promql,
        "kind": kind,
        "start": start,
        "end": end,
        "step": step or (max(15.0, (end - start) / 300) if kind == "range" else None),
    }
    try:
        run = inv_services.queryrun_create(ds, [spec], investigation=report.investigation, created_by=user)
    except ValueError as exc:
        raise ReportError(f"The query cannot run: {exc}.") from exc
    transaction.on_commit(partial(_send_query, queryrun_execute_task, run.pk))
    return {
        "promql": spec["promql"],
        "source": str(ds),
        "source_kind": ds.kind,
        "window": {"start": start, "end": end, "step": spec["step"]},
        "run_id": run.pk,
        "state": "running",
        "live_url": reverse("investigations:run_detail", args=[run.pk]),
    }


def _send_query(task: Any, run_id: int) -> None:
    try:
        task.delay(run_id)
    except BrokerError as exc:
        logger.error("could not enqueue query run %s: %s", run_id, exc)
        inv_services.queryrun_finish(
            run_id,
            QueryRun.Status.FAILED,
            f"Could not reach the task broker: {exc}",
            from_status=QueryRun.Status.QUEUED,
        )


def human_finding_freeze(finding: HumanFinding) -> bool:
    """Copy a finished query's result into the finding's evidence; return True when it changed now."""
    ev = finding.evidence or {}
    if finding.kind != HumanFinding.Kind.QUERY or ev.get("state") != "running":
        return False
    run_id = ev.get("run_id")  # a pk is never null: no run id finds no run, as filter(pk=None) did
    run = QueryRun.objects.filter(pk=run_id).first() if run_id is not None else None
    if run is not None and not run.is_finished:
        return False
    result = run.results.filter(name="evidence").first() if run is not None else None
    ev = ev | {
        "state": "done" if result is not None and result.ok else "failed",
        "error": (
            result.error if result is not None else (run.error if run else "The query run was deleted.")
        ),
        "series_count": result.series_count if result is not None else 0,
        "result": result.summary if result is not None else {},
        "frozen_at": run.finished.timestamp() if run is not None and run.finished else None,
    }
    HumanFinding.objects.filter(pk=finding.pk).update(evidence=ev)
    finding.evidence = ev
    return True
