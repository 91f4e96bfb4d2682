"""Training-instability onsets dated from the log as the log orders them (#10).

- an undated report of a NaN (a traceback) comes after every step line the log printed before it, however
  those lines were timed (print-style lines carry no time: they are placed from their own durations);
- where the log's step times are inferred (a progress bar's clock) and the TSDB has a step gauge, a step the
  log names is dated by when the gauge reached it;
- a loss that blows up between two prints of a log that prints every 10th step, then turns NaN in an undated
  traceback: the blow-up the prints show began the instability, dated between the last normal print and the
  first that shows it (interval-censored), not at the NaN.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import numpy as np
import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.log_series import gauge_step_times
from playbooks.synth import Exporters, _log, _sim
from playbooks.triage import triage_job, triage_log

_ABSL = re.compile(r"I(\d{4}) (\d\d:\d\d:\d\d\.\d+) \d+ metric_logger")


def _log_of(tmp_path: Path, scenario: str, variants: tuple[str, ...], seed: int) -> list[str]:
    job = _sim.simulate(_sim.plan(scenario, seed, 4, profile="nvidia", interval=15.0, variants=variants))
    job.exporters, job.log_format = Exporters(), ""
    (tmp_path / "job").mkdir(parents=True)
    _log.write_log(job, tmp_path / "job.log", "job")
    return (tmp_path / "job.log").read_text().splitlines()


def test_an_undated_nan_report_comes_after_the_undated_step_lines_before_it(tmp_path):
    """Seed 5's step lines are print-style (no stamp): the triage times them from the barrier and their own
    seconds. The NaN traceback after them is no earlier than the last of them (it used to take the last
    dated line's time: the barrier's, before the first step)."""
    t = triage_log(_log_of(tmp_path, "training-instability", ("nan_traceback",), seed=5))
    assert t.details["last_step_time_estimated"]  # the step lines were placed, not read
    bad = t.details["nonfinite_loss"]
    assert bad["undated"]
    assert bad["time"] >= t.progress["last_step_time"] > t.details["first_step_time"]


def _prints(job_dir: Path, year: int) -> list[tuple[float, float]]:
    """(time, loss) of rank 0's dated step lines (absl's stamp is UTC and names no year)."""
    out = []
    for line in (job_dir.parent / f"{job_dir.name}.log").read_text().splitlines():
        m = _ABSL.search(line) if line.startswith("0: ") and "completed step:" in line else None
        if m:
            d = dt.datetime.strptime(f"{year}{m.group(1)} {m.group(2)}", "%Y%m%d %H:%M:%S.%f")
            out.append((d.replace(tzinfo=dt.UTC).timestamp(), float(line.rsplit("loss: ", 1)[1])))
    return out


def test_a_blow_up_between_prints_before_an_undated_nan_is_the_onset(served_job):
    """A step line every 10th step, no training gauges, 30 s scrapes: the loss falls steadily, one print shows
    it tripled, then the trainer raises on a NaN (an undated traceback). The instability began between the last
    normal print and that one; it used to be dated at the NaN (the middle of the span after the last print)."""
    client, truth, job_dir = served_job(
        "training-instability",
        10,
        "nvidia",
        interval=30.0,
        exporters="log-every-10-no-gauges",
        variants=("blowup_traceback",),
    )
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    d = result["diagnosis"]
    assert d["class"] == "training-instability"
    prints = _prints(job_dir, dt.datetime.fromtimestamp(truth["onset"], dt.UTC).year)
    k = next(
        i for i in range(1, len(prints)) if prints[i][1] > 2 * prints[i - 1][1]
    )  # the print that shows it
    assert prints[k - 1][0] <= d["onset"] < prints[k][0]
    assert abs(d["onset"] - truth["onset"]) <= 3 * truth["interval_s"]


def test_a_step_gauge_dates_the_steps_it_sampled():
    """A gauge of the last completed step, scraped every 10 s: one step a scrape completes half-way between
    the scrape before it and the one that shows it; ten a scrape, evenly. Before its first sample, beyond its
    last value, it cannot tell. After a restart (the counter went back) the last run's samples tell."""
    t = np.arange(6) * 10.0
    assert gauge_step_times(t, np.array([0.0, 1, 2, 3, 4, 5]), [3, 0, 9]) == [25.0, None, None]
    ten = gauge_step_times(t, np.array([0.0, 10, 20, 30, 40, 50]), [21, 30])
    assert ten == pytest.approx([20.5, 29.5])
    again = gauge_step_times(t, np.array([40.0, 41, 42, 30, 31, 32]), [31])
    assert again == [35.0]


def test_a_nan_under_a_late_started_progress_bar_is_dated_by_the_step_gauge(served_job):
    """Hugging Face's Trainer under Slurm, 10 s scrapes, trainer gauges in the TSDB: its undated loss dicts,
    each followed by tqdm's bar, whose clock began minutes after the dated "Running training" the triage
    places it from. The loss climbs, turns NaN a few steps later (its dict before the bar's next step).
    The NaN's step is dated by when the step gauge reached it, after the gradient norm's jump it ends: the
    onset is that jump's. It used to be the bar's time, minutes before the jump."""
    client, truth, job_dir = served_job(
        "training-instability",
        1,
        "nvidia",
        interval=10.0,
        log_format="srun-hf",
        variants=("climb_to_nan",),
    )
    triage = triage_job(job_dir).to_dict()
    d = run_diagnosis(client, triage=triage)["diagnosis"]
    assert d["class"] == "training-instability"
    assert abs(d["onset"] - truth["onset"]) <= 2 * truth["interval_s"]
    assert triage["details"]["step_times_inferred"]  # the bar's clock, not its lines'
    assert isinstance(triage["details"]["nonfinite_loss"]["step"], int)
