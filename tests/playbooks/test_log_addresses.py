"""A GPU exporter known only by its pod's address is named after the node the job's log places the same fault
on (#10, corpus D seed 11 case 13: DCGM with `--no-hostname` scraped at pod IPs, an uncorrectable ECC error
that NCCL's warning places on `dgx-r10-01` GPU 2). On canned findings and log events."""

from __future__ import annotations

import numpy as np

from playbooks.context import Finding
from playbooks.decision import decide_diagnosis
from playbooks.log_addresses import name_addresses
from playbooks.triage import triage_log

from .test_analysis import NOW, N, _ctx, _grid

ADDRS = ["192.168.244.202", "192.168.15.179", "192.168.135.233"]
NODES = ["dgx-r10-01", "dgx-r10-02", "dgx-r10-03"]
AT = NOW + 100 * 15.0


def _fault(host: str = ADDRS[0], gpu: str = "2") -> Finding:
    return Finding("gpu_health", "ecc_uncorrectable", "gpu-hardware-fault", "critical", "cause", [host], [gpu],
                   AT, f"Uncorrectable ECC/RAS errors on {host} GPU {gpu}", [])  # fmt: skip


def _ctx_with(gpu_hosts: list[str]):
    return _ctx({"power_by_host": _grid({(h, None): np.full(N, 500.0) for h in gpu_hosts})})


def _ecc(host: str, gpu: int, dt: float = 8.0) -> dict:
    return {
        "kind": "gpu-ecc",
        "host": host,
        "gpu": gpu,
        "time": AT - dt,
        "line": 1282,
        "code": gpu,
        "text": "",
    }


def test_the_address_takes_the_node_the_log_places_the_same_fault_on():
    f = _fault()
    name_addresses(_ctx_with(ADDRS), [f], [_ecc(NODES[0], 2)])
    assert f.hosts == [NODES[0]] and f.title == "Uncorrectable ECC/RAS errors on dgx-r10-01 GPU 2"
    assert f.extra["aliases"] == {ADDRS[0]: NODES[0]}
    assert "dgx-r10-01's GPU exporter" in f.evidence[-1]["interpretation"]


def test_no_node_is_named_on_another_gpu_a_later_fault_or_a_node_with_its_own_gpu_series():
    for events, gpu_hosts in (
        ([_ecc(NODES[0], 5)], ADDRS),  # the log's fault is on another GPU
        ([_ecc(NODES[0], 2, dt=-3600.0)], ADDRS),  # an hour apart: another event
        ([_ecc(NODES[0], 2)], [*ADDRS, NODES[0]]),  # the node reports GPUs under its own name: another node
        ([_ecc(NODES[0], 2), _ecc(NODES[1], 2)], ADDRS),  # two nodes with the same fault: no telling which
    ):
        f = _fault()
        name_addresses(_ctx_with(gpu_hosts), [f], events)
        assert f.hosts == [ADDRS[0]]


def test_ncccls_uncorrectable_ecc_warning_is_a_gpu_fault_of_its_host_and_device():
    lines = [
        "[default2]:[2026-12-23T05:57:59.934+08:00] dgx-r10-01:4125:4425 [2] NCCL WARN Cuda failure "
        "'uncorrectable ECC error encountered'",
    ]
    [e] = [e for e in triage_log(lines).details["host_events"] if e["kind"] == "gpu-ecc"]
    assert e["host"] == "dgx-r10-01" and e["gpu"] == 2


def _hang(host: str) -> Finding:
    return Finding("collective_hang", "busy_wait", "collective-hang", "critical", "cause", [host], [], AT,
                   "GPUs busy-wait in a collective", [])  # fmt: skip


def test_a_hang_culprit_no_series_or_line_names_is_said_to_be_an_address_not_a_node():
    """Corpus D seed 7 case 26 (#10): a host's GPUs never entered the collective, its DCGM exporter (no host
    label) scraped at its pod's IP, no `node` label, kube_pod_info or node_uname_info at that address, no
    line of the log on it: the culprit stays the address, and the summary says it names no node."""
    ctx = _ctx_with(ADDRS)
    ctx.triage = {"nodes": NODES, "job": {}, "details": {}}
    d = decide_diagnosis(ctx, [_hang(ADDRS[1])])
    assert d["class"] == "collective-hang" and [c["host"] for c in d["culprits"]] == [ADDRS[1]]
    assert f"{ADDRS[1]} is the address a GPU or host exporter was scraped at" in d["summary"]
    assert "not a node name" in d["summary"] and "ties it to a node" in d["summary"]
    ctx.triage = {"nodes": [*NODES, ADDRS[1]], "job": {}, "details": {}}  # the log's own name for a node
    assert "not a node name" not in decide_diagnosis(ctx, [_hang(ADDRS[1])])["summary"]
    assert "not a node name" not in decide_diagnosis(ctx, [_hang(NODES[0])])["summary"]
