"""A log that prints every Nth step dates no stall at its last print (#10, corpus E seed 23 case 25).

Many trainers print their step line (or refresh tqdm's bar) every 10th or 20th step and train quietly
between: the last printed step is the last one the log saw, not the last one the job ran. Without a step
gauge, a hang read from the log alone began as much as one print interval early. Here the generator's
torchtitan log (no training gauges in the TSDB) keeps only every Nth step line, as such a trainer prints
it, so the stall falls between two prints; the job's GPUs (at their training level until the stall) date
it, no later than one print interval after the last print. Built by the generator, served by a real
Prometheus."""

from __future__ import annotations

import re
import shutil

import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.synth import Exporters
from playbooks.triage import triage_job

#: the trainer prints one step line in this many (the generator's hangs stop at step 80, which a print every
#: 10th or 20th step would name: every 25th leaves it between two prints)
EVERY = 25
#: a job of 8 nodes without training gauges (the log's steps stand in for them), torchtitan's dated step lines
JOB = {
    "nodes": 8,
    "gpus": 4,
    "interval": 15.0,
    "hours": 1.0,
    "exporters": Exporters(trainer_gauges=False),
    "log_format": "kubectl-titan",
}
_STEP = re.compile(r"\[titan\].* step:\s*(\d+)\s")


def _printed_every(job_dir, tmp_path, every: int):
    """Return a copy of the job's log keeping every `every`-th step line (its other lines as they are)."""
    out = tmp_path / "job"
    shutil.copytree(job_dir, out, ignore=shutil.ignore_patterns("prometheus"))
    for log in (f for f in out.iterdir() if f.name != "truth.json"):
        lines = log.read_text().splitlines(keepends=True)
        kept = [x for x in lines if not (m := _STEP.search(x)) or int(m.group(1)) % every == 0]
        log.write_text("".join(kept))
    return out


@pytest.mark.parametrize(
    ("scenario", "seed"), [("collective-hang", 2), ("collective-hang", 4), ("node-death", 2)]
)
def test_a_stall_between_two_prints_is_dated_by_the_gpus(served_job, tmp_path, scenario, seed):
    """A stall between two of the log's prints is dated by the GPUs, within two scrapes."""
    client, truth, job_dir = served_job(scenario, seed, "nvidia", **JOB)
    triage = triage_job(_printed_every(job_dir, tmp_path, EVERY)).to_dict()
    assert triage["job"]["last_step"] % EVERY == 0  # the log's last print, steps before the stall
    diag = run_diagnosis(client, triage=triage)["diagnosis"]
    assert diag["class"] == scenario
    assert {c["host"] for c in diag["culprits"]} == {c["host"] for c in truth["culprits"]}
    assert abs(diag["onset"] - truth["onset"]) <= 2 * JOB["interval"]


def test_a_stall_within_a_minute_of_the_last_print_is_dated_by_the_gpus(served_job, tmp_path):
    """Corpus F seed 33 case 00 (torchtitan printing every 10th step, 47 s apart, scraped every 5 s): the
    GPUs trained 43 s past the last print, less than the minute a step gauge may lag by, and the stall was
    dated at the print, 8.6 scrapes early. The GPUs' power falls within a grid step or two of the stall:
    here (5-s scrapes, every 11th step printed, seed 2) 51 s after the last print, and dated so."""
    job = JOB | {"interval": 5.0}
    client, truth, job_dir = served_job("collective-hang", 2, "nvidia", **job)
    triage = triage_job(_printed_every(job_dir, tmp_path, 11)).to_dict()
    assert 30 < truth["onset"] - triage["progress"]["last_step_time"] < 60
    diag = run_diagnosis(client, triage=triage)["diagnosis"]
    assert diag["class"] == "collective-hang"
    assert abs(diag["onset"] - truth["onset"]) <= 2 * job["interval"]
