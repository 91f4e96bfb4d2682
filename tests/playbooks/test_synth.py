"""The generator writes job directories of the seed system's shape, deterministically by seed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from playbooks.synth import SCENARIO_TABLE, SCENARIOS, SynthError, _sim, generate_job
from playbooks.synth._log import compress_nodelist

CONTRACT_CLASSES = {
    "healthy",
    "collective-hang",
    "network-hang",
    "node-death",
    "heartbeat-false-positive",
    "host-oom",
    "thermal-straggler",
    "rdma-degradation",
    "restore-resource-leak",
    "monitoring-ghost-data",
    "gpu-driver-fault",
    "gpu-hardware-fault",
    "training-instability",
}
CONTRACT_FAMILIES = {
    "none",
    "collective",
    "network-rdma",
    "node",
    "heartbeat",
    "host-memory",
    "thermal",
    "cpu-contention",
    "monitoring",
    "gpu-driver",
    "gpu-hardware",
    "training",
}
STEP_RE = re.compile(r"^\s*(\d+): .*completed step: (\d+), seconds: ([\d.]+)")


def test_every_contract_class_has_a_scenario():
    """Each diagnosis class of the contract can be generated, with a contract family."""
    assert {SCENARIO_TABLE[s].klass for s in SCENARIOS} == CONTRACT_CLASSES
    assert {SCENARIO_TABLE[s].family for s in SCENARIOS} <= CONTRACT_FAMILIES


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_job_dir_has_the_seed_layout(job_factory, scenario):
    """A job dir holds prometheus/ blocks and wal/, a log symlink to the sibling <dir>.log, and truth.json."""
    job_dir, truth = job_factory(scenario)
    assert (job_dir / "log").is_symlink()
    assert (job_dir / "log").resolve() == job_dir.parent / f"{job_dir.name}.log"
    blocks = [p for p in (job_dir / "prometheus").iterdir() if (p / "meta.json").exists()]
    assert blocks, "no TSDB blocks"
    wal = list((job_dir / "prometheus" / "wal").iterdir())
    assert wal and sum(p.stat().st_size for p in wal if p.is_file()) > 0
    assert not (job_dir / "prometheus" / "lock").exists()
    on_disk = json.loads((job_dir / "truth.json").read_text())
    assert on_disk["class"] == SCENARIO_TABLE[scenario].klass == truth["class"]
    assert on_disk["root_cause_family"] in CONTRACT_FAMILIES
    for c in on_disk["culprits"]:
        assert c["host"] in on_disk["hosts"]
        assert c["gpu"] is None or 0 <= int(c["gpu"]) < on_disk["gpus_per_host"]
    if scenario == "healthy":
        assert on_disk["onset"] is None and on_disk["culprits"] == []
    else:
        assert on_disk["data_range"][0] <= on_disk["onset"] <= on_disk["data_range"][1]
    # the blocks end where the WAL-only tail begins
    max_block = max(json.loads((b / "meta.json").read_text())["maxTime"] for b in blocks) / 1000.0
    assert max_block <= on_disk["wal_tail_start"] + 1


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_log_follows_the_seed_grammar(job_factory, scenario):
    """Header keys, config params, the tunnel, one completed-step line per node and the right summary."""
    job_dir, truth = job_factory(scenario)
    text = (job_dir / "log").read_text()
    lines = text.splitlines()
    head = [ln.split("=", 1)[0] for ln in lines[:9]]
    assert head == [
        "JOB_ID",
        "JOB_NAME",
        "NNODES",
        "JOB_NODELIST",
        "JAX_COORDINATOR_PORT",
        "RAY_PORT",
        "PASSTHROUGH_ARGS",
        "MODEL_NAME",
        "EXP_TAG",
    ]
    assert f"NNODES={truth['nodes']}" in lines
    assert f"steps={truth['steps_total']}" in lines[6]
    assert re.search(rf"^0: Config param checkpoint_period: {truth['checkpoint_period']}$", text, re.M)
    tunnel = re.search(
        r"ssh -J \S+ -L 8265:localhost:8265 -L 6006:localhost:6006 -L (\d+):localhost:\1 "
        r"root@(\S+)",
        text,
    )
    assert tunnel and tunnel.group(2) == truth["head"]
    steps: dict[int, set[int]] = {}
    for ln in lines:
        m = STEP_RE.match(ln)
        if m:
            steps.setdefault(int(m.group(2)), set()).add(int(m.group(1)))
    assert min(steps) == truth["first_step"] and max(steps) == truth["last_step"]
    assert all(len(ranks) == truth["nodes"] for ranks in steps.values())
    summary = re.search(r"Status:\s*(?:\x1b\[[0-9;]*m)?(SUCCESS|FAILED) \(exit (\d+)\)", text)
    assert summary
    expected = {"completed": ("SUCCESS", "0"), "failed": ("FAILED", "1"), "cancelled": ("FAILED", "143")}
    assert summary.groups() == expected[truth["status"]]


def test_failure_signatures_are_written(job_factory):
    """Crash scenarios carry the seed system's failure signatures naming the right hosts and tasks."""
    _, hb = job_factory("heartbeat-false-positive")
    text = Path(hb["log"]).read_text()
    assert "UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats)" in text
    accused = re.findall(r"/job:jax_worker/replica:0/task:(\d+)", text)
    assert [int(a) for a in accused] == hb["accused_tasks"]
    _, oom = job_factory("host-oom")
    text = Path(oom["log"]).read_text()
    assert f"NODE_EXIT host={oom['culprits'][0]['host']} exit=137" in text and " Killed " in text
    _, hw = job_factory("gpu-hardware-fault")
    text = Path(hw["log"]).read_text()
    assert f"NODE_EXIT host={hw['culprits'][0]['host']} exit=134" in text
    assert "Training subprocess killed by SIGABRT" in text


