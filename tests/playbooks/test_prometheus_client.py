"""PrometheusClient against a real Prometheus serving a generated TSDB of 2026-03-01.

Canned replies (httpx.MockTransport) appear only for faults a real server cannot be made to give:
a 5xx followed by success, a read timeout, and a different backend's coarse label index.
"""

from __future__ import annotations

import json
import math
import pickle
import socket
import threading
from pathlib import Path
from urllib.parse import parse_qs

import httpx
import pytest

from playbooks.prometheus import (
    MAX_POINTS,
    InstantSample,
    PrometheusBadResponse,
    PrometheusClient,
    PrometheusError,
    PrometheusForbidden,
    PrometheusQueryError,
    PrometheusTimeout,
    PrometheusUnreachable,
    choose_step,
)
from tests.support.prometheus import Family, build_tsdb, points, running_prometheus, served, write_openmetrics

T0 = 1772323200.0  # 2026-03-01 00:00:00 UTC, months before "now": data_time_range must not assume recent data
END = T0 + 4 * 3600
STEP = 15.0
# The earliest and latest samples sit off the 15 s grid and in series of their own, so that the range
# must come from the data, not from block boundaries or the majority of series.
FIRST = T0 - 37.0
LAST = END + 13.0


def power(t: float) -> float:
    return 500.0 + (t - T0) / 60.0


@pytest.fixture(scope="module")
def tsdb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("client-tsdb")
    families = [
        Family("tb_step", help="training step", series=[({"host": "node-0"}, points(T0, END, STEP, lambda t: (t - T0) / STEP))]),
        Family(
            "hw_gpu_power_watts",
            series=[({"host": h, "gpu": g}, points(T0, END, STEP, power)) for h in ("node-0", "node-1") for g in ("0", "1")],
        ),
        Family("hw_net_rx_bytes", type="counter", series=[({"host": "node-1", "device": "eth0"}, points(T0, END, STEP, lambda t: (t - T0) * 1e6))]),
        Family("early_probe", series=[({"host": "node-0"}, [(FIRST, 1.0), (T0 + 60, 1.0)])]),
        Family("late_probe", series=[({"host": "node-1"}, [(END - 60, 2.0), (LAST, 2.0)])]),
    ]  # fmt: skip
    return build_tsdb(write_openmetrics(base / "job.om", families), base / "job" / "prometheus")


