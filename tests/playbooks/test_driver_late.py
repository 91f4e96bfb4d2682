"""A GPU driver fault that starts minutes before the data ends (#10, a held-out miss).

The `late_driver` variant: 9-10.5 minutes before the data ends one host's GPU reports Xid 119 (a GSP RPC
timeout) and from then on every scrape of the host's GPU exporter is slow and a third of them fail outright
(the target down, no GPU sample) while its node_exporter answers and training runs on. The stretch is shorter
than the timeout rules' 10 minutes only because the data ends: it is censored, not short, and with the Xid on
the same host it is a driver fault on that GPU. A stretch the data's end cuts short without a driver error
(`restart_at_end`: a GPU exporter restarted as the capture is taken) stays a note, and the host whose
node_exporter answers while the job trains on is not dead.
"""

from __future__ import annotations

import numpy as np

from playbooks.detectors._censored import censored_start
from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job


def _diagnose(served_job, scenario, seed, variant, **kw):
    client, truth, job_dir = served_job(
        scenario, seed, "nvidia", variants=(variant,), nodes=8, interval=30.0, **kw
    )
    return run_diagnosis(client, triage=triage_job(job_dir).to_dict()), truth


def test_a_driver_fault_the_data_end_cuts_short_is_a_driver_fault_on_the_xid_gpu(served_job):
    """Slow and failed GPU exporter scrapes on one host from the minute its GPU reports Xid 119 to the data's
    end, 9-10 minutes: a driver fault on that host's GPU from the first slow scrape (main said healthy)."""
    result, truth = _diagnose(served_job, "gpu-driver-fault", 4, "late_driver")
    diag = result["diagnosis"]
    assert diag["class"] == "gpu-driver-fault"
    assert diag["culprits"] == truth["culprits"]
    assert abs(diag["onset"] - truth["onset"]) <= 60
    timeouts = [f for f in result["findings"] if f["title"].startswith("GPU exporter scrapes time out")]
    assert timeouts and timeouts[0]["severity"] == "warning"
    assert "failed while its node_exporter answered" in timeouts[0]["evidence"][0]["interpretation"]


def test_a_gpu_exporter_down_at_the_data_end_without_a_driver_error_is_healthy(served_job):
    """One host's GPU exporter refuses its scrapes for the data's last 5-9 minutes, no Xid, no kernel error,
    its node_exporter answering and the job training on to its end: healthy. The stretch of failed scrapes
    is a note (an outage of the monitoring), and the host is no dead node (main called it a node death)."""
    result, truth = _diagnose(served_job, "healthy", 3, "restart_at_end", gpus=8, hours=None)
    host = truth["red_herrings"]["restart_at_end"].split()[0]
    assert result["diagnosis"]["class"] == "healthy"
    timeouts = [f for f in result["findings"] if f["title"].startswith("GPU exporter scrapes time out")]
    assert timeouts and all(f["severity"] == "info" and f["hosts"] == [host] for f in timeouts)
    assert not any(f["title"].startswith(f"Host {host} stopped") for f in result["findings"])


def test_a_censored_stretch_is_judged_over_what_was_observed():
    """A stretch still going on when the data ends, at least half a window long, is judged by its share of
    departures in each half; one that ended before the data did, or too short a tail, is not censored."""
    on = np.array([0] * 30 + [1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1], bool)
    assert censored_start(on, 20, 0.2) == 30
    ended = np.array([0] * 30 + [1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0], bool)
    assert censored_start(ended, 20, 0.2) is None
    assert censored_start(np.array([0] * 40 + [1] * 6, bool), 20, 0.2) is None
