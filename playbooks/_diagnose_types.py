"""The diagnosis API's data: what a source holds, the planned queries, their outputs (JSON round-trip)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._diagnose_peers import PeerFollowUp
from ._diagnose_relabel import Relabel
from .errors import PlaybooksError

#: Points of the fine grid every range query shares, and of the coarse grid of per-GPU queries.
FINE_POINTS = 720
COARSE_POINTS = 120
#: Series x points one query may read on the fine grid (a query over more series gets a coarser step).
SERIES_POINTS = 1_000_000


class DiagnosisError(PlaybooksError):
    """The source cannot be diagnosed (no data, no known metric profile)."""


@dataclass(frozen=True)
class SourceInfo:
    """What the data source holds.

    Attributes:
        url: Prometheus base URL.
        profile: metric profile name ("amd", "nvidia").
        metric_names: every metric name in the TSDB.
        hosts: normalised host names.
        gpus_per_host: GPUs per host (the most common count), None when no GPU metric.
        time_range: (first, last) sample time, None when the TSDB is empty.
        gpu_model: GPU model name (a key of `playbooks.gpus.GPU_MODELS`) or None.
        interval: scrape interval in seconds (estimated).
    """

    url: str
    profile: str
    metric_names: tuple[str, ...]
    hosts: tuple[str, ...]
    gpus_per_host: int | None
    time_range: tuple[float, float] | None
    gpu_model: str | None = None
    interval: float = 15.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "profile": self.profile,
            "metric_names": list(self.metric_names),
            "hosts": list(self.hosts),
            "gpus_per_host": self.gpus_per_host,
            "time_range": list(self.time_range) if self.time_range else None,
            "gpu_model": self.gpu_model,
            "interval": self.interval,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SourceInfo:
        tr = d.get("time_range")
        return cls(
            url=d["url"],
            profile=d["profile"],
            metric_names=tuple(d.get("metric_names", ())),
            hosts=tuple(d.get("hosts", ())),
            gpus_per_host=d.get("gpus_per_host"),
            time_range=(float(tr[0]), float(tr[1])) if tr else None,
            gpu_model=d.get("gpu_model"),
            interval=float(d.get("interval", 15.0)),
        )


@dataclass(frozen=True)
class PlannedQuery:
    """One query to run.

    Attributes:
        name: result key (the playbook declaration's query name).
        promql: the rendered PromQL.
        kind: "instant" (evaluated at `end`) or "range".
        start, end: window (unix seconds).
        step: range step in seconds (None for instant queries).
        window_s: the range of the query's function in seconds (0 when none), for the detectors.
        relabel: how Stepwise names the answer's series (`promql` answers by the exporter's own labels), or
            None when `promql` names them itself.
        follow_up: how the query is asked in two, the second rendered from the first's answer (a peer query
            over many GPUs), or None: `promql` answers it alone, and names its answer (the evidence's query).
        gate: PromQL of an instant query at `end` whose empty answer means `promql`'s is empty too (the
            counters it reads did not move in any of its windows): `promql` is then not asked. "" for none.
    """

    name: str
    promql: str
    kind: str
    start: float
    end: float
    step: float | None
    window_s: float = 0.0
    relabel: Relabel | None = None
    follow_up: PeerFollowUp | None = None
    gate: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "promql": self.promql,
            "kind": self.kind,
            "start": self.start,
            "end": self.end,
            "step": self.step,
            "window_s": self.window_s,
            "relabel": self.relabel.to_dict() if self.relabel else None,
            "follow_up": self.follow_up.to_dict() if self.follow_up else None,
            "gate": self.gate,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PlannedQuery:
        return cls(
            name=d["name"],
            promql=d["promql"],
            kind=d["kind"],
            start=float(d["start"]),
            end=float(d["end"]),
            step=None if d.get("step") is None else float(d["step"]),
            window_s=float(d.get("window_s", 0.0)),
            relabel=Relabel.from_dict(d["relabel"]) if d.get("relabel") else None,
            follow_up=PeerFollowUp.from_dict(d["follow_up"]) if d.get("follow_up") else None,
            gate=str(d.get("gate") or ""),
        )


@dataclass(frozen=True)
class PlaybookPlan:
    """A playbook ready to run.

    Attributes:
        name, title: the playbook's.
        queries: its queries, rendered for the source's profile (signals it lacks are left out).
        window: where its rules look (from the triage; refined from the data when deciding).
        unavailable: signals it wanted that the source lacks.
    """

    name: str
    title: str
    queries: tuple[PlannedQuery, ...]
    window: tuple[float, float]
    unavailable: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "queries": [q.to_dict() for q in self.queries],
            "window": list(self.window),
            "unavailable": list(self.unavailable),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PlaybookPlan:
        return cls(
            name=d["name"],
            title=d["title"],
            queries=tuple(PlannedQuery.from_dict(q) for q in d["queries"]),
            window=(float(d["window"][0]), float(d["window"][1])),
            unavailable=tuple(d.get("unavailable", ())),
        )


@dataclass
class PlaybookOutput:
    """What running one playbook's queries gave.

    Attributes:
        name: playbook name.
        results: query name -> {"kind", "promql", "window_s", and for range results "start", "step", "n",
            "series": [{"labels", "values" (null = no value)}], for instant ones "samples": [{"labels", "value"}]}.
        errors: query name -> error message (results are partial when not empty).
        prometheus_s: wall time during which at least one of its requests was in flight.
        queries: number of queries sent.
    """

    name: str
    results: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    prometheus_s: float = 0.0
    queries: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "results": self.results,
            "errors": self.errors,
            "prometheus_s": self.prometheus_s,
            "queries": self.queries,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PlaybookOutput:
        return cls(
            name=d["name"],
            results=dict(d.get("results", {})),
            errors=dict(d.get("errors", {})),
            prometheus_s=float(d.get("prometheus_s", 0.0)),
            queries=int(d.get("queries", 0)),
        )
