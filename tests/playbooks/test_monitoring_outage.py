"""A monitoring outage (Prometheus restarted: no sample of any series, `up` included, for 2-4 minutes,
fleet-wide) as a red herring under the scenarios (#10, held-out D6): the generator's `prometheus-outage`
perturbation, and diagnoses it must not change. A window where the monitoring saw nobody is neither evidence
of a fault nor of health; a silence of everyone is not one host's silence.
"""

from __future__ import annotations

import numpy as np
import pytest

from playbooks.detectors._base import _blind, _gaps
from playbooks.diagnose import run_diagnosis
from playbooks.prometheus import PrometheusClient
from playbooks.triage import triage_job

OUTAGE = {"profile": "nvidia", "nodes": 8, "hours": 1.0, "exporters": "prometheus-outage"}


def _diagnose(served_job, scenario, seed, **kw):
    opts = OUTAGE | kw
    client, truth, job_dir = served_job(scenario, seed, opts.pop("profile"), **opts)
    return run_diagnosis(client, triage=triage_job(job_dir).to_dict()), truth, client


def _count(client: PrometheusClient, query: str, at: float) -> int:
    return len(client.query(query, at))


@pytest.mark.parametrize(("scenario", "seed"), [("heartbeat-false-positive", 70), ("host-oom", 70)])
def test_the_outage_hides_every_series_for_minutes_never_the_onset(served_job, scenario, seed):
    """Nothing is stored in the window (not `up`, not the trainer's gauges), everything is around it; the
    window is in the truth's red herrings, and leaves the incident's onset visible (host-oom 70: the only
    room is before the onset, which the first draw covered)."""
    result, truth, client = _diagnose(served_job, scenario, seed)
    t0, t1 = truth["red_herrings"]["monitoring_outage"]
    assert 120 <= t1 - t0 <= 240
    onset = truth["onset"]
    assert onset is not None and not (t0 - 2 * truth["interval_s"] <= onset <= t1 + truth["interval_s"])
    mid = (t0 + t1) / 2
    for q in ('{__name__=~".+"}', "up"):
        assert _count(client, f"{q}[{int(t1 - t0) // 2 - 10}s]", mid) == 0
        assert _count(client, f"{q}[60s]", t0) > 0
    assert result["diagnosis"]["class"] == truth["class"]


@pytest.mark.parametrize("seed", [70, 71, 74])
def test_a_heartbeat_false_positive_across_an_outage_keeps_its_accused_alive(served_job, seed):
    """Seeds 70 and 71 were collective-hang: between the heartbeat-stop time and the kill the outage left
    every host without samples and `up`, which the presence check took as the accused hosts' silence. Seed 74
    too: the outage ended 8 min before the heartbeats stopped, but lay in the one window the scrape interval
    was read from (16.8 s for 15 s: coarser grids left 3 instants to judge the accused by, one out of step)."""
    result, truth, _ = _diagnose(served_job, "heartbeat-false-positive", seed)
    assert truth["red_herrings"]["monitoring_outage"]
    diag = result["diagnosis"]
    assert diag["class"] == "heartbeat-false-positive", diag["summary"]
    assert diag["culprits"] == []
    assert abs(diag["onset"] - (truth["crash_time"] - truth["heartbeat_timeout_s"])) <= truth["interval_s"]


def test_a_silence_of_everyone_is_no_hosts_gap():
    up = np.ones((4, 20))
    up[:, 8:12] = np.nan  # the monitoring saw nobody
    blind = _blind(_grid(up))
    assert blind[8:12].all() and not blind[:8].any()
    assert not _gaps(up[0], blind)
    up[1, 12:14] = 0.0  # one host down on its own, after the outage: its silence
    assert _gaps(up[1], _blind(_grid(up)))
    assert _gaps(up[0][:10]), "without the fleet's view the outage looks like the host's silence"
    assert _gaps(np.array([1.0, np.nan, np.nan]), _blind(_grid(np.array([[1.0, np.nan, np.nan]]))))


def _grid(values):
    from playbooks.anomaly import Grid

    return Grid(
        t=15.0 * np.arange(values.shape[1]),
        labels=[{"host": str(i)} for i in range(len(values))],
        values=values,
    )


def test_an_outage_in_the_middle_of_the_data_does_not_lengthen_the_scrape_interval():
    """One hour of 15 s scrapes with 192 s without any sample mid-way: the one window read in the middle held
    107 samples of 120 (16.8 s, every grid coarsened; heartbeat-false-positive 74 lost its accused-alive
    finding), a window clear of the outage holds 120."""
    from types import SimpleNamespace

    from playbooks._diagnose_source import _scrape_interval
    from playbooks.profiles import PROFILES

    start, end, hole = 0.0, 3600.0, (2400.0, 2592.0)

    class Client:
        def query(self, expr, at):
            lost = max(0.0, min(at, hole[1]) - max(at - 1800.0, hole[0]))
            return [SimpleNamespace(value=float(int((1800.0 - lost) / 15.0)))]

    assert _scrape_interval(Client(), PROFILES["nvidia"], {"up": True}, start, end) == 15.0
