"""The step time read from a log's timed step lines (#10): per training step, whatever the log interval."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from playbooks.log_series import with_log_step_time


@dataclass
class _Output:
    name: str
    results: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, Any] = field(default_factory=dict)


def _triage(every: int, step_s: float, lines: int) -> dict[str, Any]:
    """A log printing every `every`-th step of `step_s` seconds, `lines` timed step lines with a loss."""
    points = [[1000.0 + k * every * step_s, 5.0] for k in range(lines)]
    return {
        "job": {"first_step": 0, "last_step": every * (lines - 1)},
        "details": {"log_loss": points, "steps_logged": lines},
    }


@pytest.mark.parametrize("every", [1, 10, 50])
def test_the_step_time_is_per_step_when_the_trainer_logs_every_nth_step(every: int) -> None:
    out = with_log_step_time([_Output("training")], _triage(every, 4.0, 60), 15.0)
    values = [v for v in out[0].results["step_time"]["series"][0]["values"] if v is not None]
    assert values and all(v == pytest.approx(4.0) for v in values)


def test_without_step_numbers_the_lines_are_taken_one_step_apart() -> None:
    triage = _triage(10, 4.0, 60)
    triage["job"] = {}
    out = with_log_step_time([_Output("training")], triage, 15.0)
    values = [v for v in out[0].results["step_time"]["series"][0]["values"] if v is not None]
    assert values and all(v == pytest.approx(40.0) for v in values)


def test_a_step_time_gauge_in_the_tsdb_is_kept() -> None:
    gauge = {"kind": "range", "series": []}
    out = with_log_step_time([_Output("training", {"step_time": gauge})], _triage(10, 4.0, 60), 15.0)
    assert out[0].results["step_time"] is gauge
