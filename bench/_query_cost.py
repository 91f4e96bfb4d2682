"""What each diagnosis query costs Prometheus: a recording client, and a replay of every distinct query one at
a time with the server's CPU read from /proc around it (CPU time, unlike wall time, hardly depends on what
else the machine runs).

Used by `diagnosis_speed.py --query-costs` and `diagnosis_scale.py`; run as scripts, so `bench/` is on the import path.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from playbooks.prometheus import PrometheusClient


def process_cpu(pid: int) -> float:
    """Return the CPU time (user + system, seconds) a process has used so far, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Recording(PrometheusClient):
    """A client that records every query: (wall seconds, series returned, kind, PromQL, start, end, step)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.log: list[tuple[float, int, str, str, float, float, float | None]] = []

    def query_range(self, promql, start, end, step=None):
        t0 = time.perf_counter()
        out = super().query_range(promql, start, end, step)
        self.log.append((time.perf_counter() - t0, len(out), "range", promql, start, end, step))
        return out

    def query(self, promql, at=None):
        t0 = time.perf_counter()
        out = super().query(promql, at)
        self.log.append((time.perf_counter() - t0, len(out), "instant", promql, at or 0.0, at or 0.0, None))
        return out


def replay_costs(client: Recording, pid: int) -> list[tuple[float, float, int, str]]:
    """Run each distinct recorded query again, one at a time; return (Prometheus CPU s, wall s, series, PromQL)
    per query, costliest first. The first replay warms nothing the diagnosis did not already warm."""
    seen: dict[tuple[Any, ...], None] = {}
    for _, _, kind, promql, start, end, step in client.log:
        seen.setdefault((kind, promql, start, end, step), None)
    plain = PrometheusClient(client.base_url, timeout=600.0, retries=0)
    out = []
    with plain:
        for kind, promql, start, end, step in seen:
            cpu0, t0 = process_cpu(pid), time.perf_counter()
            res = (
                plain.query(promql, at=start)
                if kind == "instant"
                else plain.query_range(promql, start, end, step)
            )
            wall, cpu = time.perf_counter() - t0, process_cpu(pid) - cpu0
            out.append((cpu, wall, len(res), promql))
    return sorted(out, reverse=True)


def print_costs(costs: list[tuple[float, float, int, str]], *, gpus: int, top: int = 12) -> None:
    """Print the replay's total and its costliest queries (a query returning one series per GPU is flagged)."""
    print(
        f"{len(costs)} distinct queries one at a time: Prometheus CPU {sum(c[0] for c in costs):.2f} s, "
        f"wall {sum(c[1] for c in costs):.2f} s; load {os.getloadavg()[0]:.1f}"
    )
    print("costliest: Prometheus CPU s, wall s, series, PromQL")
    for cpu, wall, series, promql in costs[:top]:
        flag = "  <- one series per GPU" if series >= gpus > 16 else ""
        print(f"  {cpu:6.2f} {wall:6.2f} {series:>6}  {promql[:150]}{flag}")
    per_gpu = [c for c in costs if c[2] >= gpus > 16]
    print(f"queries returning one series per GPU: {len(per_gpu)} of {len(costs)}")
    for _, _, series, promql in per_gpu:
        print(f"  {series:>6}  {promql[:200]}")
