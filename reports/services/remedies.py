"""What to do next, by root-cause family (seed 002's interpretation tables, condensed): the one table of next
steps, which the report's "Recommended next steps" section and the investigation page's verdict both use.

Plain data and one function, so that the verdict (investigations.services.verdict) and the report's
autofill (which reads the verdict) can both import it.
"""

from __future__ import annotations

from typing import Any

#: What to do next, by root-cause family (seed 002's interpretation tables, condensed).
NEXT_STEPS: dict[str, list[str]] = {
    "collective": [
        "Restart from the last checkpoint; the hang had no hardware or network trigger.",
        "Collect RCCL/NCCL debug logs (`NCCL_DEBUG=INFO`) on the next run to catch the stuck collective.",
    ],
    "network-rdma": [
        "Drain the culprit hosts and check their RDMA links (cable, port, switch counters).",
        "Exclude hosts with retry exhaustion first, then those with sustained retransmits.",
    ],
    "node": [
        "Drain the dead host and open a hardware ticket (dmesg, BMC logs, Xid history).",
        "Restart the job from the last checkpoint without that host.",
    ],
    "heartbeat": [
        "Raise `jax_distributed_heartbeat_timeout_seconds`: the accused hosts were training.",
        "Check the coordinator's host for CPU or network stalls around the kill.",
    ],
    "host-memory": [
        "Lower host memory use during checkpoint saves (async save, fewer in-flight buffers).",
        "Restart from the last checkpoint; watch replica-0 hosts' memory during the next save.",
    ],
    "thermal": [
        "Check cooling of the hot GPU's host (fans, airflow, inlet temperature); drain it if it recurs.",
        "Compare the GPU's clock with its peers after the fix.",
    ],
    "cpu-contention": [
        "Find the extra processes the restore left behind (runnable count per host).",
        "Restart fresh from the checkpoint instead of the in-place restore until fixed.",
    ],
    "monitoring": [
        "Restart the frozen exporter; the job itself is not affected.",
        "Do not act on metrics from the frozen window.",
    ],
    "gpu-driver": [
        "Collect dmesg and driver logs from the host; update or reload the GPU driver.",
        "Keep the job running: training was not affected.",
    ],
    "gpu-hardware": [
        "Drain the host and RMA the faulty GPU (uncorrectable errors / Xid).",
        "Restart from the last checkpoint without it.",
    ],
    "training": [
        "Check the data and the learning-rate schedule around the onset step.",
        "Restart from a checkpoint before the instability with a lower learning rate if it recurs.",
    ],
    "none": ["Nothing to fix in the system metrics; close the investigation if the job's owners agree."],
}


def culprits_text(diagnosis: dict[str, Any]) -> str:
    """Return the diagnosis' culprits as "h1 GPU 3, h2", or "none"."""
    names = [
        c["host"] + (f" GPU {c['gpu']}" if c.get("gpu") not in (None, "") else "")
        for c in diagnosis.get("culprits") or []
        if isinstance(c, dict) and c.get("host")
    ]
    return ", ".join(names) or "none"


def next_steps(diagnosis: dict[str, Any]) -> list[str]:
    """Return what to do next for a diagnosis object (its root-cause family and culprits), most urgent first.

    The one table of next steps: the report's section and the investigation page's verdict both use it.
    """
    steps = list(NEXT_STEPS.get(diagnosis.get("root_cause_family", ""), []))
    if diagnosis.get("culprits"):
        steps.insert(0, f"Act on the culprits first: {culprits_text(diagnosis)}.")
    return steps or ["Review the findings below."]
