"""Discovery on real served TSDBs: what the TSDB holds, and whether it is the log's job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from playbooks.discovery import Discovery, discover, family_prefix, log_step_losses
from playbooks.prometheus import PrometheusClient
from playbooks.triage import triage_job

_FAMILIES = {
    "amd": {"hw_gpu_", "hw_rdma_", "tb_", "ray_node_"},
    "nvidia": {"DCGM_FI_DEV_", "node_memory_", "training_"},
}


def _own(served_job, scenario: str = "healthy", **kw):
    client, truth, job_dir = served_job(scenario, **kw)
    return client, truth, job_dir, triage_job(job_dir).to_dict(), log_step_losses(truth["log"])


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
def test_it_reports_what_the_tsdb_holds(served_job, profile: str) -> None:
    """Families, hosts, GPUs per host, GPU model, range and profile agree with the generator's truth."""
    client, truth, _ = served_job("healthy", profile=profile)
    found = discover(client)
    assert found.errors == {}
    assert found.ok and not found.unreachable
    assert found.profile == profile
    assert found.time_range == pytest.approx(tuple(truth["data_range"]), abs=1.0)
    assert set(found.hosts) == set(truth["hosts"])
    assert found.gpus_per_host == dict.fromkeys(truth["hosts"], truth["gpus_per_host"])
    assert found.gpus_min == found.gpus_max == found.gpus_typical == truth["gpus_per_host"]
    assert found.hosts_fewer_gpus == ()
    assert any(truth["gpu_model"] in model for model in found.gpu_models)
    prefixes = {f.prefix for f in found.families}
    assert _FAMILIES[profile] <= prefixes
    assert found.series_total == sum(f.series for f in found.families)
    assert found.metric_count == sum(f.metrics for f in found.families)
    assert found.head.get("numSeries", 0) > 0
    assert found.targets_source == "up"
    assert {t.host for t in found.targets} == set(truth["hosts"])
    assert all(t.up == 1.0 and not t.stopped_early for t in found.targets)
    assert all(t.last_scrape == pytest.approx(truth["data_range"][1], abs=1.0) for t in found.targets)
    assert found.unavailable and all(title for _, title in found.unavailable)


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
def test_the_identity_matches_the_jobs_own_log(served_job, profile: str) -> None:
    """The TSDB's last step and its loss equal the log's last completed step and its loss."""
    client, truth, _, triage, losses = _own(served_job, profile=profile)
    ident = discover(client, triage=triage, log_losses=losses).identity
    assert ident.status == "match", ident.message
    assert ident.log_last_step == ident.tsdb_last_step == truth["last_step"]
    assert ident.compared_step == truth["last_step"]
    assert ident.log_loss == pytest.approx(ident.tsdb_loss, abs=0.002)
    assert ident.step_metric == {"amd": "tb_step", "nvidia": "training_step"}[profile]


def test_the_identity_compares_the_step_only_when_the_log_loss_is_unknown(served_job) -> None:
    """Without the log's losses the step alone decides, and the result says the loss was not compared."""
    client, truth, _, triage, _ = _own(served_job)
    ident = discover(client, triage=triage).identity
    assert ident.status == "match"
    assert ident.tsdb_last_step == truth["last_step"]
    assert any("Loss not compared" in note for note in ident.notes)


def test_the_identity_flags_another_jobs_log(served_job) -> None:
    """Given the triage of another generated job with a different last step, the check says mismatch."""
    client, truth, _ = served_job("healthy")
    _, other_truth, other_dir = served_job("collective-hang", seed=2)
    assert other_truth["last_step"] != truth["last_step"]
    other = triage_job(other_dir).to_dict()
    ident = discover(client, triage=other, log_losses=log_step_losses(other_truth["log"])).identity
    assert ident.status == "mismatch"
    assert ident.log_last_step == other_truth["last_step"]
    assert ident.tsdb_last_step == truth["last_step"]
    assert f"{other_truth['last_step']:,}" in ident.message and "wrong Prometheus" in ident.message
    # the other job's log names nodes this TSDB never scraped: the check says so too
    assert set(other["nodes"]) - set(truth["hosts"]), "the two generated jobs must not share every node"
    assert any("of the log's" in note and "nodes" in note for note in ident.notes), ident.notes


