"""Discovery: what a job's Prometheus holds, and whether it is the right job's Prometheus at all.

`discover(client, triage=...)` asks a Prometheus (live, or serving a finished job's TSDB) for:

- metric families grouped by prefix with series counts (one `count by (__name__)` aggregated by Prometheus);
- hosts (normalised through the metric profile), GPUs per host, the GPU model;
- the data's time range, head statistics;
- scrape targets and their last scrape (the targets API of a live server, else the `up` series);
- the metric profile and the signals it cannot give;
- the identity check of the seeds: the TSDB's training step (and loss) at the log's last completed step
  must match the log, else this is probably the wrong Prometheus.

It never raises on a half-broken server: each part records its error in `Discovery.errors` and the
others go on. Everything it stores is JSON-serialisable (`to_dict()` / `from_dict()`).
"""

from __future__ import annotations

import logging
import math
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from .profiles import Profile, ProfileError, resolve_profile, signal_info
from .prometheus import (
    PrometheusClient,
    PrometheusError,
    PrometheusTimeout,
    PrometheusUnreachable,
    choose_step,
)

__all__ = [
    "FAMILY_PREFIXES",
    "Discovery",
    "Family",
    "Identity",
    "Target",
    "discover",
    "family_prefix",
    "gpus_per_host",
    "log_step_losses",
    "source_hosts",
    "typical_count",
]

#: Known metric-name prefixes, longest first wins; other names are grouped by their first word.
FAMILY_PREFIXES: tuple[str, ...] = (
    "hw_gpu_", "hw_rdma_", "hw_tcp_", "hw_net_", "hw_io_", "hw_mem_", "hw_procs_", "hw_",
    "DCGM_FI_DEV_", "DCGM_FI_PROF_", "DCGM_", "amd_gpu_", "gpu_", "amd_pcie_", "pcie_",
    "node_memory_", "node_netstat_", "node_infiniband_", "node_network_", "node_pressure_", "node_disk_",
    "node_cpu_", "node_",
    "tb_learning_", "tb_perf_", "tb_", "training_",
    "ray_node_", "ray_",
    "scrape_", "prometheus_", "go_", "process_",
)  # fmt: skip

#: How long the exporters may lag behind training: the TensorBoard bridge sees events only when
#: TensorBoard flushes (every 120 s) and Prometheus scrapes every 10-15 s. A job that died within this
#: time may have its last steps in the log but not in the TSDB.
EXPORTER_LAG_S = 150.0
#: Queries over "the whole range" look at most this far back from the last sample (a week).
MAX_WINDOW_S = 7 * 86400.0
#: Steps of slack when the step time is unknown.
DEFAULT_STEP_SLACK = 5
#: The log prints loss with 3 decimals ("loss: 2.417"); the TSDB holds the float itself.
LOSS_TOLERANCE = 0.0015
#: GPU-scope signals tried in order to count GPUs per host.
_GPU_SIGNALS = ("gpu_power", "gpu_temp", "gpu_util", "gpu_vram_used", "gpu_clock")
#: Host-scope (and GPU-scope) gauge signals whose hosts together make the host list.
_HOST_SIGNALS = ("up", "gpu_power", "gpu_temp", "procs_running", "mem_total", "exporter_scrape_duration")
#: Labels that name the GPU model: DCGM exporter, Ray (NVML or AMD SMI).
_MODEL_LABELS = ("modelName", "GpuDeviceName", "card_model")
_TRANSIENT = (PrometheusUnreachable, PrometheusTimeout)
log = logging.getLogger(__name__)
_STEP_LINE = re.compile(r"completed step: (\d+),.*?\bloss: ([-+0-9.eEnaif]+)")


@dataclass(frozen=True)
class Family:
    """Metrics sharing a name prefix.

    Attributes:
        prefix: "hw_gpu_", "DCGM_FI_DEV_", ... (see FAMILY_PREFIXES).
        metrics: how many metric names carry the prefix.
        series: how many series they have over the data's time range.
    """

    prefix: str
    metrics: int
    series: int


@dataclass(frozen=True)
class Target:
    """One scrape target and how its scrapes went.

    Attributes:
        job, instance: the target's Prometheus labels.
        host: `instance` without its port, or the exporter's own host name when the target is scraped by IP.
        last_scrape: unix seconds of its last scrape (None if unknown).
        up: the value of `up` at its last scrape (1 ok, 0 failed), None if unknown.
        failed_scrapes: scrapes with up == 0 over the range (None for a live server's targets API).
        first_down: unix seconds when up was first seen at 0 (None if never).
        stopped_early: its samples end well before the data's end (the host or its exporter went away).
        error: the last scrape error of a live target.
    """

    job: str
    instance: str
    host: str
    last_scrape: float | None
    up: float | None
    failed_scrapes: int | None = None
    first_down: float | None = None
    stopped_early: bool = False
    error: str = ""


