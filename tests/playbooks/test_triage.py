"""Log triage reproduces the generated jobs' truth and survives bad input."""

from __future__ import annotations

import os
import random
import tracemalloc

import pytest

from playbooks.synth import SCENARIOS
from playbooks.triage import TriageError, expand_nodelist, triage_job, triage_log


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_triage_matches_the_generated_truth(job_factory, scenario, profile):
    """Status, primary class, step range, head/port and heartbeat hosts agree with truth.json."""
    job_dir, truth = job_factory(scenario, profile=profile)
    t = triage_job(job_dir)
    assert t.status == truth["status"]
    assert t.triage_class == truth["triage_class"]
    assert (t.first_step, t.last_step) == (truth["first_step"], truth["last_step"])
    assert t.head == truth["head"] and 9190 <= t.port <= 9195
    assert t.nodes == truth["hosts"]
    assert t.heartbeat_accused == truth["accused_hosts"]
    assert t.progress["steps_total"] == truth["steps_total"]
    if truth["crash_time"] is not None:
        assert abs(t.crash_time - truth["crash_time"]) < 120
    if truth["restored_from"] is not None:
        assert t.progress["restored_from"] == truth["restored_from"]
    if truth["status"] == "completed":
        assert t.progress["lost_steps"] == 0
    assert t.unreadable == []


def test_contract_json_has_exactly_the_contract_keys(job_factory):
    """to_dict() carries the contract's keys and types."""
    job_dir, _ = job_factory("host-oom")
    d = triage_job(job_dir).to_dict()
    assert set(d) >= {
        "job",
        "matches",
        "progress",
        "config",
        "nodes",
        "prometheus",
        "heartbeat_accused",
        "unreadable",
    }
    assert set(d["job"]) == {"id", "status", "triage_class", "first_step", "last_step", "crash_time"}
    assert set(d["progress"]) == {
        "steps_total",
        "restored_from",
        "step_time_s",
        "last_step_time",
        "lost_steps",
        "last_checkpoint_step",
        "tgs_trend_pct",
    }
    assert set(d["prometheus"]) == {"head", "port", "tunnel"}
    assert d["matches"][0]["class"] == d["job"]["triage_class"] == "oom-host"
    assert all(set(m) == {"class", "line", "text"} for m in d["matches"])
    assert isinstance(d["config"]["NNODES"], str)


def test_oom_cascade_lists_all_matches_primary_first(job_factory):
    """OOM on one node then NCCL timeouts elsewhere: oom-host primary, the cascade reported after it."""
    job_dir, truth = job_factory("host-oom")
    t = triage_job(job_dir)
    assert t.classes[0] == "oom-host"
    assert {"nccl-timeout", "node-fail", "stage-fail"} <= set(t.classes)
    assert any(truth["culprits"][0]["host"] in m.text for m in t.matches if m.klass == "node-fail")


def k8s_host_oom(job_factory):
    """Return (job_dir, truth) of the first generated k8s host-oom job (its kill is in a rank-N.log)."""
    for seed in range(1, 12):
        job_dir, truth = job_factory("host-oom", seed=seed, profile="nvidia")
        if truth["job_id"].startswith("k8s-"):
            return job_dir, truth
    pytest.skip("no k8s job among the seeds")  # pragma: no cover - seeds 1..11 include k8s ids


def test_k8s_rank_logs_are_read(job_factory):
    """For a k8s job the OOM lives only in another rank's rank-N.log and is still found."""
    job_dir, _ = k8s_host_oom(job_factory)
    assert "Killed" not in (job_dir / "log").read_text()
    assert triage_job(job_dir).triage_class == "oom-host"


