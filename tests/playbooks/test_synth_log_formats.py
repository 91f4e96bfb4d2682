"""Generated jobs written in other trainers' and launchers' grammars (kubectl's pod prefix, torchtitan, NeMo):
the triage reads every step of them, at its time, and maps kubectl's pods to the job's hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

from playbooks.synth import _log, _sim
from playbooks.synth._log_trainers import LOG_FORMATS
from playbooks.triage import triage_log


def _job(scenario: str, fmt: str, tmp_path: Path) -> tuple[_sim.Job, Path]:
    job = _sim.simulate(_sim.plan(scenario, 3, 4, profile="nvidia", interval=15.0))
    job.log_format = fmt
    path = tmp_path / "job.log"
    (tmp_path / "job").mkdir()
    _log.write_log(job, path, "job")
    return job, path


@pytest.mark.parametrize("fmt", LOG_FORMATS)
def test_every_step_of_a_generated_log_is_read_at_its_time(fmt, tmp_path):
    job, path = _job("healthy", fmt, tmp_path)
    t = triage_log(path.read_text().splitlines())
    assert t.details["steps_logged"] == len(job.step_num)
    assert (t.first_step, t.last_step) == (int(job.step_num[0]), int(job.step_num[-1]))
    # undated NeMo steps are placed by their own durations after the last dated line: seconds off at most;
    # Hugging Face's bar began with the loop, 2-6 minutes after the "Running training" it is placed from
    late = float(job.step_end[-1]) - t.progress["last_step_time"]
    assert 120 - 5 <= late <= 360 + 5 if fmt == "srun-hf" else abs(late) <= 5.0
    assert t.status == "completed" and t.triage_class is None
    if fmt.startswith("kubectl-"):
        assert t.nodes == job.hosts


def test_a_kubectl_pods_failure_lands_on_its_host(tmp_path):
    job, path = _job("host-oom", "kubectl-nemo", tmp_path)
    t = triage_log(path.read_text().splitlines())
    culprits = {c["host"] for c in job.culprits}
    hosts = {e["host"] for e in t.details["host_events"] if e["host"]}
    assert t.last_step == int(job.step_num[-1])
    assert culprits and culprits <= hosts


@pytest.mark.parametrize("fmt", LOG_FORMATS)
def test_a_pytorch_trainers_heartbeat_kill_is_its_nccl_monitors(fmt, tmp_path):
    """A PyTorch trainer's heartbeat kill is PyTorch's NCCL heartbeat monitor's (ProcessGroupNCCL.cpp's
    words): the triage reads it as JAX's, the accused nodes and the timeout the heartbeat-stop time needs."""
    job, path = _job("heartbeat-false-positive", fmt, tmp_path)
    text = path.read_text()
    assert "Heartbeat monitor timed out!" in text and "stopped sending heartbeats" not in text
    t = triage_log(text.splitlines())
    assert t.triage_class == "heartbeat-timeout"
    assert t.heartbeat_accused == [job.hosts[a] for a in job.accused_tasks]
    assert t.config["jax_distributed_heartbeat_timeout_seconds"] == str(job.hb_timeout)
    assert t.crash_time == pytest.approx(float(job.crash_time), abs=1.0)