def test_the_identity_flags_a_different_loss_at_the_same_step(served_job) -> None:
    """Two runs can stop at the same step; a loss that differs beyond rounding still says wrong Prometheus."""
    client, truth, _, triage, losses = _own(served_job)
    last = truth["last_step"]
    ident = discover(client, triage=triage, log_losses={last: losses[last] + 0.5}).identity
    assert ident.status == "mismatch"
    assert "loss" in ident.message and "wrong Prometheus" in ident.message


def test_the_identity_allows_the_exporter_lag(served_job) -> None:
    """A log two steps past the TSDB (the job died within one flush) still matches, and says why."""
    client, truth, _, triage, _ = _own(served_job)
    lagging = json.loads(json.dumps(triage))
    lagging["job"]["last_step"] = truth["last_step"] + 2
    ident = discover(client, triage=lagging).identity
    assert ident.status == "match"
    assert ident.compared_step == truth["last_step"]
    assert any("exporter lag" in note for note in ident.notes)


def test_the_identity_is_unknown_without_a_log(served_job) -> None:
    client, _, _ = served_job("healthy")
    ident = discover(client).identity
    assert ident.status == "unknown"
    assert ident.tsdb_last_step is not None


def test_a_dead_hosts_targets_show_failed_scrapes(served_job) -> None:
    """node-death (seed 2): the dead host's exporter stops answering, so its up series ends at 0."""
    client, truth, _ = served_job("node-death", seed=2)
    dead = truth["culprits"][0]["host"]
    targets = discover(client).targets
    dead_targets = [t for t in targets if t.host == dead]
    assert dead_targets and all(t.up == 0.0 and (t.failed_scrapes or 0) > 0 for t in dead_targets)
    assert all(t.first_down is not None for t in dead_targets)
    assert all(t.up == 1.0 for t in targets if t.host != dead)


def test_a_server_that_is_down_gives_errors_not_an_exception() -> None:
    """Nothing listens on port 9: every part records its error and the identity is unknown."""
    with PrometheusClient("http://127.0.0.1:9", timeout=2.0, retries=1) as client:
        found = discover(client, triage={"job": {"last_step": 10, "status": "failed"}})
    assert found.unreachable and not found.ok
    assert "tsdb_status" in found.errors and "unreachable" in found.errors["tsdb_status"]
    assert found.identity.status == "unknown"
    assert found.families == () and found.hosts == ()


def test_it_round_trips_through_json(served_job) -> None:
    """to_dict() is plain JSON and from_dict() gives the same Discovery back."""
    client, _, _, triage, losses = _own(served_job)
    found = discover(client, triage=triage, log_losses=losses)
    data = json.loads(json.dumps(found.to_dict()))
    assert Discovery.from_dict(data) == found


@pytest.mark.parametrize(
    ("name", "prefix"),
    [
        ("hw_gpu_power_watts", "hw_gpu_"),
        ("hw_rdma_tx_retx_pkts_total", "hw_rdma_"),
        ("hw_oom_kills_total", "hw_"),
        ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_"),
        ("node_memory_MemTotal_bytes", "node_memory_"),
        ("node_load1", "node_"),
        ("tb_step", "tb_"),
        ("training_loss", "training_"),
        ("ray_node_mem_used", "ray_node_"),
        ("rdma_stat_tx_bytes", "rdma_"),
        ("up", "up"),
    ],
)
def test_family_prefixes(name: str, prefix: str) -> None:
    """Known prefixes win (the longest first); other names group by their first word."""
    assert family_prefix(name) == prefix


