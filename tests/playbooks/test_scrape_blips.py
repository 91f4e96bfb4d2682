"""Network blips dropping random scrapes across the fleet are no GPU driver fault (#10, held-out misses).

Two held-out healthy jobs: every target, DCGM's and node_exporter's, on every host, lost a few scrapes at
random (0-6 in 390), each written as a timed-out scrape (`up` 0, the timeout as its duration). Main called
them gpu-driver-fault: one host's few isolated 10 s scrapes counted as "timeouts that come and go". The
`scrape_blips` variant draws such blips in any scenario; with a one-off exporter stall beside them (healthy
`exporter_stall`: one host's GPU exporter hangs once for minutes), the stall is flagged and the blips on the
same host made it recur. Isolated timeouts at the fleet's own rate are the network's; a real driver fault's
timeouts (dozens of episodes from its onset) stay a warning.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from playbooks.anomaly import Grid
from playbooks.diagnose import run_diagnosis
from playbooks.recurrence import recurs
from playbooks.triage import triage_job


def _diagnose(served_job, scenario, seed, variants):
    client, truth, job_dir = served_job(scenario, seed, "nvidia", variants=variants, nodes=8)
    return run_diagnosis(client, triage=triage_job(job_dir).to_dict()), truth


def test_an_exporter_stall_among_fleet_wide_scrape_blips_is_no_driver_fault(served_job):
    """One host's GPU exporter hangs once, and every target of the fleet loses a few scrapes at random:
    healthy, the stall a note (main: gpu-driver-fault, a warning on the stalled host)."""
    result, truth = _diagnose(served_job, "healthy", 1, ("exporter_stall", "scrape_blips"))
    assert result["diagnosis"]["class"] == "healthy"
    assert not [f for f in result["findings"] if f["severity"] in ("warning", "critical")]
    stalled = truth["red_herrings"]["exporter_stall"].split()[0]
    notes = [f for f in result["findings"] if f["class"] == "gpu-driver-fault"]
    assert notes and all(f["severity"] == "info" and f["hosts"] == [stalled] for f in notes)
    # the note says why it is no driver fault, whichever of the two it was (one outage, or the fleet's rate)
    timeouts = [f for f in notes if "time out" in f["title"]]
    assert timeouts and all("no more than the fleet's own lost scrapes" in f["title"] for f in timeouts)


def test_a_driver_fault_among_fleet_wide_scrape_blips_is_still_found(served_job):
    """The real fault (timeouts again and again from the onset, dmesg errors) with the same blips around it:
    still a driver fault on its host, from its onset."""
    result, truth = _diagnose(served_job, "gpu-driver-fault", 3, ("scrape_blips",))
    diag = result["diagnosis"]
    assert diag["class"] == "gpu-driver-fault"
    assert [c["host"] for c in diag["culprits"]] == [c["host"] for c in truth["culprits"]]
    assert abs(diag["onset"] - truth["onset"]) <= 60


def _ctx(scrape: np.ndarray, up: np.ndarray) -> SimpleNamespace:
    t = np.arange(scrape.shape[1]) * 15.0
    labels = [{"host": f"h{i}"} for i in range(scrape.shape[0])]
    grids = {"scrape": Grid(t=t, labels=labels, values=scrape), "up": Grid(t=t, labels=labels, values=up)}
    return SimpleNamespace(grid=grids.get, source=SimpleNamespace(interval=15.0))


def _fleet(rate: float, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """12 hosts x 420 scrapes: every GPU exporter and node_exporter loses scrapes at `rate`, at random."""
    rng = np.random.default_rng(seed)
    scrape = np.where(rng.random((12, 420)) < rate, 10.0, 0.025 + 0.004 * rng.random((12, 420)))
    up = np.where(rng.random((12, 420)) < rate, 0.0, 1.0)
    return scrape, up


def test_isolated_timeouts_at_the_fleets_rate_do_not_recur():
    """A host with one outage and three isolated timeouts, where every target loses a scrape in 150: at the
    fleet's rate, no recurrence; the same host where nobody else ever times out, or with dozens of timeouts
    from an onset on, recurs. A timeout at an instant its node_exporter failed too is the network's."""
    scrape, up = _fleet(1 / 150)
    scrape[0] = 0.025
    scrape[0, 100:116] = 10.0  # the outage
    scrape[0, [40, 220, 330]] = 10.0  # three isolated timeouts
    up[0] = 1.0
    assert not recurs(_ctx(scrape, up), ["h0"], 3, "scrape", "up", 1e-3)
    quiet = np.where(scrape[1:] > 5, 0.025, scrape[1:])
    alone = np.vstack([scrape[:1], quiet])
    assert recurs(_ctx(alone, np.ones_like(up)), ["h0"], 3, "scrape", "up", 1e-3)
    shared = up.copy()
    shared[0, [40, 220, 330]] = 0.0  # lost on both targets at once: the network
    assert not recurs(_ctx(alone, shared), ["h0"], 3, "scrape", "up", 1e-3)
    fault = scrape.copy()
    fault[0, 200:] = np.where(np.random.default_rng(1).random(220) < 0.45, 10.0, 0.025)
    assert recurs(_ctx(fault, up), ["h0"], 3, "scrape", "up", 1e-3)