@dataclass(frozen=True)
class Identity:
    """Whether this Prometheus belongs to the job whose log was triaged.

    Attributes:
        status: "match", "mismatch" or "unknown".
        message: one or two sentences for people.
        step_metric: the TSDB's step metric ("tb_step", "training_step"), "" when there is none.
        log_last_step: the log's last completed step.
        tsdb_last_step: the largest step in the TSDB over its whole range.
        compared_step: the step whose loss was compared (None: no loss compared).
        log_loss, tsdb_loss: the loss at compared_step in the log and in the TSDB.
        tsdb_step_time: unix seconds when the TSDB first recorded tsdb_last_step (or compared_step).
        log_step_time: the log's time of its last step.
        slack: how many steps the TSDB may trail the log (exporter lag).
        notes: further remarks (lag allowed, loss not compared, hosts that do not match the log's nodes).
    """

    status: str = "unknown"
    message: str = ""
    step_metric: str = ""
    log_last_step: int | None = None
    tsdb_last_step: int | None = None
    compared_step: int | None = None
    log_loss: float | None = None
    tsdb_loss: float | None = None
    tsdb_step_time: float | None = None
    log_step_time: float | None = None
    slack: int | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Discovery:
    """What one Prometheus holds.

    Attributes:
        url: the server asked.
        discovered_at: unix seconds when discovery ran.
        time_range: (first, last) sample times in unix seconds, None if there is no data (or it failed).
        window: the part of time_range that the "over the range" queries covered (its last MAX_WINDOW_S).
        head: /api/v1/status/tsdb headStats (numSeries, chunkCount, minTime, maxTime; the in-memory head only).
        series_total: series over the whole range (sum of the families); the head's count covers only the head.
        metric_count: distinct metric names.
        families: per prefix, largest first.
        profile, profile_title: the metric profile recognised ("amd", "nvidia"), "" if none.
        unavailable: (signal, title) pairs the profile or this TSDB cannot give.
        hosts: normalised host names, sorted.
        gpus_per_host: host -> GPU count (hosts without any GPU series have 0).
        gpus_min, gpus_max, gpus_typical: over hosts (typical is the most common count).
        hosts_fewer_gpus: hosts with fewer GPUs than the typical host.
        gpu_models: GPU model names the labels give.
        targets: scrape targets.
        targets_source: "api" (a live server's /api/v1/targets) or "up" (derived from the up series).
        identity: the identity check against the log.
        errors: part -> error text, for each part that failed.
        unreachable: True when the server could not be reached at all (a transient condition).
        requests, seconds: HTTP requests made and time spent.
    """

    url: str = ""
    discovered_at: float = 0.0
    time_range: tuple[float, float] | None = None
    window: tuple[float, float] | None = None
    head: dict[str, Any] = field(default_factory=dict)
    series_total: int | None = None
    metric_count: int = 0
    families: tuple[Family, ...] = ()
    profile: str = ""
    profile_title: str = ""
    unavailable: tuple[tuple[str, str], ...] = ()
    hosts: tuple[str, ...] = ()
    gpus_per_host: dict[str, int] = field(default_factory=dict)
    gpus_min: int | None = None
    gpus_max: int | None = None
    gpus_typical: int | None = None
    hosts_fewer_gpus: tuple[str, ...] = ()
    gpu_models: tuple[str, ...] = ()
    targets: tuple[Target, ...] = ()
    targets_source: str = ""
    identity: Identity = field(default_factory=Identity)
    errors: dict[str, str] = field(default_factory=dict)
    unreachable: bool = False
    requests: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Return True if the server answered and the data's range is known."""
        return not self.unreachable and self.time_range is not None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (tuples become lists)."""
        out = asdict(self)
        out["time_range"] = list(self.time_range) if self.time_range is not None else None
        out["window"] = list(self.window) if self.window is not None else None
        out["unavailable"] = [list(u) for u in self.unavailable]
        return _jsonable(out)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Discovery:
        """Return the Discovery that `to_dict()` gave (unknown keys are ignored)."""
        known = set(cls.__dataclass_fields__)
        raw = {k: v for k, v in dict(data).items() if k in known}
        for name in ("time_range", "window"):
            tr = raw.get(name)
            raw[name] = (float(tr[0]), float(tr[1])) if tr else None
        raw["families"] = tuple(_known(Family, f) for f in raw.get("families") or ())
        raw["targets"] = tuple(_known(Target, t) for t in raw.get("targets") or ())
        ident = dict(raw.get("identity") or {})
        ident["notes"] = tuple(ident.get("notes") or ())
        raw["identity"] = _known(Identity, ident)
        raw["unavailable"] = tuple((str(a), str(b)) for a, b in raw.get("unavailable") or ())
        for name in ("hosts", "hosts_fewer_gpus", "gpu_models"):
            raw[name] = tuple(raw.get(name) or ())
        return cls(**raw)


def _known(cls: Any, data: Mapping[str, Any]) -> Any:
    """Return cls(**data) without the keys cls does not know (display helpers a caller added)."""
    return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def _jsonable(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def family_prefix(name: str) -> str:
    """Return the family prefix of a metric name: a known prefix, else its first word and "_"."""
    for prefix in FAMILY_PREFIXES:
        if name.startswith(prefix):
            return prefix
    head, sep, _ = name.partition("_")
    return f"{head}_" if sep else name


# --- the log side ------------------------------------------------------------------------------


def log_step_losses(path: str | Path, *, tail_bytes: int = 8 << 20, keep: int = 500) -> dict[int, float]:
    """Return step -> loss from the `completed step:` lines in the last `tail_bytes` of a log.

    Reads only the tail (bounded memory on a 1 GB log); the first line of the tail may be cut and is
    skipped. Keeps the last `keep` steps. Returns {} when the log cannot be read or has no such lines.
    """
    found: dict[int, float] = {}
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            start = max(0, size - tail_bytes)
            fh.seek(start)
            if start:
                fh.readline()
            for raw in fh:
                if b"completed step:" not in raw:
                    continue
                m = _STEP_LINE.search(raw.decode("utf-8", "replace"))
                if not m:
                    continue
                try:
                    loss = float(m.group(2))
                except ValueError:
                    continue
                if math.isfinite(loss):
                    # one line per node per step: the first one wins, they carry the same loss
                    found.setdefault(int(m.group(1)), loss)
    except OSError:
        return {}
    return {s: found[s] for s in sorted(found)[-keep:]}


def _triage_facts(triage: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return last_step, step_time, last_step_time, status, nodes and losses from a triage dict."""

    def part(parent: Any, key: str) -> Mapping[str, Any]:
        value = parent.get(key) if isinstance(parent, Mapping) else None
        return value if isinstance(value, Mapping) else {}

    triage = triage if isinstance(triage, Mapping) else {}
    job, progress, details = part(triage, "job"), part(triage, "progress"), part(triage, "details")
    losses: dict[int, float] = {}
    raw = details.get("step_losses") or details.get("losses")
    if isinstance(raw, Mapping):
        for k, v in raw.items():
            try:
                losses[int(k)] = float(v)
            except (TypeError, ValueError):
                continue
    last = _int_or_none(job.get("last_step"))
    for key in ("last_loss", "last_step_loss", "loss"):
        value = details.get(key)
        if last is not None and isinstance(value, (int, float)) and math.isfinite(value):
            losses.setdefault(last, float(value))
    return {
        "last_step": last,
        "status": job.get("status"),
        "step_time": _float_or_none(progress.get("step_time_s")),
        "last_step_time": _float_or_none(progress.get("last_step_time")),
        "nodes": [str(n) for n in triage.get("nodes") or () if n]
        if isinstance(triage.get("nodes"), list)
        else [],
        "losses": losses,
    }


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _float_or_none(value: Any) -> float | None:
    try:
        out = float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
    return out if out is not None and math.isfinite(out) else None


