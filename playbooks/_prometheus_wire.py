"""What the Prometheus client puts on the wire and takes off it: the read-only paths it may call, its
request headers, and the parsing of a range result's points."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import re
from collections.abc import Sequence
from typing import Any

import orjson

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


_VALUES_KEY = b'"values":['


def cut_values(body: bytes) -> tuple[bytes, list[bytes]]:
    """Return (`body` with each series' "values" array replaced by its index in the list, those arrays' text).

    A range answer is mostly points: parsing them as JSON makes a list, an int and a string per point (a
    diagnosis of 8,192 GPUs receives millions) before `_floats` makes floats of them. Cut out, the arrays
    are parsed as flat lists of numbers (`_floats` on bytes), the rest (the labels) as JSON. The key cannot
    occur inside a JSON string (a quote there is escaped), and an array of [ts, "value"] pairs ends at its
    first "]]"."""
    parts = body.split(_VALUES_KEY)
    arrays: list[bytes] = []
    if len(parts) == 1:
        return body, arrays
    out = [parts[0]]
    for part in parts[1:]:
        end = 0 if part.startswith(b"]") else part.index(b"]]") + 1
        out.append(b'"values":%d' % len(arrays) + part[end + 1 :])
        arrays.append(part[:end])
    return b"".join(out), arrays


def load_answer(content: bytes, *, cut: bool) -> Any:
    """Return the parsed JSON of an answer, with each series' "values" array as its text when `cut` (a range
    answer: `cut_values`, parsed by `_floats`); raises ValueError when it is no JSON."""
    arrays: list[bytes] = []
    if cut:
        # a ValueError (no "]]" after a key): not an answer of ours, parsed whole (and refused) below
        with contextlib.suppress(ValueError):
            content, arrays = cut_values(content)
    body = json.loads(content)
    data = body.get("data") if arrays and isinstance(body, dict) else None
    for r in (data.get("result") or ()) if isinstance(data, dict) else ():
        if isinstance(r, dict) and type(r.get("values")) is int and 0 <= r["values"] < len(arrays):
            r["values"] = arrays[r["values"]]
    return body


def _floats(points: Sequence[Sequence[Any]] | bytes) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Return (timestamps, values) of a range result's [ts, "value"] pairs; a value that is no number is NaN.

    `points` is the parsed list or the array's text cut out of the answer (`cut_values`): read as a flat
    list of numbers without its brackets and quotes (a tenth of a microsecond a point; a value that is no
    JSON number, NaN or Inf, sends the array through the parsed path). `map(float, ...)` runs in C: a
    diagnosis of 1,024 GPUs parses a million points."""
    if isinstance(points, bytes):
        try:
            flat = orjson.loads(b"[" + points.translate(None, b'[]"') + b"]")
            if len(flat) % 2 == 0:
                return tuple(map(float, flat[0::2])), tuple(map(float, flat[1::2]))
        except (orjson.JSONDecodeError, TypeError):
            pass
        points = json.loads(b"[" + points + b"]")
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
