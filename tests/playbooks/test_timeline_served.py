"""The timeline on generated jobs served by a real Prometheus: the named outliers, a band's queries,
checkpoint and warm-up marks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from playbooks import timeline as tl
from playbooks.profiles import PROFILES
from playbooks.timeline import queries as tl_queries
from playbooks.timeline import traces as tl_traces


def _served_panels(served_job, scenario, profile, keys, **kw):
    client, truth, _ = served_job(scenario, profile=profile)
    start, end = truth["data_range"]
    ctx = tl.context_build(client, PROFILES[profile], start, end)
    return truth, ctx, tl.panels_fetch(client, ctx, keys, start, end, **kw)


@pytest.mark.parametrize("max_lines", [16, 4])
def test_thermal_stragglers_hot_gpu_is_the_named_outlier(served_job, max_lines) -> None:
    """The hot GPU tops the outliers of the temperature and clock panels, as lines or as a band."""
    truth, ctx, panels = _served_panels(
        served_job, "thermal-straggler", "amd", ["gpu_temp", "gpu_clock"], max_lines=max_lines
    )
    (culprit,) = truth["culprits"]
    assert ctx.gpu_series == 16 and ctx.host_series == 4
    for panel in panels:
        assert panel.mode == ("lines" if max_lines == 16 else "band")
        top = panel.outliers[0]
        assert (top["host"], top["gpu"]) == (culprit["host"], culprit["gpu"]), panel.spec.key
        fig = tl.figure_build(panel, ctx, xmode="step")
        assert any(f"{culprit['host']} GPU {culprit['gpu']} (outlier)" == d["name"] for d in fig["data"])


def test_a_band_panel_sends_its_band_as_one_query_and_reads_every_series_once_for_the_scores(
    served_job, monkeypatch
) -> None:
    """At a real Prometheus: min and max come back from one range query; the scores and the median line from
    one range query of every series raw on a coarser grid (no quantile, no subquery), the same numbers PromQL's
    own `max_over_time(abs(x - scalar(quantile(0.5, x)))[range:grid])` and `quantile(0.5, x)` on that grid
    give; then the top-k by label."""
    client, truth, _ = served_job("thermal-straggler", profile="amd")
    start, end = truth["data_range"]
    ctx = tl.context_build(client, PROFILES["amd"], start, end)
    sent: list[tuple[str, str, int]] = []
    api = client._api

    def logged(path, params, *, query):
        data = api(path, params, query=query)
        if path in ("/api/v1/query", "/api/v1/query_range"):
            sent.append((path, params["query"], len(data["result"])))
        return data

    monkeypatch.setattr(client, "_api", logged)
    (panel,) = tl.panels_fetch(client, ctx, ["gpu_temp"], start, end, max_lines=4)
    assert panel.mode == "band"
    plan = tl.panel_queries(tl.PANELS["gpu_temp"], ctx, start, end, max_lines=4)
    # The band and the score run in parallel (either may be answered first); the top-k by label follow the
    # score at once, without waiting for the band.
    scores = [i for i, (_, q, _) in enumerate(sent) if q == plan.queries["score"]]
    assert [sent[i][2] for i in scores] == [ctx.gpu_series], sent  # every GPU's series, once
    bands = [i for i, (_, q, _) in enumerate(sent) if '"stat"' in q]
    assert [sent[i][2] for i in bands] == [2], sent  # min and max: one query
    (top,) = set(range(3)) - set(scores) - set(bands)
    assert top > scores[0] and sent[top][2] == 3, sent  # by label
    assert all(p == "/api/v1/query_range" and "topk" not in q for p, q, _ in sent)
    assert "quantile" not in plan.queries["score"] and "[" not in plan.queries["score"]
    (culprit,) = truth["culprits"]
    assert (panel.outliers[0]["host"], panel.outliers[0]["gpu"]) == (culprit["host"], culprit["gpu"])
    x, res = plan.expr, plan.score_step
    promql = f"max_over_time((abs({x} - scalar(quantile(0.5, {x}))))[{(end - start) * 1000:.0f}ms:{res:g}s])"
    want = {(s.labels["host"], s.labels["gpu"]): s.value for s in client.query(promql, end)}
    first, last = tl_queries.score_grid(start, end, res)
    got, median = tl_traces._device_scores(client.query_range(x, first, last, res), first, res, end)
    assert {(s.labels["host"], s.labels["gpu"]): s.value for s in got} == pytest.approx(want)
    assert panel.outliers[0]["score"] == pytest.approx(want[culprit["host"], culprit["gpu"]])
    assert [t.role for t in panel.traces[:3]] == ["min", "median", "max"]
    _assert_promql_median(client, panel.traces[1], x, first, last, res)
    assert median is not None and np.array_equal(median.t, panel.traces[1].t)
    # drawn as one line: its holes are judged by the score's step, not the band's finer one
    drawn = {d["meta"]["role"]: d for d in tl.figure_build(panel, ctx, xmode="time-utc")["data"]}
    assert drawn["median"]["x"].count(None) <= drawn["max"]["x"].count(None), drawn["median"]["x"][:8]


def _assert_promql_median(client, trace, x, first, last, step) -> None:
    """Assert that a band's median trace is `quantile(0.5, x)` as Prometheus evaluates it on the score grid."""
    (want,) = client.query_range(f"quantile(0.5, {x})", first, last, step)
    assert np.array_equal(trace.t, np.asarray(want.timestamps)), (trace.t, want.timestamps)
    assert np.allclose(trace.v, np.asarray(want.values)), trace.name


