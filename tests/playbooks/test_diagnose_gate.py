"""A range query of counters (or of a gauge's changes) that moved nowhere is not asked (#14): its gate,
`changes` over the union of its windows at one instant, answers nothing, and so would the query. Where they
moved, the query is asked and the verdict is the one the query alone gives."""

from __future__ import annotations

from dataclasses import replace

import pytest

from playbooks._diagnose_execute import _ask
from playbooks.diagnose import PlannedQuery, discover_source, plan, run_diagnosis
from playbooks.triage import triage_job
from tests.playbooks.test_diagnose_cost import _source
from tests.playbooks.test_diagnose_scenarios import _serve

KEEP = ("class", "severity", "title", "hosts", "gpus", "onset")
GATED = ("uncorrectable_errors", "correctable_errors")


def _planned(profile: str) -> dict[str, PlannedQuery]:
    return {q.name: q for p in plan(_source(profile), triage=None) for q in p.queries}


@pytest.mark.parametrize("profile", ["nvidia", "amd"])
def test_only_a_counters_increase_kept_above_zero_has_a_gate_over_all_its_windows(profile):
    """The hosts where ECC errors grew have a gate reading each counter of the signal over every window of the
    grid (its first point's window included); the same counters' per-interval increase, which answers 0 on
    every host and step, has none, nor any gauge or instant query."""
    queries = _planned(profile)
    for name in GATED:
        q = queries[name]
        assert q.kind == "range" and q.step and q.window_s
        span = int(q.end - q.start + q.window_s) + 1
        parts = q.gate.split(" or ")
        assert parts and all(p.startswith("group(changes(") and p.endswith(f"[{span}s]) > 0)") for p in parts)
        assert all(p.split("(")[2].split("[")[0] in q.promql for p in parts)
    assert not queries["ecc_ue_host"].gate and not queries["ecc_ue_gpu"].gate
    assert not any(q.gate for n, q in queries.items() if n not in (*GATED, "pcie_fatal_errors", "xid_host"))


def test_dcgms_xid_present_only_where_it_changed_has_a_gate_over_its_lookbacks():
    """DCGM's Xid is present only within 10 minutes of a change: the gate reads its changes over the grid's
    first point's 10 minutes and the rest; the GPUs' maximum over the job (an instant query) has none."""
    queries = _planned("nvidia")
    q = queries["xid_host"]
    assert q.gate == f"group(changes(DCGM_FI_DEV_XID_ERRORS[{int(q.end - q.start) + 600 + 1}s]) > 0)"
    assert not queries["xid_gpu"].gate


class _Counting:
    """A client's query methods, recording the PromQL asked."""

    def __init__(self, client, monkeypatch):
        self.asked: list[str] = []
        for method in ("query", "query_range"):
            real = getattr(client, method)
            monkeypatch.setattr(client, method, self._recording(real))

    def _recording(self, real):
        def ask(promql, *a, **kw):
            self.asked.append(promql)
            return real(promql, *a, **kw)

        return ask


def test_a_gated_query_is_not_asked_on_a_healthy_job(served_job, view_root, monkeypatch):
    """Healthy: no ECC counter moves, each gate is asked once and its query never; the answer is the empty
    range answer the query would have given (same PromQL and grid), and the verdict is the same."""
    client, truth, job_dir = _serve(served_job, view_root, "healthy", 3, "nvidia", nodes=4, gpus=4, hours=1.0)
    triage = triage_job(job_dir).to_dict()
    queries = {q.name: q for p in plan(discover_source(client), triage=triage) for q in p.queries}
    counting = _Counting(client, monkeypatch)
    gated = run_diagnosis(client, triage=triage)
    for name in (*GATED, "xid_host"):
        assert counting.asked.count(queries[name].gate) == 1
        assert queries[name].promql not in counting.asked
        asked, data, why = _ask(client, queries[name])
        assert (asked, data, why) == (queries[name], [], "")
        assert client.query_range(queries[name].promql, asked.start, asked.end, asked.step) == []
    monkeypatch.setattr("playbooks._diagnose_query._gate", lambda *a, **kw: "")
    ungated = run_diagnosis(client, triage=triage)
    assert gated["diagnosis"] == ungated["diagnosis"] and truth["class"] == "healthy"
    # a gate asked instead of each query
    assert gated["timings"]["queries"] == ungated["timings"]["queries"]
    assert [[f.get(k) for k in KEEP] for f in gated["findings"]] == [
        [f.get(k) for k in KEEP] for f in ungated["findings"]
    ]


def test_a_gated_query_is_asked_where_the_counters_moved(served_job, view_root, monkeypatch):
    """A GPU's uncorrectable errors grow and it reports an Xid: the gates find them, the query is asked, and the diagnosis is the one
    without gates (class, culprits, onset, findings)."""
    client, truth, job_dir = _serve(
        served_job, view_root, "gpu-hardware-fault", 3, "nvidia", nodes=4, gpus=4, hours=1.0
    )
    triage = triage_job(job_dir).to_dict()
    queries = {q.name: q for p in plan(discover_source(client), triage=triage) for q in p.queries}
    counting = _Counting(client, monkeypatch)
    gated = run_diagnosis(client, triage=triage)
    ue = queries["uncorrectable_errors"]
    assert counting.asked.count(ue.gate) == 1 and counting.asked.count(ue.promql) == 1
    xid = queries["xid_host"]
    assert counting.asked.count(xid.gate) == 1 and counting.asked.count(xid.promql) == 1
    monkeypatch.setattr("playbooks._diagnose_query._gate", lambda *a, **kw: "")
    ungated = run_diagnosis(client, triage=triage)
    assert gated["diagnosis"]["class"] == truth["class"] == "gpu-hardware-fault"
    assert gated["diagnosis"] == ungated["diagnosis"]
    assert [[f.get(k) for k in KEEP] for f in gated["findings"]] == [
        [f.get(k) for k in KEEP] for f in ungated["findings"]
    ]
    assert replace(ue, gate="").to_dict() == PlannedQuery.from_dict({**ue.to_dict(), "gate": ""}).to_dict()
    assert PlannedQuery.from_dict(ue.to_dict()) == ue
