"""Discovery's queries of one Prometheus: metric families, hosts, GPUs per host, GPU models, scrape targets;
and the plumbing that lets each part fail alone (`Parts`, `safe`, `call_part`). Used by `playbooks.discovery`
(and `source_hosts`, `gpus_per_host`, `typical_count` by the diagnosis, through it).
"""

from __future__ import annotations

import logging
import math
import re
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ._diagnose_bits import _plain, with_matcher
from .profiles import Profile
from .profiles._signal import _ADDRESS
from .prometheus import PrometheusClient, PrometheusError, PrometheusUnreachable, choose_step
from .prometheus_types import parse_duration

#: GPU-scope signals tried in order to count GPUs per host.
_GPU_SIGNALS = ("gpu_power", "gpu_temp", "gpu_util", "gpu_vram_used", "gpu_clock")
#: Host-scope (and GPU-scope) gauge signals whose hosts together make the host list.
_HOST_SIGNALS = ("up", "gpu_power", "gpu_temp", "procs_running", "mem_total", "exporter_scrape_duration")
#: Labels that name the GPU model: DCGM exporter, Ray (NVML or AMD SMI).
_MODEL_LABELS = ("modelName", "GpuDeviceName", "card_model")
log = logging.getLogger("playbooks.discovery")


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


class Parts:
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


def safe(fn: Callable[[], Any]) -> Callable[[], Any]:
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


def call_part(parts: Parts, part: str, fn: Callable[[], Any]) -> Any:
    """Return fn(), or None after recording its error under `part`."""
    try:
        result = safe(fn)()
    except PrometheusError as exc:
        parts.record(part, exc)
        return None
    return parts.value(part, result)


def window(time_range: tuple[float, float]) -> str:
    """Return a PromQL duration covering the whole range, ending at its last sample."""
    return f"{int(math.ceil(time_range[1] - time_range[0])) + 1}s"


def family_counts(client: PrometheusClient, rng: tuple[float, float], parts: Parts) -> dict[str, float]:
    """Return metric name -> series count over the whole range (one aggregated query).

    last_over_time keeps the metric name and sees every series that had a sample in the range; if the
    server refuses it (too many samples), fall back to the series present at the range's end.
    """
    try:
        samples = client.query(
            f'count by (__name__) (last_over_time({{__name__=~".+"}}[{window(rng)}]))', at=rng[1]
        )
    except PrometheusError as exc:
        if isinstance(exc, PrometheusUnreachable):
            raise
        # too many samples, or too slow: count what is there at the end instead
        parts.record("families_range", exc)
        samples = client.query('count by (__name__) ({__name__=~".+"})', at=rng[1])
    return {s.labels.get("__name__", ""): s.value for s in samples if s.labels.get("__name__")}


def _available(profile: Profile, names: Iterable[str]) -> list[str]:
    return [n for n in names if profile.has(n)]


def source_hosts(client: PrometheusClient, profile: Profile, win: str, at: float) -> set[str]:
    """Return the normalised hosts seen by any of the host signals over `win` before `at`.

    The one host list of a source: discovery and the diagnosis both take it from here. A signal whose host is
    one label of one metric selector is named from the TSDB's index (label values over the window: no sample
    is read; on 128 hosts x 4 h the query reading every sample of the window cost Prometheus 0.11 s, on
    1,024 x 2 h 0.49 s); the others by their PromQL, in one request.
    """
    hosts: set[str] = set()
    exprs = []
    for name in _available(profile, _HOST_SIGNALS):
        sig = profile.signal(name)
        named = _index_hosts(client, sig, at - parse_duration(win), at)
        if named is None:
            exprs.append(f"group by (host) ({sig.expr('last_over_time', window=win)})")
        else:
            hosts |= named
    if not exprs:
        return hosts
    try:  # one request for every signal; should it fail short of an unreachable server, each is asked alone
        return hosts | {
            s.labels["host"] for s in client.query(" or ".join(exprs), at=at) if s.labels.get("host")
        }
    except PrometheusUnreachable:
        raise
    except PrometheusError:
        pass
    errors: list[PrometheusError] = []
    for expr in exprs:
        try:
            samples = client.query(expr, at=at)
        except PrometheusError as exc:
            errors.append(exc)
            continue
        hosts.update(s.labels["host"] for s in samples if s.labels.get("host"))
    if not hosts and errors:
        raise errors[0]
    return hosts