# --- discovery ---------------------------------------------------------------------------------


class _Parts:
    """Collects per-part errors: `value(part, result)` turns a returned exception into None and a record."""

    def __init__(self) -> None:
        self.errors: dict[str, str] = {}
        self.kinds: dict[str, type[BaseException]] = {}

    def record(self, part: str, exc: BaseException) -> None:
        self.errors.setdefault(part, str(exc) or type(exc).__name__)
        self.kinds.setdefault(part, type(exc))

    def value(self, part: str, result: Any) -> Any:
        """Return `result`, or None after recording it if it is an exception."""
        if isinstance(result, Exception):
            self.record(part, result)
            return None
        return result


def _safe(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Return fn wrapped so that it returns, not raises, any exception (run_parallel re-raises all but
    PrometheusError). A half-broken server can send shapes nothing here expects; that part fails alone."""

    def call() -> Any:
        try:
            return fn()
        except PrometheusError:
            raise
        except Exception as exc:  # noqa: BLE001 - recorded on the part, logged with its traceback
            log.warning("discovery part failed", exc_info=True)
            return exc

    return call


def _window(time_range: tuple[float, float]) -> str:
    """Return a PromQL duration covering the whole range, ending at its last sample."""
    return f"{int(math.ceil(time_range[1] - time_range[0])) + 1}s"


def discover(
    client: PrometheusClient,
    *,
    triage: Mapping[str, Any] | None = None,
    log_losses: Mapping[int, float] | None = None,
    time_range: tuple[float, float] | None = None,
    max_concurrency: int = 8,
    max_window: float = MAX_WINDOW_S,
) -> Discovery:
    """Return what the Prometheus behind `client` holds, checked against the triage of the job's log.

    1. In parallel: the data's time range (`time_range` when the caller knows it, e.g. from the TSDB
       files), /status/tsdb and /targets.
    2. One `count by (__name__)` over the whole range: families, metric names, the profile.
    3. In parallel: hosts, GPUs per host and GPU models through the profile; targets from the `up`
       series when the server has no configured targets (a served finished job); the step signal.
    4. The identity check: the TSDB's step (and loss) against the log's last completed step.

    `triage` is the triage JSON (`Triage.to_dict()`); `log_losses` maps steps to the loss the log printed
    (see `log_step_losses`). Queries "over the range" cover at most the last `max_window` seconds of data
    (a cluster Prometheus keeps weeks; a job's own holds the job). Never raises on what a server answers:
    failed parts are listed in `errors`.
    """
    began = time.monotonic()
    requests_before = client.stats.requests
    parts = _Parts()
    now = time.time()

    def _range() -> tuple[float, float] | None:
        return time_range if time_range is not None else client.data_time_range()

    rng, status, targets_api = client.run_parallel(
        [_safe(_range), _safe(client.tsdb_status), _safe(client.targets)], max_concurrency=3
    )
    rng = parts.value("time_range", rng)
    status = parts.value("tsdb_status", status) or {}
    targets_api = parts.value("targets", targets_api)
    # Both small status calls failing to connect (or timing out) means the server is not there.
    unreachable = all(
        issubclass(parts.kinds.get(p, type(None)), _TRANSIENT) for p in ("tsdb_status", "targets")
    )
    head = _head(status)

    families: list[Family] = []
    names: list[str] = []
    series_total: int | None = None
    profile: Profile | None = None
    if rng is None and "time_range" not in parts.errors:
        parts.errors["time_range"] = "this Prometheus holds no samples"
    scope = (max(rng[0], rng[1] - max_window), rng[1]) if rng is not None else None
    if scope is not None and not unreachable:
        counts = _call(parts, "families", lambda: _family_counts(client, scope, parts))
        if counts is not None:
            names = sorted(counts)
            series_total = int(sum(counts.values()))
            families = _families(counts)
            try:
                profile = resolve_profile(client, names)
            except (ProfileError, PrometheusError) as exc:
                parts.record("profile", exc)

    hosts: list[str] = []
    gpus: dict[str, int] = {}
    models: list[str] = []
    targets: list[Target] = []
    targets_source = ""
    if targets_api and targets_api.get("activeTargets"):
        from_api = _call(parts, "targets", lambda: _targets_from_api(targets_api))
        if from_api is not None:
            targets, targets_source = from_api, "api"
    step_info: dict[str, Any] = {}
    if rng is not None and scope is not None and not unreachable:
        win = _window(scope)
        calls: list[tuple[str, Callable[[], Any]]] = []
        if profile is not None:
            calls.append(("hosts", lambda: source_hosts(client, profile, win, rng[1])))
            calls.append(("gpus", lambda: gpus_per_host(client, profile, win, rng[1])))
            calls.append(("host_map", lambda: _instance_hosts(client, profile, win, rng[1])))
            if profile.has("step"):
                calls.append(("step", lambda: _step_summary(client, profile, scope)))
        calls.append(("gpu_models", lambda: _gpu_models(client, rng)))
        if targets_source != "api":
            calls.append(("targets", lambda: _up_targets(client, scope)))
        results = client.run_parallel([_safe(fn) for _, fn in calls], max_concurrency=max_concurrency)
        got = {name: parts.value(name, res) for (name, _), res in zip(calls, results, strict=True)}
        hosts = sorted(got.get("hosts") or ())
        gpus = dict(got.get("gpus") or {})
        models = list(got.get("gpu_models") or ())
        step_info = got.get("step") or {}
        host_map = got.get("host_map") or {}
        if got.get("targets") is not None:
            targets, targets_source = _finish_targets(got["targets"], host_map, scope), "up"
        elif host_map:
            targets = [replace(t, host=host_map.get(t.instance, t.host)) for t in targets]
    if gpus:
        # a host seen by its host exporter but without a single GPU series has 0 GPUs, not "unknown"
        for host in hosts:
            gpus.setdefault(host, 0)
    counts_gpu = list(gpus.values())
    typical = typical_count(counts_gpu)
    fewer = sorted(h for h, n in gpus.items() if typical is not None and n < typical)

    identity = _identity(client, profile, scope, step_info, _triage_facts(triage), log_losses, hosts, parts)
    unavailable: tuple[tuple[str, str], ...] = ()
    if profile is not None:
        unavailable = tuple((n, signal_info(n)["title"]) for n in profile.unavailable(names))
    return Discovery(
        url=client.base_url,
        discovered_at=now,
        time_range=rng,
        window=scope,
        head=head,
        series_total=series_total,
        metric_count=len(names),
        families=tuple(families),
        profile=profile.name if profile else "",
        profile_title=profile.title if profile else "",
        unavailable=unavailable,
        hosts=tuple(hosts),
        gpus_per_host=dict(sorted(gpus.items())),
        gpus_min=min(counts_gpu) if counts_gpu else None,
        gpus_max=max(counts_gpu) if counts_gpu else None,
        gpus_typical=typical,
        hosts_fewer_gpus=tuple(fewer),
        gpu_models=tuple(models),
        targets=tuple(targets),
        targets_source=targets_source,
        identity=identity,
        errors=dict(parts.errors),
        unreachable=unreachable,
        requests=client.stats.requests - requests_before,
        seconds=round(time.monotonic() - began, 3),
    )


def _call(parts: _Parts, part: str, fn: Callable[[], Any]) -> Any:
    """Return fn(), or None after recording its error under `part`."""
    try:
        result = _safe(fn)()
    except PrometheusError as exc:
        parts.record(part, exc)
        return None
    return parts.value(part, result)


def _head(status: Mapping[str, Any]) -> dict[str, Any]:
    head = status.get("headStats") or {}
    out: dict[str, Any] = {}
    for key in ("numSeries", "chunkCount", "numLabelPairs"):
        if key in head:
            out[key] = _int_or_none(head[key])
    for key in ("minTime", "maxTime"):
        value = _int_or_none(head.get(key))
        # an empty head reports int64 sentinels
        if value is not None and abs(value) < 2**62:
            out[key] = value / 1000.0
    return out


def _family_counts(client: PrometheusClient, rng: tuple[float, float], parts: _Parts) -> dict[str, float]:
    """Return metric name -> series count over the whole range (one aggregated query).

    last_over_time keeps the metric name and sees every series that had a sample in the range; if the
    server refuses it (too many samples), fall back to the series present at the range's end.
    """
    try:
        samples = client.query(
            f'count by (__name__) (last_over_time({{__name__=~".+"}}[{_window(rng)}]))', at=rng[1]
        )
    except PrometheusError as exc:
        if isinstance(exc, PrometheusUnreachable):
            raise
        # too many samples, or too slow: count what is there at the end instead
        parts.record("families_range", exc)
        samples = client.query('count by (__name__) ({__name__=~".+"})', at=rng[1])
    return {s.labels.get("__name__", ""): s.value for s in samples if s.labels.get("__name__")}


def _families(counts: Mapping[str, float]) -> list[Family]:
    grouped: dict[str, list[float]] = {}
    for name, n in counts.items():
        grouped.setdefault(family_prefix(name), []).append(n)
    fams = [Family(prefix=p, metrics=len(v), series=int(sum(v))) for p, v in grouped.items()]
    return sorted(fams, key=lambda f: (-f.series, f.prefix))


def _available(profile: Profile, names: Iterable[str]) -> list[str]:
    return [n for n in names if profile.has(n)]


def source_hosts(client: PrometheusClient, profile: Profile, win: str, at: float) -> set[str]:
    """Return the normalised hosts seen by any of the host signals over `win` before `at`.

    The one host list of a source: discovery and the diagnosis both take it from here.
    """
    hosts: set[str] = set()
    errors: list[PrometheusError] = []
    for name in _available(profile, _HOST_SIGNALS):
        sig = profile.signal(name)
        try:
            samples = client.query(f"group by (host) ({sig.expr('last_over_time', window=win)})", at=at)
        except PrometheusError as exc:
            errors.append(exc)
            continue
        hosts.update(s.labels["host"] for s in samples if s.labels.get("host"))
    if not hosts and errors:
        raise errors[0]
    return hosts


def gpus_per_host(client: PrometheusClient, profile: Profile, win: str, at: float) -> dict[str, int]:
    """Return host -> GPU count from the first GPU signal this TSDB has (the one count discovery and the
    diagnosis share; `typical_count` of its values is "GPUs per host")."""
    for name in _available(profile, _GPU_SIGNALS):
        sig = profile.signal(name)
        samples = client.query(f"count by (host) ({sig.expr('last_over_time', window=win)})", at=at)
        if samples:
            return {s.labels["host"]: int(s.value) for s in samples if s.labels.get("host")}
    return {}


def _instance_hosts(client: PrometheusClient, profile: Profile, win: str, at: float) -> dict[str, str]:
    """Return instance -> host for exporters scraped by address whose series (or node_uname_info) name their host."""
    out: dict[str, str] = {}
    for name in _available(profile, _GPU_SIGNALS[:2] + ("procs_running",)):
        sig = profile.signal(name)
        if sig.host_join:
            names = {
                _strip_port(s["instance"]): s["nodename"]
                for s in client.series(["node_uname_info"])
                if s.get("instance") and s.get("nodename")
            }
            for inst in client.label_values("instance", [sig.metrics[0]]):
                if _strip_port(inst) in names:
                    out[inst] = names[_strip_port(inst)]
            continue
        label = sig.host_from.split(",")[0]
        if label in ("instance", "host", ""):
            continue
        samples = client.query(
            f"group by (instance, {label}) (last_over_time({sig.metrics[0]}[{win}]))", at=at
        )
        for s in samples:
            if s.labels.get("instance") and s.labels.get(label):
                out.setdefault(s.labels["instance"], s.labels[label])
    return out


def _gpu_models(client: PrometheusClient, rng: tuple[float, float]) -> list[str]:
    models: list[str] = []
    for label in _MODEL_LABELS:
        for value in client.label_values(label, start=rng[0], end=rng[1]):
            if value and value not in models:
                models.append(value)
    return models


def typical_count(counts: list[int]) -> int | None:
    """Return the most common count (the larger on a tie): a host that lost GPUs does not move it."""
    if not counts:
        return None
    tally = Counter(counts).most_common()
    best = tally[0][1]
    return max(n for n, c in tally if c == best)


# --- targets -----------------------------------------------------------------------------------


def _strip_port(instance: str) -> str:
    m = re.match(r"^\[?([^\]]+?)\]?(?::\d+)?$", instance)
    return m.group(1) if m else instance


def _parse_time(text: Any) -> float | None:
    if not text or not isinstance(text, str) or text.startswith("0001-"):
        return None
    try:
        # Prometheus writes RFC 3339 with nanoseconds; Python takes microseconds.
        trimmed = re.sub(r"(\.\d{6})\d+", r"\1", text.replace("Z", "+00:00"))
        return datetime.fromisoformat(trimmed).timestamp()
    except ValueError:
        return None


def _targets_from_api(data: Mapping[str, Any]) -> list[Target]:
    out = []
    for t in data.get("activeTargets") or ():
        labels = t.get("labels") or {}
        instance = str(labels.get("instance", t.get("scrapeUrl", "")))
        health = t.get("health")
        out.append(
            Target(
                job=str(labels.get("job", t.get("scrapePool", ""))),
                instance=instance,
                host=_strip_port(instance),
                last_scrape=_parse_time(t.get("lastScrape")),
                up=1.0 if health == "up" else 0.0 if health == "down" else None,
                error=str(t.get("lastError") or ""),
            )
        )
    return sorted(out, key=lambda t: (t.job, t.instance))


def _up_targets(client: PrometheusClient, rng: tuple[float, float]) -> dict[str, Any]:
    """Return the raw per-target figures of the up series over the range (merged in _finish_targets)."""
    win = _window(rng)
    span = rng[1] - rng[0]
    # The subquery step bounds the precision of the last-scrape and first-down times.
    sub = max(1.0, choose_step(rng[0], rng[1], max_points=1000)) if span > 0 else 1.0
    queries = {
        "last": f"last_over_time(up[{win}])",
        # exact times of the last samples still within the lookback window at the end
        "seen": "timestamp(up)",
        "count": f"count_over_time(up[{win}])",
        "failed": f"count_over_time(up[{win}]) - sum_over_time(up[{win}])",
        "first_down": f"min_over_time(timestamp(up == 0)[{win}:{int(sub)}s])",
    }
    out: dict[str, Any] = {"sub": sub}
    _up_queries(client, queries, rng[1], out)
    if set(out["last"]) - set(out["seen"]):
        # Targets that stopped before the end: their last sample, to the subquery's precision.
        early: dict[str, Any] = {}
        _up_queries(client, {"seen": f"max_over_time(timestamp(up)[{win}:{int(sub)}s])"}, rng[1], early)
        out["seen"] = early["seen"] | out["seen"]
    return out


def _up_queries(client: PrometheusClient, queries: Mapping[str, str], at: float, out: dict[str, Any]) -> None:
    """Fill out[name] with {(job, instance): value} for each query; only a failed "last" raises."""
    calls = [lambda q=q: client.query(q, at=at) for q in queries.values()]
    results = client.run_parallel(calls, max_concurrency=len(calls))
    for key, res in zip(queries, results, strict=True):
        if isinstance(res, PrometheusError):
            if key == "last":
                raise res
            out[key] = {}
            continue
        out[key] = {(s.labels.get("job", ""), s.labels.get("instance", "")): s.value for s in res}


def _finish_targets(
    raw: Mapping[str, Any], host_map: Mapping[str, str], rng: tuple[float, float]
) -> list[Target]:
    sub = float(raw.get("sub", 1.0))
    span = max(rng[1] - rng[0], 1.0)
    counts = [c for c in raw.get("count", {}).values() if c and c > 1]
    interval = statistics.median(span / c for c in counts) if counts else 15.0
    slack = max(3 * interval, sub + 1.0, 60.0)
    out = []
    for key, value in raw.get("last", {}).items():
        job, instance = key
        seen = raw.get("seen", {}).get(key)
        failed = raw.get("failed", {}).get(key)
        first_down = raw.get("first_down", {}).get(key)
        out.append(
            Target(
                job=job,
                instance=instance,
                host=host_map.get(instance) or _strip_port(instance),
                last_scrape=seen,
                up=value,
                failed_scrapes=int(failed) if failed is not None and math.isfinite(failed) else None,
                first_down=first_down,
                stopped_early=seen is not None and rng[1] - seen > slack,
            )
        )
    return sorted(out, key=lambda t: (t.job, t.instance))


# --- identity ----------------------------------------------------------------------------------


def _step_summary(client: PrometheusClient, profile: Profile, rng: tuple[float, float]) -> dict[str, Any]:
    """Return {metric, max, points}: the step signal's largest value and its curve over the range."""
    sig = profile.signal("step")
    metric = sig.metrics[0]
    res = choose_step(rng[0], rng[1], max_points=2000)
    series = client.query_range(f"max({metric})", rng[0], rng[1], res)
    points = [(t, v) for s in series for t, v in zip(s.timestamps, s.values, strict=True) if math.isfinite(v)]
    if not points:
        return {"metric": metric, "max": None, "points": [], "res": res}
    top = max(v for _, v in points)
    # A range query sees one sample per step; a step that lived shorter than the resolution may be missed,
    # so also ask for the exact maximum over the raw samples.
    exact = client.query(f"max(max_over_time({metric}[{_window(rng)}]))", at=rng[1])
    if exact and math.isfinite(exact[0].value):
        top = max(top, exact[0].value)
    return {"metric": metric, "max": top, "points": points, "res": res}


def _step_point(
    client: PrometheusClient, profile: Profile, info: Mapping[str, Any], step: int, rng: tuple[float, float]
) -> tuple[float | None, float | None]:
    """Return (time, loss) of the TSDB's first sample of `step`, from the raw samples."""
    metric = info["metric"]
    res = float(info["res"])
    after = [t for t, v in info["points"] if v >= step]
    if not after:
        after = [rng[1]]
    t1 = after[0]
    ts: float | None = None
    for width in (res + 1.0, res + 1800.0):
        raw = client.query(f"{metric}[{int(math.ceil(width))}s]", at=t1)
        hits = [s.timestamp for s in raw if abs(s.value - step) < 0.5]
        if hits:
            ts = min(hits)
            break
    if ts is None:
        # the sample is after t1 (maximum found only by max_over_time): look in the range's tail
        raw = client.query(f"{metric}[{int(math.ceil(res + 1.0))}s]", at=rng[1])
        hits = [s.timestamp for s in raw if abs(s.value - step) < 0.5]
        ts = min(hits) if hits else None
    if ts is None or not profile.has("loss"):
        return ts, None
    loss_metric = profile.signal("loss").metrics[0]
    raw = client.query(f"{loss_metric}[120s]", at=ts + 0.001)
    if not raw:
        return ts, None
    exact = [s for s in raw if abs(s.timestamp - ts) < 0.002]
    pick = (
        exact[0] if exact else max((s for s in raw if s.timestamp <= ts + 0.001), key=lambda s: s.timestamp)
    )
    return ts, pick.value if math.isfinite(pick.value) else None


def _fmt(n: int | None) -> str:
    return f"{n:,}" if n is not None else "?"


def _identity(
    client: PrometheusClient,
    profile: Profile | None,
    rng: tuple[float, float] | None,
    step_info: Mapping[str, Any],
    facts: Mapping[str, Any],
    log_losses: Mapping[int, float] | None,
    hosts: list[str],
    parts: _Parts,
) -> Identity:
    """Return the identity check (never raises: a failed lookup leaves status unknown or loss uncompared).

    The TSDB's largest step must equal the log's last completed step, within the exporter lag (the TSDB
    may miss the last steps of a job that died within one TensorBoard flush); a live job's TSDB may be
    ahead of a log read earlier. Where both sides have the loss of the compared step, it must agree
    within the log's rounding.
    """
    log_last = facts.get("last_step")
    losses = dict(facts.get("losses") or {})
    losses.update({int(k): float(v) for k, v in (log_losses or {}).items()})
    metric = str(step_info.get("metric") or "")
    tsdb_max = step_info.get("max")
    tsdb_last = int(round(tsdb_max)) if tsdb_max is not None else None
    notes: list[str] = []
    nodes = facts.get("nodes") or []
    if nodes and hosts:
        short = {n.split(".")[0] for n in nodes}
        missing = sorted(short - set(hosts))
        if not short & set(hosts):
            notes.append(
                f"None of the log's {len(short)} nodes ({', '.join(sorted(short)[:4])}…) appear among "
                f"this TSDB's hosts ({', '.join(hosts[:4])}…)."
            )
        elif missing:
            notes.append(f"{len(missing)} of the log's nodes have no series here: {', '.join(missing[:8])}.")
    step_time = facts.get("step_time")
    slack = DEFAULT_STEP_SLACK if not step_time else max(2, min(1000, math.ceil(EXPORTER_LAG_S / step_time)))
    base = {
        "step_metric": metric,
        "log_last_step": log_last,
        "tsdb_last_step": tsdb_last,
        "log_step_time": facts.get("last_step_time"),
        "slack": slack,
    }
    if log_last is None:
        why = "no triage of the job's log" if not facts.get("status") else "the log has no completed step"
        return Identity(
            status="unknown",
            message=f"Cannot check which job this Prometheus belongs to: {why}.",
            notes=tuple(notes),
            **base,
        )
    if profile is None or not metric:
        what = "no metric profile was recognised" if profile is None else "the profile has no step signal"
        return Identity(
            status="unknown", message=f"Cannot check which job this is: {what}.", notes=tuple(notes), **base
        )
    if tsdb_last is None:
        reason = parts.errors.get("step")
        why = f"querying {metric} failed ({reason})" if reason else f"this TSDB has no {metric} samples"
        return Identity(
            status="unknown", message=f"Cannot check which job this is: {why}.", notes=tuple(notes), **base
        )

    running = facts.get("status") == "running"
    diff = tsdb_last - log_last
    name = metric
    if (diff > slack and not running) or diff < -slack:
        notes_t = tuple(notes)
        return Identity(
            status="mismatch",
            message=(
                f"The log's last step is {_fmt(log_last)} but this Prometheus's {name} ends at "
                f"{_fmt(tsdb_last)}: this is probably the wrong Prometheus."
            ),
            notes=notes_t,
            **base,
        )
    compared = min(log_last, tsdb_last)
    if diff < 0:
        notes.append(
            f"The TSDB's {name} ends {-diff} step(s) before the log's last step: within the exporter "
            f"lag (up to {slack} steps, about {EXPORTER_LAG_S:.0f} s), so the job probably died before "
            "its last steps were exported."
        )
    elif diff > 0 and running:
        notes.append(f"The job is running: this Prometheus is {diff} step(s) ahead of the log as read.")
    elif diff > 0:
        notes.append(
            f"The TSDB has {diff} step(s) past the log's last step: the log may have stopped early "
            "(Ray's log forwarding loses its buffer at exit)."
        )
    step_ts: float | None = None
    tsdb_loss: float | None = None
    try:
        assert rng is not None
        step_ts, tsdb_loss = _step_point(client, profile, step_info, compared, rng)
    except Exception as exc:  # noqa: BLE001 - the loss is a refinement: without it the step still decides
        parts.record("identity", exc)
        notes.append(f"Could not read the loss at step {compared}: {exc}")
    log_loss = losses.get(compared)
    fields = dict(
        base, compared_step=compared, tsdb_step_time=step_ts, log_loss=log_loss, tsdb_loss=tsdb_loss
    )
    log_time = facts.get("last_step_time")
    if (
        step_ts is not None
        and log_time is not None
        and compared == log_last
        and abs(step_ts - log_time) > 15 * 3600
    ):
        notes.append(
            f"The TSDB recorded step {compared} {abs(step_ts - log_time) / 86400:.1f} days away from the "
            "log's time for it: check the log's year and the clock."
        )
    if log_loss is not None and tsdb_loss is not None:
        if abs(log_loss - tsdb_loss) > LOSS_TOLERANCE + 1e-6 * abs(log_loss):
            return Identity(
                status="mismatch",
                message=(
                    f"Step {_fmt(compared)} is in both, but the log's loss there is {log_loss:.3f} and this "
                    f"Prometheus's is {tsdb_loss:.4f}: this is probably the wrong Prometheus."
                ),
                notes=tuple(notes),
                **fields,
            )
        message = (
            f"The log's last step {_fmt(log_last)} and its loss {log_loss:.3f} match this Prometheus's "
            f"{name} and loss."
        )
    else:
        side = "the log" if log_loss is None else "the TSDB"
        notes.append(f"Loss not compared: {side} has no loss for step {compared}.")
        message = (
            f"The log's last step {_fmt(log_last)} matches this Prometheus's {name} ({_fmt(tsdb_last)})."
        )
    return Identity(status="match", message=message, notes=tuple(notes), **fields)
