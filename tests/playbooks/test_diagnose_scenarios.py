"""Every generator scenario, on both metric profiles, diagnosed end to end through a served TSDB.

Onset tolerances (seconds), and why:
- 90 by default: queries run on a 15 s grid and counters are read through rate()/increase() over four
  scrape intervals, so an event is placed within a few grid steps of when it began.
- thermal-straggler, 180: the GPU heats over a 10-20 minute ramp, read on a coarse per-GPU grid; its
  start is found by extending the ramp's line back to the pack, which is exact only for a straight ramp.
- training-instability, 180: a jump is visible only once the step after the onset completes (a step
  is 10-31 s) and is seen on the next grid point; the first jumped step may fall in a checkpoint window.
- restore-resource-leak, 300: the truth is the start of training after the restore; the data shows the
  first completed step (compile time 40-150 s after it).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from playbooks import tsdb_server
from playbooks._diagnose_execute import _to_result
from playbooks.diagnose import (
    DiagnosisError,
    PlannedQuery,
    PlaybookOutput,
    PlaybookPlan,
    SourceInfo,
    decide,
    discover_source,
    execute,
    plan,
    render_query,
    run_diagnosis,
    serves_copy,
)
from playbooks.gpus import GPU_MODELS
from playbooks.loader import load_playbooks
from playbooks.profiles import PROFILES
from playbooks.prometheus import PrometheusClient, PrometheusQueryError
from playbooks.synth import SCENARIOS
from playbooks.triage import triage_job


def _serve(served_job, view_root, scenario, seed=1, profile="amd", **kw):
    """Return served_job(...), re-served when the fixture's server answers for another TSDB.

    tsdb_server's readiness probe can be answered by another process that took the port first (a race
    when many servers start at once); a diagnosis test must never read another job's data.
    """
    client, truth, job_dir = served_job(scenario, seed, profile, **kw)
    if f"/{job_dir.name}-prometheus-" in str(client.flags().get("storage.tsdb.path", "")):
        return client, truth, job_dir
    for _ in range(3):
        served = tsdb_server.ensure_served(job_dir / "prometheus", work_root=view_root)
        if serves_copy(served):
            return PrometheusClient(served.url, timeout=30.0, retries=2, backoff=0.05), truth, job_dir
        tsdb_server.stop(served)
    pytest.fail("could not serve the job's TSDB on a port of its own")


TOLERANCE = {"thermal-straggler": 180.0, "training-instability": 180.0, "restore-resource-leak": 300.0}

# A restore leak is a comparison finding (contract): one restored job alone is judged in its own test below.
CASES = [(s, p, 1, {}) for s in SCENARIOS if s != "restore-resource-leak" for p in ("amd", "nvidia")] + [
    # other seeds and sizes, so that nothing is tuned to one job
    ("healthy", "nvidia", 2, {"nodes": 6, "gpus": 8, "hours": 1.5}),
    ("thermal-straggler", "nvidia", 2, {"nodes": 6, "gpus": 8, "hours": 1.5}),
    ("heartbeat-false-positive", "amd", 2, {"nodes": 6, "gpus": 8, "hours": 1.5}),
    # the generator's own job length: every host pauses for a checkpoint save just before the heartbeats stop
    ("heartbeat-false-positive", "nvidia", 2, {"nodes": 16, "hours": None}),
    # a 100 s heartbeat timeout: the dead host's exporter is silent for less than 3 minutes before the data ends
    ("node-death", "amd", 4, {"hours": None}),
    ("rdma-degradation", "amd", 3, {"nodes": 8, "interval": 10.0, "hours": 1.5}),
    ("collective-hang", "nvidia", 3, {"nodes": 8, "interval": 10.0, "hours": 1.5}),
]


@pytest.mark.parametrize(
    ("scenario", "profile", "seed", "kw"), CASES, ids=[f"{s}-{p}-{seed}" for s, p, seed, _ in CASES]
)
def test_diagnosis_matches_the_truth(served_job, view_root, scenario, profile, seed, kw):
    """run_diagnosis gives the truth's class, family, culprits (and GPU) and onset; healthy has no warning."""
    client, truth, job_dir = _serve(served_job, view_root, scenario, seed, profile, **kw)
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    d = result["diagnosis"]
    assert (d["class"], d["root_cause_family"]) == (truth["class"], truth["root_cause_family"]), d["summary"]
    assert sorted(c["host"] for c in d["culprits"]) == sorted(c["host"] for c in truth["culprits"])
    for want in truth["culprits"]:
        if want["gpu"] is not None:
            assert {"host": want["host"], "gpu": want["gpu"]} in d["culprits"]
    if truth["onset"] is None:
        assert d["onset"] is None
    else:
        assert d["onset"] is not None
        assert abs(d["onset"] - truth["onset"]) <= TOLERANCE.get(scenario, 90.0)
    assert 0.0 <= d["confidence"] <= 1.0 and d["summary"] and isinstance(d["chain"], list)
    if truth["class"] == "healthy":
        assert [f for f in result["findings"] if f["severity"] != "info"] == []
    else:
        assert any(f["class"] == truth["class"] and f["severity"] != "info" for f in result["findings"])
    assert set(result) == {"job", "source", "diagnosis", "findings", "timings"}
    assert result["source"]["profile"] == profile
    assert result["timings"]["queries"] > 0


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
def test_a_restored_job_alone_hints_at_a_leak_and_leaves_the_verdict_to_compare(
    served_job, view_root, profile
):
    """Without the fresh start's own level a single job cannot tell leaked polling threads from a site's runnable
    background: the uniform excess is an info finding, the verdict stays healthy (compare's own
    tests give restore-resource-leak for the pair)."""
    client, truth, job_dir = _serve(served_job, view_root, "restore-resource-leak", 1, profile)
    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())
    d = result["diagnosis"]
    assert (d["class"], d["root_cause_family"], d["culprits"]) == ("healthy", "none", [])
    assert [f for f in result["findings"] if f["severity"] != "info"] == []
    assert [f["severity"] for f in result["findings"] if f["class"] == "restore-resource-leak"] == ["info"]
    assert "compare" in d["summary"]


