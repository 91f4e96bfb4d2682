"""Host events of the triage: Slurm node failures, kills, kernel OOM kills, Xids and NCCL timeouts, each
mapped to a host; a Slurm node failure triages as `node-fail`, never as the training stage's failure."""

from __future__ import annotations

import json

import pytest

from playbooks.triage import triage_job, triage_log
from tests.playbooks.test_triage import k8s_host_oom

HEAD = [
    "JOB_ID=81234",
    "NNODES=4",
    "JOB_NODELIST=gpu-[101-104]",
    'PASSTHROUGH_ARGS="steps=100"',
    "[INFO] Running from artifact: /o/.artifacts/artifact_20260301_100000_abcd",
    "0: I0301 10:10:00.000000 1 train.py:1] ====== BARRIER PASSED: Starting training loop ======",
]
STEPS = [
    f"0: completed step: {i}, seconds: 10.000, TFLOP/s/device: 1.0, Tokens/s/device: 100.0, "
    "total_weights: 1, loss: 2.0"
    for i in range(30)
]
T0 = 1772359200.0  # 2026-03-01T10:00:00Z
EVENT_KEYS = {"kind", "host", "time", "line", "code", "text"}


def _events(lines: list[str]) -> list[dict]:
    return triage_log(HEAD + STEPS + lines).to_dict()["details"]["host_events"]


def _one(lines: list[str]) -> dict:
    (ev,) = _events(lines)
    assert set(ev) == EVENT_KEYS | ({"pci"} if ev["kind"] == "xid" else set())
    return ev


@pytest.mark.parametrize(
    ("line", "kind", "host", "time", "code"),
    [
        ("srun: error: Node failure on gpu-104", "node-failure", "gpu-104", None, None),
        ("srun: error: gpu-103: task 2: Killed", "killed", "gpu-103", None, 137),
        ("srun: error: gpu-103: tasks 2-3: Exited with exit code 137", "killed", "gpu-103", None, 137),
        ("srun: error: gpu-102: task 1: Exited with exit code 143", "killed", "gpu-102", None, 143),
        ("srun: error: gpu-102: task 1: Out Of Memory", "oom-kill", "gpu-102", None, None),
        ("2: NODE_EXIT host=gpu-103.example.org exit=137", "killed", "gpu-103", None, 137),
        (
            "2: /usr/local/bin/_train.sh: line 212: 4242 Killed    python3 -u -m MaxText.train",
            "killed",
            "gpu-103",
            None,
            137,
        ),
        (
            "Mar  1 10:15:02 gpu-102 kernel: [123.4] Out of memory: Killed process 4242 (python3) "
            "total-vm:9kB, anon-rss:8kB",
            "oom-kill",
            "gpu-102",
            T0 + 902,
            None,
        ),
        (
            "3: [Sun Mar  1 10:15:03 2026] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),task=python3,pid=4242",
            "oom-kill",
            "gpu-104",
            T0 + 903,
            None,
        ),
        (
            "1: Memory cgroup out of memory: Killed process 4242 (python3)",
            "oom-kill",
            "gpu-102",
            None,
            None,
        ),
        (
            "2026-03-01T10:15:04.123+00:00 gpu-101 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
            "name=<unknown>, GPU has fallen off the bus.",
            "xid",
            "gpu-101",
            T0 + 904,
            79,
        ),
        (
            "2: gpu-103:5521:5930 [2] NCCL WARN Timeout waiting for peer",
            "nccl-timeout",
            "gpu-103",
            None,
            None,
        ),
        (
            "1: torch.distributed.elastic.multiprocessing.api:[ERROR] failed (exitcode: -9) local_rank: 3 "
            "(pid: 1234) of binary: /usr/bin/python",
            "killed",
            "gpu-102",
            None,
            137,
        ),
    ],
)
def test_each_line_gives_one_host_mapped_event(line, kind, host, time, code) -> None:
    """The host comes from the line itself, else from its srun label (task N = node N); FQDNs are shortened
    to the node list's names."""
    ev = _one([line])
    assert (ev["kind"], ev["host"], ev["time"], ev["code"]) == (kind, host, time, code)
    assert ev["line"] == len(HEAD) + len(STEPS) + 1 and ev["text"] in line


