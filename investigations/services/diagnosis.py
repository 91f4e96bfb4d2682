"""Glue for automated diagnosis: a DiagnosisRun of kind diagnosis is planned, its playbooks executed,
then decided.

The engine (`playbooks.diagnose`) does the thinking; these modules load rows, call it and store what it
returns, so that findings and their evidence still render once the data source is gone:

1. `diagnosis_start` (here) creates a queued run (the view enqueues `diagnosis_plan_task` after commit).
2. `diagnosis_plan` (here) discovers the source, plans the playbooks and creates one PlaybookExecution each.
3. `playbook_execute` (services/playbook_runs.py) runs one playbook's queries and stores their summaries
   and the engine's output.
4. `diagnosis_finished_executing` (services/decision.py) tells the caller whether it is the one to
   enqueue the decision.
5. `diagnosis_decide` (services/decision.py) turns the outputs into the diagnosis and upserts the findings.

Claim, finish and cancel are any run's (services/runs.py); what the page shows is read by
services/diagnosis_overview.py. Services never enqueue tasks and never decide whether to retry:
transient Prometheus errors propagate (`TRANSIENT_ERRORS`), the tasks retry them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from django.db import transaction

from investigations.models import (
    DiagnosisRun,
    Investigation,
    InvestigationJob,
    Job,
    PlaybookExecution,
    TaskStatus,
)
from playbooks import diagnose as engine
from playbooks.gpus import gpu_model_named
from playbooks.profiles import PROFILES

from .datasources import datasource_client
from .deadruns import dead_runs_reap
from .runs import ACTIVE, run_gone_refusal, triage_wait_check

#: The `playbooks` argument that runs every declared playbook, whatever the triage says.
ALL_PLAYBOOKS = ("all",)


class DiagnosisRunError(Exception):
    """A diagnosis cannot start or go on: no data source, one already running, bad input.

    The message is written for the user who asked for it.
    """


def diagnosis_active(job: Job) -> DiagnosisRun | None:
    """Return the job's queued or running diagnosis, in whichever investigation, if any."""
    return (
        DiagnosisRun.objects.filter(job=job, status__in=ACTIVE, kind=DiagnosisRun.Kind.DIAGNOSIS)
        .select_related("investigation")
        .first()
    )


def window_validate(start: float | None, end: float | None) -> dict[str, float]:
    """Return {"start", "end"} (unix seconds) or {} for the job's whole range; ValueError if inverted."""
    if start is None and end is None:
        return {}
    if start is None or end is None:
        raise ValueError("give both the start and the end of the window, or neither")
    if not (math.isfinite(start) and math.isfinite(end)) or end <= start:
        raise ValueError("the window's end must come after its start")
    return {"start": float(start), "end": float(end)}


def diagnosis_start(
    investigation: Investigation,
    job: Job,
    *,
    playbooks: Sequence[str] | None = None,
    window: dict[str, float] | None = None,
    profile: str = "auto",
    gpu_model: str = "auto",
    user: Any = None,
) -> DiagnosisRun:
    """Return a new queued diagnosis run of `job` (the caller enqueues the plan task after commit).

    `playbooks` None runs what the job's triage calls for; a list runs those playbooks. `profile` and
    `gpu_model` ("auto": recognised from the data) are the user's word for the metric naming and the GPU
    model's priors. Raises DiagnosisRunError for a bad window, profile or GPU model, and when the job is not
    in the investigation, has no data source, or already has a queued or running diagnosis (in any
    investigation: both would query one source).
    """
    try:
        window = window_validate((window or {}).get("start"), (window or {}).get("end"))
    except ValueError as exc:
        raise DiagnosisRunError(f"Bad window: {exc}.") from exc
    if profile != "auto" and profile not in PROFILES:
        raise DiagnosisRunError(
            f"Unknown metric profile {profile!r}: use auto or one of {', '.join(PROFILES)}."
        )
    if gpu_model != "auto":
        try:
            gpu_model = gpu_model_named(gpu_model).name
        except ValueError as exc:
            raise DiagnosisRunError(f"{str(exc)[0].upper()}{str(exc)[1:]}.") from exc
    names = list(dict.fromkeys(str(p) for p in playbooks)) if playbooks is not None else None
    if names is not None and not names:
        raise DiagnosisRunError("Choose at least one playbook.")
    dead_runs_reap()  # a run whose worker died is failed first, not a reason to refuse this one
    with transaction.atomic():
        # The job's row lock serialises two starts racing for the same job (PostgreSQL; SQLite
        # serialises writers anyway).
        Job.objects.select_for_update().filter(pk=job.pk).first()
        if not InvestigationJob.objects.filter(investigation=investigation, job=job).exists():
            raise DiagnosisRunError(f"Job {job.job_id} is not part of this investigation.")
        datasource = job.current_datasource()
        if datasource is None:
            raise DiagnosisRunError(
                f"Job {job.job_id} has no data source: add its job directory, a Prometheus URL or an "
                "SSH tunnel first."
            )
        active = diagnosis_active(job)
        if active is not None:
            where = "" if active.investigation_id == investigation.pk else f" in “{active.investigation}”"
            raise DiagnosisRunError(
                f"A diagnosis of job {job.job_id} is already {active.status} (run #{active.pk}{where}); "
                "wait for it or cancel it."
            )
        return DiagnosisRun.objects.create(
            investigation=investigation,
            job=job,
            datasource=datasource,
            created_by=user if getattr(user, "is_authenticated", False) else None,
            playbooks=names or [],
            window=window,
            request={"playbooks": names, "profile": profile, "gpu_model": gpu_model},
        )


