"""Vertical marks on every panel: checkpoints, warm-up end, restores, crash, hang start, heartbeat stop
and each finding's onset."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .context import TimelineContext

MAX_CHECKPOINT_MARKS = 60
MAX_CHECKPOINT_LABELS = 10


@dataclass(frozen=True)
class Annotation:
    """A vertical mark on every panel.

    Attributes:
        kind: checkpoint, warmup-end, restore, crash, hang-start, heartbeat-stop or finding.
        label: short text.
        time: unix seconds, or None when only the step is known.
        step: the training step, or None when only the time is known.
        finding_id: the finding's id, for kind "finding".
        hosts: hosts the finding names.
    """

    kind: str
    label: str
    time: float | None = None
    step: float | None = None
    finding_id: int | None = None
    hosts: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "label": self.label,
            "time": self.time,
            "step": self.step,
            "finding_id": self.finding_id,
            "hosts": list(self.hosts),
        }


def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _clip(text: str, size: int) -> str:
    """Return text cut to size characters, an ellipsis saying where it was cut (a label, not the whole title)."""
    return text if len(text) <= size else text[: size - 1].rstrip() + "…"


def annotations_build(
    ctx: TimelineContext,
    triage: Mapping[str, Any] | None = None,
    findings: Iterable[Mapping[str, Any]] = (),
) -> list[Annotation]:
    """Return the marks of a job: from the triage JSON (contract shape), the step axis and findings.

    findings: mappings with id, title, onset (unix s), hosts.
    """
    triage = triage or {}
    job = triage.get("job") or {}
    config = triage.get("config") or {}
    progress = triage.get("progress") or {}
    details = triage.get("details") or {}
    classes = {m.get("class") for m in triage.get("matches") or ()} | {job.get("triage_class")}
    axis = ctx.axis
    marks: list[Annotation] = []

    period = _num(config.get("checkpoint_period"))
    enabled = str(config.get("enable_checkpointing", "true")).lower() not in ("false", "0", "")
    if period and period > 0 and enabled and not axis.empty:
        first = math.ceil(axis.first_step / period) * period
        steps = np.arange(first, axis.last_step + 1, period)
        if 0 < len(steps) <= MAX_CHECKPOINT_MARKS:
            times = np.atleast_1d(axis.time_at(steps))
            # Every checkpoint gets its line; with many, only every n-th its label, so labels stay legible.
            every = max(1, math.ceil(len(steps) / MAX_CHECKPOINT_LABELS))
            for i, (s, t) in enumerate(zip(steps, times, strict=True)):
                label = f"ckpt {int(s)}" if i % every == 0 else ""
                marks.append(Annotation("checkpoint", label, _num(t), float(s)))
    if ctx.warmup_end is not None:
        marks.append(
            Annotation("warmup-end", "warm-up end", ctx.warmup_end, _num(axis.step_at(ctx.warmup_end)))
        )
    restored_from = _num(progress.get("restored_from"))
    if restored_from is not None and not axis.empty:
        marks.append(
            Annotation("restore", f"restored from {int(restored_from)}", axis.start, axis.first_step)
        )
    for r in axis.restores:
        marks.append(Annotation("restore", f"restore {int(r.from_step)}→{int(r.to_step)}", r.time, r.to_step))
    crash = _num(job.get("crash_time"))
    if crash is not None:
        marks.append(Annotation("crash", "crash", crash, _num(axis.step_at(crash))))
    stall = _num(details.get("stall_after_last_step_s"))
    step_time = _num(progress.get("step_time_s")) or 0.0
    hung = (
        "hang" in classes
        or job.get("status") == "hanging"
        or (stall is not None and stall > max(5 * step_time, 600.0))
    )
    if hung and not axis.empty:
        t = axis.last_advance()
        marks.append(Annotation("hang-start", f"hang (step {int(axis.last_step)})", t, axis.last_step))
    timeout = _num(config.get("jax_distributed_heartbeat_timeout_seconds"))
    if "heartbeat-timeout" in classes and crash is not None and timeout:
        t = crash - timeout
        marks.append(Annotation("heartbeat-stop", "heartbeats stop", t, _num(axis.step_at(t))))
    for f in findings:
        onset = _num(f.get("onset"))
        if onset is None:
            continue
        marks.append(
            Annotation(
                "finding",
                _clip(str(f.get("title") or "finding"), 40),
                onset,
                _num(axis.step_at(onset)),
                finding_id=f.get("id"),
                hosts=tuple(f.get("hosts") or ()),
            )
        )
    return marks