def test_log_step_losses_reads_only_the_tail(tmp_path: Path) -> None:
    """The loss of each completed step comes from the log's tail; a cut first line and garbage are skipped."""
    log = tmp_path / "job.log"
    lines = [
        f"0: I0301 10:42:{i % 60:02d}.5 1 metric_logger.py:190] completed step: {i}, seconds: 29.874, "
        f"TFLOP/s/device: 803.112, MFU: 32.12%, Tokens/s/device: 3311.604, total_weights: 1048576, "
        f"loss: {2 + i / 1000:.3f}"
        for i in range(200)
    ]
    log.write_bytes("\n".join(lines).encode() + b"\n\xff\xfe garbage\ncompleted step: 7, loss: nan\n")
    losses = log_step_losses(log, tail_bytes=len(lines[0]) * 10)
    assert 199 in losses and losses[199] == pytest.approx(2.199)
    assert 150 not in losses
    assert log_step_losses(tmp_path / "missing.log") == {}


@pytest.fixture
def live_prometheus(tmp_path: Path):
    """A live Prometheus scraping itself and a target where nothing listens, every second."""
    import shutil
    import subprocess
    import time

    from playbooks.tsdb_server import find_free_port

    port = find_free_port(start=20190, end=20990)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 500ms\n"
        "scrape_configs:\n"
        f"  - job_name: self\n    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
        "  - job_name: gone\n    static_configs: [{targets: ['127.0.0.1:9']}]\n"
    )
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [
            shutil.which("prometheus") or "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    client = PrometheusClient(f"http://127.0.0.1:{port}", timeout=5.0, retries=1)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, (
                tmp_path / "prometheus.log"
            ).read_text()
            try:
                active = client.targets()["activeTargets"]
                if len(active) == 2 and all(t.get("health") != "unknown" for t in active):
                    break
            except Exception:  # noqa: BLE001 - still starting
                pass
            time.sleep(0.2)
        yield client
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_a_live_servers_targets_come_from_its_targets_api(live_prometheus) -> None:
    """A live server lists its scrape targets: the dead one is down with its error; no profile is no crash."""
    found = discover(live_prometheus, triage={"job": {"last_step": 10, "status": "running"}})
    assert found.targets_source == "api"
    by_job = {t.job: t for t in found.targets}
    assert by_job["self"].up == 1.0 and by_job["self"].last_scrape is not None
    assert by_job["gone"].up == 0.0 and by_job["gone"].error
    assert "profile" in found.errors and found.profile == ""
    assert found.identity.status == "unknown"
    assert any(f.prefix == "prometheus_" for f in found.families)


def test_a_target_whose_samples_stop_early_is_flagged(tmp_path: Path) -> None:
    """On a served TSDB where one exporter's up series ends 30 min before the rest, that target stopped early."""
    from tests.support.prometheus import Family as OMFamily
    from tests.support.prometheus import build_tsdb, points, served, write_openmetrics

    start = 1_773_400_000.0
    end = start + 3600.0
    up = OMFamily("up", series=[
        ({"job": "node_hw", "instance": "n1:9400"}, points(start, end, 15.0, lambda t: 1.0)),
        ({"job": "node_hw", "instance": "n2:9400"}, points(start, end - 1800.0, 15.0, lambda t: 1.0)),
    ])  # fmt: skip
    tsdb = build_tsdb(write_openmetrics(tmp_path / "m.om", [up]), tmp_path / "tsdb")
    with served(tsdb, tmp_path / "views") as server, PrometheusClient(server.url, retries=1) as client:
        found = discover(client)
    by_instance = {t.instance: t for t in found.targets}
    assert not by_instance["n1:9400"].stopped_early
    assert by_instance["n1:9400"].last_scrape == pytest.approx(end)
    assert by_instance["n2:9400"].stopped_early
    assert by_instance["n2:9400"].last_scrape == pytest.approx(end - 1800.0, abs=20.0)
    assert found.profile == "" and "profile" in found.errors  # only up: no profile, still an answer


def test_a_long_range_is_looked_at_through_its_last_window(served_job) -> None:
    """With a 10-minute window the range is still whole, the range queries cover the window, and the answer holds."""
    client, truth, _ = served_job("healthy")
    found = discover(client, max_window=600.0)
    end = truth["data_range"][1]
    assert found.time_range == pytest.approx(tuple(truth["data_range"]), abs=1.0)
    assert found.window == pytest.approx((end - 600.0, end), abs=1.0)
    assert set(found.hosts) == set(truth["hosts"]) and found.errors == {}
    assert found.identity.tsdb_last_step == truth["last_step"]