def _index_hosts(client: PrometheusClient, sig: Any, start: float, end: float) -> set[str] | None:
    """Return the hosts a signal's series name in [start, end], read from the index (label values), as its
    PromQL names them; None when only its PromQL can (a join, an alias, several host labels, an expression),
    or when the server refuses the label values (another implementation)."""
    src = sig.host_from
    if not src or "," in src or sig.host_join or sig.host_alias or not _plain(sig):
        return None
    try:
        values = client.label_values(src, [sig.selector], start, end)
        if src == "instance":  # the address less its port
            hosts = {m[1] for v in values if (m := re.fullmatch(_ADDRESS, v))}
        else:
            hosts = set(values)
        if src != "host":
            # a series without the exporter's label keeps a host label of its own, as label_replace leaves it
            hosts |= set(client.label_values("host", [with_matcher(sig, f'{src}=""').selector], start, end))
    except PrometheusUnreachable:
        raise
    except PrometheusError:
        return None
    return {h for h in hosts if h}


def gpus_per_host(client: PrometheusClient, profile: Profile, win: str, at: float) -> dict[str, int]:
    """Return host -> GPU count from the first GPU signal this TSDB has (the one count discovery and the
    diagnosis share; `typical_count` of its values is "GPUs per host")."""
    for name in _available(profile, _GPU_SIGNALS):
        sig = profile.signal(name)
        samples = client.query(f"count by (host) ({sig.expr('last_over_time', window=win)})", at=at)
        if samples:
            return {s.labels["host"]: int(s.value) for s in samples if s.labels.get("host")}
    return {}


def instance_hosts(client: PrometheusClient, profile: Profile, win: str, at: float) -> dict[str, str]:
    """Return instance -> host for exporters scraped by address whose series (or node_uname_info) name their host."""
    out: dict[str, str] = {}
    for name in _available(profile, _GPU_SIGNALS[:2] + ("procs_running",)):
        sig = profile.signal(name)
        if sig.host_join:
            names = {
                strip_port(s["instance"]): s["nodename"]
                for s in client.series(["node_uname_info"])
                if s.get("instance") and s.get("nodename")
            }
            for inst in client.label_values("instance", [sig.metrics[0]]):
                if strip_port(inst) in names:
                    out[inst] = names[strip_port(inst)]
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


def gpu_models(client: PrometheusClient, rng: tuple[float, float]) -> list[str]:
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


def strip_port(instance: str) -> str:
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


def targets_from_api(data: Mapping[str, Any]) -> list[Target]:
    out = []
    for t in data.get("activeTargets") or ():
        labels = t.get("labels") or {}
        instance = str(labels.get("instance", t.get("scrapeUrl", "")))
        health = t.get("health")
        out.append(
            Target(
                job=str(labels.get("job", t.get("scrapePool", ""))),
                instance=instance,
                host=strip_port(instance),
                last_scrape=_parse_time(t.get("lastScrape")),
                up=1.0 if health == "up" else 0.0 if health == "down" else None,
                error=str(t.get("lastError") or ""),
            )
        )
    return sorted(out, key=lambda t: (t.job, t.instance))


def up_targets(client: PrometheusClient, rng: tuple[float, float]) -> dict[str, Any]:
    """Return the raw per-target figures of the up series over the range (merged in finish_targets)."""
    win = window(rng)
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


def finish_targets(
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
                host=host_map.get(instance) or strip_port(instance),
                last_scrape=seen,
                up=value,
                failed_scrapes=int(failed) if failed is not None and math.isfinite(failed) else None,
                first_down=first_down,
                stopped_early=seen is not None and rng[1] - seen > slack,
            )
        )
    return sorted(out, key=lambda t: (t.job, t.instance))