def diagnosis_plan(run_id: int) -> DiagnosisRun:
    """Return the running run with its source discovered, its playbooks planned and one execution each.

    1. Open a client (serving the job TSDB if needed) and discover the source: profile, hosts, range.
    2. Plan the requested playbooks (or what the triage calls for) over the run's window.
    3. Give each query to the first playbook that plans it: the decision reads every playbook's
       results by query name, so a query several playbooks share runs once.
    4. Store the source and the triage read in `planned`, one queued PlaybookExecution per plan (its own queries; the plan
       in `output["plan"]`, the shared queries and their owners in `output["shared"]`), the planned
       names in `playbooks` and the query count in progress_total.

    A job whose log triage is still queued or running (and not stalled) raises TriagePending before
    anything is stored: the task tries again shortly.
    DataSourceError and Prometheus errors propagate, and a source the engine cannot diagnose (no
    samples, no known metric profile, an unknown playbook) raises DiagnosisRunError: nothing was stored.
    """
    run = DiagnosisRun.objects.select_related("job", "datasource").get(pk=run_id)
    if run.datasource is None:
        raise DiagnosisRunError("The job's data source was deleted; add it again and re-run.")
    triage_wait_check([run.job], "it picks the playbooks")
    triage = run.job.finished_triage()
    request = run.request or {}
    requested = request.get("playbooks")
    chosen = {k: request.get(k) or "auto" for k in ("profile", "gpu_model")}
    with datasource_client(run.datasource, refuse_start=run_gone_refusal(run.pk)) as client:
        try:
            source = engine.discover_source(client, profile=chosen["profile"], gpu_model=chosen["gpu_model"])
            plans = engine.plan(
                source,
                triage=triage,
                playbooks=requested,
                start=run.window.get("start"),
                end=run.window.get("end"),
            )
        except engine.DiagnosisError as exc:
            raise DiagnosisRunError(f"Cannot diagnose this source: {exc}.") from exc
    plans_shared = _plans_share_queries(plans)
    plans = [p for p, _ in plans_shared]
    with transaction.atomic():
        for p, shared in plans_shared:
            PlaybookExecution.objects.update_or_create(
                run=run,
                playbook=p.name,
                defaults={
                    "status": TaskStatus.QUEUED,
                    "queries": [_planned_query(q) for q in p.queries],
                    "output": {"plan": p.to_dict(), "shared": shared, "total": len(p.queries)},
                    "error": "",
                    "duration_s": 0.0,
                },
            )
        run.executions.exclude(playbook__in=[p.name for p in plans]).delete()
        run.playbooks = [p.name for p in plans]
        run.progress_total = sum(len(p.queries) for p in plans)
        run.progress_done = 0
        run.stage = DiagnosisRun.Stage.EXECUTING
        run.planned = {"source": source.to_dict(), "triage": triage}
        run.save(update_fields=["playbooks", "progress_total", "progress_done", "stage", "planned"])
    return run


def _plans_share_queries(plans: list[Any]) -> list[tuple[Any, dict[str, str]]]:
    """Return each plan keeping only the queries no earlier plan has, with {query name: owner playbook}."""
    owners: dict[tuple[Any, ...], str] = {}
    out = []
    for p in plans:
        own, shared = [], {}
        for q in p.queries:
            key = (q.name, q.promql, q.kind, q.start, q.end, q.step, q.relabel)
            if key in owners:
                shared[q.name] = owners[key]
            else:
                owners[key] = p.name
                own.append(q)
        out.append((dataclasses.replace(p, queries=tuple(own)), shared))
    return out


def _planned_query(q: Any) -> dict[str, Any]:
    return {
        "name": q.name,
        "promql": q.promql,
        "kind": q.kind,
        "ok": None,
        "error": "",
        "summary": {},
    }