@pytest.fixture(scope="module")
def server_url(tsdb_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    with served(tsdb_dir, tmp_path_factory.mktemp("work")) as server:
        yield server.url


@pytest.fixture
def client(server_url: str):
    with PrometheusClient(server_url, timeout=10.0, retries=2, backoff=0.01) as c:
        yield c


def test_query_returns_the_samples_at_a_past_instant(client: PrometheusClient) -> None:
    """An instant query at a time inside old data returns its vector with labels and values."""
    got = client.query('hw_gpu_power_watts{host="node-1"}', at=T0 + 600)
    assert sorted(s.labels["gpu"] for s in got) == ["0", "1"]
    assert all(s.timestamp == T0 + 600 and s.value == power(T0 + 600) for s in got)
    assert got[0].labels["__name__"] == "hw_gpu_power_watts"


def test_query_turns_a_scalar_into_one_unlabelled_sample(client: PrometheusClient) -> None:
    """A scalar result becomes one sample with {} labels."""
    assert client.query("scalar(tb_step) * 2", at=T0 + 150) == [InstantSample({}, T0 + 150, 20.0)]


def test_query_range_returns_every_step(client: PrometheusClient) -> None:
    """A range query returns one Series per series with one point per step."""
    series = client.query_range('hw_net_rx_bytes_total{host="node-1"}', T0, T0 + 3600, 60)
    assert len(series) == 1
    assert series[0].labels == {"__name__": "hw_net_rx_bytes_total", "host": "node-1", "device": "eth0"}
    assert series[0].timestamps == tuple(T0 + 60 * i for i in range(61))
    assert series[0].values[-1] == 3600 * 1e6


def test_query_range_raises_a_step_too_small_for_the_window(client: PrometheusClient) -> None:
    """A 4 h window at 1 s would be 14,401 points: the step is raised to 2 s and Prometheus accepts it."""
    assert choose_step(T0, END, min_step=1.0) == 2.0
    (series,) = client.query_range("tb_step", T0, END, step=1.0)
    assert len(series.timestamps) == 7201 <= MAX_POINTS
    assert series.timestamps[1] - series.timestamps[0] == 2.0


@pytest.mark.parametrize(
    ("start", "end", "min_step", "expected"),
    [
        (0, 3600, 1.0, 1.0),
        (0, 4 * 3600, 1.0, 2.0),
        (0, 30 * 86400, 1.0, 300.0),
        (0, 3600, 7.0, 10.0),
        (0, 0, 1.0, 1.0),
        (0, 10, 0.004, 0.005),
        (0, 3650 * 86400, 1.0, 43200.0),
        (0, 36500 * 86400, 1.0, 4 * 86400.0),
    ],
)
def test_choose_step_picks_the_smallest_nice_step_that_fits(start, end, min_step, expected) -> None:
    """choose_step returns the smallest nice step >= min_step keeping at most 11,000 points."""
    step = choose_step(start, end, min_step=min_step)
    assert step == expected
    assert (end - start) / step + 1 <= MAX_POINTS


def test_series_labels_and_values_list_the_index(client: PrometheusClient) -> None:
    """series, label_names and label_values answer from the TSDB index."""
    found = client.series(["hw_gpu_power_watts"], start=T0, end=END)
    assert sorted((s["host"], s["gpu"]) for s in found) == [
        ("node-0", "0"), ("node-0", "1"), ("node-1", "0"), ("node-1", "1"),
    ]  # fmt: skip
    assert client.label_names(["tb_step"], start=T0, end=END) == ["__name__", "host"]
    assert client.label_values("gpu") == ["0", "1"]
    assert client.label_values("__name__", ['{host="node-1"}']) == [
        "hw_gpu_power_watts", "hw_net_rx_bytes_total", "late_probe",
    ]  # fmt: skip
    with pytest.raises(PrometheusQueryError):
        client.label_values("not a label")


def test_status_endpoints_describe_the_server(client: PrometheusClient) -> None:
    """tsdb_status, buildinfo, targets and flags return their `data` objects."""
    assert "headStats" in client.tsdb_status()
    assert client.buildinfo()["version"].startswith("2.")
    assert client.targets()["activeTargets"] == []  # the view scrapes nothing
    assert client.flags()["query.lookback-delta"] == "15m"
    assert client.ready() is True


def test_bad_promql_raises_with_prometheus_own_text(client: PrometheusClient, server_url: str) -> None:
    """A parse error is a PrometheusQueryError carrying Prometheus's error text verbatim, not retried."""
    raw = httpx.get(f"{server_url}/api/v1/query", params={"query": "sum(rate(x[5m])", "time": T0}).json()
    before = client.stats.requests
    with pytest.raises(PrometheusQueryError) as info:
        client.query("sum(rate(x[5m])", at=T0)
    assert info.value.error_type == "bad_data"
    assert info.value.message == raw["error"]
    assert info.value.query == "sum(rate(x[5m])"
    assert "parse error" in str(info.value)
    assert pickle.loads(pickle.dumps(info.value)).message == raw["error"]  # survives a Celery result
    assert client.stats.requests == before + 1


def test_a_long_query_is_sent_as_a_post_form(client: PrometheusClient) -> None:
    """PromQL longer than 2,000 characters still works (POST form) and gives the same answer."""
    long_query = "tb_step" + " + 0 * tb_step" * 200
    assert len(long_query) > 2000
    assert client.query(long_query, at=T0 + 150)[0].value == 10.0

    methods = []

    def handler(request: httpx.Request) -> httpx.Response:
        methods.append(request.method)
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": []}})

    with PrometheusClient("http://prom.test", transport=httpx.MockTransport(handler)) as mock:
        mock.query(long_query)
        mock.query("up")
    assert methods == ["POST", "GET"]


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_server_fails_after_the_retries() -> None:
    """Connection refused is retried, then raised as PrometheusUnreachable with a clear message."""
    port = _dead_port()
    with PrometheusClient(f"http://127.0.0.1:{port}", retries=3, backoff=0.001) as dead:
        with pytest.raises(PrometheusUnreachable) as info:
            dead.query("up")
        assert dead.stats.requests == 3
        assert dead.ready() is False
    assert str(info.value) == (
        f"Prometheus at http://127.0.0.1:{port} is unreachable (connection refused) after 3 attempts"
    )


def _sequence_transport(replies: list) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        reply = replies[min(len(seen), len(replies)) - 1]
        if isinstance(reply, Exception):
            raise reply
        return reply

    return httpx.MockTransport(handler), seen


OK_VECTOR = {
    "status": "success",
    "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "3"]}]},
}


def test_a_5xx_is_retried_until_success() -> None:
    """HTTP 503 then 200: the client retries and returns the good answer."""
    transport, seen = _sequence_transport(
        [httpx.Response(503, text="busy"), httpx.Response(200, json=OK_VECTOR)]
    )
    with PrometheusClient("http://prom.test", retries=3, backoff=0, transport=transport) as c:
        assert c.query("up") == [InstantSample({}, 1.0, 3.0)]
    assert len(seen) == 2


class _Recording(httpx.HTTPTransport):
    """The real transport to the real server, keeping each response's headers."""

    def __init__(self) -> None:
        super().__init__()
        self.encodings: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.encodings.append(response.headers.get("content-encoding"))
        return response


def test_a_loopback_server_answers_uncompressed(server_url: str) -> None:
    """On the loopback the client asks for identity: Prometheus spends no CPU on gzip, the answer is the same."""
    transport = _Recording()
    with PrometheusClient(server_url, transport=transport) as c:
        (series,) = c.query_range('hw_net_rx_bytes_total{host="node-1"}', T0, T0 + 3600, 60)
    assert transport.encodings == [None]
    assert series.values[-1] == 3600 * 1e6
    with httpx.Client() as plain:  # what httpx asks for by default, which Prometheus honours
        default = plain.get(f"{server_url}/api/v1/query", params={"query": "hw_gpu_power_watts"})
    assert default.headers.get("content-encoding") == "gzip"


@pytest.mark.parametrize(
    ("url", "encoding"),
    [("http://127.0.0.1:9090", "identity"), ("http://localhost:9090", "identity"), ("http://[::1]:9090", "identity"),
     ("http://prom.example:9090", "gzip"), ("http://10.1.2.3:9090", "gzip")],
)  # fmt: skip
def test_compression_is_asked_for_off_the_loopback_only(url: str, encoding: str) -> None:
    """A remote Prometheus is asked for gzip (the network is the cost there), a loopback one for identity."""
    transport, seen = _sequence_transport([httpx.Response(200, json=OK_VECTOR)])
    with PrometheusClient(url, retries=1, transport=transport) as c:
        c.query("up")
    assert encoding in seen[0].headers["accept-encoding"]


def test_a_persistent_5xx_becomes_a_bad_response() -> None:
    """HTTP 502 on every attempt raises PrometheusBadResponse after all attempts."""
    transport, seen = _sequence_transport([httpx.Response(502, text="<html>bad gateway</html>")])
    with PrometheusClient("http://prom.test", retries=3, backoff=0, transport=transport) as c:
        with pytest.raises(PrometheusBadResponse, match="HTTP 502 after 3 attempts"):
            c.query("up")
    assert len(seen) == 3


def test_a_4xx_is_never_retried() -> None:
    """HTTP 422 (execution error) is raised at once as a PrometheusQueryError."""
    body = {"status": "error", "errorType": "execution", "error": "many-to-many matching not allowed"}
    transport, seen = _sequence_transport([httpx.Response(422, json=body)])
    with PrometheusClient("http://prom.test", retries=3, backoff=0, transport=transport) as c:
        with pytest.raises(PrometheusQueryError) as info:
            c.query("a / on() b")
    assert (info.value.error_type, info.value.message, len(seen)) == ("execution", body["error"], 1)


def test_a_read_timeout_is_retried_then_raised() -> None:
    """A read timeout on every attempt raises PrometheusTimeout."""
    transport, seen = _sequence_transport([httpx.ReadTimeout("slow")])
    with PrometheusClient("http://prom.test", timeout=1.5, retries=2, backoff=0, transport=transport) as c:
        with pytest.raises(
            PrometheusTimeout, match=r"did not answer within 1.5 s \(read timeout\) after 2 attempts"
        ):
            c.query("up")
    assert len(seen) == 2


def test_a_non_json_answer_is_a_bad_response() -> None:
    """A 200 with HTML (a proxy login page) raises PrometheusBadResponse."""
    transport, _ = _sequence_transport([httpx.Response(200, text="<html>login</html>")])
    with PrometheusClient("http://prom.test", transport=transport) as c:
        with pytest.raises(PrometheusBadResponse, match="non-JSON"):
            c.buildinfo()


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/admin/tsdb/delete_series",
        "/api/v1/admin/tsdb/snapshot",
        "/api/v1/admin/tsdb/clean_tombstones",
        "/-/quit",
        "/-/reload",
        "/api/v1/write",
        "/federate",
        "/api/v1/label/../admin/values",
        "/api/v1/query/../admin/tsdb/snapshot",
    ],
)
def test_a_forbidden_path_is_refused_without_io(path: str) -> None:
    """Paths outside the read-only allow-list raise PrometheusForbidden before any request."""
    transport, seen = _sequence_transport([httpx.Response(200, json={"status": "success", "data": {}})])
    with PrometheusClient("http://prom.test", transport=transport) as c:
        with pytest.raises(PrometheusForbidden):
            c.get(path)
    assert seen == []


