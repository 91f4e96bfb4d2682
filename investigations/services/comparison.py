"""Glue for the multi-job comparison of an investigation (seed 002, "Multi-Job Comparison").

A comparison is a DiagnosisRun of kind comparison, of the investigation's primary job, whose `request`
is {"jobs": [job pks, baseline first]}. The engine
(`playbooks.compare.compare_jobs`) does the thinking; this module loads rows, connects to each job's
data source, calls it and stores what it returns:

1. `comparison_start` creates a queued run (the view enqueues `comparison_execute_task` after commit).
2. `comparison_execute` connects to every job's source (progress: one step per job connected), compares
   them with their stored triage, stores the contract's `compare` object in `run.result`, upserts the
   findings (playbook "comparison", job = the primary job) and sets the investigation's incident class.
3. A user cancels it like a diagnosis (`runs.run_cancel`: the run row becomes cancelled). `comparison_execute`
   looks for that before connecting each job, between the engine's queries and before storing anything, and
   then raises ComparisonCancelled: the run row is left as the user's cancel wrote it.

Services never enqueue tasks and never decide whether to retry: transient Prometheus errors propagate
(`TRANSIENT_ERRORS`), the task retries them. The claim, requeue and finish of a run are any run's
(services/runs.py): a comparison is a run like any other.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from contextlib import ExitStack
from typing import Any, cast

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from investigations.models import (
    DataSource,
    DiagnosisRun,
    Finding,
    Investigation,
    InvestigationJob,
    Job,
    TaskStatus,
)
from playbooks.compare import CompareError, CompareJob, compare_jobs
from playbooks.prometheus import PrometheusClient

from . import datasource_client
from .comparison_pairs import compare_pairs
from .decision import findings_prune, findings_record
from .runs import ACTIVE, run_is_running, run_watched, triage_wait_check

logger = logging.getLogger(__name__)

#: The playbook of a comparison's findings.
PLAYBOOK = "comparison"

# Baseline first (compare_jobs judges every job against the job that did not restore, else the first).
_ROLE_ORDER: dict[str, int] = {
    InvestigationJob.Role.BASELINE: 0,
    InvestigationJob.Role.PRIMARY: 1,
    InvestigationJob.Role.COMPARE: 2,
}
_NUMBER = re.compile(r"[-+]?\d[\d.,]*")


class ComparisonError(Exception):
    """A comparison cannot start or go on: too few jobs, one already running, jobs that cannot be compared.

    The message is written for the user who asked for it.
    """


class ComparisonCancelled(Exception):
    """The run stopped running (a user cancelled it) while it worked: it stopped, and stored nothing more."""


def comparison_runs(investigation: Investigation) -> Any:
    """Return the investigation's comparison runs, newest first."""
    return DiagnosisRun.objects.filter(
        investigation=investigation, kind=DiagnosisRun.Kind.COMPARISON
    ).order_by("-created", "-pk")


def comparison_active(investigation: Investigation) -> DiagnosisRun | None:
    """Return the investigation's queued or running comparison, if any."""
    return comparison_runs(investigation).filter(status__in=ACTIVE).first()


def comparison_links(investigation: Investigation) -> list[tuple[InvestigationJob, DataSource | None]]:
    """Return the investigation's jobs in comparison order (baseline, primary, others), each with its source."""
    links = list(InvestigationJob.objects.filter(investigation=investigation).select_related("job"))
    links.sort(key=lambda link: (_ROLE_ORDER.get(link.role, 3), link.position, link.pk))
    # Each job's current source (Job.current_datasource: the newest), for all the jobs in one query.
    newest: dict[int, DataSource] = {}
    for ds in DataSource.objects.filter(job__in=[link.job_id for link in links]).order_by("-created", "-pk"):
        assert ds.job_id is not None  # job__in: only sources of these jobs
        newest.setdefault(ds.job_id, ds)
    return [(link, newest.get(link.job_id)) for link in links]


