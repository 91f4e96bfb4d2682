"""An open timeline on a data source: the job's shared context (profile, data range, step axis, series
counts), from the shared cache when anyone computed it for the same data, and a client connected only
when a query is needed (a job TSDB whose results are all cached is not even served)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import cast

from django.conf import settings

from investigations.models import DataSource
from playbooks import timeline as tl
from playbooks.profiles import PROFILES, Profile, ProfileError, resolve_profile
from playbooks.prometheus import PrometheusClient, PrometheusError

from . import DataSourceError, _datasource_connect, panel_cache
from .timeline_view import TimelineView, TimelineViewError

#: Panel queries in flight per request; the job's Prometheus shares two CPUs with everything else.
MAX_CONCURRENCY = 4


@dataclass
class TimelineSession:
    """An open timeline: the context, the resolved range and, once a query is needed, a client.

    A job TSDB whose context is cached is not even served: the client connects on first use.

    Attributes:
        ds: the data source.
        ctx: the job's shared timeline context.
        start, end: the range to draw.
        identity: what the source holds (`panel_cache.SourceIdentity`), part of every cache key.
        queries: Prometheus queries this session sent so far (the cached context counts 0).
    """

    ds: DataSource
    ctx: tl.TimelineContext
    start: float
    end: float
    identity: panel_cache.SourceIdentity
    queries: int = 0
    _client: PrometheusClient | None = None

    @property
    def client(self) -> PrometheusClient:
        """Return the client of the source, connecting (serving a job TSDB, opening a tunnel) on first use."""
        if self._client is None:
            try:
                self._client = _datasource_connect(self.ds)[0]
            except DataSourceError as exc:
                raise TimelineViewError(str(exc)) from exc
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def _profile_of(ds: DataSource, client: PrometheusClient) -> Profile:
    name = (ds.discovery or {}).get("profile")
    if name in PROFILES:
        return PROFILES[cast(str, name)]  # equal to one of the str keys
    try:
        # fitted to this TSDB (host labels, job names), as discovery would
        return resolve_profile(client, client.label_values("__name__"))
    except ProfileError as exc:
        raise TimelineViewError(str(exc)) from exc


def _range_of(
    ds: DataSource, client: PrometheusClient, served: tuple[float, float] | None
) -> tuple[float, float]:
    found = (ds.discovery or {}).get("time_range") or served or client.data_time_range()
    if not found:
        raise TimelineViewError("The job's Prometheus holds no data.")
    return float(found[0]), float(found[1])


def _profile_hint(ds: DataSource) -> str:
    return str((ds.discovery or {}).get("profile") or "")


def timeline_open(ds: DataSource | None, view: TimelineView) -> TimelineSession:
    """Return an open session on the data source: cached context, the view's range, a lazy client.

    Raises TimelineViewError (no data source, unreachable, empty) with a message for the user.
    """
    if ds is None:
        raise TimelineViewError("This job has no data source: add its Prometheus to see the timeline.")
    identity = panel_cache.files_identity(ds)
    hint = _profile_hint(ds)
    ctx = _context_cached(identity, hint)
    client, queries = None, 0
    try:
        if ctx is None:
            try:
                client, served_range = _datasource_connect(ds)
            except DataSourceError as exc:
                raise TimelineViewError(str(exc)) from exc
            if identity is None:
                identity = panel_cache.live_identity(ds, client)
                ctx = _context_cached(identity, hint)
            if ctx is None:
                ctx = _context_build(ds, client, served_range)
                queries = ctx.queries
                panel_cache.set_many({panel_cache.context_key(identity, hint): ctx}, identity)
        # The samples budget is configuration and the points a panel shows the page's, not data: applied to
        # the cached context on every view.
        points = tl.points_for_width(view.width) if view.width else 0
        ctx = replace(ctx, max_samples=int(settings.STEPWISE_SOURCE_MAX_SAMPLES), points=points)
        start, end = _view_range(view, ctx)
    except PrometheusError as exc:
        if client is not None:
            client.close()
        raise TimelineViewError(f"The job's Prometheus did not answer: {exc}") from exc
    except BaseException:
        if client is not None:
            client.close()
        raise
    assert identity is not None  # no files identity means no cached context: the live one was taken above
    return TimelineSession(ds, ctx, start, end, identity, queries=queries, _client=client)


def _context_cached(identity: panel_cache.SourceIdentity | None, hint: str) -> tl.TimelineContext | None:
    """Return the source's timeline context from the shared cache, or None (request thread only)."""
    if identity is None:
        return None
    key = panel_cache.context_key(identity, hint)
    return panel_cache.get_many([key]).get(key)


def _context_build(
    ds: DataSource, client: PrometheusClient, served_range: tuple[float, float] | None
) -> tl.TimelineContext:
    """Return the job's timeline context read from its Prometheus (sends `ctx.queries` queries, no cache)."""
    profile = _profile_of(ds, client)
    start, end = _range_of(ds, client, served_range)
    return tl.context_build(client, profile, start, end, max_concurrency=MAX_CONCURRENCY)


def _view_range(view: TimelineView, ctx: tl.TimelineContext) -> tuple[float, float]:
    """Return [start, end] in unix seconds: a step range through the axis, else start/end, clamped to the data."""
    start, end = view.start, view.end
    if view.step_from is not None and view.step_to is not None and not ctx.axis.empty:
        lo, hi = sorted((view.step_from, view.step_to))
        lo = max(lo, ctx.axis.first_step) if lo < ctx.axis.first_step else lo
        # a scalar step gives a float (StepAxis.time_at)
        t0 = cast(float, ctx.axis.time_at(lo, occurrence="earliest"))
        t1 = cast(float, ctx.axis.time_at(min(hi, ctx.axis.last_step)))
        if math.isfinite(t0) and math.isfinite(t1) and t1 > t0:
            start, end = t0, t1
    start = ctx.start if start is None else max(ctx.start, start)
    end = ctx.end if end is None else min(ctx.end, end)
    if not end > start:
        raise TimelineViewError("The range holds no data of this job.")
    return start, end