def test_the_api_round_trips_through_json(served_job, view_root):
    """discover -> plan -> execute -> decide works with every object passed through to_dict/from_dict + JSON."""
    client, truth, job_dir = _serve(served_job, view_root, "node-death", 1, "nvidia")
    triage = triage_job(job_dir).to_dict()
    source = SourceInfo.from_dict(json.loads(json.dumps(discover_source(client).to_dict())))
    assert source.profile == "nvidia" and len(source.hosts) == 4 and source.gpus_per_host == 4
    plans = [PlaybookPlan.from_dict(json.loads(json.dumps(p.to_dict()))) for p in plan(source, triage=triage)]
    names = {p.name for p in plans}
    assert {"hang", "heartbeat", "node"} <= names  # called for by the triage (heartbeat timeout, node exit)
    done: list[tuple[str, bool]] = []
    outputs = [
        PlaybookOutput.from_dict(
            json.loads(
                json.dumps(
                    execute(
                        client, p, concurrency=2, on_query_done=lambda n, ok: done.append((n, ok))
                    ).to_dict()
                )
            )
        )
        for p in plans
    ]
    assert len(done) == sum(len(p.queries) for p in plans) and all(ok for _, ok in done)
    out = decide(source, outputs, triage=triage)
    assert out["diagnosis"]["class"] == truth["class"]
    assert all("rule" in f for f in out["findings"])
    assert len({f["rule"] for f in out["findings"]}) == len(
        out["findings"]
    )  # one finding per rule: upsert key


def test_the_gpu_model_is_chosen_from_the_data_unless_the_user_names_one(served_job, view_root):
    """The labels' model by default; the user's choice (any case) when given; an unknown name is refused."""
    client, truth, _ = _serve(served_job, view_root, "healthy")
    assert discover_source(client).gpu_model == truth["gpu_model"]
    assert discover_source(client, gpu_model="auto").gpu_model == truth["gpu_model"]
    other = next(name for name in GPU_MODELS if name != truth["gpu_model"])
    assert discover_source(client, gpu_model=other.lower()).gpu_model == other
    with pytest.raises(DiagnosisError, match="unknown GPU model 'V100'"):
        discover_source(client, gpu_model="V100")


def test_failed_queries_are_kept_as_errors_and_lower_confidence(served_job, view_root):
    """A query Prometheus rejects is recorded in .errors, the others still run, and the verdict says so."""
    client, truth, job_dir = _serve(served_job, view_root, "gpu-hardware-fault")
    triage = triage_job(job_dir).to_dict()
    source = discover_source(client)
    plans = plan(source, triage=triage)
    broken = [
        replace(p, queries=(*p.queries, PlannedQuery("bad", "sum(", "instant", *p.window, None)))
        if p.name == "network"
        else p
        for p in plans
    ]
    outputs = [execute(client, p) for p in broken]
    net = next(o for o in outputs if o.name == "network")
    assert "bad" in net.errors and "bad" not in net.results and net.results
    out = decide(source, outputs, triage=triage)
    assert out["diagnosis"]["class"] == truth["class"]
    assert "1 query failed (bad)" in out["diagnosis"]["summary"]
    assert any(f["rule"] == "exporter_health.queries_failed" for f in out["findings"])
    clean = decide(source, [execute(client, p) for p in plans], triage=triage)
    assert out["diagnosis"]["confidence"] < clean["diagnosis"]["confidence"]


def test_cancelled_queries_are_not_sent(served_job, view_root):
    """When should_cancel() is true, queries not yet started are recorded as cancelled."""
    client, _, _ = _serve(served_job, view_root, "healthy")
    p = next(p for p in plan(discover_source(client), triage=None) if p.name == "gpu_health")
    before = client.stats.requests
    out = execute(client, p, should_cancel=lambda: True)
    assert client.stats.requests == before
    assert set(out.errors) == {q.name for q in p.queries} and set(out.errors.values()) == {"cancelled"}