def test_a_host_with_fewer_gpus_is_flagged(tmp_path: Path) -> None:
    """On a served TSDB where one host exports 3 GPUs and the others 4, that host is flagged."""
    from tests.support.prometheus import Family as OMFamily
    from tests.support.prometheus import build_tsdb, points, served, write_openmetrics

    start, end = 1_773_400_000.0, 1_773_401_800.0
    gpus = {"n1": 4, "n2": 4, "n3": 3}
    power = OMFamily(
        "hw_gpu_power_watts",
        series=[
            (
                {"host": h, "gpu": str(g), "instance": f"{h}:9400", "job": "node_hw"},
                points(start, end, 15.0, lambda t: 700.0),
            )
            for h, n in gpus.items()
            for g in range(n)
        ],
    )
    up = OMFamily(
        "up",
        series=[
            ({"job": "node_hw", "instance": f"{h}:9400"}, points(start, end, 15.0, lambda t: 1.0))
            for h in gpus
        ],
    )
    tsdb = build_tsdb(write_openmetrics(tmp_path / "m.om", [power, up]), tmp_path / "tsdb")
    with served(tsdb, tmp_path / "views") as server, PrometheusClient(server.url, retries=1) as client:
        found = discover(client, triage={"job": {"last_step": 10, "status": "failed"}})
    assert found.profile == "amd"
    assert found.gpus_per_host == gpus
    assert (found.gpus_min, found.gpus_max, found.gpus_typical) == (3, 4, 4)
    assert found.hosts_fewer_gpus == ("n3",)
    assert found.identity.status == "unknown" and "no tb_step samples" in found.identity.message


def test_a_half_broken_server_fails_part_by_part(served_job) -> None:
    """Status and targets answer garbage (a proxy in front of a real server): those parts fail, the rest holds.

    A real Prometheus cannot be made to send these, so a transport forwards every other request to one.
    """
    import httpx

    real, truth, _ = served_job("healthy")
    upstream = httpx.HTTPTransport()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/status/tsdb":
            return httpx.Response(502, text="<html>bad gateway</html>")
        if request.url.path == "/api/v1/targets":
            return httpx.Response(200, json={"status": "success", "data": {"activeTargets": "garbage"}})
        return upstream.handle_request(request)

    with PrometheusClient(real.base_url, retries=1, transport=httpx.MockTransport(handler)) as client:
        found = discover(client, triage=triage_job(truth["job_dir"]).to_dict())
    assert set(found.errors) == {"tsdb_status", "targets"}
    assert not found.unreachable and found.head == {}
    assert set(found.hosts) == set(truth["hosts"]) and found.profile == "amd"
    assert found.identity.status == "match"


def test_a_running_jobs_prometheus_may_be_ahead_of_its_log(served_job) -> None:
    """A live job's log read 20 steps ago still matches: the TSDB has that step, with the log's loss there."""
    client, truth, _, triage, losses = _own(served_job)
    earlier = json.loads(json.dumps(triage))
    earlier["job"]["last_step"] = truth["last_step"] - 20
    earlier["job"]["status"] = "running"
    ident = discover(client, triage=earlier, log_losses=losses).identity
    assert ident.status == "match", ident.message
    assert ident.compared_step == truth["last_step"] - 20
    assert ident.log_loss == pytest.approx(ident.tsdb_loss, abs=0.002)
    assert any("running" in note for note in ident.notes)
    earlier["job"]["status"] = "failed"  # a finished job's log cannot be 20 steps behind its TSDB
    assert discover(client, triage=earlier, log_losses=losses).identity.status == "mismatch"


@pytest.mark.parametrize(
    "triage", [{}, {"job": "x", "details": [1], "nodes": "abc"}, {"job": {"last_step": None}}]
)
def test_a_triage_without_a_last_step_leaves_the_identity_unknown(served_job, triage) -> None:
    """An empty, malformed or stepless triage is no reason to fail: the identity is just unknown."""
    client, _, _ = served_job("healthy")
    ident = discover(client, triage=triage).identity
    assert ident.status == "unknown" and "Cannot check" in ident.message
