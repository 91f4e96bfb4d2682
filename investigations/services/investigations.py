"""Open investigations, add jobs to them, change them. Browsing the job roots (`job_roots.py`) and the
triage of a job's log (`job_triage.py`) live apart; their names are re-exported here for the callers.

Glue only: rows in and out, playbooks.triage for the log. Views enqueue the tasks (triage, then
discovery); nothing here imports a task. `investigation_create` saves everything in one transaction,
or nothing: a bad path, a refused or silent Prometheus, a missing TSDB or an unreadable upload raises
InvestigationError naming the form field to blame, and leaves no row (and no uploaded file) behind.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from investigations.models import DataSource, Investigation, InvestigationJob, Job, TaskStatus
from playbooks.jobdirs import JobIdError, find_job_dirs, looks_like_job_id
from playbooks.textclean import printable

from . import (
    DataSourceError,
    discovery,
    job_dir_validate,
    job_register,
    tunnels,
)
from .job_roots import (  # noqa: F401 (re-exported for the callers of this module)
    BROWSE_MAX_ENTRIES,
    FolderEntry,
    FolderListing,
    job_dir_browse,
    job_root_of,
)
from .job_triage import (  # noqa: F401 (re-exported for the callers of this module)
    job_has_log,
    job_triage,
    job_triage_claim,
    job_triage_fail,
    job_triage_queue,
)
from .sources import SourceURL, url_source_probe, url_source_store

logger = logging.getLogger(__name__)

SOURCE_KINDS = ("job_dir", "upload", "url", "tunnel")
#: Lines (and at most bytes) of an uploaded log read for its JOB_ID / JOB_NAME header.
HEADER_LINES = 200
HEADER_BYTES = 64 * 1024

# The header of a seed log, possibly behind an `srun -l` task label.
_HEADER_RE = re.compile(rb"\A(?:\d+: )?(JOB_ID|JOB_NAME)=(\S+)")


class InvestigationError(Exception):
    """The request cannot be carried out; `field` names the form field to blame (None: the whole form)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


# --- Creating investigations --------------------------------------------------------------------


@dataclass(frozen=True)
class SourceRequest:
    """Where the new investigation's job and metrics come from.

    Attributes:
        kind: job_dir (a job directory inside the roots), upload (a log file, with an optional
            Prometheus URL), url (a running Prometheus) or tunnel (an SSH tunnel Stepwise opens).
        job_dir: the job directory, for kind job_dir.
        log: the uploaded log, for kind upload.
        prometheus_url: the Prometheus URL, for kind url (optional for upload).
        tunnel: a tunnel spec or the pasted ssh command, for kind tunnel (the tunnels service parses it).
        job_id, cluster: how to key the job when no job directory or log header names it.
    """

    kind: str
    job_dir: str = ""
    log: UploadedFile | None = None
    prometheus_url: str = ""
    tunnel: Any = None
    job_id: str = ""
    cluster: str = ""


def investigation_create(
    *,
    title: str,
    source: SourceRequest,
    severity: str = Investigation.Severity.SEV3,
    team: str = "",
    owner: Any = None,
) -> Investigation:
    """Return a new Investigation with its primary Job, the link and the job's DataSource.

    1. Check what needs no database: the URL against the allow-list and that it answers; the job
       directory inside the roots with a prometheus/ folder; the upload not empty and not too big; the
       SSH tunnel opens and its Prometheus answers through it.
    2. In one transaction: create or update the Job (keyed by cluster and JOB_ID), save an upload to
       Job.log_upload, create the DataSource, the Investigation and its primary InvestigationJob,
       and mark the job's triage queued when it has a log (the caller enqueues it after commit).
    Any failure raises InvestigationError; the transaction and a saved upload are undone.
    """
    if source.kind not in SOURCE_KINDS:
        raise InvestigationError(f"Unknown source {source.kind!r}.", "source")
    title = title.strip()
    if not title:
        raise InvestigationError("Give the investigation a title.", "title")
    if severity not in Investigation.Severity.values:
        raise InvestigationError(f"Unknown severity {severity!r}.", "severity")

    probed: SourceURL | None = None
    if source.kind == "url" or (source.kind == "upload" and source.prometheus_url.strip()):
        probed = prometheus_probe(source.prometheus_url)  # network I/O: never inside the transaction
    url = probed.url if probed is not None else ""
    if source.kind == "job_dir":
        source = replace(source, job_dir=str(_job_dir_with_tsdb(source.job_dir)))
    if source.kind == "upload":
        _upload_check(source.log)
    if source.kind == "tunnel" and source.tunnel:
        _tunnel_probe(source.tunnel)  # opens ssh: never inside the transaction

    saved_upload: Job | None = None
    try:
        with transaction.atomic():
            job, saved_upload = _job_for(source, url)
            if probed is not None:
                # A job seen before keeps one source per address: reuse it rather than pile up copies.
                _mark_up(url_source_store(probed, job=job))
            elif source.kind == "tunnel":
                _tunnel_datasource(job, source.tunnel)
            investigation = Investigation.objects.create(
                title=title,
                severity=severity,
                team=team.strip(),
                owner=owner if getattr(owner, "is_authenticated", False) else None,
            )
            InvestigationJob.objects.create(
                investigation=investigation, job=job, role=InvestigationJob.Role.PRIMARY
            )
            job_triage_queue(job)
            _discovery_queue(job)
    except BaseException:
        if saved_upload is not None and saved_upload.log_upload:
            saved_upload.log_upload.delete(save=False)
        raise
    return investigation


