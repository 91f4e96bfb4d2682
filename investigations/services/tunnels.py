"""SSH-tunnel data sources: create one for a job, open it, health-check it, close it when unneeded.

A DataSource of kind ssh_tunnel keeps its `playbooks.tunnel.TunnelSpec` in `tunnel` (JSON) and, while
the tunnel is open, the tunnel's local URL (http://127.0.0.1:<port>) in `address` and `served_url`.
The `ssh -N` process itself is recorded under settings.STEPWISE_TUNNELS_DIR, one per spec, shared by
the web server and every worker; `datasource_client()` reopens it whenever it is down.

For the pages: validate a form's fields with `playbooks.tunnel.TunnelSpec(...)` or a pasted command
with `parse_tunnel_command()` (both raise TunnelError with a sentence for the user), then call
`tunnel_datasource_create(job, spec)`. Opening can take up to STEPWISE_TUNNEL_TIMEOUT seconds, so a
view enqueues `tunnel_open_task` instead of calling `tunnel_open` itself. Call `tunnels_release()`
when an investigation is resolved or about to be deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from investigations.models import DataSource, DiagnosisRun, Investigation, InvestigationJob, Job
from playbooks import tunnel as tunnels
from playbooks.triage import TriageError, triage_log
from playbooks.tunnel import OpenTunnel, TunnelError, TunnelRefused, TunnelSpec
from playbooks.tunnel_policy import TunnelPolicy, parse_ports

from . import DataSourceError, _datasource_mark
from .runs import ACTIVE, run_cancel

logger = logging.getLogger(__name__)

__all__ = [
    "tunnel_allowed",
    "tunnel_check",
    "tunnel_close",
    "tunnel_datasource_create",
    "tunnel_open",
    "tunnel_policy",
    "tunnel_spec",
    "tunnels_prune",
    "tunnels_release",
]


def tunnel_policy() -> TunnelPolicy:
    """Return the tunnel allow-list of the settings (STEPWISE_TUNNEL_*)."""
    return TunnelPolicy(
        hosts=tuple(h for h in settings.STEPWISE_TUNNEL_HOSTS if h.strip()),
        ssh_ports=parse_ports(settings.STEPWISE_TUNNEL_SSH_PORTS, "STEPWISE_TUNNEL_SSH_PORTS"),
        remote_ports=parse_ports(
            settings.STEPWISE_TUNNEL_PROMETHEUS_PORTS, "STEPWISE_TUNNEL_PROMETHEUS_PORTS"
        ),
        keys_dir=str(settings.STEPWISE_TUNNEL_KEYS_DIR),
    )


def tunnel_allowed(spec: TunnelSpec) -> TunnelSpec:
    """Return `spec` if the tunnel allow-list admits it; TunnelError (a sentence for the user) if not."""
    return tunnel_policy().check(spec)


def tunnel_spec(ds: DataSource) -> TunnelSpec:
    """Return the data source's spec, validated again (the stored JSON may have been edited in the admin)."""
    if ds.kind != DataSource.Kind.SSH_TUNNEL:
        raise DataSourceError(f"Data source {ds.pk} is not an SSH tunnel.")
    try:
        return TunnelSpec.from_dict(ds.tunnel)
    except TunnelError as exc:
        raise DataSourceError(f"The stored SSH tunnel of data source {ds.pk} is invalid: {exc}") from exc


def _job_triage(job: Job) -> Mapping[str, Any]:
    """Return the job's last good triage, or a fresh one of its log when none is stored yet."""
    if found := job.finished_triage():
        return found
    if job.log_path:
        try:
            return triage_log(job.log_path, roots=settings.STEPWISE_JOB_ROOTS).to_dict()
        except TriageError as exc:
            raise DataSourceError(f"The job's log cannot be read ({exc}); paste the tunnel command.") from exc
    raise DataSourceError("The job has no log to read a tunnel command from; paste the tunnel command.")


