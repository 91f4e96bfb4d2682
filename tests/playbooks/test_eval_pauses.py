"""Pauses the log names are no slow steps (#10): a trainer that evaluates every few dozen steps (Hugging Face's
`{'eval_loss': ..., 'eval_runtime': 63.2, ...}`, Megatron's `validation loss at iteration N`) or saves a
checkpoint stops training between two step lines. The step time read from the log leaves those spans out
(or takes the evaluation's length out of them), so a slowdown is dated where the training steps' own time
changed, and an RDMA degradation is judged by whether the steps slowed down as the retransmits began."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.log_series import with_log_step_time
from playbooks.triage import triage_job
from playbooks.triage._api import triage_log
from playbooks.triage._pauses import pause_line
from playbooks.triage._state import _State

_T0 = dt.datetime(2026, 4, 17, 17, 0, 0)
_EVALS = (50, 150, 250)  # the steps an evaluation follows


@dataclass
class _Output:
    name: str
    results: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, Any] = field(default_factory=dict)


def _step_times(triage: dict[str, Any]) -> list[float]:
    out = with_log_step_time([_Output("training")], triage, 15.0)
    return [v for v in out[0].results["step_time"]["series"][0]["values"] if v is not None]


def _megatron_log() -> list[str]:
    """Megatron-LM printing every 10th iteration of 14 s; a validation of 70 s after iterations 50, 150, 250."""
    lines, t = ["Fri Apr 17 16:59:00 UTC 2026"], _T0
    for it in range(10, 310, 10):
        t += dt.timedelta(seconds=140 + (70 if it - 10 in _EVALS else 0))
        lines.append(
            f"[{t:%Y-%m-%d %H:%M:%S}] iteration {it:8d}/  500000 | consumed samples: {it * 512} | "
            f"elapsed time per iteration (ms): 14000.0 | lm loss: {3 - it / 1000:.6E} |"
        )
        if it in _EVALS:
            lines.append(
                f" validation loss at iteration {it} | lm loss value: 2.9E+00 | lm loss PPL: 1.8E+01 | "
            )
    return lines


def _hf_log() -> list[str]:
    """A Hugging Face Trainer: tqdm's bar every 10th step of 14 s, the loss dict before it, and after steps 50,
    150 and 250 an evaluation of 63 s (`eval_runtime`), undated as HF prints it."""
    lines = [
        "Fri Apr 17 16:59:00 UTC 2026",
        "***** Running training *****",
        "  Total optimization steps = 300",
    ]
    elapsed = 0.0
    for step in range(10, 310, 10):
        elapsed += 140 + (63.2 if step - 10 in _EVALS else 0.0)
        mm, ss = divmod(int(elapsed), 60)
        lines.append(
            f"{{'loss': {3 - step / 1000:.4f}, 'grad_norm': 1.02, 'learning_rate': 0.0001, 'epoch': 0.1}}"
        )
        lines.append(f" {step // 3:2d}%|###       | {step}/300 [{mm:02d}:{ss:02d}<10:00, 14.00s/it]")
        if step in _EVALS:
            lines.append(
                "{'eval_loss': 2.41, 'eval_runtime': 63.2, 'eval_samples_per_second': 64.8, 'epoch': 0.1}"
            )
    return lines


def test_a_megatron_validation_is_a_pause_and_its_span_is_no_step_time():
    triage = triage_log(_megatron_log()).to_dict()
    assert [p[2] for p in triage["details"]["pauses"]] == [None, None, None]  # no length printed: left out
    times = _step_times(triage)
    assert times and all(v == pytest.approx(14.0) for v in times)


def test_an_hf_evaluation_s_runtime_is_taken_out_of_the_steps_around_it():
    triage = triage_log(_hf_log()).to_dict()
    assert [p[2] for p in triage["details"]["pauses"]] == [63.2, 63.2, 63.2]
    times = _step_times(triage)
    # the bar's elapsed time is in whole seconds
    assert times and all(v == pytest.approx(14.0, abs=0.15) for v in times)


@pytest.mark.parametrize(
    ("line", "after", "length"),
    [
        ("eval at step 300: loss=2.3100", 300, None),
        ("eval metrics after step: 300, loss=2.310, total_weights=8388608", 300, None),
        ("Evaluation took 63.2 s", 7, 63.2),
        ("***** Running Evaluation *****", 7, None),
        ("Validation DataLoader 0: 100%|##########| 50/50 [01:03<00:00,  0.79it/s]", 7, 63.0),
    ],
)
def test_the_evaluation_lines_of_other_trainers_are_pauses(line, after, length):
    st = _State(last_logged=7)
    assert pause_line(st, None, line)
    assert st.pauses == [(after, None, length)]


@pytest.mark.parametrize(
    "line", ["Config param eval_interval: 100", "evaluation_strategy=steps", "loss: 2.3 eval_steps=55"]
)
def test_a_setting_that_names_evaluation_is_no_pause(line):
    st = _State(last_logged=7)
    assert not pause_line(st, None, line) or not st.pauses


def _diagnose(served_job, scenario, seed, *, drop_pauses=False, **kw):
    client, truth, job_dir = served_job(
        scenario,
        seed,
        "nvidia",
        hours=3.0,
        exporters="log-every-10-no-gauges",
        variants=("eval_pauses",),
        **kw,
    )
    triage = triage_job(job_dir).to_dict()
    if drop_pauses:
        triage["details"].pop("pauses", None)
    return run_diagnosis(client, triage=triage), truth


def _slowdown(result):
    return [f for f in result["findings"] if f["title"].startswith("Step time")]


def test_an_rdma_degradation_among_evaluations_is_dated_by_the_steps_own_time(served_job):
    """The step lines every 10th step of 14 s, an evaluation of 60-95 s every 40-60 steps and a save every 40:
    the slowdown's walk back crossed the pauses and dated it 34 min before the retransmits (the RDMA finding
    then read as a job that did not slow down: healthy). Without the pauses it is dated at the onset."""
    result, truth = _diagnose(served_job, "rdma-degradation", 6, nodes=8, gpus=8)
    assert result["diagnosis"]["class"] == "rdma-degradation"
    slow = _slowdown(result)
    # within 3 prints of the onset (the slowdown ramps over 2 min; its walk back used to end 34 min early)
    assert slow and abs(slow[0]["onset"] - truth["onset"]) < 450


def test_retransmits_the_steps_slowed_at_are_an_rdma_degradation_whenever_a_slowdown_is_dated(served_job):
    """The same job as if its evaluations printed nothing: the slowdown is dated far too early, yet the steps
    ran 20 % slower in the 15 min after the retransmits began than in the 15 min before."""
    result, truth = _diagnose(served_job, "rdma-degradation", 6, nodes=8, gpus=8, drop_pauses=True)
    slow = _slowdown(result)
    assert slow and slow[0]["onset"] < truth["onset"] - 900  # what the demotion alone went by
    assert result["diagnosis"]["class"] == "rdma-degradation"


@pytest.mark.parametrize("seed", [3, 6])
def test_evaluations_in_a_healthy_job_are_no_slowdown(served_job, seed):
    result, _ = _diagnose(served_job, "healthy", seed, nodes=8, gpus=8)
    assert result["diagnosis"]["class"] == "healthy"
    assert not [f for f in result["findings"] if f["severity"] in ("warning", "critical")]
    assert not _slowdown(result)