def comparison_start(investigation: Investigation, user: Any = None) -> DiagnosisRun:
    """Return a new queued comparison of the investigation's jobs that have a data source.

    Raises ComparisonError when fewer than two of its jobs have a data source, or a comparison of this
    investigation is already queued or running.
    """
    with transaction.atomic():
        # The investigation's row lock serialises two starts racing (PostgreSQL; SQLite serialises writers).
        Investigation.objects.select_for_update().filter(pk=investigation.pk).first()
        links = comparison_links(investigation)
        usable = [(link, ds) for link, ds in links if ds is not None]
        if len(usable) < 2:
            missing = [link.job.job_id for link, ds in links if ds is None]
            why = f" (no data source: {', '.join(missing)})" if missing else ""
            raise ComparisonError(
                f"A comparison needs at least two jobs with a data source; this investigation has "
                f"{len(usable)}{why}. Add a job to compare (its job directory) first."
            )
        active = comparison_active(investigation)
        if active is not None:
            raise ComparisonError(
                f"A comparison is already {active.status} (run #{active.pk}); wait for it to finish."
            )
        primary = next(
            ((link, ds) for link, ds in usable if link.role == InvestigationJob.Role.PRIMARY), usable[0]
        )
        return DiagnosisRun.objects.create(
            investigation=investigation,
            job=primary[0].job,
            datasource=primary[1],
            created_by=user if getattr(user, "is_authenticated", False) else None,
            kind=DiagnosisRun.Kind.COMPARISON,
            request={"jobs": [link.job.pk for link, _ in usable]},
            progress_total=len(usable),
            result={},
        )


def finding_rule(finding: dict[str, Any]) -> str:
    """Return the finding's rule, or a stable one from its class and title (numbers left out).

    A re-run over the same jobs whose figures moved a little updates the same row instead of adding one.
    """
    if finding.get("rule"):
        return str(finding["rule"])[:100]
    title = _NUMBER.sub("#", str(finding.get("title") or "finding"))
    return f"{finding.get('class') or 'healthy'}:{title}"[:100]


def comparison_execute(run_id: int) -> DiagnosisRun:
    """Return the running comparison, done, with its result and findings stored.

    1. Connect to each job's data source in order (serving a job TSDB when needed), counting one
       progress step per job connected.
    2. Compare them with each job's stored triage, pair by pair (`compare_pairs`: each job with the baseline,
       or the primary with each other job), in a helper thread whose queries
       stop once the run is cancelled (`_compare_watched`).
    3. In one transaction, and only while the run is still running: upsert the findings by
       (investigation, primary job, "comparison", rule), delete the earlier comparison findings that no
       longer fire, store the contract's `compare` object in `run.result`, set the investigation's
       incident class when the comparison names a non-healthy class, mark the run done.

    DataSourceError and transient Prometheus errors propagate; jobs that cannot be compared (a job or
    its data source deleted, no data, no step gauge) raise ComparisonError: nothing was stored. A run
    that is no longer running at a checkpoint (before each job, between queries, before storing) raises
    ComparisonCancelled: the run keeps its progress so far and the earlier comparison's findings.
    """
    run = DiagnosisRun.objects.select_related("job", "investigation").get(pk=run_id)
    job_ids = [int(pk) for pk in (run.request or {}).get("jobs") or []]
    jobs = Job.objects.in_bulk(job_ids)
    missing = [pk for pk in job_ids if pk not in jobs]
    if missing or len(job_ids) < 2:
        raise ComparisonError("A job of this comparison was deleted; start the comparison again.")
    # the logs give the restore points and the configs the comparison diffs
    triage_wait_check([jobs[pk] for pk in job_ids], "its restore point and config are compared")
    DiagnosisRun.objects.filter(pk=run_id).update(progress_done=0, progress_total=len(job_ids))
    stop = threading.Event()
    with ExitStack() as stack:
        specs = []
        for pk in job_ids:
            job = jobs[pk]
            _checkpoint(run_id, f"before connecting to job {job.job_id}")
            datasource = job.current_datasource()
            if datasource is None:
                raise ComparisonError(
                    f"Job {job.job_id} has no data source any more; add it again and re-run."
                )
            client = stack.enter_context(datasource_client(datasource))
            # the proxy forwards every attribute of the PrometheusClient, so it is used as one
            stoppable = cast(PrometheusClient, _StoppableClient(client, stop))
            specs.append(CompareJob(stoppable, job.finished_triage()))
            DiagnosisRun.objects.filter(pk=run_id).update(progress_done=F("progress_done") + 1)
        _checkpoint(run_id, "before comparing")
        roles = dict(
            InvestigationJob.objects.filter(
                investigation_id=run.investigation_id, job_id__in=job_ids
            ).values_list("job_id", "role")
        )
        try:
            result = _compare_watched(run_id, specs, [roles.get(pk, "") for pk in job_ids], stop)
        except CompareError as exc:
            raise ComparisonError(f"Cannot compare these jobs: {exc}.") from exc
    findings = [{**f, "rule": finding_rule(f)} for f in _json_safe(result.get("findings") or [])]
    with transaction.atomic():
        if not DiagnosisRun.objects.select_for_update().filter(pk=run_id, status=TaskStatus.RUNNING).exists():
            raise ComparisonCancelled("stopped before storing its result")
        keys = findings_record(run, findings)
        findings_prune(run, keys, playbooks=[PLAYBOOK])
        run.result = _json_safe(result)
        run.status = TaskStatus.DONE
        run.finished = timezone.now()
        run.error = ""
        run.save(update_fields=["result", "status", "finished", "error"])
        klass = str((result.get("diagnosis") or {}).get("class") or "")
        if klass and klass != "healthy":
            Investigation.objects.filter(pk=run.investigation_id).update(
                incident_class=klass[:40], updated=timezone.now()
            )
    run.refresh_from_db()
    return run


