"""What every panel of one job's timeline shares (step axis, series counts, scrape interval, warm-up
end), read once per view with a handful of parallel queries."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from playbooks.alignment import StepAxis, step_axis_from_series
from playbooks.discovery import source_hosts
from playbooks.hostnames import HostNames, host_names
from playbooks.profiles import Profile, signal_info
from playbooks.prometheus import PrometheusClient, PrometheusError, Series, choose_step

from .panels import PANELS, PanelSpec, TimelineError
from .promql import _bare_ok


@dataclass(frozen=True)
class TimelineContext:
    """What every panel of one job shares, read once per view.

    Attributes:
        profile: the job's metric profile.
        start, end: the job's data range, unix seconds.
        axis: wall time <-> step.
        interval: the scrape interval in seconds (the finest useful step).
        gpu_series, host_series: how many (host, gpu) and host series the job has.
        warmup_end: unix seconds the learning rate reached its peak after a warm-up, or None.
        queries: how many Prometheus queries building it took.
        unique: signals whose raw selector has at most one series per host (and GPU) over the whole
            range: their band queries skip the per-device aggregation (5x cheaper at 1,024 GPUs).
        max_samples: the source's budget of samples a query (series x points); 0 for none. Set by the
            caller from its configuration (`dataclasses.replace`), it coarsens the step of wide panels.
        points: points a panel's plot can show (its width in pixels / 2, `points_for_width`), 0 for the
            default (`queries.QUERY_POINTS`); set per view like `max_samples`, it only ever coarsens a step.
        hosts: the source's hosts as the profile's PromQL names them (`source_hosts`, the diagnosis's list:
            DCGM's `gpu-238` and node_exporter's `gpu-238.cluster.internal` alike).
        uname: node_uname_info's (instance, nodename) pairs: an exporter scraped by address names its host.
    """

    profile: Profile
    start: float
    end: float
    axis: StepAxis
    interval: float = 15.0
    gpu_series: int = 0
    host_series: int = 0
    warmup_end: float | None = None
    queries: int = 0
    unique: frozenset[str] = frozenset()
    max_samples: int = 0
    points: int = 0
    hosts: tuple[str, ...] = ()
    uname: tuple[tuple[str, str], ...] = ()

    def host_names(self, nodes: Iterable[str] = ()) -> HostNames:
        """Return each host's one name, the diagnosis's (`playbooks.hostnames`): the scheduler's `nodes`
        (the log's node list), else the shortest name an exporter gives it; and back to the TSDB's."""
        return host_names(self.hosts, nodes, self.uname)

    def series_count(self, spec: PanelSpec) -> int:
        scope = signal_info(spec.signal)["scope"]
        return {"gpu": self.gpu_series, "host": self.host_series}.get(scope, 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile.name,
            "start": self.start,
            "end": self.end,
            "interval": self.interval,
            "gpu_series": self.gpu_series,
            "host_series": self.host_series,
            "warmup_end": self.warmup_end,
            "unique": sorted(self.unique),
            "hosts": list(self.hosts),
            "axis": self.axis.to_dict(),
        }


#: The context's series counts: (name, the signal counted, its device labels in the profile's PromQL).
_COUNTED = (("gpus", "gpu_temp", "host, gpu"), ("hosts", "procs_running", "host"))


def _count_query(profile: Profile, signal: str, by: str) -> str | None:
    if not profile.has(signal):
        return None
    return f"count(group by ({by}) ({profile.expr(signal, window='5m')}))"


def _device_labels(profile: Profile, keys: Iterable[str]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Return {signal: (its raw selector, the exporter's labels naming one device)} of the signals whose
    band queries could skip the per-device aggregation (`_bare_ok`)."""
    out = {}
    for key in dict.fromkeys(keys):
        if _bare_ok(profile, key):
            sig = profile.signal(key)
            out[key] = (
                sig.selector,
                tuple(sig.host_from if n == "host" else sig.gpu_from for n in sig.labels),
            )
    return out


def _devices(label_sets: list[dict[str, str]], names: tuple[str, ...]) -> int:
    """Return how many devices (distinct values of the labels naming one) the label sets have: the lines a
    panel of one series per device draws over the range (a device whose exporter restarted under another
    instance is one)."""
    return len({tuple(labels.get(n, "") for n in names) for labels in label_sets})


def _is_unique(label_sets: list[dict[str, str]], names: tuple[str, ...]) -> bool:
    """Return True if no device has more than one series (a series replaced during the span, by a restarted
    exporter with other labels, is a second one): the raw selector is then the per-device value."""
    devices = Counter(tuple(labels.get(n, "") for n in names) for labels in label_sets)
    return bool(devices) and max(devices.values()) == 1


def _warmup_end(series: list[Series]) -> float | None:
    """Return when the learning rate first reached 99 % of its peak, if it started below half of it."""
    if not series or not series[0].values:
        return None
    t = np.asarray(series[0].timestamps)
    v = np.asarray(series[0].values)
    ok = np.isfinite(v)
    t, v = t[ok], v[ok]
    if len(v) < 3 or v.max() <= 0 or v[0] >= 0.5 * v.max():
        return None
    return float(t[int(np.argmax(v >= 0.99 * v.max()))])


def context_build(
    client: PrometheusClient, profile: Profile, start: float, end: float, *, max_concurrency: int = 4
) -> TimelineContext:
    """Return the shared context of a job's timeline over its data range [start, end] (in parallel).

    1. The step signal at the finest legal step: the step axis.
    2. Series counts of a GPU-scope and a host-scope signal: lines or band.
    3. Samples per 10 minutes of a host gauge: the scrape interval.
    4. The learning rate: the end of the warm-up.
    5. The label sets of each signal that could be read raw (index lookups): one series per device?
    6. The hosts as the diagnosis lists them, and node_uname_info's names of the addresses (an index
       lookup): each host's one name (`TimelineContext.host_names`).
    """
    if not end > start:
        raise TimelineError(f"the data range is empty ({start} .. {end})")
    fine = choose_step(start, end, min_step=1.0, max_points=5000)
    coarse = max((end - start) / 8, 1.0)
    calls: list[Callable[[], Any]] = []
    names: list[str] = []

    def add(name: str, call: Callable[[], Any]) -> None:
        names.append(name)
        calls.append(call)

    if profile.has("step"):
        add("step", lambda: client.query_range(profile.expr("step"), start, end, fine))
    # Which signals have one series per device: the series API reads the index only (no sample is decoded,
    # where counting with present_over_time over the whole range was the context's costliest query).
    devices = _device_labels(profile, (s.signal for s in PANELS.values()))
    for name, signal, by in _COUNTED:
        # a signal read raw is counted from its series list below (the index): its count query decoded
        # every sample of the range (0.1 s of Prometheus's CPU at 1,024 GPUs) for the same devices
        q = None if signal in devices else _count_query(profile, signal, by)
        if q:
            add(name, partial(client.query_range, q, start, end, coarse))
    if profile.has("procs_running"):
        sel = profile.signal("procs_running").selector
        add("interval", lambda: client.query(f"max(count_over_time({sel}[10m]))", end))
    if profile.has("learning_rate"):
        add("lr", lambda: client.query_range(profile.expr("learning_rate"), start, end, fine))
    for key, (selector, _) in devices.items():
        add(f"unique:{key}", partial(client.series, [selector], start, end))
    # the diagnosis's own host list over its own window (`discover_source`), so that both name hosts alike
    add("host_list", partial(source_hosts, client, profile, f"{max(60, int(end - start) + 60)}s", end))
    add("uname", partial(client.series, ["node_uname_info"], start, end))
    results = dict(zip(names, client.run_parallel(calls, max_concurrency=max_concurrency), strict=True))
    # Without the step axis or the series counts every panel would be drawn wrongly (one line per GPU at
    # 1,024 GPUs): fail the whole timeline instead, with Prometheus's own reason.
    counts = {name: f"unique:{signal}" if signal in devices else name for name, signal, _ in _COUNTED}
    for name in ("step", *counts.values()):
        if isinstance(results.get(name), PrometheusError):
            raise results[name]
    ok = {k: v for k, v in results.items() if not isinstance(v, PrometheusError)}

    def peak(name: str) -> int:
        if counts[name] != name:  # the signal's series list: its devices over the range
            signal = counts[name].removeprefix("unique:")
            return _devices(ok.get(counts[name]) or [], devices[signal][1])
        series = ok.get(name) or []
        return int(max((max(s.values) for s in series if s.values), default=0))

    interval = 15.0
    samples = ok.get("interval")
    if samples and samples[0].value > 1:
        interval = max(1.0, round(600.0 / (samples[0].value - 1), 1))
    return TimelineContext(
        profile=profile,
        start=start,
        end=end,
        axis=step_axis_from_series(ok.get("step") or []),
        interval=interval,
        gpu_series=peak("gpus"),
        host_series=peak("hosts"),
        warmup_end=_warmup_end(ok.get("lr") or []),
        queries=len(calls),
        unique=frozenset(
            key for key, (_, names) in devices.items() if _is_unique(ok.get(f"unique:{key}") or [], names)
        ),
        hosts=tuple(sorted(ok.get("host_list") or ())),
        uname=tuple(
            sorted(
                {
                    (s["instance"], s["nodename"])
                    for s in ok.get("uname") or []
                    if s.get("instance") and s.get("nodename")
                }
            )
        ),
    )
