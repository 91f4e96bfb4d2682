"""The triage result: its record types, the class vocabulary in priority order, the limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from playbooks.errors import PlaybooksError

MAX_LINE = 64 * 1024  # longer lines are cut (runaway binary logs)
MAX_MATCHES_PER_CLASS = 50  # a log with 100k NCCL warnings still gives a readable answer


class TriageError(PlaybooksError):
    """The log could not be opened at all (missing, a directory, permission denied)."""


# Priority order of the seed triage table (§3.2): first match = primary.
CLASS_ORDER: tuple[str, ...] = (
    # 1. infrastructure
    "prolog-kill-no-log",
    "container-pull-fail",
    "container-load-fail",
    "no-gpu",
    "nccl-nic-fail",
    "port-fail",
    "model-not-found",
    "patch-branch-fail",
    "ray-start-fail",
    # 2. stage timeouts
    "preflight-timeout",
    "pull-timeout",
    "ecc-timeout",
    "train-timeout",
    # 3. training
    "hang",
    "heartbeat-timeout",
    "oom-host",
    "oom-gpu",
    "nccl-timeout",
    "xla-compile-fail",
    "python-exception",
    "signal-kill",
    "subprocess-fail",
    "actor-fail",
    "checkpoint-fs-error",
    "gpu-hw-error",
    # 4. performance
    "tgs-degradation",
    # 5. job level
    "cancelled",
    "node-fail",
    "unknown-death",
    "stage-fail",
    "soft-success",
)

_RANK = {c: i for i, c in enumerate(CLASS_ORDER)}


@dataclass(frozen=True)
class Match:
    """One failure-signature hit.

    Attributes:
        klass: triage class name.
        line: 1-based line number in the log (0 for computed classes).
        text: the line, labels and ANSI codes stripped, cut to 500 characters.
    """

    klass: str
    line: int
    text: str


@dataclass
class Triage:
    """The result of triaging one log; `to_dict()` gives the contract's JSON.

    Attributes:
        job_id, status, triage_class, first_step, last_step, crash_time: the contract's `job` object.
        matches: all signature hits, primary class first.
        progress: the contract's progress figures.
        config: header keys, PASSTHROUGH_ARGS items and `Config param` values.
        nodes: expanded node list (NODE_RANK order).
        head, port, tunnel: where the job's Prometheus lives.
        heartbeat_accused: hosts named by a heartbeat timeout.
        unreadable: what could not be read, in words.
        details: further figures (training vs wall time, TGS, expected step now, ...).
    """

    job_id: str | None = None
    status: str | None = None
    triage_class: str | None = None
    first_step: int | None = None
    last_step: int | None = None
    crash_time: float | None = None
    matches: list[Match] = field(default_factory=list)
    progress: dict[str, Any] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)
    head: str | None = None
    port: int | None = None
    tunnel: str | None = None
    heartbeat_accused: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def classes(self) -> list[str]:
        seen: list[str] = []
        for m in self.matches:
            if m.klass not in seen:
                seen.append(m.klass)
        return seen

    def to_dict(self) -> dict[str, Any]:
        """Return the contract's triage JSON object (plus `details`)."""
        return {
            "job": {
                "id": self.job_id,
                "status": self.status,
                "triage_class": self.triage_class,
                "first_step": self.first_step,
                "last_step": self.last_step,
                "crash_time": self.crash_time,
            },
            "matches": [{"class": m.klass, "line": m.line, "text": m.text} for m in self.matches],
            "progress": {
                k: self.progress.get(k)
                for k in (
                    "steps_total",
                    "restored_from",
                    "step_time_s",
                    "last_step_time",
                    "lost_steps",
                    "last_checkpoint_step",
                    "tgs_trend_pct",
                )
            },
            "config": dict(self.config),
            "nodes": list(self.nodes),
            "prometheus": {"head": self.head, "port": self.port, "tunnel": self.tunnel},
            "heartbeat_accused": list(self.heartbeat_accused),
            "unreadable": list(self.unreadable),
            "details": dict(self.details),
        }
