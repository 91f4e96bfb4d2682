"""Glue between the database and playbooks/: register jobs, open data sources, run query batches.

Services never enqueue tasks (views and tasks do) and never decide a run's final status on their
own behalf: `queryrun_execute` fills results and progress, the task marks the run done or failed.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import batched
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from playbooks import tsdb_server
from playbooks.prometheus import (
    PrometheusClient,
    PrometheusError,
    PrometheusTimeout,
    PrometheusUnreachable,
    choose_step,
)
from stepwise.checks import allow_rules

from ..models import DataSource, Investigation, Job, QueryResult, QueryRun

logger = logging.getLogger(__name__)

#: Errors worth retrying: the server may come back (a restarting served TSDB, a dropped tunnel).
TRANSIENT_ERRORS: tuple[type[PrometheusError], ...] = (PrometheusUnreachable, PrometheusTimeout)

QUERY_KINDS = ("instant", "range", "buildinfo")

#: The "Run sample queries" batch: is the server there, what does it hold, is anyone scraped,
#: how far did training get.
SAMPLE_QUERIES: tuple[dict[str, Any], ...] = (
    {"name": "buildinfo", "kind": "buildinfo", "promql": ""},
    {"name": "metric-families", "kind": "instant", "promql": 'count by (__name__)({__name__=~".+"})'},
    {"name": "up", "kind": "instant", "promql": "up"},
    {"name": "training-step", "kind": "range", "promql": "tb_step or training_step"},
)

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
        served = tsdb_server.ensure_served(
            tsdb,
            work_root=settings.STEPWISE_TSDB_VIEWS,
            prometheus_bin=settings.STEPWISE_PROMETHEUS_BIN,
        )
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


def _datasource_connect(ds: DataSource) -> tuple[PrometheusClient, tuple[float, float] | None]:
    """Return a client and, for a served job TSDB, the data's time range read from the TSDB files."""
    if ds.kind == DataSource.Kind.JOB_TSDB:
        served = _datasource_serve(ds)
        url, time_range = served.url, served.time_range
    elif ds.kind == DataSource.Kind.SSH_TUNNEL:
        # Imported here because services/tunnels.py builds on this module. Reuses the tunnel if healthy,
        # else (re)opens it; its local end is loopback on a port Stepwise chose.
        from .tunnels import tunnel_open

        url, time_range = tunnel_open(ds).url, None
    else:
        from .sources import datasource_auth  # builds on this module

        url, time_range = prometheus_url_check(ds.address), None
        auth = datasource_auth(ds)
        return PrometheusClient(url, timeout=float(settings.STEPWISE_PROMETHEUS_TIMEOUT), auth=auth), time_range
    return PrometheusClient(url, timeout=float(settings.STEPWISE_PROMETHEUS_TIMEOUT)), time_range


def datasource_client(ds: DataSource) -> PrometheusClient:
    """Return a client for the data source; the caller closes it (it is a context manager).

    A job TSDB is served first (recording served_url and state); an SSH tunnel is opened, or reopened
    when it is down; a URL must pass the allow-list. The served and tunnelled URLs are loopback on a
    port Stepwise chose, so they are not checked against the list.
    """
    return _datasource_connect(ds)[0]


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


# --- Query runs --------------------------------------------------------------------------------


