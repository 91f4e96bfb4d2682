"""What the Prometheus client returns and raises, and the helpers it shares with its callers.

Errors (`PrometheusError` and its kinds, each one line a user can read), results (`InstantSample`,
`Series`), request statistics (`ClientStats`), query steps (`choose_step`) and durations
(`parse_duration`). `playbooks.prometheus` re-exports every public name: import them from there.
"""

from __future__ import annotations

import errno
import math
import re
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import PlaybooksError

# Prometheus rejects a range query whose (end - start) / step exceeds 11,000.
MAX_POINTS = 11000

# "Nice" steps in seconds: sub-second decades, then the usual dashboard steps up to a day.
_NICE_STEPS = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5,
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
)  # fmt: skip
_DAY = 86400.0
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|y|w|d|h|m|s)")
_DURATION_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


class PrometheusError(PlaybooksError):
    """Base of every error the client raises; str() is one line a user can read."""


class PrometheusUnreachable(PrometheusError):
    """Connection refused, DNS failure or connection reset, after all attempts."""


class PrometheusTimeout(PrometheusError):
    """A request (or the query on the server) timed out, after all attempts."""


class PrometheusQueryError(PrometheusError):
    """Prometheus rejected the request (HTTP 400/422, e.g. errorType bad_data or execution).

    Attributes:
        error_type: Prometheus's errorType, e.g. "bad_data", "execution".
        message: Prometheus's own error text, verbatim.
        query: The PromQL (or matchers) that was sent.
    """

    def __init__(self, error_type: str, message: str, query: str) -> None:
        self.error_type = error_type
        self.message = message
        self.query = query
        one_line = " ".join(message.split())
        super().__init__(f"Prometheus rejected the query ({error_type}): {one_line}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep the attributes when pickled (Celery results, multiprocessing).
        return (type(self), (self.error_type, self.message, self.query))


class PrometheusBadResponse(PrometheusError):
    """Non-JSON body, status other than success, unexpected shape, or HTTP 5xx after all attempts.

    Attributes:
        status: The HTTP status of the response (None when unknown). Bodies are never quoted: the
            server may be anything the allow-list admits, and its body no business of the user.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:
        return (_bad_response, (str(self), self.status))


def _bad_response(message: str, status: int | None) -> PrometheusBadResponse:
    return PrometheusBadResponse(message, status=status)


class PrometheusForbidden(PrometheusError):
    """The path or method is not one of the read-only endpoints; raised before any I/O."""


@dataclass(frozen=True)
class InstantSample:
    """One sample of an instant query.

    Attributes:
        labels: The series labels ({} for a scalar or string result).
        timestamp: Unix seconds.
        value: The sample value (NaN for a string result that is not a number).
    """

    labels: dict[str, str]
    timestamp: float
    value: float


@dataclass(frozen=True)
class Series:
    """One series of a range query.

    Attributes:
        labels: The series labels.
        timestamps: Unix seconds, ascending.
        values: One value per timestamp.
    """

    labels: dict[str, str]
    timestamps: tuple[float, ...]
    values: tuple[float, ...]


@dataclass
class ClientStats:
    """Cumulative request statistics, safe to update from several threads.

    Attributes:
        requests: HTTP requests sent, retries included.
        seconds: Time spent waiting on Prometheus, summed over requests (parallel requests add up).
        queued: Requests that had to queue for the source's budget (`gate`).
        queued_seconds: Time they spent queued, summed.
    """

    requests: int = 0
    seconds: float = 0.0
    queued: int = 0
    queued_seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, seconds: float) -> None:
        """Count one request that took `seconds`."""
        with self._lock:
            self.requests += 1
            self.seconds += seconds

    def record_queued(self, seconds: float) -> None:
        """Count one request that waited `seconds` for a slot of the source's budget (`gate`)."""
        with self._lock:
            self.queued += 1
            self.queued_seconds += seconds


def choose_step(start: float, end: float, *, min_step: float = 1.0, max_points: int = MAX_POINTS) -> float:
    """Return the smallest nice step >= min_step giving at most max_points points over [start, end].

    Nice steps are 1-2-5 below a second, then 1, 2, 5, 10, 15, 30 s, 1, 2, 5, 10, 15, 30 min,
    1, 2, 3, 6, 12 h, then whole days.
    """
    if end < start:
        raise ValueError(f"end ({end}) is before start ({start})")
    if min_step <= 0 or max_points < 2:
        raise ValueError("min_step must be > 0 and max_points >= 2")
    needed = max(min_step, (end - start) / (max_points - 1))
    for step in _NICE_STEPS:
        if step >= needed and (end - start) / step + 1 <= max_points:
            return float(step)
    return math.ceil(needed / _DAY) * _DAY


def parse_duration(text: str) -> float:
    """Return the seconds of a Prometheus duration such as "15m" or "1h30m"."""
    parts = _DURATION_PART.findall(text.strip())
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(float(n) * _DURATION_SECONDS[u] for n, u in parts)


def _fmt_time(t: float) -> str:
    return f"{float(t):.3f}"


def _as_float(raw: Any) -> float:
    try:
        return float(raw)
    except (TypeError, ValueError):
        return math.nan


def _point_value(point: Mapping[str, Any]) -> tuple[float, float]:
    # Native histograms carry "histogram": [ts, {...}] instead of "value"; their count is the value.
    if "value" in point:
        ts, raw = point["value"]
        return float(ts), _as_float(raw)
    ts, hist = point["histogram"]
    return float(ts), _as_float(hist.get("count"))


def _transport_reason(exc: BaseException) -> str:
    """Return a short human reason ("connection refused", ...) for a transport exception."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, socket.gaierror):
            return "name resolution failed"
        if isinstance(cur, OSError) and cur.errno is not None:
            return {
                errno.ECONNREFUSED: "connection refused",
                errno.ECONNRESET: "connection reset",
                errno.EHOSTUNREACH: "host unreachable",
                errno.ENETUNREACH: "network unreachable",
                errno.ECONNABORTED: "connection aborted",
                errno.EPIPE: "connection closed",
            }.get(cur.errno, cur.strerror or type(cur).__name__)
        cur = cur.__cause__ or cur.__context__
    text = str(exc).lower()
    for needle, reason in (
        ("connection refused", "connection refused"),
        ("name or service not known", "name resolution failed"),
        ("nodename nor servname", "name resolution failed"),
        ("temporary failure in name resolution", "name resolution failed"),
        ("reset", "connection reset"),
        ("disconnected", "server closed the connection"),
    ):
        if needle in text:
            return reason
    return str(exc) or type(exc).__name__
