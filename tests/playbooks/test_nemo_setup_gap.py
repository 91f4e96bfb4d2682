"""NeMo's undated step lines after a setup that took minutes: placed between the dated lines around them (#10,
a training instability dated 47 scrape intervals early).

Under `srun -l` NeMo dates its setup lines and its save reports, validations and the end, never a step. An
undated step line used to be placed its own duration after the last dated line before it: after the setup's
last line, while the model's build and the data loaders' warm-up took minutes more, every step before the
next dated line was early by all that time, and so was the loss's blow-up among them. A step line is now
never before the dated line that precedes it nor after the one that follows it (less the pause that line
times), and the gap after the setup's lines is the setup's."""

from __future__ import annotations

import datetime as dt

import pytest

from playbooks.triage._api import triage_log

_PST = dt.timezone(dt.timedelta(hours=-8))
_START = dt.datetime(2027, 1, 14, 14, 29, 56, tzinfo=_PST).timestamp()
_SETUP_END = _START + 28.0  # NeMo's last dated setup line
_BEGIN = _START + 310.0  # the first step starts: the model's build and the data loaders took 282 s more
_STEP_S = 4.25


def _local(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, _PST).strftime("%Y-%m-%d %H:%M:%S")


def _glog(ts: float) -> str:
    d = dt.datetime.fromtimestamp(ts, _PST)
    return f"{d:%m%d %H:%M:%S}.{int(ts * 1e6) % 10**6:06d}"


def _step(s: int, loss: str) -> str:
    return (
        f" 0: Training epoch 0, iteration {s}/9999 | lr: 0.0003 | global_batch_size: 512 | global_step: {s} | "
        f"reduced_train_loss: {loss} | train_step_timing in s: {_STEP_S:.3f} | consumed_samples: {512 * (s + 1)}"
    )


def _log(
    steps: int, nan_from: int | None, save_at: int | None = None, valid_at: tuple[int, ...] = ()
) -> tuple[list[str], dict[int, float], float]:
    """A NeMo job under `srun -l`: dated setup, undated steps (a save's report, a validation between them), then
    the end: a NaN the trainer raised on (the agent's dated failure a few seconds later), else a hung collective
    the watchdog reports ten minutes later. Returns the lines, each step's true end and the end line's time."""
    lines = [
        "SLURM_JOB_ID=106218037",
        f"Start: {dt.datetime.fromtimestamp(_START, _PST):%a %b %d %H:%M:%S} PST 2027",
        "+ srun -l torchrun --nnodes=8 --nproc-per-node=8 train.py",
        f" 0: [NeMo I {_local(_START + 25)} nemo_logging:393] Experiments will be logged at /results/llama3-8b",
        f" 0: [NeMo I {_local(_SETUP_END)} nemo_logging:393] World size: 64, tensor_model_parallel_size: 8",
    ]
    t, ends = _BEGIN, {}
    for s in range(steps):
        t += _STEP_S
        ends[s] = t
        lines.append(_step(s, "nan" if nan_from is not None and s >= nan_from else f"{9.0 - s * 0.01:.4f}"))
        if s == save_at:
            lines.append(
                f" 0: [NeMo I {_local(t + 41.5)} nemo_logging:393] Global Checkpoint Save : Rank: 0 : "
                f"Iteration: {s} : Start time: {t:.3f}s : Save duration: 41.500s"
            )
            t += 41.5
        if s in valid_at:
            t += 30.0
            lines.append(
                f" 0: [NeMo I {_local(t)} nemo_logging:393] validation at step {s}: val_loss=5.4490 (30.0s)"
            )
    if nan_from is not None:
        end = t + 21.0
        lines += [
            " 0: Traceback (most recent call last):",
            " 0: RuntimeError: Rank 0: found NaN in local grad norm in backward pass before data-parallel "
            "communication collective",
            f" 0: E{_glog(end)} 1200 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
            "local_rank: 4 (pid: 32576) of binary: /usr/bin/python3",
        ]
    else:
        end = t + 600.0
        lines.append(
            f" 0: [rank0]:[E{_glog(end)} 3100 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=40017, OpType=ALLREDUCE, NumelIn=33554432, NumelOut=33554432, "
            "Timeout(ms)=600000) ran for 600037 milliseconds before timing out."
        )
    return lines, ends, end


def _times(lines: list[str]) -> tuple[dict[int, float], dict]:
    t = triage_log(lines).to_dict()
    steps = t["details"]["log_loss_steps"]
    return dict(zip(steps, (p[0] for p in t["details"]["log_loss"]), strict=True)), t


def test_steps_before_a_save_report_end_when_the_save_began_not_right_after_the_setup():
    """The held-out shape: the blow-up before the first save; its report's own clock dates its step."""
    lines, ends, _ = _log(260, nan_from=240, save_at=150)
    times, t = _times(lines)
    for s in (0, 100, 150, 151, 239, 259):
        assert times[s] == pytest.approx(ends[s], abs=1.5), s
    assert t["details"]["nonfinite_loss"]["time"] == pytest.approx(ends[240], abs=1.5)


def test_steps_before_a_validation_end_its_length_before_its_line():
    lines, ends, _ = _log(200, nan_from=190, valid_at=(120,))
    times, _t = _times(lines)
    for s in (0, 60, 120, 121, 199):
        assert times[s] == pytest.approx(ends[s], abs=1.5), s


def test_the_only_run_of_steps_ends_by_the_failure_the_trainer_raised_on_its_nan():
    """No dated line between the setup and the end: the trainer's NaN report, undated, then the agent's dated
    failure seconds later. The steps ended by then (not at the setup's last line plus their durations)."""
    lines, ends, end = _log(200, nan_from=185)
    times, t = _times(lines)
    for s in (0, 100, 199):
        assert ends[s] - 1.0 <= times[s] <= end, s
        assert times[s] - ends[s] < 25.0, s  # the seconds between the last step and the agent's report
    assert ends[185] - 1.0 <= t["details"]["nonfinite_loss"]["time"] <= end


def test_a_hung_jobs_only_run_of_steps_is_not_moved_to_its_watchdogs_report():
    """The gap after the last step of a hang is the watchdog's wait: the steps keep the earliest times their
    durations give (the GPUs' power dates them better in the timeline)."""
    lines, ends, _ = _log(150, nan_from=None)
    times, _t = _times(lines)
    assert times[149] == pytest.approx(_SETUP_END + 150 * _STEP_S, abs=1.0)
    assert times[149] < ends[149]


def test_durations_that_overrun_the_next_dated_line_are_scaled_to_end_by_it():
    """A timer that counts more than the step ran (or a clock a little behind) never puts a step line after the
    dated line that follows it: the durations between two validations are scaled to fit between them."""
    lines, ends, _ = _log(200, nan_from=190, valid_at=(60, 120))
    at = next(i for i, ln in enumerate(lines) if "validation at step 120" in ln)
    early = ends[120] + 30.0 - 20.0  # the validation's line 20 s earlier than its steps' durations say
    lines[at] = (
        f" 0: [NeMo I {_local(early)} nemo_logging:393] validation at step 120: val_loss=5.4490 (30.0s)"
    )
    times, _t = _times(lines)
    assert times[61] >= ends[60] + 30.0 - 1.0  # after the validation before them
    assert max(times[s] for s in range(61, 121)) <= early - 30.0 + 1.0
    assert all(times[s] < times[s + 1] for s in range(61, 120))
    assert times[60] == pytest.approx(ends[60], abs=1.5)