def test_hang_without_timestamps_is_found_from_wall_time():
    """A cancelled job whose last step is long before the cancel is a hang even without absl headers."""
    lines = [
        "JOB_ID=123",
        "NNODES=1",
        "JOB_NODELIST=n1",
        'PASSTHROUGH_ARGS="steps=100"',
        "[INFO] Running from artifact: /o/.artifacts/artifact_20260301_100000_abcd",
        "I0301 10:10:00.000000 1 train.py:1] ====== BARRIER PASSED: Starting training loop ======",
    ]
    lines += [
        f"completed step: {i}, seconds: 10.000, TFLOP/s/device: 1.0, Tokens/s/device: 100.0, "
        f"total_weights: 1, loss: 2.0"
        for i in range(30)
    ]
    lines += [
        "slurmstepd: error: *** STEP 123.0 ON n1 CANCELLED AT 2026-03-01T11:30:00 ***",
        "========================== JOB SUMMARY ==========================",
        "  Wall:   1h 30m 0s",
        "  Status: FAILED (exit 143) \u2014 CANCELLED (scancel / SIGTERM)",
    ]
    t = triage_log(lines)
    assert t.status == "cancelled" and t.triage_class == "hang"
    assert t.progress["last_step_time"] == pytest.approx(1772359800 + 300, abs=1)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        bytes(random.Random(1).randrange(256) for _ in range(200_000)),
        b"JOB_ID=9\nNNODES=2\ncompleted step: 0, seconds: 3.0, TFLOP/s/device: 1.0, Tokens/s/device: 5.0, tot",
        b"\x00\x01\x02garbage\nJOB_ID=7\n" + b"A" * 300_000 + b"\n\xff\xfe bad utf8 Killed\n",
    ],
)
def test_bad_logs_never_raise(tmp_path, content):
    """Empty, random-binary, truncated and over-long-line logs are triaged with what could be read."""
    p = tmp_path / "bad.log"
    p.write_bytes(content)
    t = triage_log(p)
    d = t.to_dict()
    assert d["job"]["status"] in {
        "completed",
        "failed",
        "cancelled",
        "running",
        "hanging",
        "unknown-death",
        "soft-success",
    }
    assert t.unreadable, "what could not be read must be said"


def test_truncated_log_reads_up_to_the_cut(job_factory, tmp_path):
    """A log cut mid-line keeps every complete step before the cut and reports an unknown death."""
    job_dir, truth = job_factory("healthy")
    data = (job_dir / "log").read_bytes()
    cut = tmp_path / "cut.log"
    cut.write_bytes(data[: len(data) // 2])
    t = triage_log(cut)
    assert t.status == "unknown-death" and 0 < t.last_step < truth["last_step"]


def test_missing_log_raises_a_clear_error(tmp_path):
    """Only an unopenable path raises, with the path in the message."""
    with pytest.raises(TriageError, match="not found"):
        triage_log(tmp_path / "nope.log")
    with pytest.raises(TriageError, match="directory"):
        triage_log(tmp_path)
    with pytest.raises(TriageError, match="no log"):
        triage_job(tmp_path)


def test_large_log_streams_in_bounded_memory(tmp_path):
    """A ~60 MB log with 64 ranks per step is read with a small, size-independent peak of memory."""
    p = tmp_path / "big.log"
    with open(p, "w") as fh:
        fh.write("JOB_ID=1\nNNODES=64\nJOB_NODELIST=g[001-064]\n")
        for step in range(6000):
            for r in range(64):
                fh.write(
                    f"{r:>2}: (MaxTextTrainerActor pid=1) completed step: {step}, seconds: 12.000, "
                    f"TFLOP/s/device: 800.000, Tokens/s/device: 3300.000, total_weights: 1, loss: 2.0\n"
                )
    assert os.path.getsize(p) > 50e6
    tracemalloc.start()
    t = triage_log(p)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert t.last_step == 5999 and t.progress["step_time_s"] == 12.0
    assert peak < 40e6


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("gpu-[101-103,105]", ["gpu-101", "gpu-102", "gpu-103", "gpu-105"]),
        ("n[1-2],login[08-09]", ["n1", "n2", "login08", "login09"]),
        ("single", ["single"]),
    ],
)
def test_nodelist_expansion(text, hosts):
    """Slurm compressed node lists expand in NODE_RANK order."""
    assert expand_nodelist(text) == hosts


def test_label_padding_and_ansi_are_stripped():
    """Right-aligned srun labels and ANSI colours do not hide signatures."""
    t = triage_log(["JOB_ID=5", " 3: \x1b[31mNODE_EXIT host=gpu-4 exit=137\x1b[0m", "10: Killed"])
    assert "oom-host" in t.classes and "node-fail" in t.classes
    assert t.details["node_exits"] == [{"host": "gpu-4", "exit": 137}]