def test_run_parallel_keeps_order_and_isolates_a_failure(client: PrometheusClient) -> None:
    """Results come back in call order; a failing call yields its exception and the others complete."""
    calls = [lambda i=i: client.query("tb_step", at=T0 + 150 * i)[0].value for i in range(12)]
    calls.insert(5, lambda: client.query("tb_step{", at=T0))
    results = client.run_parallel(calls, max_concurrency=4)
    assert isinstance(results[5], PrometheusQueryError)
    del results[5]
    assert results == [10.0 * i for i in range(12)]


def test_stats_count_requests_from_threads(server_url: str) -> None:
    """ClientStats adds up requests and waiting time from concurrent threads."""
    with PrometheusClient(server_url) as c:
        threads = [
            threading.Thread(target=lambda: [c.query("tb_step", at=T0) for _ in range(5)]) for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert c.stats.requests == 20
        assert c.stats.seconds > 0


def test_data_time_range_finds_the_first_and_last_sample(client: PrometheusClient) -> None:
    """data_time_range returns the real first and last sample, months in the past, with a bounded count."""
    before = client.stats.requests
    first, last = client.data_time_range()
    assert first == pytest.approx(FIRST, abs=1.0)
    assert last == pytest.approx(LAST, abs=1.0)
    assert client.stats.requests - before <= 75


def test_data_time_range_of_an_empty_server_is_none(tmp_path: Path) -> None:
    """A server without any sample has no data range."""
    with running_prometheus(tmp_path / "empty", lockfile=False) as live, PrometheusClient(live.url) as c:
        assert c.data_time_range() is None


class _CoarseIndexBackend:
    """A Prometheus-compatible backend whose label index has day granularity (like VictoriaMetrics).

    It answers /labels for any window touching a day that holds data, and min/max(timestamp(...))
    instant and range queries exactly, with a 5 min lookback; it has no /status endpoints.
    """

    LOOKBACK = 300.0

    def __init__(self, samples: list[float]) -> None:
        self.samples = sorted(samples)

    def _seen_at(self, t: float, agg) -> float | None:
        visible = [s for s in self.samples if t - self.LOOKBACK < s <= t]
        return agg(visible) if visible else None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        q = {k: v[0] for k, v in parse_qs(request.url.query.decode()).items()}
        path = request.url.path
        if path == "/api/v1/labels":
            start, end = float(q["start"]), float(q["end"])
            days = {math.floor(s / 86400) for s in self.samples}
            hit = any(math.floor(start / 86400) <= d <= math.floor(end / 86400) for d in days)
            return httpx.Response(200, json={"status": "success", "data": ["__name__"] if hit else []})
        if path in ("/api/v1/query", "/api/v1/query_range"):
            agg = min if q["query"].startswith("min(") else max
            if path == "/api/v1/query":
                v = self._seen_at(float(q["time"]), agg)
                result = [{"metric": {}, "value": [float(q["time"]), str(v)]}] if v is not None else []
                return httpx.Response(
                    200, json={"status": "success", "data": {"resultType": "vector", "result": result}}
                )
            start, end, step = float(q["start"]), float(q["end"]), float(q["step"])
            values = []
            for i in range(int((end - start) / step + 1e-9) + 1):
                t = start + i * step
                v = self._seen_at(t, agg)
                if v is not None:
                    values.append([t, str(v)])
            result = [{"metric": {}, "values": values}] if values else []
            return httpx.Response(
                200, json={"status": "success", "data": {"resultType": "matrix", "result": result}}
            )
        return httpx.Response(404, text=json.dumps({"status": "error", "error": "not found"}))


def test_data_time_range_scans_past_a_coarse_index() -> None:
    """On a backend whose index only knows days, the range still comes from the samples themselves."""
    first = 1772323200.0 + 5 * 3600 + 17.25  # 05:00:17.25, hours after the day boundary the index reports
    samples = [first + 10 * i for i in range(2000)]
    with PrometheusClient("http://vm.test", transport=httpx.MockTransport(_CoarseIndexBackend(samples))) as c:
        got = c.data_time_range()
    assert got is not None
    assert got[0] == pytest.approx(first, abs=0.2)
    assert got[1] == samples[-1]


def test_the_client_rejects_a_url_without_scheme() -> None:
    """A base URL without http(s):// is a programming error, reported at construction."""
    with pytest.raises(ValueError):
        PrometheusClient("localhost:9090")
    assert issubclass(PrometheusUnreachable, PrometheusError)