def queries_validate(queries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the query specs normalised to {name, promql, kind, start, end, step}.

    Raises ValueError for a missing name or PromQL, a duplicate name, an unknown kind or a window
    whose end precedes its start.
    """
    specs: list[dict[str, Any]] = []
    seen: set[str] = set()
    for raw in queries:
        name = str(raw.get("name", "")).strip()
        kind = raw.get("kind", "instant")
        promql = str(raw.get("promql", "")).strip()
        if not name or name in seen:
            raise ValueError(f"query name {name!r} is empty or repeated")
        if kind not in QUERY_KINDS:
            raise ValueError(f"query {name!r}: kind {kind!r} is not one of {', '.join(QUERY_KINDS)}")
        if kind != "buildinfo" and not promql:
            raise ValueError(f"query {name!r} has no PromQL")
        start, end, step = (_seconds(raw.get(key)) for key in ("start", "end", "step"))
        if start is not None and end is not None and end < start:
            raise ValueError(f"query {name!r}: end {end} is before start {start}")
        seen.add(name)
        specs.append({"name": name, "promql": promql, "kind": kind, "start": start, "end": end, "step": step})
    if not specs:
        raise ValueError("a query run needs at least one query")
    return specs


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


def queryrun_create(
    ds: DataSource,
    queries: Iterable[dict[str, Any]],
    *,
    investigation: Investigation | None = None,
    created_by: Any = None,
) -> QueryRun:
    """Return a new queued run of `queries` against `ds` (the caller enqueues it after commit)."""
    specs = queries_validate(queries)
    return QueryRun.objects.create(
        datasource=ds,
        investigation=investigation,
        created_by=created_by if getattr(created_by, "is_authenticated", False) else None,
        queries=specs,
        progress_total=len(specs),
    )


@dataclass
class _Outcome:
    """What one query gave.

    Attributes:
        summary: the JSON stored on QueryResult.summary.
        series_count: uncapped number of series.
        error: the Prometheus error (or the reason no query could be made), or None on success.
        duration_s: wall time of the call.
    """

    summary: dict[str, Any] = field(default_factory=dict)
    series_count: int = 0
    error: Exception | None = None
    duration_s: float = 0.0


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _series_summary(
    labels: dict[str, str], timestamps: Sequence[float], values: Sequence[float]
) -> dict[str, Any]:
    finite = [v for v in values if math.isfinite(v)]
    cap = settings.STEPWISE_RESULT_MAX_POINTS
    if len(values) > cap:
        # Evenly spaced picks that always include the first and the last point.
        picks = sorted({round(i * (len(values) - 1) / (cap - 1)) for i in range(cap)})
    else:
        picks = range(len(values))
    return {
        "labels": dict(labels),
        "min": min(finite) if finite else None,
        "max": max(finite) if finite else None,
        "last": _finite(values[-1]) if values else None,
        "points": [[timestamps[i], _finite(values[i])] for i in picks],
    }


def _summarise(series: list[dict[str, Any]], window: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Return the capped summary (largest maxima first) and the uncapped series count.

    The top-level min and max span every series, capped or not; last is given for a single series.
    """
    series.sort(key=lambda s: (s["max"] is None, -(s["max"] or 0.0)))
    cap = settings.STEPWISE_RESULT_MAX_SERIES
    mins = [s["min"] for s in series if s["min"] is not None]
    maxes = [s["max"] for s in series if s["max"] is not None]
    summary = {
        "window": window,
        "min": min(mins) if mins else None,
        "max": max(maxes) if maxes else None,
        "last": series[0]["last"] if len(series) == 1 else None,
        "series": series[:cap],
        "omitted_series": max(len(series) - cap, 0),
    }
    return summary, len(series)


def _query_window(spec: dict[str, Any], data_range: tuple[float, float] | None) -> dict[str, Any]:
    """Return the spec's window with gaps filled from the data's own time range."""
    start, end = spec["start"], spec["end"]
    if data_range is not None:
        start = data_range[0] if start is None else start
        end = data_range[1] if end is None else end
    if spec["kind"] == "instant":
        return {"at": end}
    if start is None or end is None:
        raise DataSourceError("the data source holds no samples, so a range query has no window")
    step = spec["step"] or choose_step(start, end, max_points=settings.STEPWISE_RESULT_MAX_POINTS)
    return {"start": start, "end": end, "step": step}


def _open_window(spec: dict[str, Any]) -> bool:
    """Return True if the spec leaves part of its window to the data's time range."""
    if spec["kind"] == "instant":
        return spec["end"] is None
    return spec["kind"] == "range" and (spec["start"] is None or spec["end"] is None)


def _query_one(
    client: PrometheusClient, spec: dict[str, Any], data_range: tuple[float, float] | None
) -> _Outcome:
    """Return the outcome of one spec; Prometheus errors are returned, not raised."""
    began = time.monotonic()
    outcome = _Outcome()
    try:
        if spec["kind"] == "buildinfo":
            outcome.summary = {"build": client.buildinfo()}
        elif spec["kind"] == "instant":
            window = _query_window(spec, data_range)
            samples = client.query(spec["promql"], at=window["at"])
            rows = [_series_summary(s.labels, [s.timestamp], [s.value]) for s in samples]
            outcome.summary, outcome.series_count = _summarise(rows, window)
        else:
            window = _query_window(spec, data_range)
            found = client.query_range(spec["promql"], window["start"], window["end"], step=window["step"])
            rows = [_series_summary(s.labels, s.timestamps, s.values) for s in found]
            outcome.summary, outcome.series_count = _summarise(rows, window)
    except (PrometheusError, DataSourceError) as exc:
        outcome.error = exc
    outcome.duration_s = time.monotonic() - began
    return outcome


def queryresults_record(rows: list[QueryResult]) -> None:
    """Store results, replacing any earlier result of the same run and name (an upsert)."""
    QueryResult.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["run", "name"],
        update_fields=["kind", "promql", "ok", "error", "series_count", "summary", "duration_s", "updated"],
    )


