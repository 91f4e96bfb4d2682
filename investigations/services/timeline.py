"""Timeline glue: parse a view from a query string, build its panels' figures from the job's Prometheus,
and pin a figure into the investigation so that it renders later without any data source.

The shared context of a job's timeline (profile, data range, step axis, series counts) and each panel's
data (not its figure) are kept in the shared cache (`panel_cache`), keyed by what the source holds and
the exact queries, range and step: a finished job's timeline is computed once for everyone, and
switching the x-axis between step and time, resetting a zoom or pinning a chart sends no query.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.db.models import Q

from investigations.models import DataSource, Finding, Investigation, Job, PinnedChart
from playbooks import timeline as tl
from playbooks.hostnames import HostNames

from . import notes as timeline_notes
from . import panel_cache
from .timeline_compare import (
    _compare_fetch,
    _compare_open,
    _compare_steps,
    _compare_store,
    _Compared,
    compare_choices,
    compare_links,
)
from .timeline_promql import PromqlError, promql_panel
from .timeline_session import MAX_CONCURRENCY, TimelineSession, timeline_open
from .timeline_view import TimelineCompareError, TimelineView, TimelineViewError, timeline_view_parse

__all__ = [
    "PromqlError",
    "TimelineCompareError",
    "TimelineViewError",
    "TimelineSession",
    "TimelineView",
    "chart_pin",
    "chart_unpin",
    "compare_choices",
    "compare_links",
    "pinned_chart_list",
    "promql_figure",
    "timeline_figures",
    "timeline_open",
    "timeline_panels",
    "timeline_view_parse",
    "timeline_warm",
]

logger = logging.getLogger(__name__)


# --- Figures ---------------------------------------------------------------------------------------


def _findings(investigation: Investigation, job: Job | None) -> list[dict[str, Any]]:
    rows = Finding.objects.filter(investigation=investigation, onset__isnull=False)
    if job is not None:
        rows = rows.filter(Q(job=job) | Q(job__isnull=True))
    return [
        {"id": f.pk, "title": f.title, "onset": f.onset, "hosts": f.hosts} for f in rows.order_by("onset")
    ]


def _triage(job: Job | None) -> dict[str, Any]:
    return (job.finished_triage() or {}) if job is not None else {}


def _host_names(session: TimelineSession, triage: dict[str, Any]) -> HostNames:
    """Return each host's one name on this job's timeline: the diagnosis's (the log's node list, else the
    shortest an exporter gives), from the source's hosts in its (cached) context."""
    return session.ctx.host_names([str(n) for n in triage.get("nodes") or []])


def _panel_keys(
    session: TimelineSession,
    keys: Sequence[str],
    max_lines: int,
    hosts: Sequence[str],
    ctx: tl.TimelineContext | None = None,
) -> dict[str, str]:
    """Return {panel: its cache key}: the source's identity and the exact queries, range and step."""
    out = {}
    for key in keys:
        plan = tl.panel_queries(
            tl.PANELS[key], ctx or session.ctx, session.start, session.end, max_lines=max_lines, hosts=hosts
        )
        queries = sorted(plan.queries.items())
        out[key] = panel_cache.result_key(
            "panel", session.identity, key, plan.mode, queries, plan.step, session.start, session.end
        )
    return out


def _cached(
    session: TimelineSession, keys: Sequence[str], max_lines: int, hosts: Sequence[str]
) -> tuple[dict[str, str], dict[str, Any], list[str]]:
    """Return ({panel: its cache key}, {cache key: the panel's data} found in the shared cache, the panels
    not found).

    A view whose panels are narrower than the default (`TimelineContext.points`) is also served by a panel
    cached at the default width (the one the worker warms): its finer points are drawn alike."""
    cache_keys = _panel_keys(session, keys, max_lines, hosts)
    cached = panel_cache.get_many(list(cache_keys.values()))
    missing = [k for k in keys if cache_keys[k] not in cached]
    if missing and session.ctx.points:
        wide = _panel_keys(session, missing, max_lines, hosts, replace(session.ctx, points=0))
        found = panel_cache.get_many(list(wide.values()))
        for key in missing:
            if wide[key] in found:
                cache_keys[key], cached[wide[key]] = wide[key], found[wide[key]]
    return cache_keys, cached, [k for k in keys if cache_keys[k] not in cached]


def _store(session: TimelineSession, cache_keys: dict[str, str], fetched: Sequence[tl.PanelData]) -> None:
    """Keep the fetched panels in the shared cache; a failed panel is asked again next time."""
    panel_cache.set_many({cache_keys[p.spec.key]: p for p in fetched if p.mode != "error"}, session.identity)