def _as_spec(job: Job | None, spec_or_text: TunnelSpec | str | Mapping[str, Any] | None) -> TunnelSpec:
    try:
        if isinstance(spec_or_text, TunnelSpec):
            return tunnel_allowed(spec_or_text)
        if isinstance(spec_or_text, str):
            return tunnel_allowed(tunnels.parse_tunnel_command(spec_or_text))
        if isinstance(spec_or_text, Mapping):
            return tunnel_allowed(TunnelSpec.from_dict(spec_or_text))
        assert job is not None, "only tunnel_datasource_create passes no spec, and always with its job"
        return tunnel_allowed(tunnels.spec_from_triage(_job_triage(job)))
    except TunnelError as exc:
        raise DataSourceError(str(exc)) from exc


def tunnel_datasource_create(
    job: Job, spec_or_text: TunnelSpec | str | Mapping[str, Any] | None = None
) -> DataSource:
    """Return the job's SSH-tunnel DataSource for the spec, created or updated; nothing is opened yet.

    `spec_or_text` is a TunnelSpec (a form's fields), the text of an ssh command (the log's tunnel block
    or a paste), a spec dict (TunnelSpec.to_dict()), or None for the tunnel the job's log prints.
    A job has one tunnel source: a different spec replaces the old one, whose tunnel is closed first.
    Raises DataSourceError, with a message for the user, when the spec is invalid.
    """
    spec = _as_spec(job, spec_or_text)
    with transaction.atomic():
        ds = (
            DataSource.objects.select_for_update()
            .filter(job=job, kind=DataSource.Kind.SSH_TUNNEL)
            .order_by("pk")
            .first()
        )
        if ds is None:
            return DataSource.objects.create(
                job=job,
                kind=DataSource.Kind.SSH_TUNNEL,
                address="",
                tunnel=spec.to_dict(),
                state=DataSource.State.UNKNOWN,
                state_detail=f"SSH tunnel to {spec.describe()}, not opened yet",
            )
        if ds.tunnel == spec.to_dict():
            return ds
        old = ds.tunnel
        ds.tunnel = spec.to_dict()
        ds.address = ds.served_url = ""
        ds.state = DataSource.State.UNKNOWN
        ds.state_detail = f"SSH tunnel to {spec.describe()}, not opened yet"
        ds.save(update_fields=["tunnel", "address", "served_url", "state", "state_detail"])
    _close_spec(old)
    return ds


def tunnel_probe(spec_or_text: TunnelSpec | str | Mapping[str, Any]) -> OpenTunnel:
    """Return the tunnel of a spec not stored yet, opened (or the healthy one already open for it).

    A new investigation on a tunnel opens it before anything is saved: a refused login, an unknown host
    key or nothing listening on the Prometheus port is the form's error, not an investigation that cannot
    be used. The tunnel stays open for the data source about to be created (one tunnel per spec), or is
    closed by the next prune if nothing needs it. Raises DataSourceError with the reason.
    """
    spec = _as_spec(None, spec_or_text)  # a spec or a command: the job's log is not read
    try:
        return tunnels.open_tunnel(
            spec,
            settings.STEPWISE_TUNNELS_DIR,
            ssh_bin=settings.STEPWISE_SSH_BIN,
            timeout=float(settings.STEPWISE_TUNNEL_TIMEOUT),
        )
    except TunnelError as exc:
        raise DataSourceError(str(exc)) from exc


def _close_spec(data: Mapping[str, Any]) -> bool:
    try:
        return tunnels.close_tunnel(TunnelSpec.from_dict(data), settings.STEPWISE_TUNNELS_DIR)
    except TunnelError:
        return False  # an invalid stored spec never opened a tunnel


