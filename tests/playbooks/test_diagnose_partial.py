"""A query Prometheus gives up on (its --query.timeout, its --query.max-samples), with a real Prometheus started
with those limits on a copy of a generated job: asked again on a coarser grid, and the verdict says what it
lacks instead of reading the silence as health."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from playbooks import _diagnose_execute, _diagnose_partial
from playbooks.diagnose import PlannedQuery, discover_source, run_diagnosis
from playbooks.prometheus import PrometheusClient, PrometheusQueryError, PrometheusTimeout
from playbooks.triage import triage_job
from tests.playbooks.test_diagnose_scenarios import _serve


@contextmanager
def _limited(job_dir: Path, tmp: Path, *flags: str) -> Iterator[PrometheusClient]:
    """Yield a client of a Prometheus serving a copy of `job_dir`'s TSDB with extra limits (`flags`)."""
    data = tmp / "data"
    shutil.copytree(job_dir / "prometheus", data, ignore=shutil.ignore_patterns("lock", "queries.active"))
    (tmp / "p.yml").write_text("global: {}\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        "prometheus", f"--config.file={tmp / 'p.yml'}", f"--storage.tsdb.path={data}",
        "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}",
        "--query.lookback-delta=15m", *flags,
    ]  # fmt: skip
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    client = PrometheusClient(f"http://127.0.0.1:{port}", timeout=60.0, retries=1)
    try:
        for _ in range(600):
            if client.ready():
                break
            assert proc.poll() is None, (tmp / "prometheus.log").read_text()[-2000:]
            time.sleep(0.1)
        yield client
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


class _Routed(PrometheusClient):
    """A client whose GPU temperature and clock queries go to a limited server, the others to `fast`, and
    which records each routed query's steps."""

    def __init__(self, fast: PrometheusClient, *a, **kw):
        super().__init__(*a, **kw)
        self.fast, self.steps = fast, {}

    def _routed(self, promql: str) -> bool:
        return "DCGM_FI_DEV_GPU_TEMP" in promql or "CLOCK" in promql

    def query_range(self, promql, start, end, step=None):
        if not self._routed(promql):
            return self.fast.query_range(promql, start, end, step)
        # by the query (several read the temperature: the per-GPU values, the per-host sample count), a window
        # tied to the step being the same query on a coarser grid
        self.steps.setdefault(re.sub(r"\[\d+s\]", "[window]", promql), []).append(step)
        return super().query_range(promql, start, end, step)

    def query(self, promql, at=None):
        return (super() if self._routed(promql) else self.fast).query(promql, at)


def test_a_coarser_grid_keeps_the_end_and_widens_a_window_tied_to_the_step():
    """Four times coarser: the same end, a step four times larger, and a step-long window (60 s step, 15 s
    scrapes: 75 s) as long as the new step and a scrape, so that no increment falls between two windows."""
    q = PlannedQuery("x", "sum by (host) (increase(c[75s]))", "range", 0.0, 7200.0, 60.0, 75.0)
    c = _diagnose_partial.coarser(q, 4)
    assert c is not None and (c.end, c.step, c.window_s) == (7200.0, 240.0, 255.0)
    assert c.promql == "sum by (host) (increase(c[255s]))" and c.start == 0.0
    assert _diagnose_partial.coarser(PlannedQuery("y", "up", "instant", 0.0, 7200.0, None), 4) is None


def test_what_prometheus_gives_up_on_is_told_from_what_a_coarser_grid_would_not_mend():
    """Its timeout (also as an execution error while it selects the series) and its sample limit are asked
    again; a malformed query, or a request that waited too long in the source's own queue, is not."""
    gave_up = _diagnose_partial.gave_up
    assert gave_up(PrometheusQueryError("execution", "expanding series: context deadline exceeded", "q"))
    assert gave_up(PrometheusQueryError("execution", "query processing would load too many samples", "q"))
    assert gave_up(
        PrometheusTimeout("gave up on the query (timeout): query timed out in expression evaluation")
    )
    assert not gave_up(PrometheusQueryError("bad_data", "1:5: parse error: unexpected end of input", "q"))
    assert not gave_up(PrometheusTimeout("Prometheus at http://x: queued too long: 30 s"))