def test_a_log_of_another_job_is_flagged(served_job, view_root, job_factory):
    """Diagnosing one job's TSDB with another job's log says the source may be the wrong one."""
    client, _, _ = _serve(served_job, view_root, "healthy", 1, "amd")
    other_dir, _ = job_factory("healthy", 3, "amd", nodes=5)
    result = run_diagnosis(client, triage=triage_job(other_dir).to_dict())
    assert result["diagnosis"]["summary"].startswith("Check the data source first")
    assert result["diagnosis"]["confidence"] <= 0.2


@pytest.mark.parametrize(
    ("scenario", "profile"),
    [
        ("healthy", "nvidia"),
        ("collective-hang", "amd"),
        ("node-death", "amd"),
        ("thermal-straggler", "nvidia"),
    ],
)
def test_without_a_log_the_data_alone_decides(served_job, view_root, scenario, profile):
    """With no triage (a bare --prometheus), every playbook runs and the data alone gives the class.

    (A heartbeat false positive needs the log's accusation, and a restore leak the log's restore: without
    a log both come out healthy, which the command's documentation says.)
    """
    client, truth, _ = _serve(served_job, view_root, scenario, 1, profile)
    d = run_diagnosis(client, triage=None)["diagnosis"]
    assert d["class"] == truth["class"]
    assert sorted(c["host"] for c in d["culprits"]) == sorted(c["host"] for c in truth["culprits"])


def test_a_window_is_judged_on_its_own(served_job, view_root):
    """A window that ends before the hang shows a healthy stretch, not a stall at the window's edge."""
    client, truth, job_dir = _serve(served_job, view_root, "collective-hang", 1, "nvidia")
    a, _ = truth["data_range"]
    triage = triage_job(job_dir).to_dict()
    before = run_diagnosis(client, triage=triage, start=a, end=truth["onset"] - 600)
    assert before["diagnosis"]["class"] == "healthy"
    whole = run_diagnosis(client, triage=triage, start=a + 600)
    assert whole["diagnosis"]["class"] == "collective-hang"


def test_aggregating_before_renaming_hosts_gives_the_same_series(served_job, view_root):
    """The cheaper rendering (aggregate by DCGM's Hostname, then rename, in Stepwise where the query carries its
    `relabel`) gives exactly the profile's series."""
    client, _, _ = _serve(served_job, view_root, "node-death", 1, "nvidia")
    source = discover_source(client)
    prof = PROFILES["nvidia"]
    checked = 0
    for name in ("power_by_host", "util_gpu", "util_min_host", "gpu_samples", "procs_running", "tcp_retx"):
        q = next(q for pb in load_playbooks().values() for q in pb.queries if q.name == name)
        pq = render_query(
            q, "nvidia", start=source.time_range[0], end=source.time_range[1], interval=source.interval
        )
        sig = prof.signal(q.signal)
        window = f"{math.ceil(pq.window_s or 60)}s"
        plain = (
            sig.expr(q.fn or None, window=window, by=q.by, agg=q.agg or None)
            if (q.fn or sig.is_counter)
            else sig.expr(None, by=q.by, agg=q.agg or None)
        )
        assert pq.promql != plain

        def answer(q: PlannedQuery) -> dict:
            data = client.query_range(q.promql, q.start, q.end, q.step)
            return {tuple(sorted(s["labels"].items())): s["values"] for s in _to_result(q, data)["series"]}

        fast, ref = answer(pq), answer(replace(pq, promql=plain, relabel=None))
        assert fast.keys() == ref.keys() and fast
        for k, vals in fast.items():
            assert all(
                (a is None and b is None) or a == pytest.approx(b) for a, b in zip(vals, ref[k], strict=True)
            )
        checked += 1
    assert checked == 6


def test_a_failed_gpu_model_query_leaves_the_model_unknown_not_the_diagnosis_broken(
    served_job, view_root, monkeypatch
):
    """The GPU model's queries fail (a server refusing label values): discovery still answers, with the
    hosts and GPUs, and the model unknown unless the user named one (it raised TypeError before)."""
    client, truth, _ = _serve(served_job, view_root, "healthy")

    real = client.label_values
    asked: list[str] = []

    def refused(label, *args, **kw):
        if label not in ("__name__", "instance") and args:  # the model label's values, per GPU metric
            asked.append(label)
            raise PrometheusQueryError("bad_data", "label values refused", f"label_values({label})")
        return real(label, *args, **kw)

    monkeypatch.setattr(client, "label_values", refused)
    source = discover_source(client)
    assert asked, "the GPU model's label values were asked for"
    assert len(source.hosts) == 4 and source.gpus_per_host == 4
    assert source.gpu_model is None
    other = next(name for name in GPU_MODELS if name != truth["gpu_model"])
    assert discover_source(client, gpu_model=other).gpu_model == other