def test_restore_pair_shares_config_and_overlaps(job_factory):
    """restore-resource-leak builds a restored job and a fresh baseline with the same PASSTHROUGH_ARGS."""
    job_dir, truth = job_factory("restore-resource-leak")
    base_dir = Path(truth["compare_with"])
    base = json.loads((base_dir / "truth.json").read_text())
    assert base["class"] == "healthy" and base["first_step"] == 0
    assert truth["restored_from"] is not None and truth["first_step"] == truth["restored_from"] + 1
    assert truth["first_step"] < base["last_step"]
    args = [
        re.search(r'^PASSTHROUGH_ARGS=".*"$', Path(t["log"]).read_text(), re.M).group(0)
        for t in (truth, base)
    ]
    assert args[0] == args[1]
    restored_log = Path(truth["log"]).read_text()
    assert f"restoring from this run's directory step {truth['restored_from']}" in restored_log
    assert restored_log.count("[0] init.cc:2095 NCCL WARN MSCCL++") == 3 * truth["nodes"]
    assert Path(base["log"]).read_text().count("[0] init.cc:2095 NCCL WARN MSCCL++") == 2 * base["nodes"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_restored_job_is_about_one_percent_slower_than_its_baseline(seed):
    """Same model, config and cluster: the restored run's steady step time is its baseline's plus ~1 %."""
    base = _sim.simulate(_sim.plan("healthy", seed, 4, gpus=2, hours=2.0))
    restored = _sim.simulate(
        _sim.plan(
            "restore-resource-leak", seed, 4, gpus=2, hours=2.0, restored_from=base.ckpt_steps[2], base=base
        )
    )

    def steady(job: _sim.Job) -> float:
        steps = job.step_num - job.first_step
        no_ckpt = ~np.isin(job.step_num - 1, job.ckpt_steps)
        return float(np.median(job.step_secs[(steps >= 5) & no_ckpt]))

    ratio = steady(restored) / steady(base)
    assert 1.0 < ratio < 1.03, ratio
    assert restored.step_params == base.step_params


def test_same_seed_same_job_other_seed_other_job(tmp_path):
    """Deterministic by seed; host naming, onset and culprits vary with it."""
    kw = {"gpus": 2, "hours": 1.0, "wal_tail_minutes": 0}
    a = generate_job("rdma-degradation", 7, 3, tmp_path / "a" / "job", **kw)
    b = generate_job("rdma-degradation", 7, 3, tmp_path / "b" / "job", **kw)
    c = generate_job("rdma-degradation", 8, 3, tmp_path / "c" / "job", **kw)
    strip = lambda t: {k: v for k, v in t.items() if k not in ("log", "job_dir", "compare_with")}  # noqa: E731
    assert strip(a.truth) == strip(b.truth)
    assert (tmp_path / "a" / "job.log").read_bytes() == (tmp_path / "b" / "job.log").read_bytes()
    assert strip(c.truth) != strip(a.truth)
    assert (c.truth["onset"], c.truth["hosts"]) != (a.truth["onset"], a.truth["hosts"])


def test_bad_arguments_raise_a_clear_error(tmp_path):
    """Unknown scenarios, profiles, variants and non-positive sizes are refused before anything is written."""
    with pytest.raises(SynthError, match="unknown scenario"):
        generate_job("meteor-strike", 1, 2, tmp_path / "x")
    with pytest.raises(SynthError, match="unknown profile"):
        generate_job("healthy", 1, 2, tmp_path / "x", profile="tpu")
    with pytest.raises(SynthError, match="positive"):
        generate_job("healthy", 1, 0, tmp_path / "x")
    with pytest.raises(SynthError, match="no variant 'death_at_end'"):
        generate_job("healthy", 1, 2, tmp_path / "x", variants=("death_at_end",))
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        (["gpu-101", "gpu-102", "gpu-103", "gpu-105"], "gpu-[101-103,105]"),
        (["node0001"], "node0001"),
        (["a1c01-gpu", "a1c02-gpu"], "a1c[01-02]-gpu"),
    ],
)
def test_nodelist_is_compressed_like_slurm(hosts, expected):
    """JOB_NODELIST uses Slurm's compressed form."""
    assert compress_nodelist(hosts) == expected


def test_jobs_of_one_seed_have_their_own_job_ids() -> None:
    """Two scenarios (or profiles) of one seed are two jobs: their JOB_IDs differ, their hosts do not."""
    from playbooks.synth import _sim

    ids = {
        (sc, prof): _sim.plan(sc, 1, 4, profile=prof).job_id
        for sc in ("healthy", "thermal-straggler", "host-oom")
        for prof in ("amd", "nvidia")
    }
    assert len(set(ids.values())) == len(ids)
    assert _sim.plan("healthy", 1, 4).hosts == _sim.plan("host-oom", 1, 4).hosts
