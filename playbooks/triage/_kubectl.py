"""`kubectl logs --prefix --timestamps`: the pods' lines, each ``[pod/NAME/CONTAINER] 2026-06-02T02:33:11.957133056Z
<line>`` (RFC 3339 in UTC, nanoseconds). A pod's first line ``NODE_NAME=r19n01 POD_NAME=... NODE_RANK=0`` names
its node and node rank: the pod's lines are read as that node rank's (as srun's label is), so the events and
accusations in them land on its host, and the pods' hosts in rank order are the job's nodes."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

_POD = re.compile(r"^\[pod/([^/\]\s]+)/[^\]\s]*\] (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d) ")
_POD_ENV = re.compile(r"\bNODE_NAME=(\S+)(?=.*\bNODE_RANK=(\d+))")


@dataclass
class Pods:
    """The pods a kubectl log holds.

    Attributes:
        rank: pod name -> node rank (its NODE_RANK line); host: node rank -> host (its NODE_NAME).
    """

    rank: dict[str, int] = field(default_factory=dict)
    host: dict[int, str] = field(default_factory=dict)


def pod_line(pods: Pods, raw: str) -> tuple[int | None, float | None, str, bool] | None:
    """Return (node rank of the line's pod, its UTC time, the pod's own line, whether it was the pod's
    NODE_NAME line) for a kubectl-prefixed line, else None."""
    m = _POD.match(raw)
    if m is None:
        return None
    pod, rest = m.group(1), raw[m.end() :]
    frac = (m.group(3) or "")[:7]  # microseconds: Python reads no nanoseconds
    zone = "+00:00" if m.group(4) == "Z" else m.group(4)
    try:
        ts: float | None = dt.datetime.fromisoformat(m.group(2) + frac + zone).timestamp()
    except ValueError:
        ts = None
    env = _POD_ENV.search(rest) if "NODE_NAME=" in rest else None
    if env:
        rank = int(env.group(2))
        pods.rank.setdefault(pod, rank)
        pods.host.setdefault(rank, env.group(1))
    return pods.rank.get(pod), ts, rest, env is not None


def pod_nodes(pods: Pods) -> list[str]:
    """Return the pods' hosts in node-rank order (none unless the ranks are 0..n-1)."""
    ranks = sorted(pods.host)
    return [pods.host[r] for r in ranks] if ranks == list(range(len(ranks))) else []
