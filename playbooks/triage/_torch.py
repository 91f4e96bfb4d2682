"""PyTorch's NCCL watchdog and heartbeat-monitor lines, and the settings that time them.

As `torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp` prints them, each after its process group's log prefix
(`[PG ID 0 PG GUID 0(default_pg) Rank 5] `; `[Rank 5] ` in releases before that prefix):

- `WorkNCCL::checkTimeout`: ``Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9,
  OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600043 milliseconds before timing
  out.`` The rank waited for its peers that long: it is a victim of the stall, not its cause;
- `heartbeatMonitor`: ``Heartbeat monitor timed out! Process will be terminated after dumping debug info.
  workMetaList_.size()=1``, then (LOG(FATAL), std::abort: torchrun reports ``exitcode: -6``)
  ``ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued
  collectives. ...``. That rank's own watchdog thread stopped beating (a CUDA/NCCL call that never
  returned): the rank is accused by its own monitor, which kills it one heartbeat timeout later;
- the settings, as a job script exports or prints them: ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=600`` (the
  monitor's timeout: 8 minutes by default in current releases, 10 in older ones) and
  ``TORCH_NCCL_ENABLE_MONITORING=0`` (no monitor: no heartbeat kill).
"""

from __future__ import annotations

import re

__all__ = [
    "HEARTBEAT_SIGNS",
    "HEARTBEAT_TIMEOUT_DEFAULT_S",
    "heartbeat_line",
    "setting_line",
    "torchrun_rank",
    "watchdog_line",
]

#: TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC's default in current releases (`60 * 8`; `60 * 10` in older ones)
HEARTBEAT_TIMEOUT_DEFAULT_S = 480
#: substrings of the heartbeat monitor's two lines (the seed table's `heartbeat-timeout` signatures)
HEARTBEAT_SIGNS = ("Heartbeat monitor timed out!", "ProcessGroupNCCL's watchdog got stuck for ")

# the PG's log prefix: the rank is the global one in the default group (PG ID 0) only
_PREFIX = re.compile(r"\[PG ID (\d+) PG GUID [^\]]{0,200}? Rank (\d+)\] |\[Rank (\d+)\] ")
_WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\([^)]*?Timeout\(ms\)=(\d+)\)"
    r"(?: ran for (\d+) milliseconds)?"
)
_STUCK = re.compile(r"watchdog got stuck for (\d+) seconds")
_SETTING = re.compile(
    r"\b(TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC|TORCH_NCCL_ENABLE_MONITORING)\s*[=:]\s*['\"]?(\d+)\b"
)
# torchrun's per-rank `--tee` label (`[rank5]:`), the global rank of the process that printed the line
_TORCHRUN = re.compile(r"^\[rank(\d+)\]:")


def torchrun_rank(msg: str) -> int | None:
    """Return the global rank of torchrun's `[rankN]:` label that begins the line, else None."""
    m = _TORCHRUN.match(msg) if msg[:5] == "[rank" else None
    return int(m.group(1)) if m else None


def _rank(msg: str, label_rank: int | None) -> int | None:
    """Return the global rank a watchdog or monitor line is about: torchrun's label, else its prefix's rank in
    the default process group (a subgroup's rank is no global rank), else the legacy `[Rank N]`."""
    if label_rank is not None:
        return label_rank
    p = _PREFIX.search(msg)
    if p is None:
        return None
    if p.group(3) is not None:
        return int(p.group(3))
    return int(p.group(2)) if p.group(1) == "0" else None


def watchdog_line(
    msg: str, label_rank: int | None = None
) -> tuple[int | None, float | None, float | None] | None:
    """Return (global rank, collective timeout s, how long the collective ran s) of a watchdog timeout line,
    None for any other line. The timeout and duration are None when the line does not print them."""
    if "Watchdog caught collective operation timeout" not in msg:
        return None
    w = _WATCHDOG.search(msg)
    timeout = int(w.group(1)) / 1000.0 if w else None
    ran = int(w.group(2)) / 1000.0 if w and w.group(2) else None
    return _rank(msg, label_rank), timeout, ran


def heartbeat_line(msg: str, label_rank: int | None = None) -> tuple[int | None, int | None] | None:
    """Return (global rank, heartbeat timeout s) of one of the heartbeat monitor's lines (the timeout None on
    the first, which does not print it), None for any other line."""
    if not any(s in msg for s in HEARTBEAT_SIGNS):
        return None
    s = _STUCK.search(msg)
    return _rank(msg, label_rank), int(s.group(1)) if s else None


def setting_line(msg: str) -> tuple[str, str] | None:
    """Return (name, value) of a `TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC` / `TORCH_NCCL_ENABLE_MONITORING` setting the
    line shows (`export X=N`, `X=N`, `X: N`), else None."""
    if "TORCH_NCCL_" not in msg or any(s in msg for s in HEARTBEAT_SIGNS):
        return None  # the monitor's own exit message names both settings as advice (`..._MONITORING=0`)
    m = _SETTING.search(msg)
    return (m.group(1), m.group(2)) if m else None
