"""The generated log's writer: its lines by time (and, on k8s, by rank), and absl's line prefix."""

from __future__ import annotations

import datetime as dt

import numpy as np

from . import _log_trainers as _lt
from ._sim import Job


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC)


def _absl(sev: str, ts: float, tid: int, where: str, tz: float = 0.0) -> str:
    """absl's (glog's) line prefix, in the machine's local time: `tz` seconds east of UTC."""
    d = _utc(ts + tz)
    return f"{sev}{d:%m%d %H:%M:%S}.{d.microsecond:06d} {tid} {where}] "


class _Writer:
    def __init__(self, job: Job, rng: np.random.Generator):
        self.job = job
        self.rng = rng
        self.k8s = job.job_id.startswith("k8s-")
        self.width = len(str(job.nodes - 1))
        self.events: list[tuple[float, int, str]] = []  # (time, seq, line)
        self.rank_events: dict[int, list[tuple[float, int, str]]] = {}
        self.seq = 0
        self.absl = bool(rng.random() < 0.7)
        self.fmt = job.log_format  # "" the seed's grammar, else one of _log_trainers.LOG_FORMATS
        self.tz = _lt.local_tz(self.fmt)  # the machines' zone, seconds east of UTC: their local stamps'
        self.pids = [int(x) for x in rng.integers(20_000, 90_000, job.nodes)]
        ex = job.exporters  # the trainer's log habits (None: the seed system's, every step and no end line)
        self.every = ex.log_every if ex is not None else 1  # a step line every this many steps
        self.trainer_end = ex.trainer_end if ex is not None else ""  # "", "ray-train" or "absl"

    def lab(self, rank: int | None) -> str:
        if rank is None or self.k8s:
            return ""
        return f"{rank:>{self.width}}: "

    def add(self, ts: float, line: str, rank: int | None = None) -> None:
        self.seq += 1
        if _lt.kubectl(self.fmt):  # every pod's lines in one log, behind kubectl's prefix
            self.events.append((ts, self.seq, _lt.pod_prefix(self.job.job_id, rank or 0, ts) + line))
            return
        if self.k8s and rank not in (None, 0):
            self.rank_events.setdefault(rank, []).append((ts, self.seq, line))
            return  # the primary k8s log holds rank 0 only
        self.events.append((ts, self.seq, self.lab(rank) + line))

    def all_ranks(self, ts: float, line: str, jitter: float = 0.0) -> None:
        for r in range(self.job.nodes):
            self.add(ts + (self.rng.random() * jitter if jitter else 0.0), line, r)

    def ray(self, rank: int) -> str:
        return f"(MaxTextTrainerActor pid={self.pids[rank]}) "
