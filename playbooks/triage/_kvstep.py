"""Step lines in any trainer's own words: a step number and a loss as key-value pairs (#10).

Trainers the triage has no grammar for still print the same facts: `step 120/900 | loss 2.48 | 4.71 s/step`
(a torchrun script), `Step 120: loss=2.48 step_time=4.7s` (an Accelerate script), Ray Train's reported dict
`{'step': 120, 'loss': 2.48, 'step_time_s': 4.7, 'timestamp': 1767391005}`. A line is a step line when it
names a step number and a training loss (not an evaluation's, not a checkpoint's step): its duration is a
`step_time` or a rate in seconds a step (or an iteration), its time the line's own stamp or, undated, a Unix
time the dict carries."""

from __future__ import annotations

import re

__all__ = ["KvStep", "read_kv_step"]

_NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"
_Q = r"['\"]?"
_STEP = re.compile(
    r"(?<![\w./-])" + _Q + r"(?:global[_ ])?step" + _Q + r"\s*(?:[=:]\s*|\s+)(\d+)(?:\s*/\s*(\d+))?\b", re.I
)
_LOSS = re.compile(
    r"(?<![\w./-])" + _Q + r"(?:train[_ ])?loss" + _Q + r"\s*(?:[=:]\s*|\s+)(" + _NUM + r")\b", re.I
)
_TIME = re.compile(
    r"(?<![\w.])" + _Q + r"step[_ ]time(?:_s)?" + _Q + r"\s*[=:]\s*([0-9.]+)\s*(ms|s)?\b"
    r"|(?<![\w.])([0-9.]+)\s*s/(?:step|it)\b",
    re.I,
)
_EPOCH = re.compile(_Q + r"(?:timestamp|time|ts)" + _Q + r"\s*[=:]\s*(1[5-9]\d{8}(?:\.\d+)?)\b")
#: words that make a line with a step and a loss something else than a training step
_NOT_TRAINING = re.compile(r"eval|valid|\bval\b|\btest\b|checkpoint|saving|saved", re.I)

KvStep = tuple[int, int | None, float | None, float, float | None]


def read_kv_step(msg: str) -> KvStep | None:
    """Return (step, total steps or None, seconds a step or None, loss, Unix time the line carries or None)
    of a step line written as key-value pairs, or None."""
    s = _STEP.search(msg)
    if s is None or _NOT_TRAINING.search(msg):
        return None
    loss = _LOSS.search(msg, s.end()) or _LOSS.search(msg)
    if loss is None:
        return None
    t = _TIME.search(msg)
    secs = None
    if t and t.group(1):
        secs = float(t.group(1)) / (1000.0 if (t.group(2) or "").lower() == "ms" else 1.0)
    elif t and t.group(3):
        secs = float(t.group(3))
    e = _EPOCH.search(msg)
    total = int(s.group(2)) if s.group(2) else None
    return int(s.group(1)), total, secs, float(loss.group(1)), float(e.group(1)) if e else None
