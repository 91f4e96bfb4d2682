"""Read-only client for the Prometheus HTTP API.

Stepwise only ever reads a job's TSDB, so the client refuses every path that is not one of the read
endpoints (no admin API, no lifecycle, no remote write) before any I/O happens. Transient faults
(connection errors, timeouts, HTTP 5xx) are retried with exponential backoff and jitter; a query that
Prometheus rejects (HTTP 400/422) is never retried and carries Prometheus's own error text.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit

import httpx

from . import prometheus_range
from ._prometheus_wire import (
    _LABEL_NAME,
    _LABEL_VALUES_PATH,
    _MAX_BACKOFF,
    _POST_THRESHOLD,
    _POSTABLE_PATHS,
    _READ_PATHS,
    _floats,
    _headers,
    load_answer,
)
from .budget import BudgetTimeout
from .prometheus_types import (
    MAX_POINTS,
    ClientStats,
    InstantSample,
    PrometheusBadResponse,
    PrometheusError,
    PrometheusForbidden,
    PrometheusQueryError,
    PrometheusTimeout,
    PrometheusUnreachable,
    Series,
    _as_float,
    _fmt_time,
    _point_value,
    _transport_reason,
    choose_step,
    parse_duration,
)

__all__ = [
    "MAX_POINTS",
    "ClientStats",
    "InstantSample",
    "PrometheusBadResponse",
    "PrometheusClient",
    "PrometheusError",
    "PrometheusForbidden",
    "PrometheusQueryError",
    "PrometheusTimeout",
    "PrometheusUnreachable",
    "Series",
    "choose_step",
    "parse_duration",
    "set_gate_factory",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


#: Returns the budget a client's queries go through (a context manager factory whose context value is
#: the seconds spent queued, e.g. `playbooks.budget.SourceBudget.slot`), or None; see `set_gate_factory`.
GateFactory = Callable[[str], "Callable[[], contextlib.AbstractContextManager[float]] | None"]
_gate_factory: GateFactory | None = None


def set_gate_factory(factory: GateFactory | None) -> None:
    """Make every client created from now on ask `factory(base_url)` for its query gate (None: no gate).

    The web app installs a per-source budget here (`investigations.apps`), so the timeline, the
    diagnosis tasks and the query runs all share it without each passing it along.
    """
    global _gate_factory
    _gate_factory = factory


class PrometheusClient:
    """Read-only client for one Prometheus server.

    One pooled httpx.Client is shared by all threads. Every request has a timeout; connection errors,
    timeouts and HTTP 5xx are retried up to `retries` attempts in total with exponential backoff and
    jitter; 4xx is never retried. Query requests (query, range, series, labels) go through the gate
    of the source's budget when there is one: over budget they queue (`stats.queued_seconds`).
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.25,
        max_connections: int = 16,
        transport: httpx.BaseTransport | None = None,
        gate: Callable[[], contextlib.AbstractContextManager[float]] | None = None,
        auth: tuple[str, str] | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"Prometheus URL must look like http://host:port, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = float(timeout)
        self.attempts = max(1, int(retries))
        self.backoff = max(0.0, float(backoff))
        self.stats = ClientStats()
        self._gate = gate if gate is not None else (_gate_factory(self.base_url) if _gate_factory else None)
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(self.timeout),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            transport=transport,
            # A job's Prometheus is reached directly or through an SSH tunnel, never via an HTTP proxy.
            trust_env=False,
            headers=_headers(parts.hostname or ""),
            # Basic-auth credentials are passed apart from the URL, so no message ever shows them.
            auth=auth,
        )

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PrometheusClient({self.base_url!r})"

    # -- queries ---------------------------------------------------------------------------------

    def query(self, promql: str, at: float | None = None) -> list[InstantSample]:
        """Return the result of an instant query at `at` (server's now when None).

        A scalar or string result becomes one sample with {} labels; a range-vector result (e.g.
        ``x[5m]``) is flattened into one sample per raw point.
        """
        params: dict[str, Any] = {"query": promql}
        if at is not None:
            params["time"] = _fmt_time(at)
        data = self._api("/api/v1/query", params, query=promql)
        try:
            kind, result = data["resultType"], data["result"]
            if kind == "vector":
                return [InstantSample(dict(r["metric"]), *_point_value(r)) for r in result]
            if kind in ("scalar", "string"):
                return [InstantSample({}, float(result[0]), _as_float(result[1]))]
            if kind == "matrix":
                return [
                    InstantSample(dict(r["metric"]), float(ts), _as_float(v))
                    for r in result
                    for ts, v in r.get("values", ())
                ]
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise self._shape_error("/api/v1/query", exc) from exc
        raise PrometheusBadResponse(f"Prometheus at {self.base_url} returned unknown resultType {kind!r}")

    def query_range(self, promql: str, start: float, end: float, step: float | None = None) -> list[Series]:
        """Return the series of a range query over [start, end].

        step None picks choose_step(start, end); a given step too small for the window is raised to
        the smallest legal nice step, so the query never hits Prometheus's 11,000-point limit.
        """
        if end < start:
            raise ValueError(f"end ({end}) is before start ({start})")
        if step is None:
            step = choose_step(start, end)
        elif step <= 0:
            raise ValueError(f"step must be > 0, got {step}")
        elif (end - start) / step + 1 > MAX_POINTS:
            step = choose_step(start, end, min_step=step)
        params = {
            "query": promql,
            "start": _fmt_time(start),
            "end": _fmt_time(end),
            "step": repr(float(step)),
        }
        data = self._api("/api/v1/query_range", params, query=promql)
        try:
            if data["resultType"] != "matrix":
                raise ValueError(f"resultType {data['resultType']!r}")
            out = []
            for r in data["result"]:
                points = r.get("values") or [(ts, h.get("count")) for ts, h in r.get("histograms", ())]
                out.append(Series(dict(r["metric"]), *_floats(points)))
            return out
        except (KeyError, TypeError, ValueError) as exc:
            raise self._shape_error("/api/v1/query_range", exc) from exc

    def series(
        self, matchers: Sequence[str], start: float | None = None, end: float | None = None
    ) -> list[dict[str, str]]:
        """Return the label sets of the series matching any of `matchers` in [start, end]."""
        if isinstance(matchers, str) or not matchers:
            raise ValueError("series() needs a non-empty sequence of matchers")
        data = self._api("/api/v1/series", self._match_params(matchers, start, end), query=" ".join(matchers))
        if not isinstance(data, list):
            raise self._shape_error("/api/v1/series", TypeError(type(data).__name__))
        return [dict(s) for s in data]

    def label_names(
        self, matchers: Sequence[str] = (), start: float | None = None, end: float | None = None
    ) -> list[str]:
        """Return the label names of the series matching `matchers` (all series when empty)."""
        data = self._api("/api/v1/labels", self._match_params(matchers, start, end), query=" ".join(matchers))
        if not isinstance(data, list):
            raise self._shape_error("/api/v1/labels", TypeError(type(data).__name__))
        return [str(n) for n in data]

    def label_values(
        self, name: str, matchers: Sequence[str] = (), start: float | None = None, end: float | None = None
    ) -> list[str]:
        """Return the values of label `name` on the series matching `matchers`."""
        if not _LABEL_NAME.match(name):
            raise PrometheusQueryError("bad_data", f"invalid label name {name!r}", name)
        path = f"/api/v1/label/{name}/values"
        data = self._api(path, self._match_params(matchers, start, end), query=" ".join(matchers) or name)
        if not isinstance(data, list):
            raise self._shape_error(path, TypeError(type(data).__name__))
        return [str(v) for v in data]

    def tsdb_status(self) -> dict[str, Any]:
        """Return /api/v1/status/tsdb data (headStats covers the in-memory head only)."""
        return self._api_dict("/api/v1/status/tsdb")

    def buildinfo(self) -> dict[str, Any]:
        """Return /api/v1/status/buildinfo data."""
        return self._api_dict("/api/v1/status/buildinfo")

    def flags(self) -> dict[str, Any]:
        """Return /api/v1/status/flags data (flag name -> value as text)."""
        return self._api_dict("/api/v1/status/flags")

    def targets(self) -> dict[str, Any]:
        """Return /api/v1/targets data (activeTargets, droppedTargets)."""
        return self._api_dict("/api/v1/targets")

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """Return the `data` of a GET on a read-only API path (the text body for /-/ paths)."""
        if path.startswith("/-/"):
            self._check_allowed("GET", path)
            return self._send("GET", path, params).text
        return self._api(path, dict(params or {}), query="")

    def ready(self) -> bool:
        """Return True if GET /-/ready answers 200; never raises, never retries."""
        try:
            self._check_allowed("GET", "/-/ready")
            started = time.monotonic()
            try:
                resp = self._http.get("/-/ready", timeout=min(self.timeout, 5.0))
            finally:
                self.stats.record(time.monotonic() - started)
            return resp.status_code == 200
        except (httpx.HTTPError, PrometheusError, OSError):
            return False

    # -- data range ------------------------------------------------------------------------------

    def data_time_range(self) -> tuple[float, float] | None:
        """Return the (first, last) sample times in unix seconds of all data served, None if there is none.

        Read APIs only, on any Prometheus-compatible server: `playbooks.prometheus_range.data_time_range`.
        """
        return prometheus_range.data_time_range(self)

    # -- concurrency -----------------------------------------------------------------------------

    def run_parallel(
        self, calls: Sequence[Callable[[], T]], *, max_concurrency: int = 8
    ) -> list[T | PrometheusError]:
        """Return the results of `calls` in order, running at most max_concurrency at a time.

        A call that raises PrometheusError yields that exception in its slot and the others still
        complete. Any other exception is a bug: it is re-raised once every call has finished. Never
        more run at a time than the source's budget has slots (the gate's): a caller alone does not
        queue behind its own queries.
        """
        if not calls:
            return []
        workers = max(1, min(max_concurrency, len(calls), self._gate_slots() or len(calls)))
        results: list[Any] = [None] * len(calls)
        bug: BaseException | None = None
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="prometheus") as pool:
            futures = [pool.submit(call) for call in calls]
            for i, fut in enumerate(futures):
                try:
                    results[i] = fut.result()
                except PrometheusError as exc:
                    results[i] = exc
                except Exception as exc:  # noqa: BLE001 - re-raised below after the others finish
                    results[i] = exc
                    bug = bug or exc
        if bug is not None:
            raise bug
        return results

    def _gate_slots(self) -> int | None:
        """Return the slots of the source's budget when the gate is one (`SourceBudget.slot`), else None."""
        slots = getattr(getattr(self._gate, "__self__", None), "slots", None)
        return slots if isinstance(slots, int) and slots > 0 else None

    # -- transport -------------------------------------------------------------------------------

    @staticmethod
    def _match_params(matchers: Sequence[str], start: float | None, end: float | None) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if matchers:
            params["match[]"] = list(matchers)
        if start is not None:
            params["start"] = _fmt_time(start)
        if end is not None:
            params["end"] = _fmt_time(end)
        return params

    def _check_allowed(self, method: str, path: str) -> None:
        allowed = path in _READ_PATHS or bool(_LABEL_VALUES_PATH.match(path))
        if method == "POST":
            allowed = path in _POSTABLE_PATHS
        elif method != "GET":
            allowed = False
        if not allowed:
            raise PrometheusForbidden(
                f"refusing {method} {path} on Prometheus at {self.base_url}: "
                "Stepwise only calls the read-only query and status endpoints"
            )

    def _api_dict(self, path: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        data = self._api(path, dict(params or {}), query="")
        if not isinstance(data, dict):
            raise self._shape_error(path, TypeError(type(data).__name__))
        return data

    def _api(self, path: str, params: dict[str, Any], *, query: str) -> Any:
        """Return the `data` of a successful JSON API reply, or raise the matching PrometheusError."""
        method = "GET"
        if path in _POSTABLE_PATHS and len(urlencode(params, doseq=True)) > _POST_THRESHOLD:
            method = "POST"
        self._check_allowed(method, path)
        resp = self._send_gated(method, path, params)
        try:
            body = load_answer(resp.content, cut=path == "/api/v1/query_range")
        except ValueError:
            body = None
        after = f" after {self.attempts} attempts" if resp.status_code >= 500 else ""
        if not isinstance(body, dict):
            kind = resp.headers.get("content-type", "no content-type").split(";")[0].strip()[:60]
            raise PrometheusBadResponse(
                f"Prometheus at {self.base_url} answered {path} with HTTP {resp.status_code}{after} and "
                f"non-JSON content ({kind})",
                status=resp.status_code,
            )
        if body.get("status") == "success" and resp.status_code < 400:
            for warning in body.get("warnings") or ():
                log.info("Prometheus warning for %s: %s", path, warning)
            if "data" not in body:
                raise self._shape_error(path, KeyError("data"))
            return body["data"]
        error_type = str(body.get("errorType", ""))
        message = str(body.get("error", ""))
        if resp.status_code in (400, 422) or error_type in ("bad_data", "execution"):
            raise PrometheusQueryError(error_type or f"http_{resp.status_code}", message, query)
        if error_type in ("timeout", "canceled"):
            raise PrometheusTimeout(
                f"Prometheus at {self.base_url} gave up on the query ({error_type}){after}: "
                f"{' '.join(message.split())}"
            )
        raise PrometheusBadResponse(
            f"Prometheus at {self.base_url} answered {path} with HTTP {resp.status_code}{after}, "
            f"status {body.get('status')!r}: {error_type} {' '.join(message.split())}".rstrip(),
            status=resp.status_code,
        )

    def _send_gated(self, method: str, path: str, params: Mapping[str, Any] | None) -> httpx.Response:
        """Return `_send`'s response, holding a slot of the source's budget for a query request."""
        if self._gate is None or not (path in _POSTABLE_PATHS or path.startswith("/api/v1/label/")):
            return self._send(method, path, params)
        try:
            with self._gate() as waited:
                if waited:
                    self.stats.record_queued(waited)
                return self._send(method, path, params)
        except BudgetTimeout as exc:
            raise PrometheusTimeout(f"Prometheus at {self.base_url}: queued too long: {exc}") from exc

    def _send(self, method: str, path: str, params: Mapping[str, Any] | None) -> httpx.Response:
        """Return the response of the first attempt that is not a transport error or HTTP 5xx."""
        last_exc: httpx.HTTPError | None = None
        last_resp: httpx.Response | None = None
        for attempt in range(1, self.attempts + 1):
            started = time.monotonic()
            try:
                if method == "POST":
                    resp = self._http.post(path, data=dict(params or {}))
                else:
                    resp = self._http.get(path, params=params)
            except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
                raise PrometheusUnreachable(f"Prometheus URL {self.base_url} is not usable: {exc}") from exc
            except httpx.TransportError as exc:
                last_exc, last_resp = exc, None
            else:
                if resp.status_code < 500:
                    return resp
                last_exc, last_resp = None, resp
            finally:
                self.stats.record(time.monotonic() - started)
            if attempt < self.attempts:
                delay = min(_MAX_BACKOFF, self.backoff * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)
                log.debug("retrying %s %s in %.2f s (attempt %d failed)", method, path, delay, attempt)
                time.sleep(delay)
        if last_resp is not None:
            # 5xx after all attempts: let _api() report Prometheus's own error text when there is one.
            if path.startswith("/-/"):
                raise PrometheusBadResponse(
                    f"Prometheus at {self.base_url} answered {path} with HTTP {last_resp.status_code} "
                    f"after {self.attempts} attempts",
                    status=last_resp.status_code,
                )
            return last_resp
        assert last_exc is not None
        n = f"{self.attempts} attempt" + ("s" if self.attempts != 1 else "")
        if isinstance(last_exc, httpx.TimeoutException):
            kind = type(last_exc).__name__.replace("Timeout", " timeout").strip().lower()
            raise PrometheusTimeout(
                f"Prometheus at {self.base_url} did not answer within {self.timeout:g} s ({kind}) after {n}"
            ) from last_exc
        raise PrometheusUnreachable(
            f"Prometheus at {self.base_url} is unreachable ({_transport_reason(last_exc)}) after {n}"
        ) from last_exc

    def _shape_error(self, path: str, exc: BaseException) -> PrometheusBadResponse:
        return PrometheusBadResponse(
            f"Prometheus at {self.base_url} answered {path} with an unexpected shape ({type(exc).__name__}: {exc})"
        )
