"""Which GPUs of each node the job holds, as its log prints them (`env | grep`, a launcher's banner).

Schedulers tell a job its GPUs through the environment: Slurm's `SLURM_STEP_GPUS` / `SLURM_JOB_GPUS` (the
node's own indices) and `CUDA_VISIBLE_DEVICES` / `GPU_DEVICE_ORDINAL`, Kubernetes' NVIDIA runtime
`NVIDIA_VISIBLE_DEVICES`, ROCm's `ROCR_VISIBLE_DEVICES` / `HIP_VISIBLE_DEVICES`. A line that names a host
(`gpu-101: CUDA_VISIBLE_DEVICES=2,4,5,7`) tells that host's; one that names none, every host's (one
process a GPU prints one index each: their union is the node's). Only indices are read: a list of UUIDs
(`GPU-8f1c...`, `MIG-...`), `all` or `none` cannot be placed on the exporter's `gpu` label.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GpuEnv", "gpus_env_line", "gpus_env_result"]

#: The variables read, most trusted first: the scheduler's own indices of the node come before the
#: process's view, which a container or a cgroup may number from 0 whatever the node's indices.
VARIABLES = (
    "SLURM_STEP_GPUS",
    "SLURM_JOB_GPUS",
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
)
_LINE = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(VARIABLES) + r")\s*[=:]\s*['\"]?([^\s'\";)]*)")
_INDICES = re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*")
_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*")
_NOT_HOST = ("rank", "task", "worker", "local", "proc", "pid", "gpu_", "cuda")
#: no node holds more GPUs than this: a larger index is no GPU index
MAX_INDEX = 255


#: lines kept (a launcher printing one line per process on 8,192 GPUs gives that many)
MAX_LINES = 20_000


@dataclass
class GpuEnv:
    """The GPU indices the log gave.

    Attributes:
        lines: (variable, the words before it that could name a host (last first), indices) of each line.
    """

    lines: list[tuple[str, tuple[str, ...], frozenset[int]]] = field(default_factory=list)


def gpus_env_line(env: GpuEnv, msg: str) -> None:
    """Record the GPU indices a log line gives (the line's rank label and stamp already removed)."""
    for m in _LINE.finditer(msg):
        idx = _indices(m.group(2))
        if idx is not None and len(env.lines) < MAX_LINES:
            env.lines.append((m.group(1), _host_tokens(msg[: m.start()]), frozenset(idx)))


def gpus_env_result(env: GpuEnv, nodes: Sequence[str]) -> dict[str, Any] | None:
    """Return the job's GPUs as the triage reports them (`details.job_gpus`), or None when the log gives
    none: {"source": the variable read, "all": indices on every host or None, "hosts": {host: indices}}.

    The most trusted variable the log gives is read. A line names the host of the last word before the
    variable that is one of the job's `nodes` (when the log lists them; else the last word that reads as a
    host name), and every host when none is.
    """
    for var in VARIABLES:
        every: set[int] = set()
        hosts: dict[str, set[int]] = {}
        for v, tokens, idx in env.lines:
            if v != var:
                continue
            host = (
                next((t for t in tokens if _in_nodes(t, nodes)), None) if nodes else next(iter(tokens), None)
            )
            if host is None:
                every |= idx
            else:
                hosts.setdefault(host, set()).update(idx)
        if every or hosts:
            return {
                "source": var,
                "all": sorted(every) if every else None,
                "hosts": {h: sorted(x) for h, x in sorted(hosts.items())},
            }
    return None


def _indices(value: str) -> set[int] | None:
    """Return the indices of a list such as `0,1,2,3` or `0-3,6`, or None (UUIDs, `all`, `none`, empty)."""
    if not _INDICES.fullmatch(value):
        return None
    out: set[int] = set()
    for part in value.split(","):
        a, _, b = part.partition("-")
        lo, hi = int(a), int(b or a)
        if hi < lo or hi > MAX_INDEX:
            return None
        out.update(range(lo, hi + 1))
    return out


def _host_tokens(prefix: str) -> tuple[str, ...]:
    """Return the words of a line's text before the variable that could name a host, last first: those
    with a digit that read as a host name (`gpu-101: `, `[node7] `, `host=dgx-a-12 `)."""
    out = []
    for tok in reversed(_TOKEN.findall(prefix)):
        low = tok.lower()
        if any(c.isdigit() for c in tok) and not low.startswith(_NOT_HOST) and not low.endswith(".py"):
            out.append(tok)
    return tuple(out)


def _in_nodes(token: str, nodes: Sequence[str]) -> bool:
    return any(n == token or n.startswith(token + ".") or token.startswith(n + ".") for n in nodes)