def _job_for(source: SourceRequest, url: str) -> tuple[Job, Job | None]:
    """Return (job, job whose upload was saved or None) for the source, inside the caller's transaction."""
    cluster = source.cluster.strip()
    if source.kind == "job_dir":
        try:
            job, _ = job_register(source.job_dir, cluster=cluster)
        except DataSourceError as exc:
            raise InvestigationError(str(exc), "job_dir") from exc
        return job, None
    if source.kind == "upload":
        assert source.log is not None
        job_id, name = _log_header(source.log)
        job_id = source.job_id.strip() or job_id or _generated_id("upload")
        if Job.objects.filter(cluster=cluster, job_id=job_id).exists():
            # Never take over a job another investigation (or a job directory) already holds: its triage
            # would switch to this upload without anybody there being told. The upload gets its own record.
            job_id = f"{job_id[:70]}~{_generated_id('upload')}"
        job = Job.objects.create(cluster=cluster, job_id=job_id)
        if name and not job.name:
            job.name = name
        elif not job.name:
            job.name = Path(source.log.name or "log").name[:255]
        source.log.seek(0)
        job.log_upload.save(Path(source.log.name or "job.log").name, source.log, save=False)
        job.save()
        return job, job
    if source.kind == "url":
        job_id = source.job_id.strip() or _url_job_id(url)
    else:
        job_id = source.job_id.strip() or _generated_id("tunnel")
    job, _ = Job.objects.get_or_create(cluster=cluster, job_id=job_id)
    return job, None


def _url_job_id(url: str) -> str:
    """Return the job id of a URL source keyed by its whole URL: two tenants behind /a and /b of one
    host:port are two jobs (`prom-<host>-<port>` alone, then a hash of the path when there is one)."""
    parts = urlsplit(url)
    base = f"prom-{parts.hostname}-{parts.port or (443 if parts.scheme == 'https' else 80)}"
    path = parts.path.rstrip("/")
    return f"{base}-{hashlib.sha256(path.encode()).hexdigest()[:10]}" if path else base


def _generated_id(prefix: str) -> str:
    return f"{prefix}-{timezone.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def _job_dir_with_tsdb(path: str) -> Path:
    """Return the resolved job directory; it must be inside the roots and hold a prometheus/ folder.

    A job id instead of a path (no slash) is looked up under the roots (`playbooks.jobdirs`).
    """
    if not path.strip():
        raise InvestigationError("Pick a job directory, or type the job id.", "job_dir")
    if "/" not in path and looks_like_job_id(path):
        path = str(_job_dir_of_id(path.strip()))
    root = job_root_of(path)
    if root is not None:
        raise InvestigationError(
            f"{path} is a job root, the folder that holds the job directories: it has no prometheus/ "
            "of its own. Pick one of its job directories in the browser below (marked TSDB).",
            "job_dir",
        )
    try:
        job_dir = job_dir_validate(path.strip())
    except DataSourceError as exc:
        raise InvestigationError(str(exc), "job_dir") from exc
    tsdb = job_dir / "prometheus"
    if not tsdb.is_dir():
        raise InvestigationError(
            f"{job_dir} has no prometheus/ folder: no TSDB was recorded for this job. Upload its log "
            "instead, or give the URL of a Prometheus that holds its metrics.",
            "job_dir",
        )
    try:
        job_dir_validate(tsdb)
    except DataSourceError as exc:
        raise InvestigationError(f"{tsdb} leads outside the allowed job roots.", "job_dir") from exc
    return job_dir