def tunnel_open(ds: DataSource, *, refuse_start: Callable[[], str | None] | None = None) -> OpenTunnel:
    """Return the open tunnel of the data source, reusing a healthy one, else starting ssh (blocks).

    The state goes starting -> up (address and served_url = the local URL) or error (the reason:
    login refused, unknown host key, nothing listening on the Prometheus port, ...).
    Raises DataSourceError with that reason. `refuse_start()`, asked under the tunnel's lock just before
    a new ssh would start, may say why none may (a task whose run was cancelled as the tunnel closed).
    """
    spec = tunnel_spec(ds)
    try:
        tunnel_allowed(spec)  # checked again before every open: the allow-list may have shrunk
    except TunnelError as exc:
        _datasource_mark(ds, DataSource.State.ERROR, str(exc), address="", served_url="")
        raise DataSourceError(str(exc)) from exc
    refused = refuse_start() if refuse_start is not None else None
    if refused:
        raise DataSourceError(refused)  # the state is left as the close wrote it
    if ds.state != DataSource.State.UP:
        _datasource_mark(ds, DataSource.State.STARTING, f"opening an SSH tunnel to {spec.describe()}")
    try:
        opened = tunnels.open_tunnel(
            spec,
            settings.STEPWISE_TUNNELS_DIR,
            ssh_bin=settings.STEPWISE_SSH_BIN,
            timeout=float(settings.STEPWISE_TUNNEL_TIMEOUT),
            refuse_start=refuse_start,
        )
    except TunnelRefused as exc:  # refused under the lock, after the close: not left "starting"
        DataSource.objects.filter(pk=ds.pk, state=DataSource.State.STARTING).update(
            state=DataSource.State.DOWN, state_detail=str(exc)
        )
        raise DataSourceError(str(exc)) from exc
    except TunnelError as exc:
        _datasource_mark(ds, DataSource.State.ERROR, str(exc), address="", served_url="")
        raise DataSourceError(str(exc)) from exc
    if ds.state != DataSource.State.UP or ds.address != opened.url:
        _datasource_mark(
            ds,
            DataSource.State.UP,
            f"SSH tunnel to {spec.describe()} open at {opened.url}",
            address=opened.url,
            served_url=opened.url,
        )
    return opened


def tunnel_check(ds: DataSource) -> DataSource:
    """Return the data source with its state refreshed: up if ssh runs and Prometheus answers through it.

    Never opens a tunnel (datasource_client() and tunnel_open() do): a tunnel that is not open is
    "down" with the reason; an invalid stored spec is "error".
    """
    try:
        spec = tunnel_spec(ds)
    except DataSourceError as exc:
        _datasource_mark(ds, DataSource.State.ERROR, str(exc))
        return ds
    found = tunnels.find_tunnel(spec, settings.STEPWISE_TUNNELS_DIR)
    if found is None:
        _datasource_mark(
            ds,
            DataSource.State.DOWN,
            f"the SSH tunnel to {spec.describe()} is not open",
            address="",
            served_url="",
        )
        return ds
    problem = tunnels.tunnel_problem(found)
    if problem is None:
        _datasource_mark(
            ds, DataSource.State.UP, f"SSH tunnel to {spec.describe()} open at {found.url}",
            address=found.url, served_url=found.url,
        )  # fmt: skip
    else:
        _datasource_mark(ds, DataSource.State.DOWN, problem)
    return ds


def tunnel_close(ds: DataSource, reason: str = "closed") -> bool:
    """Return True if the data source's ssh was stopped; the source is marked down either way.

    Only the ssh that Stepwise recorded for this spec is signalled, after checking it is that process.
    """
    try:
        spec = tunnel_spec(ds)
    except DataSourceError:
        return False
    stopped = tunnels.close_tunnel(spec, settings.STEPWISE_TUNNELS_DIR)
    _datasource_mark(
        ds, DataSource.State.DOWN, f"SSH tunnel to {spec.describe()} {reason}", address="", served_url=""
    )
    return stopped


def _wanted(ds: DataSource, *, excluding: int | None = None) -> bool:
    """Return True if an investigation (other than `excluding`) that is not resolved needs ds's ssh.

    One ssh serves every data source with the same spec (several jobs on one live Prometheus, or two Job
    rows of one job opened without a job id), so any such source in an unresolved investigation keeps it.
    """
    try:
        spec = tunnel_spec(ds)
    except DataSourceError:
        return False
    links = InvestigationJob.objects.exclude(investigation__status=Investigation.Status.RESOLVED)
    if excluding is not None:
        links = links.exclude(investigation_id=excluding)
    peers = DataSource.objects.filter(kind=DataSource.Kind.SSH_TUNNEL, job_id__in=links.values("job_id"))
    for data in peers.values_list("tunnel", flat=True):
        try:
            if TunnelSpec.from_dict(data) == spec:
                return True
        except (TunnelError, TypeError, KeyError):
            continue  # an invalid stored spec never opened a tunnel
    return False


