"""The comparison's windows: which training steps every job's TSDB holds, and each job's time window over them.

Steps are aligned by the logs (their first and last completed steps), but a TSDB may hold only part of its
job (a Prometheus started late, a retention that dropped the start, a log of an earlier attempt): only the
steps each TSDB has data for can be compared. A job's data steps are its step gauge's, else the log's steps
timed within the TSDB's range. Used by `playbooks.compare`.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from typing import Any

from ._compare_figures import WARMUP_STEPS, Job, step_range

__all__ = ["Note", "set_windows"]

#: (title, evidence) of an info finding about what could be compared
Note = tuple[str, list[dict[str, Any]]]


def _utc(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def data_steps(job: Job) -> tuple[int, int] | None:
    """Return the first and last step the job's TSDB has data for, None when no known step falls in it."""
    t0, t1 = job.time_range
    inside = [s for t, s in zip(job.step_t, job.step_v, strict=True) if t0 <= t <= t1]
    return (int(min(inside)), int(max(inside))) if inside else None


def _ranges_evidence(
    js: Sequence[Job], logs: Sequence[tuple[int, int]], held: Sequence[Any]
) -> list[dict[str, Any]]:
    out = []
    for j, (a, b), h in zip(js, logs, held, strict=True):
        data = f"steps {h[0]}-{h[1]}" if h else "no step of its log"
        out.append(
            {
                "query": "",
                "labels": {"job": j.label},
                "value": f"log steps {a}-{b}; TSDB {data}",
                "interpretation": f"{j.label}'s TSDB holds {_utc(j.time_range[0])} to {_utc(j.time_range[1])}",
            }
        )
    return out


def _usable(log: tuple[int, int], held: tuple[int, int] | None) -> tuple[int, int] | None:
    """Return the steps of a job both its log and its TSDB know, else the TSDB's own (a log of other steps)."""
    if held is None:
        return None
    lo, hi = max(log[0], held[0]), min(log[1], held[1])
    return (lo, hi) if lo <= hi else held


def set_windows(js: Sequence[Job]) -> tuple[list[int] | None, float, float, list[Note]]:
    """Set each job's steady time window over the steps every TSDB holds; return the overlap, its steady
    steps and what the findings should say about it.

    The overlap is that of the steps each job's log and TSDB both know. When the TSDBs share no step (or a
    TSDB holds none of its log's steps and has no step gauge), each job's whole data is compared and a
    note gives every job's log steps and data range.
    """
    logs = [step_range(j) for j in js]
    held = [data_steps(j) for j in js]
    usable = [_usable(r, h) for r, h in zip(logs, held, strict=True)]
    notes: list[Note] = []
    log_lo, log_hi = max(r[0] for r in logs), min(r[1] for r in logs)
    for j, r, h in zip(js, logs, held, strict=True):
        if h is None or h[1] < r[0] or h[0] > r[1]:
            notes.append(
                (
                    f"{j.label}: no overlap between its log's steps {r[0]}-{r[1]} and its TSDB's data "
                    f"({_utc(j.time_range[0])} to {_utc(j.time_range[1])}"
                    + (f", steps {h[0]}-{h[1]})" if h else ")"),
                    _ranges_evidence([j], [r], [h]),
                )
            )
    known = [u for u in usable if u is not None]
    lo, hi = (max(u[0] for u in known), min(u[1] for u in known)) if len(known) == len(js) else (1, 0)
    if lo > hi:
        ranges = ", ".join(
            f"{j.label}: " + (f"steps {h[0]}-{h[1]}" if h else "no step")
            for j, h in zip(js, held, strict=True)
        )
        notes.append(
            (
                f"No step has data in every job's TSDB ({ranges}): each job's whole data is compared",
                _ranges_evidence(js, logs, held),
            )
        )
        for j, u in zip(js, usable, strict=True):
            j.window, j.aligned = j.time_range, u is not None
        return None, -math.inf, math.inf, notes
    dropped = max(lo - log_lo, log_hi - hi)
    if dropped > max(WARMUP_STEPS, 0.1 * (log_hi - log_lo)) and not notes:
        notes.append(
            (
                f"Steps {lo}-{hi} compared: the logs overlap on steps {log_lo}-{log_hi}, "
                "but not every TSDB holds them all",
                _ranges_evidence(js, logs, held),
            )
        )
    span = hi - lo
    warm = WARMUP_STEPS if span >= 5 * WARMUP_STEPS else max(1, span // 5)
    lo_s, hi_s = lo + warm, hi
    for j in js:
        a, b = j.time_of(lo_s), j.time_of(hi_s)
        j.window = (a if a is not None else j.time_range[0], b if b is not None else j.time_range[1])
        j.window = (max(j.window[0], j.time_range[0]), min(j.window[1], j.time_range[1]))
        if j.window[1] <= j.window[0]:
            j.window = j.time_range
    return [lo, hi], lo_s, hi_s, notes
