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

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ._discovery_identity import (
    DEFAULT_STEP_SLACK,
    EXPORTER_LAG_S,
    LOSS_TOLERANCE,
    Identity,
    check_identity,
    int_or_none,
    log_step_losses,
    step_summary,
    triage_facts,
)
from ._discovery_sources import (
    Parts,
    Target,
    call_part,
    family_counts,
    finish_targets,
    gpu_models,
    gpus_per_host,
    instance_hosts,
    safe,
    source_hosts,
    targets_from_api,
    typical_count,
    up_targets,
    window,
)
from .profiles import Profile, ProfileError, resolve_profile, signal_info
from .prometheus import PrometheusClient, PrometheusError, PrometheusTimeout, PrometheusUnreachable

__all__ = [
    "DEFAULT_STEP_SLACK",
    "EXPORTER_LAG_S",
    "FAMILY_PREFIXES",
    "LOSS_TOLERANCE",
    "MAX_WINDOW_S",
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

#: Queries over "the whole range" look at most this far back from the last sample (a week).
MAX_WINDOW_S = 7 * 86400.0
_TRANSIENT = (PrometheusUnreachable, PrometheusTimeout)


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
        jsonable: dict[str, Any] = _jsonable(out)
        return jsonable

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


# --- discovery ---------------------------------------------------------------------------------


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
    parts = Parts()
    now = time.time()

    rng, status, targets_api, unreachable = _status(client, time_range, parts)
    if rng is None and "time_range" not in parts.errors:
        parts.errors["time_range"] = "this Prometheus holds no samples"
    scope = (max(rng[0], rng[1] - max_window), rng[1]) if rng is not None else None
    asked = None if unreachable else scope  # an unreachable server is asked nothing more
    names, series_total, families, profile = _metric_names(client, asked, parts)
    src = _Source()
    if targets_api and targets_api.get("activeTargets"):
        from_api = call_part(parts, "targets", lambda: targets_from_api(targets_api))
        if from_api is not None:
            src.targets, src.targets_source = from_api, "api"
    _source_parts(client, profile, rng, asked, parts, src, max_concurrency)
    counts_gpu = list(src.gpus.values())
    typical = typical_count(counts_gpu)
    hosts = src.hosts
    identity = check_identity(
        client, profile, scope, src.step_info, triage_facts(triage), log_losses, hosts, parts
    )
    return Discovery(
        url=client.base_url,
        discovered_at=now,
        time_range=rng,
        window=scope,
        head=_head(status),
        series_total=series_total,
        metric_count=len(names),
        families=tuple(families),
        profile=profile.name if profile else "",
        profile_title=profile.title if profile else "",
        unavailable=tuple((n, signal_info(n)["title"]) for n in profile.unavailable(names))
        if profile
        else (),
        hosts=tuple(hosts),
        gpus_per_host=dict(sorted(src.gpus.items())),
        gpus_min=min(counts_gpu) if counts_gpu else None,
        gpus_max=max(counts_gpu) if counts_gpu else None,
        gpus_typical=typical,
        hosts_fewer_gpus=tuple(sorted(h for h, n in src.gpus.items() if typical is not None and n < typical)),
        gpu_models=tuple(src.models),
        targets=tuple(src.targets),
        targets_source=src.targets_source,
        identity=identity,
        errors=dict(parts.errors),
        unreachable=unreachable,
        requests=client.stats.requests - requests_before,
        seconds=round(time.monotonic() - began, 3),
    )


def _status(
    client: PrometheusClient, time_range: tuple[float, float] | None, parts: Parts
) -> tuple[tuple[float, float] | None, dict[str, Any], dict[str, Any] | None, bool]:
    """Return the data's time range, /status/tsdb, /targets (asked in parallel, step 1) and whether the
    server is unreachable: both small status calls failed to connect or timed out."""

    def _range() -> tuple[float, float] | None:
        return time_range if time_range is not None else client.data_time_range()

    rng, status, targets_api = client.run_parallel(
        [safe(_range), safe(client.tsdb_status), safe(client.targets)], max_concurrency=3
    )
    unreachable_parts = ("tsdb_status", "targets")
    rng = parts.value("time_range", rng)
    status = parts.value("tsdb_status", status) or {}
    targets_api = parts.value("targets", targets_api)
    unreachable = all(issubclass(parts.kinds.get(p, type(None)), _TRANSIENT) for p in unreachable_parts)
    return rng, status, targets_api, unreachable


def _metric_names(
    client: PrometheusClient, scope: tuple[float, float] | None, parts: Parts
) -> tuple[list[str], int | None, list[Family], Profile | None]:
    """Return the metric names, their series total, their families and the profile they make (step 2);
    nothing without a scope (no data, or an unreachable server)."""
    if scope is None:
        return [], None, [], None
    counts = call_part(parts, "families", lambda: family_counts(client, scope, parts))
    if counts is None:
        return [], None, [], None
    names = sorted(counts)
    profile: Profile | None = None
    try:
        profile = resolve_profile(client, names)
    except (ProfileError, PrometheusError) as exc:
        parts.record("profile", exc)
    return names, int(sum(counts.values())), _families(counts), profile


@dataclass
class _Source:
    """What step 3 found: hosts, GPUs per host, GPU models, targets, the step signal's summary."""

    hosts: list[str] = field(default_factory=list)
    gpus: dict[str, int] = field(default_factory=dict)
    models: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    targets_source: str = ""
    step_info: dict[str, Any] = field(default_factory=dict)


def _source_parts(
    client: PrometheusClient,
    profile: Profile | None,
    rng: tuple[float, float] | None,
    scope: tuple[float, float] | None,
    parts: Parts,
    src: _Source,
    max_concurrency: int,
) -> None:
    """Fill `src` in parallel (step 3): hosts, GPUs, GPU models, the step signal, and the targets from the
    `up` series when the server has no configured targets. Nothing without a scope."""
    if rng is None or scope is None:
        return
    win = window(scope)
    calls: list[tuple[str, Callable[[], Any]]] = []
    if profile is not None:
        calls.append(("hosts", lambda: source_hosts(client, profile, win, rng[1])))
        calls.append(("gpus", lambda: gpus_per_host(client, profile, win, rng[1])))
        calls.append(("host_map", lambda: instance_hosts(client, profile, win, rng[1])))
        if profile.has("step"):
            calls.append(("step", lambda: step_summary(client, profile, scope)))
    calls.append(("gpu_models", lambda: gpu_models(client, rng)))
    if src.targets_source != "api":
        calls.append(("targets", lambda: up_targets(client, scope)))
    results = client.run_parallel([safe(fn) for _, fn in calls], max_concurrency=max_concurrency)
    got = {name: parts.value(name, res) for (name, _), res in zip(calls, results, strict=True)}
    src.hosts = sorted(got.get("hosts") or ())
    src.gpus = dict(got.get("gpus") or {})
    src.models = list(got.get("gpu_models") or ())
    src.step_info = got.get("step") or {}
    host_map = got.get("host_map") or {}
    if got.get("targets") is not None:
        src.targets, src.targets_source = finish_targets(got["targets"], host_map, scope), "up"
    elif host_map:
        src.targets = [replace(t, host=host_map.get(t.instance, t.host)) for t in src.targets]
    if src.gpus:
        # a host seen by its host exporter but without a single GPU series has 0 GPUs, not "unknown"
        for host in src.hosts:
            src.gpus.setdefault(host, 0)


def _head(status: Mapping[str, Any]) -> dict[str, Any]:
    head = status.get("headStats") or {}
    out: dict[str, Any] = {}
    for key in ("numSeries", "chunkCount", "numLabelPairs"):
        if key in head:
            out[key] = int_or_none(head[key])
    for key in ("minTime", "maxTime"):
        value = int_or_none(head.get(key))
        # an empty head reports int64 sentinels
        if value is not None and abs(value) < 2**62:
            out[key] = value / 1000.0
    return out


def _families(counts: Mapping[str, float]) -> list[Family]:
    grouped: dict[str, list[float]] = {}
    for name, n in counts.items():
        grouped.setdefault(family_prefix(name), []).append(n)
    fams = [Family(prefix=p, metrics=len(v), series=int(sum(v))) for p, v in grouped.items()]
    return sorted(fams, key=lambda f: (-f.series, f.prefix))
