"""The generator writes the trainer habits the triage reads (#10): a step line every Nth step, Ray Train's and
absl's end-of-training lines, an undated traceback of a NaN loss. Each is written as the tool prints it and
read back by the triage (no TSDB: the log alone)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from playbooks.synth import Exporters, _log, _sim
from playbooks.triage import triage_log

_SUMMARY = ("JOB SUMMARY", "  Job:", "  Model:", "  Nodes:", "  Wall:", "  Status:", "=" * 65, "== Training ")
_STAMPED = re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ \d+ ")


def _log_of(tmp_path: Path, scenario: str, ex: Exporters, variants=(), seed: int = 3, fmt: str = ""):
    job = _sim.simulate(_sim.plan(scenario, seed, 4, profile="nvidia", interval=15.0, variants=variants))
    job.exporters, job.log_format = ex, fmt
    (tmp_path / "job").mkdir(parents=True)
    _log.write_log(job, tmp_path / "job.log", "job")
    return job, (tmp_path / "job.log").read_text().splitlines()


def _without_summary(lines: list[str]) -> list[str]:
    """The log without the launcher's own end (its summary and `== Training ...` lines): the trainer's line
    is then the only word that the training completed."""
    return [x for x in lines if not any(k in x for k in _SUMMARY)]


@pytest.mark.parametrize("fmt", ["", "kubectl-titan"])
def test_a_trainer_printing_every_tenth_step_leaves_the_others_out(tmp_path, fmt):
    job, lines = _log_of(tmp_path, "healthy", Exporters(log_every=10), fmt=fmt)
    printed = [int(s) for s in job.step_num if int(s) % 10 == 0]
    t = triage_log(lines)
    assert t.details["steps_logged"] == len(printed) < len(job.step_num)
    assert t.last_step == printed[-1] < int(job.step_num[-1])  # a lower bound of the last step run
    step = r"completed step: (\d+)," if not fmt else r"step:\s+(\d+)\s"
    assert {int(m.group(1)) for x in lines if (m := re.search(step, x))} == set(printed)


def test_undated_prints_of_every_tenth_step_are_placed_ten_steps_apart(tmp_path):
    """Seed 5's step lines carry no stamp (print-style): each is placed the steps since the last print after
    it, each as long as the printed one (was one step: the run's time squeezed into a tenth of it)."""
    job, lines = _log_of(tmp_path, "healthy", Exporters(log_every=10), seed=5)
    assert not any(_STAMPED.search(x) for x in lines if "completed step: " in x)
    t = triage_log(lines)
    last = max(i for i, s in enumerate(job.step_num) if int(s) % 10 == 0)
    ran = float(job.step_end[last]) - float(job.train_start)
    assert t.progress["last_step_time"] == pytest.approx(float(job.step_end[last]), abs=0.1 * ran)


def test_ray_trains_end_line_says_completed_or_errored(tmp_path):
    job, lines = _log_of(tmp_path / "ok", "healthy", Exporters(trainer_end="ray-train"))
    done = [x for x in lines if "Training completed after" in x]
    assert len(done) == 1 and f"after {len(job.step_num)} iterations at " in done[0]
    t = triage_log(_without_summary(lines))
    assert t.status == "completed"

    job, lines = _log_of(tmp_path / "oom", "host-oom", Exporters(trainer_end="ray-train"))
    assert any(x.startswith("0: Training errored after ") for x in lines)
    assert not any("Training completed after" in x for x in lines)
    t = triage_log(lines)
    assert t.crash_time == pytest.approx(float(job.crash_time), abs=5.0)


def test_absls_training_finished_only_when_the_run_completes(tmp_path):
    _, lines = _log_of(tmp_path / "ok", "healthy", Exporters(trainer_end="absl"))
    done = [x for x in lines if x.endswith("] Training finished.")]
    assert len(done) == 1 and _STAMPED.search(done[0])
    assert triage_log(_without_summary(lines)).status == "completed"
    _, lines = _log_of(tmp_path / "oom", "host-oom", Exporters(trainer_end="absl"))
    assert not any("Training finished" in x for x in lines)


@pytest.mark.parametrize(
    "seed", [3, 4]
)  # the trainer's own check of the loss, Megatron-core's of the gradients
def test_a_nan_loss_raises_an_undated_traceback(tmp_path, seed):
    job, lines = _log_of(tmp_path, "training-instability", Exporters(), ("nan_traceback",), seed=seed)
    tb = next(i for i, x in enumerate(lines) if x.endswith("Traceback (most recent call last):"))
    error = next(
        x for x in lines[tb:] if "FloatingPointError: NaN loss" in x or "found NaN in local grad" in x
    )
    assert not any(_STAMPED.search(x) for x in lines[tb : lines.index(error) + 1])
    nan_step = int(job.step_num[-1]) + 1  # raised in this step: its line is never printed
    assert not any(f"completed step: {nan_step}," in x for x in lines)
    t = triage_log(lines)
    assert t.status == "failed" and t.last_step == nan_step - 1
    # undated: no earlier than the last dated line, the last completed step's
    assert t.details["nonfinite_loss"]["time"] == pytest.approx(float(job.step_end[-1]), abs=1.0)