def test_a_global_rank_maps_to_its_host_through_nccls_communicator_lines() -> None:
    """PyTorch's watchdog names a global rank; NCCL's `comm ... rank N` line says on which host it runs."""
    ev = _events(
        [
            "gpu-101:11:11 [0] NCCL INFO comm 0x55d1 rank 0 nranks 16 cudaDev 0 busId 1000 - Init COMPLETE",
            "gpu-102:12:12 [3] NCCL INFO comm 0x55d1 rank 7 nranks 16 cudaDev 3 busId 4000 - Init COMPLETE",
            "[rank7]:[E ProcessGroupNCCL.cpp:563] [Rank 7] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600042 milliseconds before timing out.",
            "[rank9]:[E ProcessGroupNCCL.cpp:563] [Rank 9] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600042 milliseconds before timing out.",
        ]
    )
    assert [(e["kind"], e["host"]) for e in ev] == [("nccl-timeout", "gpu-102"), ("nccl-timeout", None)]


def test_torchruns_failure_report_names_host_time_and_signal() -> None:
    ev = _one(
        [
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
            "============================================================",
            "train.py FAILED",
            "------------------------------------------------------------",
            "Root Cause (first observed failure):",
            "[0]:",
            "  time      : 2026-03-01_10:20:00",
            "  host      : gpu-103.example.org",
            "  rank      : 11 (local_rank: 3)",
            "  exitcode  : -9 (pid: 1234)",
            "  error_file: <N/A>",
            "  traceback : Signal 9 (SIGKILL) received by PID 1234",
            "============================================================",
        ]
    )
    assert (ev["kind"], ev["host"], ev["time"], ev["code"]) == ("killed", "gpu-103", T0 + 1200, 137)


def test_an_xid_keeps_its_bus_and_nvidia_smi_lines_give_each_bus_its_gpu() -> None:
    """#10 a: the Xid's PCI address becomes a bus key that nvidia-smi's table (a node's, by its srun label) and
    CSV (no label: any node) map to GPU indices; two GPUs of one host with the same Xid are two events."""
    t = triage_log(
        HEAD
        + STEPS
        + [
            "2: |   3  NVIDIA H100 80GB HBM3          On  |   00000000:4B:00.0 Off |                    0 |",
            "index, pci.bus_id",
            "5, 00000000:9C:00.0",
            "Mar  1 10:15:02 gpu-102 kernel: NVRM: Xid (PCI:0000:4b:00): 79, pid=1, GPU has fallen off the bus.",
            "Mar  1 10:15:03 gpu-102 kernel: NVRM: Xid (PCI:0000:9c:00): 79, pid=1, GPU has fallen off the bus.",
        ]
    )
    assert [e["pci"] for e in t.details["host_events"]] == ["0000:4b:00", "0000:9c:00"]
    assert t.details["gpu_bus"] == [
        {"host": "gpu-103", "pci": "0000:4b:00", "gpu": "3"},
        {"host": None, "pci": "0000:9c:00", "gpu": "5"},
    ]


def test_other_exits_and_application_xids_are_not_kills_or_hardware() -> None:
    """Exit 1 or 134 is a crash, not a kill (srun's report of it is an `exited` event on its host); Xid 13 is
    the program's own fault: an event, not a GPU fault."""
    t = triage_log(
        HEAD
        + STEPS
        + [
            "srun: error: gpu-103: task 2: Exited with exit code 134",
            "2: NODE_EXIT host=gpu-103 exit=1",
            "Mar  1 10:15:02 gpu-102 kernel: NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception",
        ]
    )
    assert [(e["kind"], e["host"], e["code"]) for e in t.details["host_events"]] == [
        ("exited", "gpu-103", 134),
        ("xid", "gpu-102", 13),
    ]
    assert "gpu-hw-error" not in t.classes


SLURM_NODE_FAILURE = [
    "srun: error: Node failure on gpu-104",
    "slurmstepd: error: *** STEP 81234.0 ON gpu-101 CANCELLED AT 2026-03-01T10:20:00 DUE TO NODE FAILURE, "
    "SEE SLURMCTLD LOG FOR DETAILS ***",
    "srun: Terminating StepId=81234.0",
    *[f"{r}: NODE_EXIT host=gpu-10{r + 1} exit=143" for r in range(3)],
    *[f"srun: error: gpu-10{r + 1}: task {r}: Exited with exit code 143" for r in range(3)],
    "== Training FAILED (exit=143, 1200s) ==",
    "========================== JOB SUMMARY ==========================",
    "  Wall:   0h 20m 0s",
    "  Status: FAILED (exit 143) \u2014 CANCELLED DUE TO NODE FAILURE",
]