def timeline_warm(ds: DataSource | None) -> int:
    """Compute the data source's default timeline (the whole job, every default panel) into the shared
    cache, so that the first person to open it is served from the cache; return the queries sent (0 when
    it was cached already). Only a finished job's TSDB: a live source (a Prometheus URL, a tunnel, a TSDB
    still written) is left alone, since its entries expire within minutes and its Prometheus serves the
    training job. Raises TimelineViewError when the source cannot be reached."""
    identity = panel_cache.files_identity(ds) if ds is not None else None
    if identity is None or identity.live:
        return 0
    view = TimelineView()
    session = timeline_open(ds, view)
    try:
        keys = tl.default_panels(session.ctx.profile)
        cache_keys, _, missing = _cached(session, keys, tl.DEFAULT_MAX_LINES, view.hosts)
        fetched, _ = _fetch(session, keys, missing, [], None, tl.DEFAULT_MAX_LINES)
        _store(session, cache_keys, fetched)
        return session.queries + sum(len(p.queries) for p in fetched)
    finally:
        session.close()


def _fetch(
    session: TimelineSession,
    keys: Sequence[str],
    missing: Sequence[str],
    compared: Sequence[_Compared],
    steps: tuple[float, float] | None,
    max_lines: int,
    hosts: Sequence[str] = (),
) -> tuple[list[tl.PanelData], list[tuple[dict[str, tl.Trace | str], int]]]:
    """Return (the missing panels' data, each compared job's traces and queries sent), all in parallel.

    `hosts` are the host label values drawn even in band mode (`HostNames.select` of the view's hosts).
    The primary's client is connected here, in the request's thread; the worker threads only query.
    """
    client = session.client if missing else None

    def primary() -> list[tl.PanelData]:
        if client is None:
            return []
        return tl.panels_fetch(
            client, session.ctx, missing, session.start, session.end, max_lines=max_lines, hosts=hosts,
            max_concurrency=MAX_CONCURRENCY,
        )  # fmt: skip

    if not compared:
        return primary(), []
    # The compared jobs' queries go to their own Prometheus, in parallel with the primary's.
    with ThreadPoolExecutor(max_workers=1 + len(compared), thread_name_prefix="timeline") as pool:
        first = pool.submit(primary)
        rest = [pool.submit(_compare_fetch, item, keys, steps) for item in compared]
        return first.result(), [f.result() for f in rest]


def _queue_notes(session: TimelineSession, compared: Sequence[_Compared]) -> list[str]:
    """Return what the page says when queries queued for a source's budget (other users, workers)."""
    clients = [session._client, *(item.client for item in compared)]
    waited = sum(c.stats.queued_seconds for c in clients if c is not None)
    if not waited:
        return []
    return [
        f"Queued {waited:.1f} s for the data source: it runs at most {settings.STEPWISE_SOURCE_MAX_QUERIES} "
        "queries at a time for all users and workers (STEPWISE_SOURCE_MAX_QUERIES), so that a live job's "
        "Prometheus keeps serving the training job."
    ]


def timeline_figures(
    investigation: Investigation,
    job: Job | None,
    ds: DataSource | None,
    view: TimelineView,
    *,
    panels: Sequence[str] | None = None,
    max_lines: int = tl.DEFAULT_MAX_LINES,
) -> dict[str, Any]:
    """Return {"figures": {key: figure}, "start", "end", "queries", "panels"} for the view's panels.

    Panels (and compared jobs' traces) already computed by anyone for the same source, queries, range
    and step come from the shared cache; the others' queries run in parallel (bounded). Annotations
    come from the job's triage, the step axis and the investigation's findings.
    """
    links = compare_links(investigation, job, view.compare)
    session = timeline_open(ds, view)
    compared: list[_Compared] = []
    try:
        ctx = session.ctx
        try:
            keys = tl.parse_panels(panels if panels is not None else view.panels, ctx.profile)
        except tl.TimelineError as exc:
            raise TimelineViewError(str(exc)) from exc
        triage = _triage(job)
        names = _host_names(session, triage)
        # a host asked for by any of its names: the label values the panels' PromQL gives it (all in the key)
        hosts = names.select(view.hosts)
        cache_keys, cached, missing = _cached(session, keys, max_lines, hosts)
        notes: list[str] = []
        steps = _compare_steps(view, session) if links else None
        if links and view.xmode != "step":
            # Runs are compared by step: on a time axis they would sit at unrelated clocks.
            notes.append(tl.compare_step_note([f"{link.job.job_id} ({link.role})" for link in links]))
        elif links and steps is False:
            notes.append("The compared jobs are not drawn: this range holds no training step.")
        elif links:
            compared = _compare_open(links, keys, steps or None)
        fetched, overlays = _fetch(session, keys, missing, compared, steps or None, max_lines, hosts)
        _store(session, cache_keys, fetched)
        for item, (found, _) in zip(compared, overlays, strict=True):
            _compare_store(item, found, steps or None)
        notes += _queue_notes(session, compared)
        by_key = {p.spec.key: p for p in fetched}
        data = [by_key[k] if k in by_key else cached[cache_keys[k]] for k in keys]
        figures = _figures(investigation, job, view, session, data, overlays, notes, triage, names)
        queries = session.queries + sum(len(p.queries) for p in fetched) + sum(n for _, n in overlays)
        return {
            "figures": figures,
            "start": session.start,
            "end": session.end,
            "queries": queries,
            "panels": keys,
            "profile": ctx.profile.name,
            "queued_s": sum(c.stats.queued_seconds for c in (session._client,) if c is not None),
        }
    finally:
        session.close()
        for item in compared:
            if item.client is not None:
                item.client.close()


