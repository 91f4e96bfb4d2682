"""A silent exporter's last values, held by Prometheus's lookback, are not measurements (#10).

A TSDB built with promtool (an outside corpus, our generator) has no staleness markers: for up to five
minutes after a host's GPU exporter went silent, a range query repeats its GPUs' last values. Generated with
the healthy scenario's `stall_in_dip` variant (one host's exporter stalls 4-5 minutes as every GPU of the job
cools), the held values stand hot above a pack that cooled: the peer rules must not read them as a level.
"""

from __future__ import annotations

import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job


@pytest.mark.parametrize(("profile", "seed"), [("amd", 1), ("nvidia", 2), ("nvidia", 3)])
def test_values_held_through_an_exporter_stall_are_no_thermal_straggler(served_job, profile, seed):
    client, truth, job_dir = served_job("healthy", seed, profile, variants=("stall_in_dip",), nodes=8)
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    assert result["diagnosis"]["class"] == "healthy"
    # a warm host's context note (info, another host) may stay; nothing may read the stalled host as hot
    stalled = truth["red_herrings"]["exporter_stall"].split()[0]
    thermal = [f for f in result["findings"] if f["class"] == "thermal-straggler"]
    assert not [f for f in thermal if f["severity"] != "info" or stalled in f["hosts"]]
