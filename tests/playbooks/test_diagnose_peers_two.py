"""A peer query over many GPUs asked in two (`PeerFollowUp`): the second part, rendered from the first's answer,
reads the pack's MAD around the median the first gave and the candidates by their own matchers; the answer
and the verdict are those of the one query."""

from __future__ import annotations

from dataclasses import replace

import pytest

from playbooks import _diagnose_peers
from playbooks.diagnose import PlannedQuery, discover_source, execute, plan, run_diagnosis
from playbooks.prometheus import Series
from playbooks.triage import triage_job
from tests.playbooks.test_diagnose_scenarios import _serve

KEEP = ("class", "severity", "title", "hosts", "gpus", "onset")


def _by_labels(result):
    return {tuple(sorted(s["labels"].items())): s["values"] for s in result["series"]}


@pytest.mark.parametrize("profile", ["nvidia", "amd"])
def test_a_peer_query_is_asked_in_two_and_answers_as_the_one_query(
    served_job, view_root, monkeypatch, profile
):
    """Judged as 8,192 GPUs would be (2 candidates a criterion): the temperature and clock queries are each
    asked in two, the second holding the first's medians and the candidates' own selectors; the pack's
    statistics are the one query's to the bit, its candidates' series the same, and so is the verdict (class,
    culprits, onset, findings)."""
    client, truth, job_dir = _serve(
        served_job, view_root, "thermal-straggler", 2, profile, nodes=6, gpus=8, hours=1.5
    )
    monkeypatch.setattr(_diagnose_peers, "CANDIDATES", 2)
    monkeypatch.setattr("playbooks._diagnose_query.PEERS_MIN_POINTS", 0)
    triage = triage_job(job_dir).to_dict()
    (gpu_plan,) = plan(discover_source(client), triage=triage, playbooks=["gpu_health"])
    peers = replace(
        gpu_plan, queries=tuple(q for q in gpu_plan.queries if q.name in ("temp_gpu", "clock_gpu"))
    )
    assert len(peers.queries) == 2 and all(q.follow_up is not None for q in peers.queries)
    asked: list[str] = []
    ask = client.query_range

    def recording(promql, *a, **kw):
        asked.append(promql)
        return ask(promql, *a, **kw)

    monkeypatch.setattr(client, "query_range", recording)
    two = execute(client, peers, concurrency=1)
    monkeypatch.setattr(client, "query_range", ask)
    temp = next(q for q in peers.queries if q.name == "temp_gpu")
    assert temp.follow_up is not None and len(asked) == 4
    then = asked[asked.index(temp.follow_up.first) + 1]
    hot = truth["culprits"][0]
    assert '"stepwise_stat", "mad"' in then and " * (time() > bool " in then and "quantile(0.5, abs(" in then
    assert f'"{hot["host"]}"' in then and "and on (" not in then and temp.follow_up.first != temp.promql

    one = execute(client, replace(peers, queries=tuple(replace(q, follow_up=None) for q in peers.queries)))
    for name in ("temp_gpu", "clock_gpu"):
        a, b = _by_labels(two.results[name]), _by_labels(one.results[name])
        stats = [k for k in b if dict(k).get("stepwise_stat")]
        assert sorted(dict(k)["stepwise_stat"] for k in stats) == ["count", "mad", "median"]
        assert all(a[k] == b[k] for k in stats)
        # the candidates tied in a criterion may be either of them (PromQL's topk), in one query as in two
        assert len(a) == len(b) and all(a[k] == b[k] for k in set(a) & set(b))
        assert two.results[name]["promql"] == one.results[name]["promql"]
    assert {"host": hot["host"], "gpu": hot["gpu"]} in [dict(k) for k in _by_labels(two.results["temp_gpu"])]

    in_two = run_diagnosis(client, triage=triage)
    monkeypatch.setattr("playbooks._diagnose_query.PeerFollowUp.of", lambda *a, **kw: None)
    in_one = run_diagnosis(client, triage=triage)
    assert in_two["diagnosis"]["class"] == truth["class"]
    assert in_two["diagnosis"] == in_one["diagnosis"]
    assert [[f.get(k) for k in KEEP] for f in in_two["findings"]] == [
        [f.get(k) for k in KEEP] for f in in_one["findings"]
    ]
    assert in_two["timings"]["queries"] == in_one["timings"]["queries"] + 2


def _follow_up() -> _diagnose_peers.PeerFollowUp:
    from playbooks.profiles import PROFILES

    sig = PROFILES["amd"].signal("gpu_temp")
    follow = _diagnose_peers.PeerFollowUp.of(sig, sig.agg, direction="up", start=0.0, end=600.0)
    assert follow is not None
    return follow


class _Client:
    def __init__(self, answer):
        self.answer, self.asked = answer, []

    def query_range(self, promql, start, end, step):
        self.asked.append(promql)
        return self.answer


def test_a_median_that_is_no_number_leaves_the_answer_to_the_one_query():
    """Where the first part's median is not a finite number (a GPU reporting +Inf), no second part can write
    it out: the one query answers, on the same grid."""
    follow = _follow_up()
    first = [
        Series({"stepwise_stat": "center"}, (0.0, 300.0, 600.0), (1.5, float("inf"), 2.0)),
        Series({"stepwise_stat": "level"}, (0.0, 300.0, 600.0), (60.0, 60.0, 60.0)),
    ]
    whole = [Series({"stepwise_stat": "median"}, (0.0,), (61.5,))]
    client = _Client(whole)
    assert _diagnose_peers.ask_in_two(client, follow, "ONE QUERY", first, (0.0, 600.0, 300.0)) == whole
    assert client.asked == ["ONE QUERY"]


def test_the_second_part_writes_the_medians_and_the_level_is_added_as_prometheus_adds_it():
    """The second part holds each step's median as Prometheus sent it (the shortest decimal of the float),
    and the candidates' selectors; the answer's pack level is the median plus the usual level."""
    follow = _follow_up()
    first = [
        Series({"stepwise_stat": "center"}, (0.0, 300.0), (0.1 + 0.2, -1.25)),
        Series({"stepwise_stat": "level"}, (0.0, 300.0), (60.7, 60.7)),
        Series({"stepwise_stat": "count"}, (0.0, 300.0), (48.0, 48.0)),
        Series({"stepwise_stat": "screen", "host": 'h"1', "gpu": "3"}, (0.0, 300.0), (1.0, 1.0)),
    ]
    then = follow.then(first, 300.0)
    assert then is not None and "0.30000000000000004 * (time() > bool -150.0)" in then
    assert 'hw_gpu_temperature_celsius{host="h\\"1", gpu="3"}' in then
    mad = [Series({"stepwise_stat": "mad"}, (0.0, 300.0), (0.5, 0.5))]
    out = {s.labels["stepwise_stat"]: s.values for s in follow.answer(first, mad)}
    assert out == {"count": (48.0, 48.0), "median": ((0.1 + 0.2) + 60.7, -1.25 + 60.7), "mad": (0.5, 0.5)}


def test_a_planned_query_keeps_its_follow_up_through_the_stored_plan():
    """Plans are stored as JSON between the plan task and the playbooks' tasks: the follow-up goes with them,
    and a plan stored before there were follow-ups is read as one query."""
    q = PlannedQuery("temp_gpu", "ONE", "range", 0.0, 600.0, 300.0, follow_up=_follow_up())
    assert PlannedQuery.from_dict(q.to_dict()) == q
    old = {k: v for k, v in q.to_dict().items() if k != "follow_up"}
    assert PlannedQuery.from_dict(old) == replace(q, follow_up=None)
