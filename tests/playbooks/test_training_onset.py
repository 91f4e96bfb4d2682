"""A training instability is dated at the earliest training-level move (contract), from the TSDB or the
log's per-step losses, whichever is finer (D3 16: trainer gauges refreshed every 30 s, the loss left its
level at one step's line minutes before the gauge showed it).

Generated with the training-instability scenario's `sparse_gauges` variant: the trainer's bridge refreshes
its gauges every 60-120 s, the log prints every step's loss.
"""

from __future__ import annotations

import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job


@pytest.mark.parametrize(("profile", "seed"), [("amd", 1), ("nvidia", 2), ("amd", 3)])
def test_an_instability_is_dated_from_the_logs_per_step_losses_when_the_gauges_are_sparse(
    served_job, profile, seed
):
    """The gauges see the jump up to two minutes late; the log's step lines date it within a scrape."""
    client, truth, job_dir = served_job("training-instability", seed, profile, variants=("sparse_gauges",))
    assert "sparse_gauges" in truth["variants"]
    diag = run_diagnosis(client, triage=triage_job(job_dir).to_dict())["diagnosis"]
    assert diag["class"] == "training-instability"
    assert abs(diag["onset"] - truth["onset"]) <= truth["interval_s"]
