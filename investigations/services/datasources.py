"""Data sources: register job directories, check Prometheus URLs against the allow-list, serve a job's
TSDB as a read-only copy or open its tunnel, and hand out clients.

Which process does what: a served TSDB copy or an SSH tunnel is started by whichever process first
needs a client for the source, normally the worker (query runs, discovery, diagnosis, comparison);
the web process does it too when a page asks for data at once (the timeline's panels, Check now). Every
process of a machine shares the one live copy of a TSDB (recorded under STEPWISE_TSDB_VIEWS).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.utils import timezone

from investigations.models import DataSource, Job
from playbooks import tsdb_server
from playbooks.prometheus import (
    PrometheusClient,
    PrometheusError,
    PrometheusTimeout,
    PrometheusUnreachable,
)
from stepwise.checks import allow_rules

logger = logging.getLogger(__name__)


class SourceBusy(Exception):
    """This machine already serves its cap of TSDB copies (STEPWISE_TSDB_MAX_COPIES), all of them in use.

    Not the source's fault, and gone in a moment: pages answer 503 with the message (stepwise/busy.py),
    tasks retry it like a transient error. The message is written for the user.
    """


#: Errors worth retrying: the server may come back (a restarting served TSDB, a dropped tunnel), or the
#: machine has room for one more served copy.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (PrometheusUnreachable, PrometheusTimeout, SourceBusy)

# JOB_ID forms of the seed system: Slurm numeric, k8s-YYYYMMDD-HHMMSS-xxxx, local_YYYYMMDD_HHMMSS_xxxx.
_JOB_DIR_RE = re.compile(r"\A(k8s-\d+-\d+-[0-9a-f]+|local_[\d_]+[0-9a-f]+|\d+)-(.+)\Z")


class DataSourceError(Exception):
    """A data source cannot be used: not allowed, outside the job roots, or cannot be served.

    The message is written for the user who asked for it.
    """


# --- Job directories ---------------------------------------------------------------------------


def _job_roots() -> list[Path]:
    return [root.resolve() for root in settings.STEPWISE_JOB_ROOTS]


def _inside_job_roots(path: Path, original: str | Path) -> Path:
    resolved = path.resolve()
    roots = _job_roots()
    if not any(resolved != root and resolved.is_relative_to(root) for root in roots):
        shown = ", ".join(str(root) for root in roots) or "(none)"
        raise DataSourceError(
            f"{original} is outside the allowed job roots ({shown}); "
            "ask an administrator to add its folder to STEPWISE_JOB_ROOTS."
        )
    return resolved


def job_dir_validate(path: str | Path) -> Path:
    """Return the resolved job directory, refusing anything outside settings.STEPWISE_JOB_ROOTS.

    Symlinks and `..` are resolved first, so neither can lead out of a root.
    """
    candidate = Path(path).expanduser()
    if not candidate.is_absolute():
        raise DataSourceError(f"{path} is not an absolute path.")
    resolved = _inside_job_roots(candidate, path)
    if not resolved.is_dir():
        raise DataSourceError(f"{path} is not a directory.")
    return resolved


def _job_identity(job_dir: Path) -> tuple[str, str]:
    """Return (job_id, name): from a `<JOB_ID>-<JOB_NAME>` directory name, else from the generator's
    truth.json, else (directory name, "")."""
    match = _JOB_DIR_RE.match(job_dir.name)
    if match:
        return match.group(1), match.group(2)
    try:
        truth = json.loads((job_dir / "truth.json").read_text())
    except (OSError, ValueError):
        truth = {}
    if isinstance(truth, dict) and truth.get("job_id"):
        return str(truth["job_id"]), str(truth.get("job_name") or job_dir.name)
    return job_dir.name, ""


def _job_log(job_dir: Path) -> Path | None:
    """Return the job's log inside the job roots: the `log` link, job.log, or the sibling DIR.log."""
    for candidate in (job_dir / "log", job_dir / "job.log", job_dir.with_name(f"{job_dir.name}.log")):
        if not candidate.is_file():
            continue
        try:
            return _inside_job_roots(candidate, candidate)
        except DataSourceError:
            logger.warning("ignoring log %s of %s: it leads outside the job roots", candidate, job_dir)
    return None