def _checkpoint(run_id: int, where: str) -> None:
    """Raise ComparisonCancelled, naming `where`, unless the run is still running."""
    if not run_is_running(run_id):
        raise ComparisonCancelled(f"stopped {where}")


class _StoppableClient:
    """A PrometheusClient that refuses every call once `stop` is set: the comparison stops between queries.

    Its refusal is not a PrometheusError, so the engine neither records it as a failed query nor goes on.
    """

    def __init__(self, client: Any, stop: threading.Event) -> None:
        self._client = client
        self._stop = stop

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._client, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._stop.is_set():
                raise ComparisonCancelled(f"stopped between queries, before {name}()")
            return value(*args, **kwargs)

        return call


def _compare_watched(
    run_id: int, specs: list[CompareJob], roles: list[str], stop: threading.Event
) -> dict[str, Any]:
    """Return the jobs compared pair by pair (`compare_pairs`: each with the baseline, or the primary with
    each other), watched for a cancellation (`run_watched`): `stop` ends it between queries."""

    def compare(pair: list[CompareJob]) -> dict[str, Any]:
        return compare_jobs(pair, concurrency=settings.STEPWISE_QUERY_CONCURRENCY)

    return run_watched(run_id, f"comparison {run_id}", lambda: compare_pairs(compare, specs, roles), stop)


def _json_safe(value: Any) -> Any:
    """Return `value` with NaN and infinities as None: JSON (and PostgreSQL's jsonb) has no such numbers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def comparison_overview(investigation: Investigation) -> dict[str, Any]:
    """Return what the comparison region shows.

    Keys: links (the investigation's jobs in comparison order, with their data source), comparable
    (2+ of them have a source), run (latest comparison, any state), decided (latest done one),
    result (its compare object or None), findings (its comparison findings, warnings first).
    """
    links = comparison_links(investigation)
    runs = comparison_runs(investigation)
    run = runs.first()
    decided = (
        run
        if run is not None and run.status == TaskStatus.DONE
        else runs.filter(status=TaskStatus.DONE).first()
    )
    findings: list[Finding] = []
    if decided is not None:
        findings = list(
            Finding.objects.filter(investigation=investigation, job_id=decided.job_id, playbook=PLAYBOOK)
            .defer("evidence")
            .order_by(F("onset").asc(nulls_last=True), "pk")
        )
    return {
        "links": links,
        "comparable": sum(1 for _, ds in links if ds is not None) >= 2,
        "run": run,
        "decided": decided,
        "result": (decided.result or None) if decided else None,
        "findings": findings,
    }


__all__ = [
    "ComparisonCancelled",
    "ComparisonError",
    "comparison_active",
    "comparison_execute",
    "comparison_overview",
    "comparison_start",
]