def test_a_slurm_node_failure_is_a_node_failure_not_a_stage_failure_or_a_cancel() -> None:
    """Survivors exit 143 and the training stage FAILED, but the job failed for a lost node: `node-fail`,
    status failed (Slurm's NODE_FAIL), no hang or cancel invented; the failed host, not the node reporting
    the cancel, carries the event, dated by the cancel line."""
    t = triage_log(HEAD + STEPS + SLURM_NODE_FAILURE)
    assert t.status == "failed"
    assert t.triage_class == "node-fail" and t.classes == ["node-fail", "stage-fail"]
    assert t.matches[0].text == "srun: error: Node failure on gpu-104"
    failures = [e for e in t.details["host_events"] if e["kind"] == "node-failure"]
    assert failures == [
        {
            "kind": "node-failure",
            "host": "gpu-104",
            "time": T0 + 1200,
            "line": len(HEAD) + len(STEPS) + 1,
            "code": None,
            "text": "srun: error: Node failure on gpu-104",
        }
    ]
    survivors = {e["host"] for e in t.details["host_events"] if e["kind"] == "killed" and e["code"] == 143}
    assert survivors == {"gpu-101", "gpu-102", "gpu-103"}


def test_kills_and_timeouts_after_the_node_failure_are_its_effects() -> None:
    """Survivors SIGKILLed (srun's `Killed`: no OOM by itself) or timing out after Slurm lost a node rank after
    the node failure; a heartbeat timeout logged before it keeps the seed table's priority."""
    after = ["srun: error: gpu-101: task 0: Killed", "1: gpu-102:5:6 [0] NCCL WARN Timeout waiting for peer"]
    t = triage_log(HEAD + STEPS + SLURM_NODE_FAILURE[:2] + after + SLURM_NODE_FAILURE[2:])
    assert t.triage_class == "node-fail" and t.classes == ["node-fail", "nccl-timeout", "stage-fail"]
    before = "0: E0301 10:19:00.000000 9 client.cc:84] UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):"
    t = triage_log(HEAD + STEPS + [before, "/job:jax_worker/replica:0/task:3"] + SLURM_NODE_FAILURE)
    assert t.triage_class == "heartbeat-timeout" and t.heartbeat_accused == ["gpu-104"]
    assert t.classes[:2] == ["heartbeat-timeout", "node-fail"]


def test_without_the_node_failure_the_same_ending_is_a_cancel() -> None:
    """The control: the same survivors' 143s under an ordinary scancel stay a cancelled job."""
    lines = [
        ln.replace("CANCELLED DUE TO NODE FAILURE", "CANCELLED (scancel / SIGTERM)")
        for ln in SLURM_NODE_FAILURE
    ]
    lines = [ln for ln in lines if "node failure" not in ln.lower()]
    t = triage_log(HEAD + STEPS + lines)
    assert t.status == "cancelled" and "node-fail" not in t.classes
    assert not [e for e in t.details["host_events"] if e["kind"] == "node-failure"]


def test_a_generated_slurm_node_death_triages_as_node_fail_on_the_dead_host(job_factory) -> None:
    """Seed 2's node death is reported by Slurm (the generator's `slurm_node_failure` variant)."""
    job_dir, truth = job_factory("node-death", seed=2)
    assert truth["variants"].get("slurm_node_failure")
    t = triage_job(job_dir)
    assert t.status == truth["status"] == "failed"
    assert t.triage_class == truth["triage_class"] == "node-fail"
    dead = truth["culprits"][0]["host"]
    (ev,) = [e for e in t.details["host_events"] if e["kind"] == "node-failure"]
    assert ev["host"] == dead and ev["time"] is not None and abs(ev["time"] - truth["crash_time"]) < 60


def test_a_kill_in_a_k8s_rank_log_is_mapped_to_that_ranks_node(job_factory) -> None:
    """The OOM-killed trainer of a k8s job prints `Killed` only in its rank-N.log, which has no node list."""
    job_dir, truth = k8s_host_oom(job_factory)
    events = triage_job(job_dir).to_dict()["details"]["host_events"]
    killed = {e["host"] for e in events if e["kind"] == "killed" and e["code"] == 137}
    assert killed == {truth["culprits"][0]["host"]}
    json.dumps(events)  # plain JSON


def test_events_are_one_per_kind_host_and_code() -> None:
    """A thousand NCCL warnings of one host are one event (the first line), not a thousand."""
    ev = _events([f"2: gpu-103:55:59 [{i % 8}] NCCL WARN Timeout waiting for peer {i}" for i in range(1000)])
    assert len(ev) == 1 and ev[0]["line"] == len(HEAD) + len(STEPS) + 1
