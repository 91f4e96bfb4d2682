"""Diagnosis of many GPUs: the peer comparison aggregated by Prometheus (the pack's statistics and its few
stand-outs), and the step of queries over one series per GPU bounded by their work."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from playbooks import _diagnose_peers
from playbooks.anomaly import MAD_SCALE, Grid, peer_deviation, robust_spread
from playbooks.diagnose import discover_source, execute, plan, render_query, run_diagnosis
from playbooks.loader import load_playbooks
from playbooks.triage import triage_job
from tests.playbooks.test_diagnose_scenarios import _serve


def test_the_pack_statistics_give_the_rows_the_deviation_the_whole_pack_gave():
    """Judged against the pack's level and the median absolute deviation of its moves (each row's from its
    own usual level), a few rows deviate exactly as they did when every row was there."""
    rng = np.random.default_rng(7)
    values = 60.0 + rng.normal(0, 1.5, size=(200, 80)) + rng.normal(0, 2.0, size=(200, 1))
    values[17, 50:] += 20.0
    values[3, :10] = np.nan
    base = np.zeros(80, bool)
    base[5:40] = True
    dev, spread, med = peer_deviation(values, base)
    with np.errstate(all="ignore"):
        # as peer_expr asks Prometheus: the GPUs' moves from their own usual level (median over the window)
        usual = np.nanmedian(values, axis=1)
        moves = values - usual[:, None]
        mad = robust_spread(moves, axis=0) / MAD_SCALE
        level = np.nanmedian(moves, axis=0) + np.median(usual)
    pack = {"median": level, "mad": mad, "count": np.full(80, 200.0)}
    few = [3, 17, 42]
    dev_p, spread_p, med_p = peer_deviation(values[few], base, pack)
    np.testing.assert_allclose(dev_p, dev[few])
    np.testing.assert_allclose(spread_p, spread)
    np.testing.assert_allclose(med_p, med)


def test_pack_rows_are_kept_apart_from_the_series():
    """A stored result's `stepwise_stat` series become the grid's pack, the others its rows."""
    g = Grid.from_result(
        {
            "start": 0.0,
            "step": 60.0,
            "n": 2,
            "series": [
                {"labels": {"stepwise_stat": "median"}, "values": [50.0, 51.0]},
                {"labels": {"host": "a", "gpu": "1"}, "values": [70.0, None]},
            ],
        }
    )
    assert g.labels == [{"host": "a", "gpu": "1"}] and g.values.shape == (1, 2)
    assert list(g.pack) == ["median"] and g.pack["median"].tolist() == [50.0, 51.0]


def _without_peers():
    return {
        name: replace(pb, queries=tuple(replace(q, peers="") for q in pb.queries))
        for name, pb in load_playbooks().items()
    }


def test_a_few_candidates_name_the_hot_gpu_as_every_gpu_did(served_job, view_root, monkeypatch):
    """With only 2 GPUs per criterion sent back out of 48, the temperature query holds the pack's three
    statistics and at most 4 GPUs, the hot one among them; the diagnosis (class, culprit GPU, onset) is the
    one that reading every GPU's series gave (the onset to within a scrape)."""
    client, truth, job_dir = _serve(
        served_job, view_root, "thermal-straggler", 2, "nvidia", nodes=6, gpus=8, hours=1.5
    )
    triage = triage_job(job_dir).to_dict()
    monkeypatch.setattr(_diagnose_peers, "CANDIDATES", 2)
    monkeypatch.setattr("playbooks._diagnose_query.PEERS_MIN_POINTS", 0)  # 48 GPUs, judged as 8,192 would be
    source = discover_source(client)
    (gpu_plan,) = plan(source, triage=triage, playbooks=["gpu_health"])
    series = execute(client, gpu_plan).results["temp_gpu"]["series"]
    stats = sorted(s["labels"]["stepwise_stat"] for s in series if "stepwise_stat" in s["labels"])
    gpus = [s["labels"] for s in series if "stepwise_stat" not in s["labels"]]
    assert stats == ["count", "mad", "median"] and 1 <= len(gpus) <= 4
    hot = truth["culprits"][0]
    assert {"host": hot["host"], "gpu": hot["gpu"]} in gpus
    few = run_diagnosis(client, triage=triage)["diagnosis"]
    monkeypatch.setattr("playbooks.diagnose.load_playbooks", _without_peers)
    every = run_diagnosis(client, triage=triage)["diagnosis"]
    assert few["class"] == every["class"] == truth["class"]
    assert (
        few["culprits"] == every["culprits"] and {"host": hot["host"], "gpu": hot["gpu"]} in few["culprits"]
    )
    # the pack's median comes from Prometheus in one reading and from every row in the other: the fit that
    # dates the departure may break a grid step apart, never more
    assert abs(few["onset"] - every["onset"]) <= 1.5 * source.interval
    assert abs(few["onset"] - truth["onset"]) <= 3 * source.interval


def test_a_query_over_every_gpu_of_a_large_job_gets_a_coarser_step():
    """Per-host power over 8,192 GPUs for 2 h at 15 s scrapes: 60 s steps (the work of 1,024 GPUs at 15 s);
    the same job's per-host process count, and the power of 64 GPUs, keep the scrape interval."""
    every = {q.name: q for pb in load_playbooks().values() for q in pb.queries}
    kw = {"start": 0.0, "end": 7200.0, "interval": 15.0}
    big = render_query(every["power_by_host"], "amd", hosts=1024, gpus=8192, **kw)
    host = render_query(every["procs_running"], "amd", hosts=1024, gpus=8192, **kw)
    small = render_query(every["power_by_host"], "amd", hosts=8, gpus=64, **kw)
    assert (big.step, host.step, small.step) == (60.0, 15.0, 15.0)
    assert big.end == small.end == 7200.0


def test_the_pack_is_aggregated_only_where_reading_every_gpu_costs_more():
    """Temperature of 1,024 GPUs over 4 h comes back per GPU; of 8,192 GPUs over 2 h, as the pack and its
    stand-outs."""
    temp = next(q for q in load_playbooks()["gpu_health"].queries if q.name == "temp_gpu")
    small = render_query(temp, "amd", start=0.0, end=14400.0, interval=15.0, hosts=128, gpus=1024)
    big = render_query(temp, "amd", start=0.0, end=7200.0, interval=15.0, hosts=1024, gpus=8192)
    assert "stepwise_stat" not in small.promql and "stepwise_stat" in big.promql and "topk(" in big.promql
