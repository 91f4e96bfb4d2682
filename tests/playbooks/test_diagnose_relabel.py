"""Series named by Stepwise after Prometheus aggregated them by the exporter's own labels (#14): the same
series, values and all, as PromQL's own rename gives, at a fraction of Prometheus's CPU."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from playbooks._diagnose_execute import _to_result
from playbooks._diagnose_relabel import Relabel
from playbooks._diagnose_types import PlannedQuery
from playbooks.diagnose import discover_source, plan
from playbooks.prometheus import InstantSample
from playbooks.triage import triage_job
from tests.playbooks.test_diagnose_scenarios import _serve

ADDRESS = "(.+?)(?::[0-9]+)?"


def test_an_address_names_its_host_and_two_exporters_of_one_host_combine_as_promql_does():
    """`instance` less its port names the host; two exporters on one host (two ports) are one series, combined
    as the aggregation would (max, sum, avg over the values present); a value the regex does not match keeps
    no host label, as label_replace leaves it."""
    rows = [
        ({"instance": "10.0.0.1:9100"}, np.array([1.0, np.nan, 3.0])),
        ({"instance": "10.0.0.1:9101"}, np.array([5.0, np.nan, np.nan])),
        ({"instance": "node-b:9100"}, np.array([2.0, 2.0, 2.0])),
        ({}, np.array([7.0, 7.0, 7.0])),
    ]

    def named(agg: str) -> dict:
        out = Relabel((("host", "instance", ADDRESS),), ("host",), agg).apply(rows)
        return {labels.get("host", ""): v.tolist() for labels, v in out}

    assert named("max")["10.0.0.1"][0] == 5.0 and np.isnan(named("max")["10.0.0.1"][1])
    assert named("sum")["10.0.0.1"][::2] == [6.0, 3.0] and named("avg")["10.0.0.1"][::2] == [3.0, 3.0]
    assert named("max")["node-b"] == [2.0, 2.0, 2.0] and named("max")[""] == [7.0, 7.0, 7.0]
    grew = Relabel((("host", "instance", ADDRESS),), ("host",), "sum", above=0.0)  # a filter `> 0`
    assert {lab.get("host", ""): v[::2].tolist() for lab, v in grew.apply(rows)} == {
        "10.0.0.1": [6.0, 3.0],
        "node-b": [2.0, 2.0],
        "": [7.0, 7.0],
    }
    assert not grew.apply([({"instance": "h:1"}, np.array([0.0, np.nan]))])
    assert grew.promql("x").endswith(") > 0") and Relabel.from_dict(grew.to_dict()) == grew
    gpu = Relabel((("host", "Hostname", "(.+)"), ("gpu", "GpuIndex", "(.+)")), ("host", "gpu"), "max")
    assert gpu.labels({"Hostname": "a1", "GpuIndex": "3", "job": "dcgm"}) == (("gpu", "3"), ("host", "a1"))
    assert gpu.promql("x") == (
        'max by (host, gpu) (label_replace(label_replace(x, "host", "$1", "Hostname", "(.+)"), '
        '"gpu", "$1", "GpuIndex", "(.+)"))'
    )


def test_a_renamed_instant_answer_keeps_its_missing_values():
    q = PlannedQuery("x", "max by (instance) (m)", "instant", 0.0, 60.0, None,
                     relabel=Relabel((("host", "instance", ADDRESS),), ("host",), "max"))  # fmt: skip
    got = _to_result(q, [InstantSample({"instance": "h1:9100"}, 60.0, float("nan")),
                         InstantSample({"instance": "h2:9100"}, 60.0, 4.0)])  # fmt: skip
    assert got["samples"] == [
        {"labels": {"host": "h1"}, "value": None},
        {"labels": {"host": "h2"}, "value": 4.0},
    ]
    assert got["promql"].startswith("max by (host) (label_replace(max by (instance) (m)")


@pytest.mark.parametrize("profile", ["nvidia", "amd"])
def test_every_renamed_query_of_a_diagnosis_answers_as_promqls_rename(served_job, view_root, profile):
    """On a served job, every planned query Stepwise renames gives the series its PromQL rename gives (labels,
    values on the grid), and no renamed query asks Prometheus for a regex over host names."""
    client, _, job_dir = _serve(served_job, view_root, "thermal-straggler", 2, profile)
    plans = plan(discover_source(client), triage=triage_job(job_dir).to_dict())
    renamed = [q for p in plans for q in p.queries if q.relabel]
    assert len(renamed) >= 10, [q.promql for p in plans for q in p.queries]

    def answer(q) -> list:
        data = client.query(q.promql, at=q.end) if q.kind == "instant" else client.query_range(
            q.promql, q.start, q.end, q.step)  # fmt: skip
        out = _to_result(q, data)
        if q.kind == "range":
            rows = out["series"]
        else:
            rows = [{"labels": s["labels"], "values": [s["value"]]} for s in out["samples"]]
        return sorted((sorted(r["labels"].items()), r["values"]) for r in rows)

    if profile == "nvidia":  # DCGM names hosts by `Hostname`: the `> 0` filters follow the rename too
        assert any(q.relabel.above is not None for q in renamed)
    for q in renamed:
        assert '"host", "$1"' not in q.promql, q.promql
        assert answer(q) == answer(replace(q, promql=q.relabel.promql(q.promql), relabel=None)), q.name
