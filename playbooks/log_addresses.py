"""Name a GPU exporter known only by its address after the node the job's log places the same fault on (#10).

A DCGM exporter run with `--no-hostname` and scraped at its pod's IP carries no node name, and when no
host-identity series joins the address to a node, a GPU fault it reports names `192.168.244.202 GPU 2`: no
node an operator can drain. The job's log often names the node: NCCL's `dgx-r10-01:4125:4425 [2] NCCL WARN
Cuda failure 'uncorrectable ECC error encountered'`, or the kernel's Xid line. When exactly one node the log
places a hardware fault on, on the same GPU index within minutes of the address's own fault, has no GPU
series under its own name, the address is that node's exporter: the finding names the node, and says why.
Two real nodes are never merged: a node whose own name carries GPU series, or a claim two addresses share,
names nobody.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .context import Context, Finding
from .hostnames import is_ipv4

__all__ = ["name_addresses"]

#: the log's fault and the exporter's are the same event within this many seconds (a scrape, a retry)
WITHIN_S = 600.0
#: per-host GPU results of the node playbook, whichever this source answered
_GPU_GRIDS = ("gpu_samples", "power_by_host")


def name_addresses(ctx: Context, findings: list[Finding], events: Iterable[Mapping[str, Any]]) -> None:
    """Rename the address-only hosts of the GPU hardware findings after the node the log places them on."""
    with_gpus = _gpu_hosts(ctx)
    faults = [e for e in events if e.get("host") and e.get("gpu") is not None and e.get("time") is not None]
    if not faults or with_gpus is None:
        return
    claims: dict[str, str] = {}
    for f in findings:
        if f.klass != "gpu-hardware-fault" or f.onset is None:
            continue
        for addr in f.hosts:
            if not is_ipv4(addr) or addr not in with_gpus:
                continue
            nodes = {
                str(e["host"])
                for e in faults
                if str(e["gpu"]) in f.gpus
                and abs(float(e["time"]) - f.onset) <= WITHIN_S
                and not is_ipv4(str(e["host"]))
                and str(e["host"]) not in with_gpus
            }
            if len(nodes) == 1:
                claims.setdefault(addr, nodes.pop())
    named = {a: n for a, n in claims.items() if list(claims.values()).count(n) == 1}
    for f in findings:
        hits = {a: n for a, n in named.items() if a in f.hosts}
        if not hits:
            continue
        f.hosts = list(dict.fromkeys(hits.get(h, h) for h in f.hosts))
        f.extra["aliases"] = {**(f.extra.get("aliases") or {}), **hits}
        for addr, node in hits.items():
            f.title = f.title.replace(addr, node)
            f.evidence.append(_evidence(addr, node, f.gpus))


def _gpu_hosts(ctx: Context) -> set[str] | None:
    """Return the hosts with GPU series under their own name, or None when no per-host GPU result is there."""
    for name in _GPU_GRIDS:
        g = ctx.grid(name)
        if g is not None:
            return {str(lab.get("host", "")) for lab in g.labels}
    return None


def _evidence(addr: str, node: str, gpus: list[str]) -> dict[str, Any]:
    where = f"GPU {', '.join(gpus)}" if gpus else "a GPU"
    return {
        "query": "job log",
        "labels": {"host": addr},
        "value": node,
        "interpretation": (
            f"{addr} is {node}'s GPU exporter, scraped at an address no node name joins: the job's log places "
            f"the same fault on {node} {where} within minutes, and no GPU reports under {node}'s own name"
        ),
    }
