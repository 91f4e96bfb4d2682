"""The decision of a diagnosis run (steps 4 and 5 of services/diagnosis.py): the one playbook task that
finishes last enqueues it; it turns the playbooks' outputs into the diagnosis and upserts the findings."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from investigations.models import DiagnosisRun, Finding, Investigation, InvestigationJob, Job, TaskStatus
from investigations.times import finite_seconds
from playbooks import diagnose as engine

from .diagnosis import DiagnosisRunError
from .runs import FINISHED

logger = logging.getLogger(__name__)

_CONTRACT_FINDING_KEYS = ("playbook", "class", "severity", "hosts", "gpus", "onset", "title", "evidence")
_CONTRACT_JOB_KEYS = ("id", "status", "triage_class", "first_step", "last_step", "crash_time")
#: What a re-run's upsert replaces in a finding that fired again.
FINDING_FIELDS = [
    "run",
    "incident_class",
    "severity",
    "title",
    "hosts",
    "gpus",
    "onset",
    "evidence",
    "updated",
]
_SEVERITIES = {choice.value for choice in Finding.Severity}


def diagnosis_finished_executing(run_id: int) -> bool:
    """Return True if every playbook of the running run has finished and this caller is the one to decide.

    Several playbook tasks can finish at once on different workers. The run row is locked while the
    executions are counted, and the conditional UPDATE of `stage` from executing to
    deciding lets exactly one caller through even where row locks do not exist (SQLite).
    """
    with transaction.atomic():
        run = DiagnosisRun.objects.select_for_update().filter(pk=run_id, status=TaskStatus.RUNNING).first()
        if run is None or run.stage != DiagnosisRun.Stage.EXECUTING:
            return False
        if run.executions.exclude(status__in=FINISHED).exists():
            return False
        won = DiagnosisRun.objects.filter(
            pk=run_id, status=TaskStatus.RUNNING, stage=DiagnosisRun.Stage.EXECUTING
        ).update(stage=DiagnosisRun.Stage.DECIDING)
    return won == 1


def _rule_keys(findings: list[dict[str, Any]]) -> list[str]:
    """Return a (playbook, rule)-unique key per finding: a rule that fires twice is told apart by host."""
    seen: dict[tuple[str, str], int] = {}
    keys = []
    for f in findings:
        rule = str(f.get("rule") or f.get("title") or "finding")[:100]
        key = (str(f.get("playbook", "")), rule)
        if key in seen:
            seen[key] += 1
            where = ",".join(str(h) for h in f.get("hosts") or []) or str(seen[key])
            rule = f"{rule[: 100 - len(where) - 2]}[{where}]"[:100]
        else:
            seen[key] = 1
        keys.append(rule)
    return keys


def _contract_job(job: Job, triage: dict[str, Any] | None) -> dict[str, Any]:
    found = (triage or {}).get("job") or {}
    out = {key: found.get(key) for key in _CONTRACT_JOB_KEYS}
    out["id"] = out["id"] or job.job_id
    return out


def _contract_source(source: dict[str, Any]) -> dict[str, Any]:
    return {
        "url": source.get("url"),
        "profile": source.get("profile"),
        "hosts": list(source.get("hosts") or []),
        "gpus_per_host": source.get("gpus_per_host"),
        "time_range": list(source.get("time_range") or []),
    }


def diagnosis_decide(run_id: int) -> DiagnosisRun:
    """Return the run, done, after deciding from its playbooks' outputs and storing the findings.

    `run.result` becomes the contract's object (job, source, diagnosis, findings without their rule,
    timings) plus the engine's `timeline` of the job.

    1. Load the outputs of the playbooks that finished (failed ones are named in run.error).
    2. Let the engine decide: the diagnosis and the findings, each with the rule that produced it.
    3. In one transaction, and only while the run is still running: upsert the findings by
       (investigation, job, playbook, rule); when the run is complete (every playbook done, no query
       failed), delete this job's diagnosis findings of those playbooks whose rule no longer fires;
       store the contract object in run.result; set the investigation's incident class if the job
       is its primary job; mark the run done.

    Raises DiagnosisRunError when no playbook produced an output.
    """
    run = DiagnosisRun.objects.select_related("job", "investigation").get(pk=run_id)
    planned = run.planned or {}
    executions = list(run.executions.order_by("pk"))
    finished_names = {e.playbook for e in executions if e.status == TaskStatus.DONE}
    done = [
        e
        for e in executions
        if e.playbook in finished_names and e.output.get("result") and _read_data(e, finished_names)
    ]
    failed = [e for e in executions if e.status != TaskStatus.DONE]
    if executions and not done:
        reasons = "; ".join(f"{e.playbook}: {e.error or e.status}" for e in failed)
        raise DiagnosisRunError(f"Every playbook failed, so there is nothing to decide from ({reasons}).")
    outputs = [engine.PlaybookOutput.from_dict(e.output["result"]) for e in done]
    source = engine.SourceInfo.from_dict(planned["source"])
    triage = planned.get("triage")
    decision = engine.decide(source, outputs, triage=triage)
    findings = list(decision.get("findings") or [])
    complete = not failed and not any(o.errors for o in outputs)
    with transaction.atomic():
        if not DiagnosisRun.objects.select_for_update().filter(pk=run_id, status=TaskStatus.RUNNING).exists():
            logger.info("diagnosis %s is no longer running (cancelled?); its decision is dropped", run_id)
            run.refresh_from_db()
            return run
        keys = findings_record(run, findings)
        if complete:
            findings_prune(run, keys, playbooks=[e.playbook for e in executions])
        finished = timezone.now()
        run.result = {
            "job": _contract_job(run.job, triage),
            "source": _contract_source(planned["source"]),
            "diagnosis": decision.get("diagnosis") or {},
            "findings": [{k: f.get(k) for k in _CONTRACT_FINDING_KEYS} for f in findings],
            "timings": {
                "total_s": round((finished - (run.started or run.created)).total_seconds(), 3),
                "queries": sum(o.queries for o in outputs),
                "prometheus_s": round(sum(o.prometheus_s for o in outputs), 3),
            },
            # Not part of the contract: the job's own timeline as the engine read it from the data
            # (training start, last step advance, crash time...), and the GPU model whose priors were
            # used (set by the user, or recognised from the data), for the page.
            "timeline": decision.get("timeline") or {},
            "gpu_model": {
                "name": planned["source"].get("gpu_model"),
                "set_by_user": (run.request or {}).get("gpu_model", "auto") != "auto",
            },
        }
        run.status = TaskStatus.DONE
        run.finished = finished
        run.error = (
            f"{len(failed)} of {len(executions)} playbooks failed: "
            + "; ".join(f"{e.playbook}: {e.error or e.status}" for e in failed)
            if failed
            else ""
        )[:10_000]
        run.save(update_fields=["result", "status", "finished", "error"])
        diagnosis_class = run.result["diagnosis"].get("class")
        if (
            diagnosis_class
            and InvestigationJob.objects.filter(
                investigation=run.investigation, job=run.job, role=InvestigationJob.Role.PRIMARY
            ).exists()
        ):
            Investigation.objects.filter(pk=run.investigation_id).update(
                incident_class=str(diagnosis_class)[:40], updated=timezone.now()
            )
    return run


def _read_data(execution: Any, finished: set[str]) -> bool:
    """Whether a finished playbook read anything: its own queries, or a shared query whose owner finished.

    A playbook whose every query is another's (identical PromQL runs once) has no data of its own; when
    those owners failed, its empty output must not make a run of failed queries look decided."""
    shared = (execution.output or {}).get("shared") or {}
    return bool(execution.queries) or not shared or any(owner in finished for owner in shared.values())


def findings_record(run: DiagnosisRun, findings: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """Upsert the engine's findings of `run`; return their (playbook, rule) keys."""
    keys = _rule_keys(findings)
    now = timezone.now()
    rows = []
    for f, rule in zip(findings, keys, strict=True):
        severity = str(f.get("severity") or "info")
        rows.append(
            Finding(
                investigation_id=run.investigation_id,
                job_id=run.job_id,
                run=run,
                playbook=str(f.get("playbook") or "")[:64],
                rule=rule,
                incident_class=str(f.get("class") or "")[:40],
                severity=severity if severity in _SEVERITIES else Finding.Severity.INFO,
                title=str(f.get("title") or rule)[:300],
                hosts=[str(h) for h in f.get("hosts") or []],
                gpus=[str(g) for g in f.get("gpus") or []],
                onset=finite_seconds(f.get("onset")),
                evidence=list(f.get("evidence") or []),
                updated=now,
            )
        )
    if rows:
        Finding.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["investigation", "job", "playbook", "rule"],
            update_fields=FINDING_FIELDS,
        )
    return {(row.playbook, row.rule) for row in rows}


def findings_prune(run: DiagnosisRun, fired: set[tuple[str, str]], *, playbooks: list[str]) -> int:
    """Delete this job's findings of `playbooks` (and of the playbooks that fired) that did not fire this run.

    Findings a person recorded (no run) are kept; so are those of playbooks this run did not cover.
    """
    covered = set(playbooks) | {p for p, _ in fired}
    stale = Finding.objects.filter(
        investigation_id=run.investigation_id, job_id=run.job_id, run__isnull=False, playbook__in=covered
    )
    keep = Q()
    for playbook, rule in fired:
        keep |= Q(playbook=playbook, rule=rule)
    if fired:
        stale = stale.exclude(keep)
    deleted, _ = stale.delete()
    return deleted
