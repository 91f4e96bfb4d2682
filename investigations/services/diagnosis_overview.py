"""What the diagnosis region of an investigation page shows for one job: its latest run, the decided
diagnosis, the findings and the crash time."""

from __future__ import annotations

from typing import Any

from django.db.models import Case, F, QuerySet, When

from investigations.models import DiagnosisRun, Finding, Investigation, Job, PlaybookExecution, TaskStatus
from investigations.times import finite_seconds

#: The findings' playbook of a comparison: the comparison region shows those, not this one.
COMPARISON_PLAYBOOK = "comparison"


def diagnosis_overview(investigation: Investigation, job: Job | None) -> dict[str, Any]:
    """Return what the diagnosis region shows for one job of an investigation.

    Keys: run (latest, any state), executions (of that run), decided (the latest done run, whose
    `result` holds the diagnosis), diagnosis (its diagnosis object or None), findings (this job's,
    by onset, unknown onsets last), crash_time (from the triage).
    """
    if job is None:
        return {
            "run": None,
            "executions": [],
            "decided": None,
            "diagnosis": None,
            "findings": [],
            "crash_time": None,
        }
    runs = DiagnosisRun.objects.filter(
        investigation=investigation, job=job, kind=DiagnosisRun.Kind.DIAGNOSIS
    ).order_by("-created", "-pk")
    run = runs.first()
    decided = (
        run
        if run is not None and run.status == TaskStatus.DONE
        else runs.filter(status=TaskStatus.DONE).first()
    )
    # Evidence is fetched when a row expands (finding_detail), not for the table. Comparison findings
    # are shown by the comparison region, not twice. The causal story first (critical and warning by
    # onset, the earliest anomaly on top), then the informational notes and red herrings.
    findings = (
        Finding.objects.filter(investigation=investigation, job=job)
        .exclude(playbook=COMPARISON_PLAYBOOK)
        .defer("evidence")
        .annotate(_notes_last=Case(When(severity=Finding.Severity.INFO, then=1), default=0))
        .order_by("_notes_last", F("onset").asc(nulls_last=True), "pk")
    )
    return {
        "run": run,
        "executions": list(execution_progress(run)) if run else [],
        "decided": decided,
        "diagnosis": (decided.result or {}).get("diagnosis") if decided else None,
        "findings": list(findings),
        "crash_time": crash_time(job, decided),
    }


def execution_progress(run: DiagnosisRun) -> QuerySet[PlaybookExecution]:
    """Return the run's executions with what the progress shows, read out of `output` by the database.

    Annotations: done (queries finished), total, unavailable (signals the source lacks), shared
    ({query: owner playbook}). `output` and `queries` hold results and are not loaded: the status
    polls every second.
    """
    return (
        run.executions.order_by("pk")
        .defer("output", "queries")
        .annotate(
            done=F("output__done"),
            total=F("output__total"),
            unavailable=F("output__plan__unavailable"),
            shared=F("output__shared"),
        )
    )


def crash_time(job: Job, run: DiagnosisRun | None = None) -> float | None:
    """Return the job's crash time (unix seconds): the triage's (in the run's result or on the job), else
    the one the engine read from the data, else None."""
    result = (run.result or {}) if run else {}
    for found in (result.get("job"), (job.finished_triage() or {}).get("job"), result.get("timeline")):
        value = finite_seconds((found or {}).get("crash_time"))
        if value is not None:
            return value
    return None