def _unneeded(ds: DataSource) -> bool:
    """Return True when the source's job belongs to investigations and none that needs its ssh is open.

    A job in no investigation at all (browsed on its own) is left to the idle timeout.
    """
    if ds.job_id is None or not InvestigationJob.objects.filter(job_id=ds.job_id).exists():
        return False
    return not _wanted(ds)


def tunnels_release(investigation: Investigation, *, deleting: bool = False) -> list[int]:
    """Return the pids of tunnels closed because no unresolved investigation needs their job any more.

    Call it after resolving `investigation`, or with deleting=True just before deleting it (an open
    investigation that is not being deleted releases nothing). Tunnels of its jobs that another open
    or monitoring investigation still uses stay open. The unfinished runs on a tunnel are cancelled
    before it closes: their queued playbooks would open it again.
    """
    if not deleting and investigation.status != Investigation.Status.RESOLVED:
        return []
    closed = []
    sources = DataSource.objects.filter(
        kind=DataSource.Kind.SSH_TUNNEL, job__investigation_links__investigation=investigation
    ).distinct()
    for ds in sources:
        if _wanted(ds, excluding=investigation.pk):
            continue
        _runs_cancel(ds)
        found = _found(ds)
        if tunnel_close(ds, "closed: no open investigation needs it") and found is not None:
            closed.append(found.pid)
    return closed


def _runs_cancel(ds: DataSource) -> None:
    """Cancel the unfinished runs on `ds` before its tunnel closes: each playbook still queued would reopen
    it (`datasource_client` reopens a tunnel that is down), one ssh after another, for a run no one needs."""
    for run in DiagnosisRun.objects.filter(datasource=ds, status__in=ACTIVE):
        run_cancel(run, reason="Cancelled: its SSH tunnel was closed, as no open investigation needs it.")


def _found(ds: DataSource) -> OpenTunnel | None:
    try:
        return tunnels.find_tunnel(tunnel_spec(ds), settings.STEPWISE_TUNNELS_DIR)
    except DataSourceError:
        return None


def _stuck_starting(ds: DataSource) -> bool:
    """Return True for a source left "starting" longer than any open could take (its worker died)."""
    if ds.state != DataSource.State.STARTING or ds.last_checked is None:
        return False
    limit = timedelta(seconds=3 * settings.STEPWISE_TUNNEL_TIMEOUT + 60)
    return timezone.now() - ds.last_checked > limit


def tunnels_prune() -> list[int]:
    """Return the pids of tunnels closed: unused for STEPWISE_TUNNEL_IDLE_SECONDS, or no longer needed.

    1. Close every recorded tunnel that open_tunnel() has not returned for the idle timeout (web and
       worker processes touch it on each use), and entries whose ssh is gone.
    2. Close the tunnels of jobs whose investigations are all resolved.
    3. Health-check the SSH-tunnel sources marked up, and those left starting by a worker that died,
       so their state is current.
    Housekeeping: errors are logged, never raised.
    """
    root = settings.STEPWISE_TUNNELS_DIR
    closed: list[int] = []
    try:
        closed += tunnels.close_idle_tunnels(root, settings.STEPWISE_TUNNEL_IDLE_SECONDS)
    except (OSError, TunnelError):
        logger.exception("could not close idle SSH tunnels under %s", root)
    live = DataSource.objects.filter(
        kind=DataSource.Kind.SSH_TUNNEL, state__in=[DataSource.State.UP, DataSource.State.STARTING]
    )
    for ds in live:
        try:
            found = _found(ds)
            if found is not None and _unneeded(ds):
                if tunnel_close(ds, "closed: its investigations are resolved"):
                    closed.append(found.pid)
            elif ds.state == DataSource.State.UP or _stuck_starting(ds):
                tunnel_check(ds)
        except (OSError, TunnelError):
            logger.exception("could not prune the SSH tunnel of data source %s", ds.pk)
    return closed