def test_a_query_that_times_out_is_asked_on_coarser_grids_before_it_fails(served_job, view_root, tmp_path):
    """A Prometheus with a 1 ms query timeout gives up on a query of every GPU's temperature at each second
    of the last hour at every scrape: asked again on grids 4 and 16 times coarser (the same end), it times
    out each time and the timeout is what is raised."""
    client, _, job_dir = _serve(served_job, view_root, "thermal-straggler", 1, "nvidia")
    end = discover_source(client).time_range[1]
    with _limited(job_dir, tmp_path, "--query.timeout=1ms") as slow:
        rec = _Routed(slow, slow.base_url, timeout=60.0, retries=1)
        heavy = "max_over_time(DCGM_FI_DEV_GPU_TEMP[1h:1s])"
        with pytest.raises(PrometheusTimeout, match="timeout"):
            _diagnose_partial.run_planned(rec, PlannedQuery("t", heavy, "range", end - 3600, end, 15.0))
    assert list(rec.steps.values()) == [[15.0, 60.0, 240.0]]


def test_gpu_queries_prometheus_gives_up_on_are_named_and_a_healthy_verdict_is_not_trusted(
    served_job, view_root, tmp_path
):
    """A thermal straggler's GPU temperature and clock queries go to a Prometheus that loads at most one
    sample per query: refused on every coarser grid too, the verdict names them, carries a "queries failed" finding,
    and reads healthy only with a low confidence."""
    client, _, job_dir = _serve(served_job, view_root, "thermal-straggler", 1, "nvidia")
    triage = triage_job(job_dir).to_dict()
    source = discover_source(client)
    with _limited(job_dir, tmp_path, "--query.max-samples=1") as small:
        routed = _Routed(client, small.base_url, timeout=60.0, retries=1)
        out = run_diagnosis(routed, triage=triage, source=source, playbooks=["gpu_health"])
    tried = [s for s in routed.steps.values() if s[0]]
    # each asked again 4 times coarser, and 16 times while 12 points or more remain
    assert tried and all(len(s) >= 2 and s == [s[0], 4 * s[0], 16 * s[0]][: len(s)] for s in tried)
    d = out["diagnosis"]
    (failed,) = [f for f in out["findings"] if "queries failed" in f["title"]]
    names = [e["query"] for e in failed["evidence"]]
    assert {"temp_gpu", "clock_gpu"} <= set(names) and all(n in d["summary"] for n in names)
    assert d["class"] != "healthy" or d["confidence"] <= _diagnose_partial.HEALTHY_PARTIAL


def test_a_query_too_large_for_prometheus_is_judged_on_a_coarser_grid_and_the_finding_says_so(
    served_job, view_root, tmp_path
):
    """Prometheus's sample limit (--query.max-samples) refuses the per-GPU temperature on its usual grid:
    asked on a coarser one, it still names the hot GPU, and the finding says on which grid it was judged."""
    client, truth, job_dir = _serve(served_job, view_root, "thermal-straggler", 1, "nvidia")
    triage = triage_job(job_dir).to_dict()
    source = discover_source(client)
    with _limited(job_dir, tmp_path, "--query.max-samples=1500") as small:
        out = run_diagnosis(small, triage=triage, source=source, playbooks=["gpu_health"])
    hot = truth["culprits"][0]
    gpu_findings = [f for f in out["findings"] if f["playbook"] == "gpu_health" and f["gpus"]]
    assert any(f["hosts"] == [hot["host"]] and f["gpus"] == [hot["gpu"]] for f in gpu_findings)
    said = [e["interpretation"] for f in gpu_findings for e in f["evidence"]]
    assert said and all("judged on a" in s and "s grid" in s for s in said)
    assert "judged on a coarser one" in out["diagnosis"]["summary"]


class _Counting(PrometheusClient):
    """A client that records the most requests it had in flight at once."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.now, self.most, self.lock = 0, 0, threading.Lock()

    def _send(self, method, path, params):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            time.sleep(0.01)  # a request that takes a moment, so that concurrent ones overlap
            return super()._send(method, path, params)
        finally:
            with self.lock:
                self.now -= 1


def test_a_job_with_many_gpus_runs_fewer_queries_at_once(served_job, view_root, monkeypatch):
    """Prometheus holds every GPU's series of each query in flight: on a source whose GPUs, times the
    queries asked at once, exceed the bound, two at a time; on a small one, as many as asked."""
    client, _, job_dir = _serve(served_job, view_root, "thermal-straggler", 1, "nvidia")
    triage = triage_job(job_dir).to_dict()
    source = discover_source(client)
    gpus = len(source.hosts) * (source.gpus_per_host or 0)
    assert _diagnose_execute.in_flight(8, gpus) == 8
    monkeypatch.setattr(_diagnose_execute, "IN_FLIGHT_GPUS", 3 * gpus)
    assert _diagnose_execute.in_flight(8, gpus) == 3 and _diagnose_execute.in_flight(8, 100 * gpus) == 2
    counting = _Counting(client.base_url, timeout=60.0, retries=1)
    run_diagnosis(counting, triage=triage, source=source, concurrency=8)
    assert 1 <= counting.most <= 3
