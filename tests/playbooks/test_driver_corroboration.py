"""A GPU driver fault is driver errors, recurring scrape timeouts or metric gaps while training runs on
(contract): one stretch of timeouts on one host, without a driver error, is the monitoring's outage.

Generated with the healthy scenario's `exporter_stall` variant (one host's GPU exporter hangs once for
3-6 minutes) and, as the control, the gpu-driver-fault scenario (timeouts at random scrapes from the onset,
dmesg errors on the same host).
"""

from __future__ import annotations

import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job


def _diagnose(served_job, scenario, seed, profile, **kw):
    client, truth, job_dir = served_job(scenario, seed, profile, **kw)
    return run_diagnosis(client, triage=triage_job(job_dir).to_dict()), truth


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
def test_one_stretch_of_exporter_timeouts_without_driver_errors_is_no_driver_fault(served_job, profile):
    """D3 07: one host's GPU exporter times out for a few minutes once, no kernel error: healthy; the
    stretch stays a note. The real fault (timeouts again and again, dmesg errors) is still found."""
    result, truth = _diagnose(served_job, "healthy", 3, profile, variants=("exporter_stall",), nodes=8)
    stalled = truth["red_herrings"]["exporter_stall"].split()[0]
    assert result["diagnosis"]["class"] == "healthy"
    notes = [f for f in result["findings"] if f["class"] == "gpu-driver-fault"]
    assert notes and all(f["severity"] == "info" and f["hosts"] == [stalled] for f in notes)
    result, truth = _diagnose(served_job, "gpu-driver-fault", 3, profile, nodes=8)
    assert result["diagnosis"]["class"] == "gpu-driver-fault"
    assert [c["host"] for c in result["diagnosis"]["culprits"]] == [c["host"] for c in truth["culprits"]]


def test_one_stretch_of_timeouts_with_a_driver_xid_is_a_driver_fault(served_job):
    """E23 09: one stretch of GPU exporter timeouts on a host whose GPU reports Xid 119 (a GSP RPC timeout: the
    driver's own error) is a driver fault on that host, although no kernel error count grew; the stretch alone
    (above) is not."""
    result, truth = _diagnose(served_job, "gpu-driver-fault", 3, "nvidia", variants=("xid_stretch",), nodes=8)
    assert result["diagnosis"]["class"] == "gpu-driver-fault"
    assert [c["host"] for c in result["diagnosis"]["culprits"]] == [c["host"] for c in truth["culprits"]]
    xid = [f for f in result["findings"] if f["title"].startswith("Xid 119 on")]
    assert xid and xid[0]["hosts"] == [truth["culprits"][0]["host"]]
