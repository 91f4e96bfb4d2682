"""Discovery of a data source: what its TSDB holds, and whether it is the job's own Prometheus.

The task (`tasks/discovery.py`) claims the data source's discovery, calls `discovery_execute`, and marks
the outcome; views call `discovery_request` and enqueue after commit. Nothing here imports a task.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from investigations.models import DataSource, Job, TaskStatus
from playbooks import discovery as discovery_lib
from playbooks.prometheus import PrometheusTimeout, PrometheusUnreachable
from playbooks.textclean import scrub
from playbooks.triage import find_job_log

from . import DataSourceError, datasource_client

logger = logging.getLogger(__name__)

PENDING = (TaskStatus.QUEUED, TaskStatus.RUNNING)
#: Key of the stored discovery holding when a worker claimed it (unix seconds).
CLAIMED_KEY = "claimed_at"
#: Past the hard time limit, this much longer running means the worker is gone.
STUCK_GRACE_S = 60.0


def discovery_stuck(datasource: DataSource, *, now: float | None = None) -> bool:
    """Return True if the discovery has been running for longer than the task's hard time limit.

    Its worker died (killed, machine lost): with acks_late the broker redelivers the task, but the row
    is no longer queued, so no worker would ever claim it again.
    """
    if datasource.discovery_status != TaskStatus.RUNNING:
        return False
    claimed = (datasource.discovery or {}).get(CLAIMED_KEY)
    if not isinstance(claimed, (int, float)):
        return False
    now = time.time() if now is None else now
    return now - claimed > settings.CELERY_TASK_TIME_LIMIT + STUCK_GRACE_S


def discovery_request(datasource: DataSource, *, force: bool = False) -> bool:
    """Mark the data source's discovery queued and clear its error; return True if it was newly queued.

    A discovery already queued or running is left alone (False): the caller enqueues only on True.
    With `force`, a discovery stuck in running (see discovery_stuck) is queued again.
    """
    rows = DataSource.objects.filter(pk=datasource.pk)
    if force and discovery_stuck(datasource):
        rows = rows.filter(discovery_status=TaskStatus.RUNNING)
    else:
        rows = rows.exclude(discovery_status__in=PENDING)
    queued = rows.update(discovery_status=TaskStatus.QUEUED, discovery_error="")
    datasource.refresh_from_db(fields=["discovery_status", "discovery_error", "discovery"])
    return queued == 1


def discovery_claim(datasource_id: int) -> bool:
    """Return True if this caller moved the discovery from queued to running (False: someone else did).

    The claim time goes into the stored discovery (CLAIMED_KEY) so that a discovery whose worker died
    can be told apart from a slow one; the finished discovery replaces it.
    """
    claimed = DataSource.objects.filter(pk=datasource_id, discovery_status=TaskStatus.QUEUED).update(
        discovery_status=TaskStatus.RUNNING
    )
    if claimed != 1:
        return False
    ds = DataSource.objects.only("discovery").get(pk=datasource_id)
    ds.discovery = {**(ds.discovery or {}), CLAIMED_KEY: time.time()}
    ds.save(update_fields=["discovery"])
    return True


def discovery_requeue(datasource_id: int, reason: str) -> None:
    """Put a running discovery back in the queue (before a retry), noting why."""
    DataSource.objects.filter(pk=datasource_id, discovery_status=TaskStatus.RUNNING).update(
        discovery_status=TaskStatus.QUEUED, discovery_error=reason[:2000]
    )


def discovery_finish(
    datasource_id: int, status: str, error: str | None = None, *, from_status: str = TaskStatus.RUNNING
) -> bool:
    """Return True if the discovery, still in `from_status`, was marked `status` (with `error` if given)."""
    fields: dict[str, Any] = {"discovery_status": status}
    if error is not None:
        fields["discovery_error"] = error[:10_000]
    return DataSource.objects.filter(pk=datasource_id, discovery_status=from_status).update(**fields) == 1


def discovery_fail_pending(datasource_id: int, error: str) -> None:
    """Mark a queued or running discovery failed (the task could not be sent, or a bug stopped it)."""
    DataSource.objects.filter(Q(discovery_status__in=PENDING), pk=datasource_id).update(
        discovery_status=TaskStatus.FAILED, discovery_error=error[:10_000]
    )


def _inside_roots(path: Path) -> bool:
    resolved = path.resolve()
    return any(resolved.is_relative_to(Path(root).resolve()) for root in settings.STEPWISE_JOB_ROOTS)


def _job_log_file(job: Job, triage: dict[str, Any]) -> Path | None:
    """Return the log file the triage read, if it can be read again (an upload, or inside the job roots)."""
    if job.log_upload:
        try:
            return Path(job.log_upload.path)
        except (ValueError, NotImplementedError):
            return None
    candidates: list[Path] = []
    for raw in (triage.get("log"), job.log_path, job.job_dir):
        if raw:
            candidates.append(Path(str(raw)))
    for path in candidates:
        if path.is_dir():
            found = find_job_log(path)
            if found is None:
                continue
            path = found
        if path.is_file() and _inside_roots(path):
            return path
    return None


def _log_losses(job: Job | None, triage: dict[str, Any] | None) -> dict[int, float]:
    """Return step -> loss from the tail of the job's log (empty when there is no readable log)."""
    if job is None or triage is None:
        return {}
    path = _job_log_file(job, triage)
    return discovery_lib.log_step_losses(path) if path is not None else {}