def job_register(job_dir: str | Path, *, cluster: str = "") -> tuple[Job, DataSource]:
    """Return the Job (keyed by cluster and JOB_ID) and its job_tsdb DataSource, created or updated."""
    path = job_dir_validate(job_dir)
    job_id, name = _job_identity(path)
    log = _job_log(path)
    job, _ = Job.objects.update_or_create(
        cluster=cluster,
        job_id=job_id,
        defaults={"name": name, "job_dir": str(path), "log_path": str(log) if log else ""},
    )
    datasource, _ = DataSource.objects.update_or_create(
        job=job, kind=DataSource.Kind.JOB_TSDB, defaults={"address": str(path)}
    )
    return job, datasource


# --- Prometheus URLs ---------------------------------------------------------------------------


def prometheus_url_check(url: str) -> str:
    """Return `url` normalised (no query, no trailing slash) if STEPWISE_ALLOWED_PROMETHEUS allows its host."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DataSourceError(f"{url!r} is not an http:// or https:// URL with a host.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise DataSourceError(f"{url!r} has an invalid port.") from None
    if not any(rule.allows(parts.hostname, port) for rule in allow_rules()):
        allowed = ", ".join(settings.STEPWISE_ALLOWED_PROMETHEUS) or "(empty)"
        raise DataSourceError(
            f"Prometheus at {parts.hostname}:{port} is not allowed. Stepwise only queries the hosts in "
            f"STEPWISE_ALLOWED_PROMETHEUS ({allowed}); ask an administrator to add it."
        )
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def datasource_create(
    *, kind: str, address: str, job: Job | None = None, tunnel: dict[str, Any] | None = None
) -> DataSource:
    """Return a new DataSource after checking its address (allow-list for URLs, job roots for TSDBs)."""
    if kind == DataSource.Kind.JOB_TSDB:
        address = str(job_dir_validate(address))
    else:
        address = prometheus_url_check(address)
    return DataSource.objects.create(kind=kind, address=address, job=job, tunnel=tunnel or {})


# --- Clients -----------------------------------------------------------------------------------


def _datasource_mark(ds: DataSource, state: str, detail: str = "", **fields: Any) -> None:
    ds.state = state
    ds.state_detail = detail
    ds.last_checked = timezone.now()
    for name, value in fields.items():
        setattr(ds, name, value)
    ds.save(update_fields=["state", "state_detail", "last_checked", *fields])


def _datasource_serve(ds: DataSource) -> tsdb_server.ServedTSDB:
    """Return the read-only Prometheus serving the job's TSDB, starting it if needed."""
    job_dir = job_dir_validate(ds.address)
    tsdb = _inside_job_roots(job_dir / "prometheus", job_dir / "prometheus")
    if not tsdb.is_dir():
        _datasource_mark(ds, DataSource.State.ERROR, f"{job_dir} has no prometheus/ folder")
        raise DataSourceError(f"{job_dir} has no prometheus/ folder (no TSDB was recorded for this job).")
    if ds.state != DataSource.State.UP:
        _datasource_mark(
            ds, DataSource.State.STARTING, "starting a read-only Prometheus on a copy of the TSDB"
        )
    try:
        # One copy per TSDB per machine, shared by the web server and the workers (the work root is the
        # registry), refreshed when the job's files changed, within the machine's cap of copies.
        served = tsdb_server.ensure_served(
            tsdb,
            work_root=settings.STEPWISE_TSDB_VIEWS,
            prometheus_bin=settings.STEPWISE_PROMETHEUS_BIN,
            max_copies=settings.STEPWISE_TSDB_MAX_COPIES,
            idle_after=float(settings.STEPWISE_TSDB_BUSY_SECONDS),
        )
    except tsdb_server.TSDBBusy as exc:
        raise SourceBusy(str(exc)) from exc
    except tsdb_server.TSDBServerError as exc:
        _datasource_mark(ds, DataSource.State.ERROR, str(exc))
        raise DataSourceError(f"Cannot serve the TSDB of {job_dir}: {exc}") from exc
    detail = served.note or f"read-only copy served at {served.url}"
    _datasource_mark(ds, DataSource.State.UP, detail, served_url=served.url)
    return served


