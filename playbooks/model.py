"""Declarative playbooks as frozen dataclasses (built by `playbooks.loader` from `definitions/*.toml`).

A playbook is data: when it applies (trigger), where it looks (window), what it asks Prometheus (queries,
written against a metric profile's semantic signals) and how it reads the answers (rules, each naming one
of the detectors registered in `playbooks.detectors.DETECTORS` with its parameters; they build on the
array statistics of `playbooks.anomaly`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")

__all__ = [
    "CLASSES",
    "FAMILIES",
    "SEVERITIES",
    "Playbook",
    "QuerySpec",
    "RuleSpec",
    "WindowRule",
]

#: The contract's CLASS vocabulary.
CLASSES = (
    "healthy",
    "collective-hang",
    "network-hang",
    "node-death",
    "heartbeat-false-positive",
    "host-oom",
    "thermal-straggler",
    "rdma-degradation",
    "restore-resource-leak",
    "monitoring-ghost-data",
    "gpu-driver-fault",
    "gpu-hardware-fault",
    "training-instability",
)
#: The contract's FAMILY vocabulary.
FAMILIES = (
    "none",
    "collective",
    "network-rdma",
    "node",
    "heartbeat",
    "host-memory",
    "thermal",
    "cpu-contention",
    "monitoring",
    "gpu-driver",
    "gpu-hardware",
    "training",
)
SEVERITIES = ("info", "warning", "critical")
#: Roles of a rule's findings in the causal chain.
ROLES = ("cause", "symptom", "context")


@dataclass(frozen=True)
class WindowRule:
    """Where a playbook's rules look.

    Attributes:
        anchor: "job" (the whole data range), "crash" (the crash time from triage, else the end of
            training) or "stall" (when the step counter stopped, else the end of training).
        before: seconds before the anchor (None: from the start of the data).
        after: seconds after the anchor (None: to the end of the data).
    """

    anchor: str = "job"
    before: float | None = None
    after: float | None = None


@dataclass(frozen=True)
class QuerySpec:
    """One PromQL query of a playbook, written against profile signals.

    Attributes:
        name: result key; a name used by several playbooks must mean the same query everywhere.
        signal: the profile signal it reads ("gpu_power"); "" when `promql` is a template.
        promql: a template with `{signal}` placeholders (each replaced by the signal's normalised
            expression) and `{window}`; "" when `signal` is used.
        fn: function applied to the signal (rate/increase for counters, *_over_time for gauges).
        window: range of `fn`: a Prometheus duration, "auto" (4 scrape intervals, at least one step and
            one scrape, so that consecutive windows share a scrape), "job" (the whole window) or "step"
            (exactly one grid step: the samples since the previous point, whether a point's value is fresh).
        by: output labels (default: the signal's scope).
        agg: aggregation across the series of one output label set (default: the signal's own).
        kind: "range" or "instant" (evaluated at the end of the window over `window`).
        resolution: "fine" (the diagnosis grid) or "coarse" (about 120 points: per-GPU queries).
        post: PromQL appended to the expression (a filter such as "> 0").
        description: what it shows, for people.
        peers: "up" or "down" for a per-GPU series judged against its peers: on a large job Prometheus returns
            the pack (its median at each step, its robust spread, its size) and only the GPUs that could stand
            out in that direction (`playbooks._diagnose_peers`), not one series per GPU; "" for the plain series.
        log_hosts: "xid" for a query only the log's events need: it runs over the hosts the job's log reports
            a hardware Xid on, and not at all when it reports none; "" for every host.
        at_least: for a per-GPU gauge whose readers only ask whether each GPU stands at or above this value
            (the busy-wait's sets of spinning GPUs): Prometheus returns one series per host whose bits say
            which of its GPUs report and which stand at or above it (`playbooks._diagnose_bits`), not one
            series per GPU; the grid reads back one row per GPU (this value, 0, or missing). None: the values.
    """

    name: str
    signal: str = ""
    promql: str = ""
    fn: str = ""
    window: str = "auto"
    by: tuple[str, ...] | None = None
    agg: str = ""
    kind: str = "range"
    resolution: str = "fine"
    post: str = ""
    description: str = ""
    peers: str = ""
    log_hosts: str = ""
    at_least: float | None = None

    @property
    def signals(self) -> tuple[str, ...]:
        """Return the profile signals this query needs."""
        if self.signal:
            return (self.signal,)
        return tuple(
            s for s in dict.fromkeys(_PLACEHOLDER.findall(self.promql)) if s not in ("window", "step")
        )


@dataclass(frozen=True)
class RuleSpec:
    """One interpretation rule: a detector applied to query results, producing findings.

    Attributes:
        id: stable id, unique within the playbook ("rdma_retransmits_sustained").
        detector: a name of `playbooks.detectors.DETECTORS` (its queries and params are checked there).
        queries: the query names it reads, in the detector's order.
        klass: the CLASS its findings support.
        severity: severity of its findings.
        role: "cause" (a root-cause candidate), "symptom" (an effect) or "context" (health facts).
        title: finding title; `{hosts}`, `{n}` are filled in.
        meaning: interpretation written into the evidence rows.
        params: detector parameters.
    """

    id: str
    detector: str
    queries: tuple[str, ...]
    klass: str
    severity: str
    role: str
    title: str
    meaning: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Playbook:
    """A declarative playbook.

    Attributes:
        name: identifier ("hang").
        title: for people.
        trigger: triage classes that call for it; ("always",) for the always-on playbooks.
        window: where its rules look.
        queries: its queries.
        rules: its interpretation table.
        description: what it is for.
    """

    name: str
    title: str
    trigger: tuple[str, ...]
    window: WindowRule
    queries: tuple[QuerySpec, ...]
    rules: tuple[RuleSpec, ...]
    description: str = ""

    @property
    def always(self) -> bool:
        return "always" in self.trigger

    def query(self, name: str) -> QuerySpec:
        for q in self.queries:
            if q.name == name:
                return q
        raise KeyError(name)