def _result_row(run: QueryRun, spec: dict[str, Any], outcome: _Outcome | PrometheusError) -> QueryResult:
    if isinstance(outcome, PrometheusError):  # run_parallel reports a failed call by returning its error
        outcome = _Outcome(error=outcome)
    return QueryResult(
        run=run,
        name=spec["name"],
        kind=spec["kind"],
        promql=spec["promql"],
        ok=outcome.error is None,
        error="" if outcome.error is None else f"{type(outcome.error).__name__}: {outcome.error}",
        series_count=outcome.series_count,
        summary=outcome.summary,
        duration_s=round(outcome.duration_s, 4),
    )


def _queryrun_cancelled(run_id: int) -> bool:
    return QueryRun.objects.filter(pk=run_id, status=QueryRun.Status.CANCELLED).exists()


def queryrun_execute(run_id: int) -> QueryRun:
    """Return the run after executing its queries and storing one QueryResult per query.

    1. Open a client for the data source (serving the job TSDB if needed). DataSourceError and
       Prometheus errors raised here propagate: nothing was queried.
    2. Fill windows the specs leave open from the data's own time range (for a served job TSDB,
       the range its files record; otherwise asked of the server).
    3. Run the queries in batches of STEPWISE_QUERY_CONCURRENCY through client.run_parallel,
       upserting results and progress after each batch, and stop if the run was cancelled.
    4. If every query failed with a transient error, raise the first so the caller can retry; a
       retry replaces these results. Otherwise record how many failed in run.error.

    The caller owns the run's status.
    """
    run = QueryRun.objects.select_related("datasource").get(pk=run_id)
    specs: list[dict[str, Any]] = run.queries
    outcomes: list[_Outcome] = []
    client, data_range = _datasource_connect(run.datasource)
    with client:
        if data_range is None and any(_open_window(s) for s in specs):
            data_range = client.data_time_range()
        for batch in batched(specs, settings.STEPWISE_QUERY_CONCURRENCY):
            if _queryrun_cancelled(run.pk):
                break
            calls = [partial(_query_one, client, spec, data_range) for spec in batch]
            results = client.run_parallel(calls, max_concurrency=len(calls))
            rows = [_result_row(run, spec, result) for spec, result in zip(batch, results, strict=True)]
            queryresults_record(rows)
            outcomes.extend(
                result if isinstance(result, _Outcome) else _Outcome(error=result) for result in results
            )
            QueryRun.objects.filter(pk=run.pk).update(progress_done=len(outcomes))

    errors = [o.error for o in outcomes if o.error is not None]
    if errors and all(isinstance(e, TRANSIENT_ERRORS) for e in errors) and len(errors) == len(outcomes):
        _datasource_mark(run.datasource, DataSource.State.DOWN, str(errors[0]))
        raise errors[0]
    if len(errors) < len(outcomes) and run.datasource.state != DataSource.State.UP:
        _datasource_mark(run.datasource, DataSource.State.UP, run.datasource.state_detail)
    error = f"{len(errors)} of {len(outcomes)} queries failed" if errors else ""
    QueryRun.objects.filter(pk=run.pk).update(error=error)
    run.refresh_from_db()
    return run


def queryrun_requeue(run_id: int, reason: str) -> None:
    """Put a running run back in the queue (before a retry), noting why."""
    QueryRun.objects.filter(pk=run_id, status=QueryRun.Status.RUNNING).update(
        status=QueryRun.Status.QUEUED, error=reason
    )


def queryrun_finish(
    run_id: int, status: str, error: str | None = None, *, from_status: str = QueryRun.Status.RUNNING
) -> bool:
    """Return True if the run, still in `from_status`, was marked `status` (False: cancelled meanwhile)."""
    fields: dict[str, Any] = {"status": status, "finished": timezone.now()}
    if error is not None:
        fields["error"] = error[:10_000]
    return QueryRun.objects.filter(pk=run_id, status=from_status).update(**fields) == 1


def queryrun_not_sent(run_id: int, error: str) -> None:
    """Mark a queued run failed because its task could not be sent (the page shows `error`)."""
    queryrun_finish(run_id, QueryRun.Status.FAILED, error, from_status=QueryRun.Status.QUEUED)


def queryrun_cancel(run: QueryRun) -> bool:
    """Return True if the queued or running run was cancelled; a worker stops at its next batch."""
    updated = QueryRun.objects.filter(
        Q(status=QueryRun.Status.QUEUED) | Q(status=QueryRun.Status.RUNNING), pk=run.pk
    ).update(status=QueryRun.Status.CANCELLED, finished=timezone.now())
    return updated == 1
