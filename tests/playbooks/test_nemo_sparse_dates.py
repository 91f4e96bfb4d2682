"""A NeMo log that dates only a few lines still says how long every step took (#10, an RDMA degradation judged
"the job did not slow down").

NeMo prints every step undated with its own duration (`train_step_timing in s`); a plain Slurm script's log
dates only its `Start:` line (local time), NeMo's validations and the end of `Trainer.fit`, and
Megatron-core's save report gives the save's start in unix seconds. The steps before the first dated line
used to have no time at all: when that line came after the retransmits' onset, no step time preceded the
onset and the degradation was demoted as if the steps had not slowed. The steps are now placed back from
the first dated line by their own durations (less the pauses the log names and times), a save's report
dates the steps after it, and where no step time precedes an onset the slowdown is unknown, not denied."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.log_series import with_log_step_time
from playbooks.synth import Exporters
from playbooks.triage import triage_job
from playbooks.triage._api import triage_log

_CEST = dt.timezone(dt.timedelta(hours=2))
_T0 = dt.datetime(2026, 6, 24, 5, 10, 0, tzinfo=_CEST).timestamp()  # training begins, 6 min after the start
_SLOW_FROM = 106  # the first step of 5.4 s (4.07 s before)
_VALID = {150: 34.5, 300: 34.5}  # validation after step: its length
_SAVE = (250, 64.568)


@dataclass
class _Output:
    name: str
    results: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, Any] = field(default_factory=dict)


def _local(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, _CEST).strftime("%Y-%m-%d %H:%M:%S")


def _secs(s: int) -> float:
    return (4.07 if s < _SLOW_FROM else 5.4) + 0.03 * ((s * 7) % 5 - 2)


def _nemo_log(start: float = _T0 - 354.0) -> tuple[list[str], dict[int, float]]:
    """The held-out case's shape: 400 steps, srun's labels, dated lines only at 150, 250 (unix), 300 and the end."""
    lines = [
        f"Start: {dt.datetime.fromtimestamp(start, _CEST):%a %b %d %H:%M:%S} CEST 2026",
        "+ srun python train.py",
    ]
    t, ends = _T0, {}
    for s in range(1, 401):
        t += _secs(s)
        ends[s] = t
        lines.append(
            f" 0: Training epoch 0, iteration {s}/9999 | lr: 0.0003 | global_batch_size: 512 | global_step: {s} | "
            f"reduced_train_loss: {6.5 - s * 0.002:.4f} | train_step_timing in s: {_secs(s):.3f} | "
            f"consumed_samples: {s * 512}"
        )
        if s == _SAVE[0]:
            lines.append(
                f" 0: Global Checkpoint Save : Rank: 0 : Iteration: {s} : Start time: {t:.3f}s : "
                f"Save duration: {_SAVE[1]:.3f}s"
            )
            t += _SAVE[1]
        if s in _VALID:
            t += _VALID[s]
            lines.append(
                f" 0: [NeMo I {_local(t)} nemo_logging:393] validation at step {s}: val_loss=5.4490 ({_VALID[s]}s)"
            )
    lines.append(
        f" 0: [NeMo I {_local(t + 2)} nemo_logging:393] `Trainer.fit` stopped: `max_steps=400` reached."
    )
    return lines, ends


def test_steps_before_the_first_dated_line_are_placed_back_from_it_by_their_durations():
    lines, ends = _nemo_log()
    t = triage_log(lines).to_dict()
    points = t["details"]["log_loss"]
    assert len(points) == 400  # every step has a time, the 149 before the first dated line too
    times = dict(zip(range(1, 401), (p[0] for p in points), strict=True))
    # a stamp to the second is the only error: the durations add up exactly
    for s in (1, _SLOW_FROM - 1, _SLOW_FROM, 149, 150, 151, 250, 251, 300, 400):
        assert times[s] == pytest.approx(ends[s], abs=1.5), s
    assert [w[2] for w in t["details"]["pauses"]] == [34.5, 64.568, 34.5]  # NeMo's "(34.5s)", the save's


def test_the_log_step_time_shows_the_slowdown_where_the_durations_changed():
    lines, ends = _nemo_log()
    out = with_log_step_time([_Output("training")], triage_log(lines).to_dict(), 15.0)
    r = out[0].results["step_time"]
    grid = [r["start"] + k * r["step"] for k in range(r["n"])]
    values = r["series"][0]["values"]
    before = [v for g, v in zip(grid, values, strict=True) if v is not None and g < ends[_SLOW_FROM - 1]]
    after = [v for g, v in zip(grid, values, strict=True) if v is not None and g > ends[_SLOW_FROM + 3]]
    assert len(before) > 20 and max(before) < 4.2  # the pauses are no slow steps
    assert len(after) > 20 and min(after) > 5.2


def test_a_step_placed_before_the_jobs_start_is_left_undated():
    """Durations that do not fit after the job's `Start:` line (a setup the steps' timer counted) place none
    of the steps they would put before it."""
    _, ends = _nemo_log()
    start = float(int(ends[39]) + 1)  # a second after step 39 ended: the log's first line cannot come later
    lines, _ = _nemo_log(start=start)
    points = triage_log(lines).to_dict()["details"]["log_loss"]
    assert len(points) == 400 - 39 and points[0][0] >= start


# ---- served: the generator's NeMo log under a plain Slurm script, no trainer gauges in the TSDB


def _job(served_job, scenario: str, seed: int):
    return served_job(
        scenario,
        seed,
        "nvidia",
        nodes=8,
        gpus=4,
        hours=1.0,
        exporters=Exporters(trainer_gauges=False),
        log_format="slurm-nemo",
        variants=("sparse_evals",),
    )


def _first_nemo_date(job_dir) -> float:
    log = (job_dir.parent / f"{job_dir.name}.log").read_text()
    m = re.search(r"\[NeMo I (\S+ \S+) ", log)
    assert m is not None
    return dt.datetime.fromisoformat(m.group(1)).replace(tzinfo=_CEST).timestamp()


@pytest.mark.parametrize("seed", [3, 4])
def test_retransmits_as_the_undated_steps_slowed_are_an_rdma_degradation(served_job, seed):
    client, truth, job_dir = _job(served_job, "rdma-degradation", seed)
    assert _first_nemo_date(job_dir) > truth["onset"]  # NeMo's first dated line comes after the onset
    diag = run_diagnosis(client, triage=triage_job(job_dir).to_dict())["diagnosis"]
    assert diag["class"] == "rdma-degradation"
    assert {c["host"] for c in diag["culprits"]} == {c["host"] for c in truth["culprits"]}
    assert abs(diag["onset"] - truth["onset"]) <= 30.0


def test_retransmits_no_step_time_precedes_are_judged_on_their_own(served_job):
    """The same job as if the log timed nothing before NeMo's first dated line (no save report): no step time
    says whether the job slowed at the onset, which is no evidence that it did not."""
    client, truth, job_dir = _job(served_job, "rdma-degradation", 3)
    triage = triage_job(job_dir).to_dict()
    first = _first_nemo_date(job_dir)
    triage["details"]["log_loss"] = [p for p in triage["details"]["log_loss"] if p[0] > first]
    triage["details"].pop("pauses", None)
    result = run_diagnosis(client, triage=triage)
    assert result["diagnosis"]["class"] == "rdma-degradation"
    assert not any("did not slow down" in f["title"] for f in result["findings"])


@pytest.mark.parametrize("seed", [3, 4])
def test_a_healthy_nemo_job_dated_as_sparsely_stays_healthy(served_job, seed):
    client, _truth, job_dir = _job(served_job, "healthy", seed)
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    assert result["diagnosis"]["class"] == "healthy"
    assert not [f for f in result["findings"] if f["severity"] in ("warning", "critical")]
