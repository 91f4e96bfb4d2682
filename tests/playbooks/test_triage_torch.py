"""PyTorch's NCCL watchdog and heartbeat-monitor kills in the triage (#10), in the words
`torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp` prints them: the heartbeat monitor's kill is a heartbeat
timeout that accuses its own rank's host (its timeout the heartbeat-stop reasoning's, as JAX's and Ray's), a
collective's watchdog timeout an NCCL timeout on its rank's host, torchrun's SIGABRT an abort on its host."""

from __future__ import annotations

import pytest

from playbooks.triage import triage_log

from .test_triage_events import HEAD, STEPS, T0

KEY = "jax_distributed_heartbeat_timeout_seconds"
COMMS = [
    "gpu-101:11:11 [0] NCCL INFO comm 0x55d1 rank 0 nranks 16 cudaDev 0 busId 1000 - Init COMPLETE",
    "gpu-102:12:12 [1] NCCL INFO comm 0x55d1 rank 5 nranks 16 cudaDev 1 busId 4000 - Init COMPLETE",
    "gpu-103:13:13 [1] NCCL INFO comm 0x55d1 rank 9 nranks 16 cudaDev 1 busId 4000 - Init COMPLETE",
]
PREFIX = "[PG ID 0 PG GUID 0(default_pg) Rank 5] "
MONITOR = (
    "[rank5]:[E0301 10:20:00.086705123 ProcessGroupNCCL.cpp:1423] " + PREFIX + "Heartbeat monitor timed out! "
    "Process will be terminated after dumping debug info. workMetaList_.size()=1"
)
STUCK = (
    "[rank5]:[F0301 10:21:00.123456789 ProcessGroupNCCL.cpp:1224] "
    + PREFIX
    + "ProcessGroupNCCL's watchdog got "
    "stuck for {s} seconds without making progress in monitoring enqueued collectives. This typically indicates a "
    "NCCL/CUDA API hang blocking the watchdog, and could be triggered by another thread holding the GIL inside a "
    "CUDA api, or other deadlock-prone behaviors.If you suspect the watchdog is not actually stuck and a longer "
    "timeout would help, you can either increase the timeout (TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC) to a larger value "
    "or disable the heartbeat monitor (TORCH_NCCL_ENABLE_MONITORING=0).If either of aforementioned helps, feel "
    "free to file an issue to PyTorch about the short timeout or false positive abort; otherwise, please attempt "
    "to debug the hang."
)
WATCHDOG = (
    "[E0301 10:20:00.000000000 ProcessGroupNCCL.cpp:632] {prefix}Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=4121, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for "
    "600043 milliseconds before timing out."
)


def _triage(lines: list[str]) -> dict:
    return triage_log(HEAD + STEPS + lines).to_dict()


def test_the_heartbeat_monitors_kill_accuses_its_ranks_host_with_its_timeout() -> None:
    """torchrun's `[rank5]:` label and NCCL's communicator lines put rank 5 on gpu-102; the exit message's
    timeout is the one the heartbeat-stop time is read with; the kill is the monitor's first line."""
    d = _triage([*COMMS, MONITOR, STUCK.format(s=600)])
    assert d["job"]["triage_class"] == "heartbeat-timeout"
    assert d["heartbeat_accused"] == ["gpu-102"]
    assert d["config"][KEY] == "600" and "heartbeat_timeout_assumed" not in d["details"]
    assert d["job"]["crash_time"] == pytest.approx(T0 + 1200.087, abs=1e-3)
    assert [m["class"] for m in d["matches"][:2]] == ["heartbeat-timeout", "heartbeat-timeout"]


def test_an_srun_label_or_the_default_groups_rank_names_the_host() -> None:
    """Without torchrun's label: srun's task label is the node; without either, the default group's rank."""
    labelled = _triage(["3: " + MONITOR.removeprefix("[rank5]:"), "3: " + STUCK.format(s=480)[8:]])
    assert labelled["heartbeat_accused"] == ["gpu-104"]
    bare = _triage([*COMMS, MONITOR.removeprefix("[rank5]:")])
    assert bare["heartbeat_accused"] == ["gpu-102"]


def test_the_timeout_comes_from_the_jobs_setting_else_pytorchs_default() -> None:
    """TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC as the job script exports it; neither it nor the exit message: the
    default (8 min), said to be assumed. The exit message's advice (`..._MONITORING=0`) is no setting."""
    d = _triage(["export TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=1200", *COMMS, MONITOR])
    assert d["config"][KEY] == "1200" and d["config"]["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "1200"
    d = _triage([*COMMS, MONITOR])
    assert d["config"][KEY] == "480" and d["details"]["heartbeat_timeout_assumed"] is True
    d = _triage([*COMMS, MONITOR, STUCK.format(s=480)])
    assert "TORCH_NCCL_ENABLE_MONITORING" not in d["config"]
    assert _triage(["TORCH_NCCL_ENABLE_MONITORING=0"])["config"]["TORCH_NCCL_ENABLE_MONITORING"] == "0"


@pytest.mark.parametrize(
    ("prefix", "label", "host"),
    [
        (PREFIX, "", "gpu-102"),  # the default group's rank is the global rank
        ("[Rank 5] ", "", "gpu-102"),  # the prefix of older releases
        ("[PG ID 2 PG GUID 7 Rank 5] ", "", None),  # a subgroup's rank is no global rank
        ("[PG ID 2 PG GUID 7 Rank 1] ", "[rank9]:", "gpu-103"),  # torchrun's label is
    ],
)
def test_a_collective_watchdog_timeout_is_an_nccl_timeout_on_its_ranks_host(prefix, label, host) -> None:
    """The rank that waited for its peers is where the timeout was seen; it accuses no one."""
    d = _triage([*COMMS, label + WATCHDOG.format(prefix=prefix)])
    assert d["job"]["triage_class"] == "nccl-timeout" and d["heartbeat_accused"] == []
    (ev,) = d["details"]["host_events"]
    assert (ev["kind"], ev["host"]) == ("nccl-timeout", host)
    assert d["job"]["crash_time"] == T0 + 1200


def test_torchruns_sigabrt_is_an_abort_on_the_reported_host() -> None:
    """`exitcode: -6` (SIGABRT: the watchdog or monitor aborting its process) is 134, no kill."""
    d = _triage(
        [
            "E0301 10:21:05.140000 1237 torch/distributed/elastic/multiprocessing/api.py:986] failed "
            "(exitcode: -6) local_rank: 1 (pid: 1734) of binary: /usr/bin/python",
            "Root Cause (first observed failure):",
            "[0]:",
            "  time      : 2026-03-01_10:21:05",
            "  host      : gpu-102.example.org",
            "  rank      : 5 (local_rank: 1)",
            "  exitcode  : -6 (pid: 1734)",
            "  error_file: <N/A>",
            "  traceback : Signal 6 (SIGABRT) received by PID 1734",
            "============================================================",
        ]
    )
    events = [(e["kind"], e["host"], e["code"]) for e in d["details"]["host_events"]]
    assert ("exited", "gpu-102", 134) in events
    assert all(kind == "exited" for kind, *_ in events)
