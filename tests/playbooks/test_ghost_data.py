"""Ghost data of any length (#10): an exporter frozen 5-15 min (generator variant `short_freeze`, mid-run
until a restart or the data's last minutes) is found on its host and dated at the freeze, at several scrape
intervals; healthy jobs under the deployments that repeat values (DCGM's 30 s collection, an exporter that
comes up late, coarse scrapes) stay healthy. A frozen node_exporter (variant `node_freeze`: its counters
constant, `up` still 1, the GPU exporter live) is ghost data too, also without the `stat` collector (its
interfaces' bytes then tell it), and the summary names what froze. Built
by the generator, served by a real Prometheus."""

from __future__ import annotations

import pytest

from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job


def _diagnose(served_job, scenario, seed, profile, **kw):
    client, truth, job_dir = served_job(scenario, seed, profile, **kw)
    return run_diagnosis(client, triage=triage_job(job_dir).to_dict()), truth


@pytest.mark.parametrize(
    ("profile", "seed", "interval"),
    [("nvidia", 2, 15.0), ("amd", 3, 30.0), ("nvidia", 5, 10.0), ("amd", 8, 60.0)],
)
def test_an_exporter_frozen_for_minutes_is_ghost_data(served_job, profile, seed, interval):
    result, truth = _diagnose(
        served_job, "monitoring-ghost-data", seed, profile, interval=interval, variants=("short_freeze",)
    )
    secs, _ = truth["variants"]["short_freeze"]
    assert 300 <= secs <= 900
    diag = result["diagnosis"]
    assert diag["class"] == "monitoring-ghost-data"
    assert [c["host"] for c in diag["culprits"]] == [c["host"] for c in truth["culprits"]]
    assert abs(diag["onset"] - truth["onset"]) <= 1.5 * interval
    assert "The GPU exporter on " in diag["summary"] and "GPU metrics" in diag["summary"]


@pytest.mark.parametrize(
    ("seed", "interval", "kw"),
    [(2, 15.0, {}), (4, 30.0, {}), (6, 30.0, {"exporters": "few-node-collectors"})],
)
def test_a_frozen_node_exporter_is_ghost_data(served_job, seed, interval, kw):
    # few-node-collectors: node_exporter without its `stat` collector (no context switches): the bytes its
    # interfaces sent are what a live host never holds still
    result, truth = _diagnose(
        served_job,
        "monitoring-ghost-data",
        seed,
        "nvidia",
        interval=interval,
        variants=("node_freeze",),
        **kw,
    )
    assert truth["variants"]["node_freeze"]
    diag = result["diagnosis"]
    assert diag["class"] == "monitoring-ghost-data"
    assert [c["host"] for c in diag["culprits"]] == [c["host"] for c in truth["culprits"]]
    assert abs(diag["onset"] - truth["onset"]) <= 1.5 * interval
    titles = [f["title"] for f in result["findings"] if f["class"] == "monitoring-ghost-data"]
    assert titles and all("node_exporter" in x for x in titles)  # the node_exporter's rule, not the GPU's
    # the summary says what froze and whose data it spoils: the host's node data, not its GPUs'
    assert "The node_exporter on " in diag["summary"] and "host metrics" in diag["summary"]
    assert "GPU" not in diag["summary"].split(" Also seen:")[0]


@pytest.mark.parametrize(
    ("profile", "seed", "kw"),
    [
        ("nvidia", 3, {"exporters": "dcgm-30s"}),
        ("nvidia", 4, {"exporters": "late-exporter"}),
        ("amd", 5, {"interval": 60.0}),
        ("nvidia", 6, {"exporters": "dcgm-30s", "interval": 10.0}),
        ("nvidia", 7, {"exporters": "few-node-collectors", "interval": 30.0}),
    ],
)
def test_healthy_jobs_whose_exporters_repeat_values_stay_healthy(served_job, profile, seed, kw):
    result, _ = _diagnose(served_job, "healthy", seed, profile, **kw)
    assert result["diagnosis"]["class"] == "healthy"
    assert not [f for f in result["findings"] if f["class"] == "monitoring-ghost-data"]