def _utc(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return ""
    return datetime.fromtimestamp(float(seconds), tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _span(seconds: float) -> str:
    minutes = int(round(seconds / 60.0))
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    return f"{hours / 24:.1f} days"


def _for_display(data: dict[str, Any]) -> dict[str, Any]:
    """Return the stored discovery with UTC strings next to its unix times (templates cannot format them).

    Discovery.from_dict ignores these extra keys.
    """
    tr = data.get("time_range")
    if tr:
        data["time_range_utc"] = [_utc(tr[0]), _utc(tr[1])]
        data["time_span"] = _span(tr[1] - tr[0])
    win = data.get("window")
    if win and tr and win[0] > tr[0]:
        data["window_span"] = _span(win[1] - win[0])
    for target in data.get("targets") or ():
        target["last_scrape_utc"] = _utc(target.get("last_scrape"))
        target["first_down_utc"] = _utc(target.get("first_down"))
    ident = data.get("identity") or {}
    ident["tsdb_step_time_utc"] = _utc(ident.get("tsdb_step_time"))
    ident["log_step_time_utc"] = _utc(ident.get("log_step_time"))
    data["hosts_count"] = len(data.get("hosts") or ())
    data["targets_down"] = sum(
        1 for t in data.get("targets") or () if t.get("up") == 0 or t.get("stopped_early")
    )
    data["errors_list"] = sorted((data.get("errors") or {}).items())
    return data


def _state_detail(ds: DataSource, found: discovery_lib.Discovery) -> str:
    bits = [f"{found.profile} profile" if found.profile else "no known profile"]
    if found.hosts:
        bits.append(f"{len(found.hosts)} hosts")
    if found.time_range:
        bits.append(f"data {_utc(found.time_range[0])} to {_utc(found.time_range[1])} UTC")
    detail = "discovered: " + ", ".join(bits)
    if not ds.served_url:
        return detail
    if ds.kind == DataSource.Kind.SSH_TUNNEL:
        return f"{detail}; through the SSH tunnel at {ds.served_url}"
    if ds.kind == DataSource.Kind.JOB_TSDB:
        return f"{detail}; read-only copy served at {ds.served_url}"
    return detail


def discovery_execute(datasource_id: int) -> DataSource:
    """Return the data source with its discovery stored.

    1. Connect with `datasource_client` (serving a job TSDB if needed). DataSourceError marks the source
       in error and propagates.
    2. Read the job's finished triage (Job.triage) and the losses its log printed, for the identity check.
    3. Run `playbooks.discovery.discover`; it records failed parts instead of raising.
    4. Unreachable server: mark the source down and raise PrometheusUnreachable / PrometheusTimeout so the
       task retries; the previous discovery, if any, is kept.
    5. Otherwise store DataSource.discovery (JSON), discovered, discovery_error (the failed parts, if
       any) and mark the source up.

    The caller owns discovery_status.
    """
    ds = DataSource.objects.select_related("job").get(pk=datasource_id)
    triage = ds.job.finished_triage() if ds.job is not None else None
    losses = _log_losses(ds.job, triage)
    try:
        client = datasource_client(ds)
    except DataSourceError as exc:
        DataSource.objects.filter(pk=ds.pk).update(
            state=DataSource.State.ERROR, state_detail=str(exc), last_checked=timezone.now()
        )
        raise
    with client:
        found = discovery_lib.discover(client, triage=triage, log_losses=losses)
    now = timezone.now()
    if found.unreachable:
        reason = found.errors.get("tsdb_status") or found.errors.get("targets") or "Prometheus did not answer"
        DataSource.objects.filter(pk=ds.pk).update(
            state=DataSource.State.DOWN, state_detail=reason, last_checked=now
        )
        timed_out = "did not answer within" in reason or "gave up on the query" in reason
        raise (PrometheusTimeout if timed_out else PrometheusUnreachable)(reason)
    errors = "; ".join(f"{part}: {text}" for part, text in sorted(found.errors.items()))
    DataSource.objects.filter(pk=ds.pk).update(
        discovery=scrub(_for_display(found.to_dict())),  # label values are data: no control byte stored
        discovered=now,
        discovery_error=errors[:10_000],
        state=DataSource.State.UP,
        state_detail=_state_detail(ds, found),
        last_checked=now,
    )
    ds.refresh_from_db()
    logger.info(
        "discovered data source %s: profile %s, %d hosts, identity %s (%d requests, %.2f s)",
        ds.pk,
        found.profile or "-",
        len(found.hosts),
        found.identity.status,
        found.requests,
        found.seconds,
    )
    return ds
