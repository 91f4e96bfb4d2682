"""Triage a job's log: queue it (keeping the last good triage until a new one is done), claim it, run
`playbooks.triage` on the job directory, log path or upload, and record the result or the failure on
`Job.triage`. The task (`tasks/triage.py`) calls these; nothing here enqueues.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from investigations.models import Investigation, InvestigationJob, Job, TaskStatus, TriageStatus
from playbooks import triage as triage_lib
from playbooks.textclean import scrub

from .datasources import DataSourceError, _inside_job_roots, job_dir_validate


def job_has_log(job: Job) -> bool:
    return bool(job.job_dir or job.log_path or job.log_upload)


def _last_good(job: Job) -> dict[str, Any]:
    """Return {"last_good": the job's last good triage} to carry into a re-run's state, or {} if none."""
    found = job.finished_triage()
    return {"last_good": found} if found is not None else {}


def job_triage_queue(job: Job) -> bool:
    """Mark the job's triage queued (the caller enqueues job_triage_task after commit).

    Return False, marking it "none", when the job has no log to triage; a triage already queued or
    running is left alone (True). The last good triage is kept (under "last_good") until a new one is done.
    """
    if job.triage_in_progress():
        return True
    if not job_has_log(job):
        job.triage = {"state": "none", "error": "This job has no log: upload it to triage it."}
        job.triage |= _last_good(job)
        job.save(update_fields=["triage", "updated"])
        return False
    job.triage = {"state": "queued", "queued": timezone.now().isoformat()} | _last_good(job)
    job.save(update_fields=["triage", "updated"])
    return True


def job_triage_claim(job_id: int) -> bool:
    """Return True if this caller moved the job's triage from queued to running (another got it: False)."""
    job = Job.objects.filter(pk=job_id, triage_status=TriageStatus.QUEUED).first()
    if job is None:
        return False
    # Compare and swap on the queued stamp: only one caller moves this queued triage to running.
    rows = Job.objects.filter(pk=job_id, triage_status=TriageStatus.QUEUED)
    if stamp := job.triage.get("queued"):
        rows = rows.filter(triage__queued=stamp)
    claimed = rows.update(
        triage={"state": "running", "started": timezone.now().isoformat()} | _last_good(job),
        triage_status=TriageStatus.RUNNING,  # update() bypasses Job.save(), which keeps the two together
        updated=timezone.now(),
    )
    return claimed == 1


def job_triage_fail(job_id: int, error: str) -> None:
    """Record a failed triage on the job (the page shows `error` beside the last good triage, if any)."""
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None:
            return
        job.triage = {
            "state": "failed",
            "error": error[:2000],
            "finished": timezone.now().isoformat(),
        } | _last_good(job)
        job.save(update_fields=["triage", "updated"])


def _log_source(job: Job) -> tuple[str, Path]:
    """Return ("dir" | "file", path) of the job's log, checked against the job roots.

    An upload wins: a user who uploads a log wants that file read.
    """
    if job.log_upload:
        return "file", Path(job.log_upload.path)
    if job.job_dir:
        try:
            return "dir", job_dir_validate(job.job_dir)
        except DataSourceError as exc:
            raise triage_lib.TriageError(str(exc)) from exc
    if job.log_path:
        try:
            # The file itself must lie inside a root (a job's sibling DIR.log sits at a root's top level).
            return "file", _inside_job_roots(Path(job.log_path), job.log_path)
        except DataSourceError as exc:
            raise triage_lib.TriageError(str(exc)) from exc
    raise triage_lib.TriageError("this job has no log (no job directory, log path or upload)")


def job_triage(job_id: int, *, now: float | None = None) -> Job:
    """Return the job with its log triaged: Job.triage holds the contract's triage JSON, Job.config the config.

    1. Find the log: the job directory (its log and, for k8s jobs, every rank-N.log), a log path
       inside the roots, or the upload. Each is streamed (bounded memory) by playbooks.triage.
    2. Store Job.triage = the contract dict plus {"state": "done", "finished": ...}, Job.config.
    3. Set incident_class of the investigations whose primary job this is, unless a finished
       diagnosis already set it.
    Raises playbooks.triage.TriageError when the log cannot be opened at all.
    """
    job = Job.objects.get(pk=job_id)
    kind, path = _log_source(job)
    began = time.monotonic()
    now = time.time() if now is None else now
    roots = None if job.log_upload else settings.STEPWISE_JOB_ROOTS  # every log read must lie inside them
    if kind == "dir":
        result = triage_lib.triage_job(path, now=now, roots=roots)
    else:
        result = triage_lib.triage_log(path, now=now, roots=roots)
    contract = scrub(result.to_dict())  # what a log holds is data: no NUL or control byte is stored
    contract.update(
        state="done",
        finished=timezone.now().isoformat(),
        duration_s=round(time.monotonic() - began, 3),
        log=job.log_upload.name if job.log_upload else str(path),
    )
    job.triage = contract
    job.config = scrub(dict(result.config))
    job.save(update_fields=["triage", "config", "updated"])
    Investigation.objects.filter(job_links__job=job, job_links__role=InvestigationJob.Role.PRIMARY).exclude(
        diagnosis_runs__status=TaskStatus.DONE
    ).update(incident_class=result.triage_class or "")
    return job