@pytest.mark.parametrize(
    ("profile", "panel"), [("amd", "rdma_retransmits"), ("nvidia", "rdma_transmit_wait")]
)
def test_rdma_degraded_host_is_the_named_outlier(served_job, profile, panel) -> None:
    """The degraded host tops the RDMA panel (AMD) or the InfiniBand panel (NVIDIA) in band mode."""
    truth, ctx, (data,) = _served_panels(served_job, "rdma-degradation", profile, [panel], max_lines=2)
    assert data.mode == "band", (ctx.to_dict(), data.message, data.queries)
    assert data.outliers[0]["host"] in {c["host"] for c in truth["culprits"]}


def test_a_served_counter_band_split_on_the_server_matches_prometheuss_band(served_job, monkeypatch) -> None:
    """At a real Prometheus: a counter band is one query of every host's rate (the rate evaluated once, no
    score query, no second round), and its min / median / max and outliers are those PromQL computes."""
    from playbooks.timeline import queries as tl_queries

    client, truth, _ = served_job("rdma-degradation", profile="amd")
    start, end = truth["data_range"]
    ctx = tl.context_build(client, PROFILES["amd"], start, end)
    (split,) = tl.panels_fetch(client, ctx, ["rdma_retransmits"], start, end, max_lines=2)
    monkeypatch.setattr(tl_queries, "SPLIT_MAX_SAMPLES", 0)
    (promql,) = tl.panels_fetch(client, ctx, ["rdma_retransmits"], start, end, max_lines=2)
    assert split.mode == promql.mode == "band"
    assert len(split.queries) == 1 and "rate(" in split.queries[0] and len(promql.queries) == 3
    for ts, tp in zip(split.traces[:3], promql.traces[:3], strict=True):
        assert ts.role == tp.role, ts.role
        if ts.role != "median":  # PromQL's band draws its median on the score's grid
            assert np.array_equal(ts.t, tp.t) and np.allclose(ts.v, tp.v), ts.role
    plan = tl.panel_queries(tl.PANELS["rdma_retransmits"], ctx, start, end, max_lines=2)
    _assert_promql_median(client, promql.traces[1], plan.expr, *tl_queries.score_grid(start, end, plan.score_step),
                          plan.score_step)  # fmt: skip
    assert [o["name"] for o in split.outliers] == [o["name"] for o in promql.outliers]
    assert split.outliers[0]["host"] in {c["host"] for c in truth["culprits"]}


def test_served_job_marks_checkpoints_and_warmup(served_job) -> None:
    """A generated job gets its checkpoint steps from the triage and its warm-up end from the learning rate."""
    from playbooks.triage import triage_job

    client, truth, job_dir = served_job("thermal-straggler")
    ctx = tl.context_build(client, PROFILES["amd"], *truth["data_range"])
    marks = tl.annotations_build(ctx, triage_job(job_dir).to_dict())
    assert [m.step for m in marks if m.kind == "checkpoint"] == [float(s) for s in truth["checkpoint_steps"]]
    warm = next(m for m in marks if m.kind == "warmup-end")
    # The generator's learning rate rises linearly for 20 to 80 steps, then decays.
    assert 20 <= warm.step <= 80
    assert warm.time == pytest.approx(ctx.axis.time_at(warm.step), abs=1.0)


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
def test_served_unique_band_matches_the_aggregated_band(served_job, profile) -> None:
    """Skipping the aggregation (PromQL band) or splitting the aggregated series on the server changes no band
    value and no outlier of a served job."""
    client, truth, _ = served_job("thermal-straggler", profile=profile)
    start, end = truth["data_range"]
    ctx = tl.context_build(client, PROFILES[profile], start, end)
    keys = ["gpu_temp", "gpu_clock"] + (["procs_running"] if profile == "amd" else [])
    assert set(keys) <= ctx.unique, ctx.unique
    bare = tl.panels_fetch(client, ctx, keys, start, end, max_lines=2)
    agg = tl.panels_fetch(client, dataclasses.replace(ctx, unique=frozenset()), keys, start, end, max_lines=2)
    for b, a in zip(bare, agg, strict=True):
        assert b.mode == a.mode == "band"
        assert " by (" not in b.queries[0] and " by (" in a.queries[0]
        for tb, ta in zip(b.traces[:3], a.traces[:3], strict=True):
            assert tb.role == ta.role, (b.spec.key, tb.role)
            if tb.role != "median":  # the PromQL band's median is on the score's grid
                assert np.allclose(tb.v, ta.v, equal_nan=True), (b.spec.key, tb.role)
        plan = tl.panel_queries(tl.PANELS[b.spec.key], ctx, start, end, max_lines=2)
        first, last = tl_queries.score_grid(start, end, plan.score_step)
        _assert_promql_median(client, b.traces[1], plan.expr, first, last, plan.score_step)
        # The aggregated expression is split on the server (few samples), its score taken at every step
        # rather than on the score query's coarser grid: the same outliers, nearly the same scores.
        assert [o["name"] for o in b.outliers] == [o["name"] for o in a.outliers], b.spec.key
        assert [o["score"] for o in b.outliers] == pytest.approx([o["score"] for o in a.outliers], rel=0.05)
    (culprit,) = truth["culprits"]
    assert (bare[0].outliers[0]["host"], bare[0].outliers[0]["gpu"]) == (culprit["host"], culprit["gpu"])