def _job_dir_of_id(job_id: str) -> Path:
    """Return the one job directory of `job_id` under the roots; several or none is a clear error."""
    roots = [Path(r) for r in settings.STEPWISE_JOB_ROOTS]
    try:
        found = find_job_dirs(roots, job_id)
    except JobIdError as exc:
        raise InvestigationError(str(exc), "job_dir") from exc
    if len(found) == 1:
        return found[0]
    if not found:
        shown = ", ".join(str(r) for r in roots) or "(none)"
        raise InvestigationError(
            f"No job directory of job {job_id} under the allowed job roots ({shown}): looked for a "
            f"{job_id}-… folder with a prometheus/ TSDB and for JOB_ID={job_id} in the logs' headers. "
            "Pick the directory in the browser below, or upload the log.",
            "job_dir",
        )
    listed = "; ".join(str(d) for d in found[:5]) + (" …" if len(found) > 5 else "")
    raise InvestigationError(
        f"Job {job_id} matches {len(found)} job directories ({listed}): type the path of the one you mean.",
        "job_dir",
    )


def _upload_check(log: UploadedFile | None) -> None:
    if log is None:
        raise InvestigationError("Choose a log file to upload.", "log")
    limit = settings.STEPWISE_LOG_UPLOAD_MAX_MB
    if log.size is not None and log.size > limit * 1024 * 1024:
        raise InvestigationError(
            f"{log.name} is {log.size / 1024 / 1024:.0f} MB; the limit is {limit} MB "
            "(STEPWISE_LOG_UPLOAD_MAX_MB).",
            "log",
        )
    try:
        log.seek(0)
        first = log.read(1)
        log.seek(0)
    except OSError as exc:
        raise InvestigationError(f"{log.name} could not be read: {exc}.", "log") from exc
    if not first:
        raise InvestigationError(f"{log.name} is empty: there is nothing to triage.", "log")


def _log_header(log: UploadedFile) -> tuple[str, str]:
    """Return (JOB_ID, JOB_NAME) from the head of an uploaded log, "" for what it lacks.

    Only the first HEADER_BYTES are read: a log of binary garbage without newlines stays cheap.
    """
    found: dict[str, str] = {}
    log.seek(0)
    head = log.read(HEADER_BYTES)
    log.seek(0)
    for raw in head.splitlines()[:HEADER_LINES]:
        match = _HEADER_RE.match(raw[:1024])
        if match:
            key = match.group(1).decode()
            value = printable(match.group(2).decode("utf-8", errors="replace")).strip().strip('"')
            found.setdefault(key, value[:100])
        if len(found) == 2:
            break
    return found.get("JOB_ID", ""), found.get("JOB_NAME", "")


def prometheus_probe(url: str) -> SourceURL:
    """Return the URL split from its credentials if the allow-list admits it and a Prometheus answers there."""
    if not url.strip():
        raise InvestigationError("Give the Prometheus URL.", "prometheus_url")
    try:
        return url_source_probe(url)
    except DataSourceError as exc:
        raise InvestigationError(str(exc), "prometheus_url") from exc


def _mark_up(ds: DataSource) -> None:
    """Record that the probe just found the server up, so the page starts with a true badge."""
    ds.state = DataSource.State.UP
    ds.state_detail = "answered when the investigation was opened"
    ds.last_checked = timezone.now()
    ds.save(update_fields=["state", "state_detail", "last_checked"])


def _tunnel_probe(spec_or_text: Any) -> None:
    """Open the tunnel before anything is saved: one that cannot open is the form's error, with its reason."""
    try:
        tunnels.tunnel_probe(spec_or_text)
    except DataSourceError as exc:
        raise InvestigationError(f"The SSH tunnel did not open: {exc}", "tunnel") from exc


def _tunnel_datasource(job: Job, spec_or_text: Any) -> DataSource:
    """Return the job's SSH-tunnel source (not opened yet: the caller enqueues tunnel_open_task)."""
    if spec_or_text is None:
        raise InvestigationError(
            "Paste the tunnel command from the log, or give the head node and port.", "tunnel"
        )
    try:
        return tunnels.tunnel_datasource_create(job, spec_or_text)
    except DataSourceError as exc:
        raise InvestigationError(str(exc), "tunnel") from exc


# --- Changing investigations --------------------------------------------------------------------

