"""A host gauge read by host is sent as its series, and Stepwise names and combines them (`Relabel`): PromQL's
`max by (host)` would make a group of each series at every step, which costs Prometheus more than reading it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from playbooks._diagnose_execute import _to_result
from playbooks.diagnose import discover_source, plan, render_query
from playbooks.loader import load_playbooks


def test_a_host_gauge_is_asked_without_an_aggregation():
    """The hosts' running processes: the exporter's selector alone, renamed and combined by host here; the
    per-host mean of the GPUs' power (eight series a host) and each GPU's power (a selector's samples count
    against Prometheus's sample limit whatever the grid: no coarser grid would bring it under) are still
    aggregated by Prometheus."""
    every = {q.name: q for pb in load_playbooks().values() for q in pb.queries}
    kw = {"start": 0.0, "end": 7200.0, "interval": 15.0, "hosts": 1024, "gpus": 8192}
    power = render_query(every["power_gpu"], "amd", **kw)
    procs = render_query(every["procs_running"], "amd", **kw)
    mean = render_query(every["power_by_host"], "amd", **kw)
    assert procs.promql == "hw_procs_running"
    assert procs.relabel is not None and procs.relabel.by == ("host",) and procs.relabel.agg == "max"
    assert mean.promql.startswith("avg by (host) (") and power.promql.startswith("max by (host, gpu) (")


@pytest.mark.parametrize("profile", ["nvidia", "amd"])
def test_a_gauge_sent_as_it_is_comes_back_as_promqls_aggregation(served_job, profile):
    """On a served job (node_exporter's `instance`; the seed's `host`, and `instance` for Ray's gauges), every
    query sent without its aggregation stores the series, values and all, that the aggregation in PromQL
    gave."""
    client, _, _ = served_job("thermal-straggler", 1, profile)
    plans = plan(discover_source(client), triage=None)
    sent = [q for p in plans for q in p.queries if q.relabel and "(" not in q.promql]
    raw = {q.promql: q for q in sent}
    assert "procs_running" in {q.name for q in sent} and len(raw) >= 3

    def answer(q) -> list:
        got = _to_result(q, client.query_range(q.promql, q.start, q.end, q.step))["series"]
        return sorted((sorted(s["labels"].items()), s["values"]) for s in got)

    for q in raw.values():
        assert q.relabel is not None
        aggregated = answer(replace(q, promql=q.relabel.promql(q.promql), relabel=None))
        assert answer(q) == aggregated and aggregated, q.name