def served_copy_live(ds: DataSource | None) -> bool | None:
    """Return whether the job TSDB's read-only copy recorded on `ds` still runs (None: not such a source).

    Copies are stopped when idle (STEPWISE_TSDB_IDLE_SECONDS) and at start-up, and served again by the
    next query: a recorded URL that no live server answers is "idle", not "up".
    """
    if ds is None or ds.kind != DataSource.Kind.JOB_TSDB or not ds.served_url:
        return None
    try:
        return any(s.url == ds.served_url for s in tsdb_server.list_served(settings.STEPWISE_TSDB_VIEWS))
    except OSError:
        return None


def tsdb_views_prune() -> list[int]:
    """Return the pids of served TSDB copies stopped for being idle over STEPWISE_TSDB_IDLE_SECONDS."""
    try:
        return tsdb_server.stop_idle(settings.STEPWISE_TSDB_VIEWS, settings.STEPWISE_TSDB_IDLE_SECONDS)
    except (OSError, tsdb_server.TSDBServerError):
        # Pruning is housekeeping: a failure must not fail the run that triggered it.
        logger.exception("could not stop idle TSDB servers under %s", settings.STEPWISE_TSDB_VIEWS)
        return []


def _datasource_connect(
    ds: DataSource, *, refuse_start: Callable[[], str | None] | None = None
) -> tuple[PrometheusClient, tuple[float, float] | None]:
    """Return a client and, for a served job TSDB, the data's time range read from the TSDB files.

    `refuse_start` is the tunnel's (see `tunnel_open`): whether a closed SSH tunnel may be reopened.
    """
    if ds.kind == DataSource.Kind.JOB_TSDB:
        served = _datasource_serve(ds)
        url, time_range = served.url, served.time_range
    elif ds.kind == DataSource.Kind.SSH_TUNNEL:
        # Imported here because services/tunnels.py builds on this module. Reuses the tunnel if healthy,
        # else (re)opens it; its local end is loopback on a port Stepwise chose.
        from .tunnels import tunnel_open

        url, time_range = tunnel_open(ds, refuse_start=refuse_start).url, None
    else:
        from .sources import datasource_auth  # builds on this module

        url, time_range = prometheus_url_check(ds.address), None
        auth = datasource_auth(ds)
        return PrometheusClient(
            url, timeout=float(settings.STEPWISE_PROMETHEUS_TIMEOUT), auth=auth
        ), time_range
    return PrometheusClient(url, timeout=float(settings.STEPWISE_PROMETHEUS_TIMEOUT)), time_range


def datasource_client(
    ds: DataSource, *, refuse_start: Callable[[], str | None] | None = None
) -> PrometheusClient:
    """Return a client for the data source; the caller closes it (it is a context manager).

    A job TSDB is served first (recording served_url and state); an SSH tunnel is opened, or reopened
    when it is down; a URL must pass the allow-list. The served and tunnelled URLs are loopback on a
    port Stepwise chose, so they are not checked against the list. A task for a run passes
    `refuse_start` so that a run cancelled as its tunnel closed does not open it again.
    """
    return _datasource_connect(ds, refuse_start=refuse_start)[0]


def datasource_check(ds: DataSource) -> DataSource:
    """Return the data source with its state refreshed from the build info and /-/ready."""
    try:
        with datasource_client(ds) as client:
            build = client.buildinfo()
            if not client.ready():  # it answers, but is still loading (WAL replay) or shutting down
                _datasource_mark(ds, DataSource.State.DOWN, "Prometheus answered but is not ready")
                return ds
    except DataSourceError as exc:
        _datasource_mark(ds, DataSource.State.ERROR, str(exc))
    except TRANSIENT_ERRORS as exc:
        _datasource_mark(ds, DataSource.State.DOWN, str(exc))
    except PrometheusError as exc:
        _datasource_mark(ds, DataSource.State.ERROR, str(exc))
    else:
        version = build.get("version", "?") if isinstance(build, dict) else "?"
        _datasource_mark(ds, DataSource.State.UP, f"Prometheus {version}")
    return ds
