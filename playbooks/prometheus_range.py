"""The first and last sample times a Prometheus serves, found with read APIs only (no admin API).

`PrometheusClient.data_time_range()` calls `data_time_range(client)`; see there for the method.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .prometheus_types import _DAY, PrometheusError, PrometheusQueryError, parse_duration

if TYPE_CHECKING:
    from .prometheus import PrometheusClient

log = logging.getLogger(__name__)

# Selects every series; used in instant queries and in range queries of at most 49 steps.
_ALL_SERIES = '{__name__=~".+"}'
# Raw samples of every series in a short window: their own timestamps, with no name dropped. (timestamp()
# drops the metric name, so series that differ only by name would collide: "vector cannot contain
# metrics with the same labelset".)
_RAW_WINDOW = "2s"
# Binary searches over /api/v1/labels stop at this width (seconds); see data_time_range().
_SEARCH_RESOLUTION = 1.0
_DEFAULT_LOOKBACK = 300.0
_SCAN_POINTS = 48
_SCAN_WINDOWS = 4


def data_time_range(client: PrometheusClient) -> tuple[float, float] | None:
    """Return the (first, last) sample times in unix seconds of all data served, None if there is none.

    /api/v1/status/tsdb only covers the in-memory head, so the range is derived from the data with
    read APIs only, on any Prometheus-compatible server:

    1. /status/tsdb: the head's maxTime, when the head holds series (Prometheus only).
    2. /status/flags: the lookback delta (5 m when the server does not say).
    3. /labels over [0, now + 1 y]: no label names means no data, return None.
    4. Earliest: binary search with /labels?start=0&end=m (an index lookup: a block or the head
       overlaps the window) down to 1 s. A Prometheus block's minTime is its first sample.
    5. Refine with the raw samples of {__name__=~".+"}[2s] at the found time. If the
       index boundary was not a sample (blocks aligned to 2 h, other backends), scan forward with
       range queries at lookback steps, then zoom in twice (precision lookback/2,304).
    6. Latest: the head's maxTime checked with the raw samples at that time; otherwise the mirror
       image of 4 and 5 with /labels?start=m&end=far.

    Requests: 3 + about 31 + 1 for the earliest, + 1 for the latest with a non-empty head (about
    36), or + about 31 + 1 without one (about 67); at most 6 more per end when a scan is needed.
    Every request is an index lookup or a query over at most 49 steps.
    """
    head_max = _head_max_time(client)
    lookback = _lookback(client)
    far = max(time.time(), head_max or 0.0) + 366 * _DAY
    if not client.label_names(start=0.0, end=far):
        return None

    # Earliest: smallest m such that the index holds data in [0, m].
    lo, hi = 0.0, far
    if head_max is not None:
        hi = head_max
    lo, hi = _bisect(lambda m: bool(client.label_names(start=0.0, end=m)), lo, hi)
    first = _instant_time(client, "min", hi)
    if first is None:
        first = _scan(client, hi, forward=True, lookback=lookback)
    if first is None:
        log.warning("%s: no sample found after index start %s; using it", client.base_url, hi)
        first = hi

    last: float | None = None
    if head_max is not None:
        last = _instant_time(client, "max", head_max)
        if last is not None and abs(last - head_max) > 0.001:
            last = None
    if last is None:
        # Latest: largest m such that the index holds data in [m, far].
        lo, hi = _bisect(lambda m: not client.label_names(start=m, end=far), first, far)
        last = _instant_time(client, "max", hi)
        if last is None:
            last = _scan(client, hi, forward=False, lookback=lookback)
        if last is None:
            log.warning("%s: no sample found before index end %s; using it", client.base_url, lo)
            last = lo
    return (first, max(first, last))


def _head_max_time(client: PrometheusClient) -> float | None:
    try:
        head = client.tsdb_status().get("headStats") or {}
    except PrometheusError:
        return None
    # An empty head reports numSeries 0 with minTime == maxTime == the newest block's maxTime,
    # or the int64 sentinels when there are no blocks either.
    try:
        if int(head.get("numSeries", 0)) <= 0:
            return None
        max_ms, min_ms = int(head["maxTime"]), int(head["minTime"])
    except (KeyError, TypeError, ValueError):
        return None
    if max_ms < min_ms or max_ms >= 2**63 - 1 or max_ms <= -(2**63):
        return None
    return max_ms / 1000.0


def _lookback(client: PrometheusClient) -> float:
    try:
        return parse_duration(str(client.flags().get("query.lookback-delta", "5m")))
    except (PrometheusError, ValueError):
        return _DEFAULT_LOOKBACK


def _bisect(pred: Callable[[float], bool], lo: float, hi: float) -> tuple[float, float]:
    """Return (lo, hi) with hi - lo <= 1 s, pred(lo) False and pred(hi) True, given pred is monotone."""
    while hi - lo > _SEARCH_RESOLUTION:
        mid = math.floor((lo + hi) / 2 * 1000) / 1000
        if mid <= lo or mid >= hi:
            break
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return lo, hi


def _instant_time(client: PrometheusClient, agg: str, at: float) -> float | None:
    """Return the min/max timestamp of the raw samples in the short window ending at `at`."""
    samples = client.query(f"{_ALL_SERIES}[{_RAW_WINDOW}]", at=at)
    times = [s.timestamp for s in samples]
    if not times:
        return None
    return min(times) if agg == "min" else max(times)


def _scan(client: PrometheusClient, origin: float, *, forward: bool, lookback: float) -> float | None:
    """Return the first (forward) or last sample time next to `origin`, scanning window by window.

    Each range query samples every `lookback` seconds, so no sample falls between two steps; a hit
    is then zoomed into twice with 48 finer steps.
    """
    agg = "min" if forward else "max"
    expr = f"{agg}(timestamp({_ALL_SERIES}))"
    width = lookback * _SCAN_POINTS
    for k in range(_SCAN_WINDOWS):
        start = origin + k * width if forward else origin - (k + 1) * width
        try:
            hit = _first_point(client, expr, start, start + width, lookback, forward)
        except PrometheusQueryError:
            # metrics sharing a label set make timestamp() ambiguous; the index boundary must do
            return None
        if hit is None:
            continue
        if not forward:
            # The last step with data sees every series' latest sample: its max is exact.
            return hit[1]
        step = lookback
        for _ in range(2):
            sub = step / _SCAN_POINTS
            lo = hit[0] - step
            refined = _first_point(client, expr, max(lo, 0.0), lo + step, sub, forward)
            if refined is None:
                break
            hit, step = refined, sub
        return hit[1]
    return None


def _first_point(
    client: PrometheusClient, expr: str, start: float, end: float, step: float, forward: bool
) -> tuple[float, float] | None:
    series = client.query_range(expr, start, end, step)
    points = [(t, v) for s in series for t, v in zip(s.timestamps, s.values, strict=True)]
    if not points:
        return None
    return min(points) if forward else max(points, key=lambda p: p[1])