UPDATABLE = ("title", "status", "severity", "owner", "team")


def investigation_update(investigation: Investigation, **changes: Any) -> Investigation:
    """Return the investigation with `changes` (title, status, severity, owner, team) saved."""
    unknown = set(changes) - set(UPDATABLE)
    if unknown:
        raise InvestigationError(f"Cannot change {', '.join(sorted(unknown))}.")
    if "status" in changes and changes["status"] not in Investigation.Status.values:
        raise InvestigationError(f"Unknown status {changes['status']!r}.", "status")
    if "severity" in changes and changes["severity"] not in Investigation.Severity.values:
        raise InvestigationError(f"Unknown severity {changes['severity']!r}.", "severity")
    if "title" in changes:
        changes["title"] = str(changes["title"]).strip()
        if not changes["title"]:
            raise InvestigationError("The title cannot be empty.", "title")
    if "team" in changes:
        changes["team"] = str(changes["team"]).strip()
    for name, value in changes.items():
        setattr(investigation, name, value)
    investigation.save(update_fields=[*changes, "updated"])
    if changes.get("status") == Investigation.Status.RESOLVED:
        # Close the SSH tunnels no other open investigation needs.
        tunnels.tunnels_release(investigation)
    return investigation


def investigation_job_add(
    investigation: Investigation,
    *,
    job_dir: str,
    role: str = InvestigationJob.Role.COMPARE,
    cluster: str | None = None,
) -> InvestigationJob:
    """Return the new link of the job in `job_dir` to the investigation, as a baseline or comparison.

    The job is registered (Job and its job TSDB DataSource; on the primary job's cluster unless
    `cluster` is given), its triage and discovery queued; the caller enqueues the triage after commit.
    """
    if role not in (InvestigationJob.Role.COMPARE, InvestigationJob.Role.BASELINE):
        raise InvestigationError("A job is added as a baseline or for comparison.", "role")
    primary = investigation_primary_job(investigation)
    if cluster is None:
        cluster = primary.cluster if primary is not None else ""  # a baseline usually ran on the same cluster
    with transaction.atomic():
        job_dir = str(_job_dir_with_tsdb(job_dir))
        try:
            job, _ = job_register(job_dir, cluster=cluster.strip())
        except DataSourceError as exc:
            raise InvestigationError(str(exc), "job_dir") from exc
        if investigation.job_links.filter(job=job).exists():
            raise InvestigationError(f"Job {job} is already part of this investigation.", "job_dir")
        last = investigation.job_links.aggregate(last=Max("position"))["last"]
        link = InvestigationJob.objects.create(
            investigation=investigation, job=job, role=role, position=(last or 0) + 1
        )
        # Triage again even if the job has one: its directory (and so its log) may have moved.
        job_triage_queue(job)
        _discovery_queue(job)
    return link


def job_log_attach(job: Job, log: UploadedFile) -> Job:
    """Return the job with `log` saved as its uploaded log and its triage queued (the caller enqueues it).

    For a job opened from a URL or a tunnel, whose log came later. Raises InvestigationError for an
    empty, unreadable or oversized file; nothing is saved then.
    """
    _upload_check(log)
    old = job.log_upload.name if job.log_upload else ""
    try:
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=job.pk)
            log.seek(0)
            job.log_upload.save(Path(log.name or "job.log").name, log, save=False)
            job.triage = {}
            job.save(update_fields=["log_upload", "triage", "updated"])
            job_triage_queue(job)
    except BaseException:
        if job.log_upload and job.log_upload.name != old:
            job.log_upload.delete(save=False)
        raise
    return job


def investigation_primary_job(investigation: Investigation) -> Job | None:
    """Return the investigation's primary job, or None if it has none (an admin removed it)."""
    link = investigation.job_links.select_related("job").filter(role=InvestigationJob.Role.PRIMARY).first()
    return link.job if link else None


def _discovery_queue(job: Job) -> None:
    """Mark the discovery of the job's data sources queued, so the page shows it coming.

    The triage task enqueues it once the log's figures are stored (the identity check needs them);
    for a job without a log, the view enqueues it at once (`discovery_pending`).
    """
    for ds in job.datasources.all():
        discovery.discovery_request(ds)


def discovery_pending(job: Job | None) -> list[int]:
    """Return the ids of the job's data sources whose discovery is queued (for the caller to enqueue)."""
    if job is None:
        return []
    return list(job.datasources.filter(discovery_status=TaskStatus.QUEUED).values_list("pk", flat=True))
