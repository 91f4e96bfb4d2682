"""What the Prometheus client puts on the wire and takes off it: the read-only paths it may call, its
request headers, and the parsing of a range result's points."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Any

from .prometheus_types import _as_float

# Long PromQL goes in a POST form body so that proxy and server URL limits (often 4-8 KiB) never bite.
_POST_THRESHOLD = 2000

_READ_PATHS = frozenset(
    {
        "/api/v1/query",
        "/api/v1/query_range",
        "/api/v1/series",
        "/api/v1/labels",
        "/api/v1/status/tsdb",
        "/api/v1/status/buildinfo",
        "/api/v1/status/runtimeinfo",
        "/api/v1/status/flags",
        "/api/v1/targets",
        "/api/v1/metadata",
        "/-/ready",
        "/-/healthy",
    }
)
_POSTABLE_PATHS = frozenset({"/api/v1/query", "/api/v1/query_range", "/api/v1/series", "/api/v1/labels"})
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_VALUES_PATH = re.compile(r"^/api/v1/label/[A-Za-z_][A-Za-z0-9_]*/values$")
_MAX_BACKOFF = 10.0


def _floats(points: Sequence[Sequence[Any]]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Return (timestamps, values) of a range result's [ts, "value"] pairs; a value that is no number is NaN.

    `map(float, ...)` runs in C: a diagnosis of 1,024 GPUs parses a million points."""
    if not points:
        return (), ()
    ts, raw = zip(*points, strict=True)
    try:
        values = tuple(map(float, raw))
    except (TypeError, ValueError):
        values = tuple(_as_float(v) for v in raw)
    return tuple(map(float, ts)), values


def _headers(hostname: str) -> dict[str, str]:
    """Return the request headers for a Prometheus at `hostname`.

    On the loopback (a served TSDB copy, an SSH tunnel's local end) a response is asked for uncompressed:
    bytes cost nothing there, while gzip costs Prometheus about twice the CPU of the query itself (a range
    query returning 128 series x 481 points: 0.25 s of its CPU for gzip). Elsewhere gzip saves the network.
    """
    headers = {"Accept": "application/json"}
    if _loopback(hostname):
        headers["Accept-Encoding"] = "identity"
    return headers


def _loopback(hostname: str) -> bool:
    """Return True when `hostname` is localhost or a loopback address (127.0.0.0/8, ::1)."""
    if hostname.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False
