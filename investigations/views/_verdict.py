"""The investigation's verdict as the page header shows it (services.verdict does the reconciling)."""

from __future__ import annotations

from typing import Any

from investigations.models import DiagnosisRun, Investigation, InvestigationJob, TaskStatus
from investigations.services.diagnosis_overview import crash_time
from investigations.services.verdict import culprit_names, investigation_verdict
from investigations.times import relative, utc


def verdict_context(investigation: Investigation) -> dict[str, Any]:
    """Return {"verdict": display dict or None, "verdict_pending": why there is none yet, or ""}."""
    verdict = investigation_verdict(investigation)
    if verdict is None:
        return {"verdict": None, "verdict_pending": _pending(investigation)}
    d = verdict.diagnosis
    link = (
        InvestigationJob.objects.filter(investigation=investigation, role=InvestigationJob.Role.PRIMARY)
        .select_related("job")
        .first()
    )
    crash = crash_time(link.job, verdict.source.run) if link else None
    onset = d.get("onset") if isinstance(d.get("onset"), int | float) else None
    return {
        "verdict": {
            "klass": verdict.klass,
            "confidence_pct": round(100 * verdict.confidence),
            "root_cause_family": d.get("root_cause_family") or "",
            "culprits": culprit_names(d),
            "onset_utc": utc(onset),
            "onset_relative": relative(onset, crash),
            "summary": d.get("summary") or "",
            "next_steps": verdict.next_steps,
            "origin": verdict.origin,
            "kind": verdict.source.kind,
        },
        "verdict_pending": "",
    }


def _pending(investigation: Investigation) -> str:
    active = DiagnosisRun.objects.filter(
        investigation=investigation, status__in=(TaskStatus.QUEUED, TaskStatus.RUNNING)
    ).exists()
    if active:
        return "the diagnosis is running (it waits for the log triage), and its answer appears here."
    return ""