def promql_figure(
    investigation: Investigation, job: Job | None, ds: DataSource | None, view: TimelineView, expr: str
) -> dict[str, Any]:
    """Return {"figure", "start", "end", "queries"}: a free PromQL expression drawn as a panel of its own
    on the view's axis, with the job's marks (`timeline_promql`). Raises PromqlError for the expression,
    TimelineViewError for the source."""
    session = timeline_open(ds, view)
    try:
        panel = promql_panel(session, expr)
        triage = _triage(job)
        names = _host_names(session, triage)
        figure = _figures(investigation, job, view, session, [panel], [], [], triage, names)[panel.spec.key]
        return {"figure": figure, "start": session.start, "end": session.end, "queries": session.queries}
    finally:
        session.close()


def _figures(
    investigation: Investigation,
    job: Job | None,
    view: TimelineView,
    session: TimelineSession,
    data: Sequence[tl.PanelData],
    overlays: Sequence[tuple[dict[str, tl.Trace | str], int]],
    notes: Sequence[str],
    triage: dict[str, Any],
    names: HostNames,
) -> dict[str, dict[str, Any]]:
    """Return {panel: its Plotly figure} with the job's marks, the compared jobs' traces and notes, each
    host under its one name (`names`: the findings' hosts, which a selected finding highlights)."""
    ctx = session.ctx
    marks = tl.annotations_build(ctx, triage, _findings(investigation, job))
    marks += timeline_notes.note_marks(investigation, job)  # people's notes, never cached: drawn at once
    tz_offset_s = view.tz_offset_min * 60
    # A window (zoom, deep link) pins every panel's axis to it; the whole job autoranges.
    zoomed = (view.start is not None and view.end is not None) or (
        view.step_from is not None and view.step_to is not None
    )
    x_range = tl.axis_range(ctx, view.xmode, session.start, session.end, tz_offset_s) if zoomed else None
    figures = {}
    for p in data:
        found = [o[p.spec.key] for o, _ in overlays]
        figures[p.spec.key] = tl.figure_build(
            p,
            ctx,
            xmode=view.xmode,
            annotations=marks,
            tz_offset_s=tz_offset_s,
            overlays=[o for o in found if isinstance(o, tl.Trace)],
            notes=[*notes, *(o for o in found if isinstance(o, str))],
            x_range=x_range,
            names=names,
        )
    return figures


def timeline_panels(ds: DataSource | None) -> dict[str, Any]:
    """Return what the timeline region lists: {"profile", "domains": [(domain, [(key, title)])], "range"}.

    Raises TimelineViewError when the data source cannot be reached.
    """
    session = timeline_open(ds, TimelineView())
    try:
        ctx = session.ctx
        keys = tl.default_panels(ctx.profile)
        domains = [(d, [(k, tl.PANELS[k].title) for k in ks]) for d, ks in tl.domains_of(keys)]
        return {
            "profile": ctx.profile.name,
            "profile_title": ctx.profile.title,
            "domains": domains,
            "default_panels": keys,
            "start": ctx.start,
            "end": ctx.end,
            "first_step": None if ctx.axis.empty else ctx.axis.first_step,
            "last_step": None if ctx.axis.empty else ctx.axis.last_step,
            "gpu_series": ctx.gpu_series,
            "host_series": ctx.host_series,
        }
    finally:
        session.close()


# --- Pinned charts ---------------------------------------------------------------------------------


def chart_pin(
    investigation: Investigation,
    job: Job | None,
    ds: DataSource | None,
    view: TimelineView,
    panel: str,
    *,
    user: Any = None,
    note: str = "",
) -> PinnedChart:
    """Return a new PinnedChart holding the panel's figure as drawn for `view`, frozen with its data.

    The stored view records panel, range and x-axis mode so that the live timeline can be reopened
    at the same place; the figure renders without the data source.
    """
    if panel not in tl.PANELS:
        raise TimelineViewError(f"Unknown panel {panel!r}.")
    built = timeline_figures(investigation, job, ds, view, panels=[panel])
    figure = built["figures"][panel]
    frozen_view = view.to_dict() | {"panels": [panel], "start": built["start"], "end": built["end"]}
    frozen_view.pop("step_from", None)
    frozen_view.pop("step_to", None)
    title = tl.PANELS[panel].title
    return PinnedChart.objects.create(
        investigation=investigation,
        job=job,
        title=f"{title} · {job.job_id}" if job is not None else title,
        note=note[:2000],
        view=frozen_view,
        figure=figure,
        created_by=user if getattr(user, "is_authenticated", False) else None,
    )


def chart_unpin(investigation: Investigation, chart_id: int) -> bool:
    """Return True if the pinned chart was removed from the investigation."""
    deleted, _ = PinnedChart.objects.filter(investigation=investigation, pk=chart_id).delete()
    return deleted > 0


def pinned_chart_list(investigation: Investigation) -> list[PinnedChart]:
    """Return the investigation's pinned charts, newest first."""
    return list(investigation.pinned_charts.select_related("job").order_by("-created", "-pk"))
