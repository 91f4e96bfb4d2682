"""Timeline glue: parse a view from a query string, build its panels' figures from the job's Prometheus,
and pin a figure into the investigation so that it renders later without any data source.

The shared context of a job's timeline (profile, data range, step axis, series counts) costs about six
queries; it is cached per data source for a few minutes so that lazily loaded panels, each its own
request, do not repeat them. Each panel's data (not its figure) is cached as long for its range: switching
the x-axis between step and time, resetting a zoom or pinning a chart just shown sends no query.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from django.core.cache import cache
from django.db.models import Q

from playbooks import timeline as tl
from playbooks.profiles import PROFILES, Profile, ProfileError, detect_profile
from playbooks.prometheus import PrometheusClient, PrometheusError

from ..models import DataSource, Finding, Investigation, InvestigationJob, Job, PinnedChart
from . import DataSourceError, _datasource_connect

logger = logging.getLogger(__name__)

CONTEXT_TTL_S = 300
#: Panel queries in flight per request; the job's Prometheus shares two CPUs with everything else.
MAX_CONCURRENCY = 4
#: Other jobs of the investigation one timeline can draw over its panels.
MAX_COMPARE = 4
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


class TimelineError(Exception):
    """The timeline cannot be shown: no data source, no data, or a bad view. The message is for the user."""


class CompareError(TimelineError):
    """A job asked for in `compare=` is not another job of this investigation (`status`: 404, or 400 for itself)."""

    def __init__(self, message: str, status: int = 404) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class TimelineView:
    """What a timeline link holds.

    Attributes:
        panels: panel keys, or None for the profile's defaults.
        start, end: the range in unix seconds, None for the job's whole data range.
        xmode: "step", "time-utc" or "time-local".
        tz_offset_min: the viewer's offset east of UTC in minutes (for time-local).
        hosts: hosts to draw even in band mode (a selected finding's).
        step_from, step_to: a range given in steps (a zoom on the step axis), converted with the step axis.
        compare: pks of other jobs of the investigation drawn over the panels, aligned by step.
    """

    panels: tuple[str, ...] | None = None
    start: float | None = None
    end: float | None = None
    xmode: str = "step"
    tz_offset_min: int = 0
    hosts: tuple[str, ...] = ()
    step_from: float | None = None
    step_to: float | None = None
    compare: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["panels"] = list(self.panels) if self.panels is not None else None
        out["hosts"] = list(self.hosts)
        out["compare"] = list(self.compare)
        return out


def _float(params: Mapping[str, Any], name: str) -> float | None:
    raw = params.get(name)
    if raw in (None, ""):
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise TimelineError(f"{name} must be a number, got {raw!r}.") from None
    if not math.isfinite(value):
        raise TimelineError(f"{name} must be a finite number, got {raw!r}.")
    return value


def _compare_ids(raw: Any) -> tuple[int, ...]:
    items = [c.strip() for c in str(raw or "").split(",") if c.strip()]
    if not all(c.isdigit() for c in items):
        raise TimelineError(f"compare lists job ids of this investigation (e.g. compare=12,14), not {raw!r}.")
    ids = tuple(dict.fromkeys(int(c) for c in items))
    if len(ids) > MAX_COMPARE:
        raise TimelineError(f"At most {MAX_COMPARE} jobs can be compared on one timeline.")
    return ids


def timeline_view_parse(params: Mapping[str, Any]) -> TimelineView:
    """Return the view of a query string: panels, start, end, x, tz, hosts, sfrom, sto, compare (all optional)."""
    xmode = str(params.get("x") or "step")
    if xmode not in tl.XMODES:
        raise TimelineError(f"x must be one of {', '.join(tl.XMODES)}, not {xmode!r}.")
    panels_raw = params.get("panels")
    panels = None
    if panels_raw:
        panels = tuple(p.strip() for p in str(panels_raw).split(",") if p.strip())
        unknown = [p for p in panels if p not in tl.PANELS]
        if unknown:
            raise TimelineError(f"Unknown panel(s): {', '.join(unknown)}.")
    hosts = tuple(h.strip() for h in str(params.get("hosts") or "").split(",") if h.strip())
    bad = [h for h in hosts if not set(h) <= _HOST_CHARS or len(h) > 100]
    if bad:
        raise TimelineError(f"Not a host name: {bad[0]!r}.")
    start, end = _float(params, "start"), _float(params, "end")
    if start is not None and end is not None and not end > start:
        raise TimelineError("end must be after start.")
    tz = _float(params, "tz") or 0.0
    if abs(tz) > 24 * 60:
        raise TimelineError("tz is the offset from UTC in minutes, within a day.")
    return TimelineView(
        panels=panels,
        start=start,
        end=end,
        xmode=xmode,
        tz_offset_min=int(tz),
        hosts=hosts[:20],
        step_from=_float(params, "sfrom"),
        step_to=_float(params, "sto"),
        compare=_compare_ids(params.get("compare")),
    )


# --- Context ---------------------------------------------------------------------------------------


@dataclass
class TimelineSession:
    """An open timeline: the client (the caller closes it), the context and the resolved range.

    Attributes:
        client: connected to the job's Prometheus.
        ctx: the job's shared timeline context.
        start, end: the range to draw.
        queries: Prometheus queries this session sent so far (the cached context counts 0).
    """

    client: PrometheusClient
    ctx: tl.TimelineContext
    start: float
    end: float
    queries: int = 0

    def close(self) -> None:
        self.client.close()


def _profile_of(ds: DataSource, client: PrometheusClient) -> Profile:
    name = (ds.discovery or {}).get("profile")
    if name in PROFILES:
        return PROFILES[name]
    try:
        return detect_profile(client.label_values("__name__"))
    except ProfileError as exc:
        raise TimelineError(str(exc)) from exc


def _range_of(
    ds: DataSource, client: PrometheusClient, served: tuple[float, float] | None
) -> tuple[float, float]:
    found = (ds.discovery or {}).get("time_range") or served
    if not found:
        key = f"timeline-range:{ds.pk}:{client.base_url}"
        found = cache.get(key)
        if found is None:
            found = client.data_time_range()
            cache.set(key, found, CONTEXT_TTL_S)
    if not found:
        raise TimelineError("The job's Prometheus holds no data.")
    return float(found[0]), float(found[1])


def timeline_open(ds: DataSource | None, view: TimelineView) -> TimelineSession:
    """Return an open session on the data source: client, cached context and the view's range.

    Raises TimelineError (no data source, unreachable, empty) with a message for the user.
    """
    if ds is None:
        raise TimelineError("This job has no data source: add its Prometheus to see the timeline.")
    try:
        client, served_range = _datasource_connect(ds)
    except DataSourceError as exc:
        raise TimelineError(str(exc)) from exc
    try:
        ctx, queries = _context(ds, client, served_range)
        start, end = _view_range(view, ctx)
    except PrometheusError as exc:
        client.close()
        raise TimelineError(f"The job's Prometheus did not answer: {exc}") from exc
    except BaseException:
        client.close()
        raise
    return TimelineSession(client, ctx, start, end, queries=queries)


def _context(
    ds: DataSource, client: PrometheusClient, served_range: tuple[float, float] | None
) -> tuple[tl.TimelineContext, int]:
    """Return (the job's shared timeline context, queries sent): cached per data source for CONTEXT_TTL_S."""
    key = f"timeline-ctx:{ds.pk}:{client.base_url}"
    ctx = cache.get(key)
    if ctx is not None:
        return ctx, 0
    profile = _profile_of(ds, client)
    start, end = _range_of(ds, client, served_range)
    ctx = tl.context_build(client, profile, start, end, max_concurrency=MAX_CONCURRENCY)
    cache.set(key, ctx, CONTEXT_TTL_S)
    return ctx, ctx.queries


def _view_range(view: TimelineView, ctx: tl.TimelineContext) -> tuple[float, float]:
    """Return [start, end] in unix seconds: a step range through the axis, else start/end, clamped to the data."""
    start, end = view.start, view.end
    if view.step_from is not None and view.step_to is not None and not ctx.axis.empty:
        lo, hi = sorted((view.step_from, view.step_to))
        lo = max(lo, ctx.axis.first_step) if lo < ctx.axis.first_step else lo
        t0, t1 = ctx.axis.time_at(lo, occurrence="earliest"), ctx.axis.time_at(min(hi, ctx.axis.last_step))
        if math.isfinite(t0) and math.isfinite(t1) and t1 > t0:
            start, end = t0, t1
    start = ctx.start if start is None else max(ctx.start, start)
    end = ctx.end if end is None else min(ctx.end, end)
    if not end > start:
        raise TimelineError("The range holds no data of this job.")
    return start, end


# --- Compared jobs ---------------------------------------------------------------------------------


def compare_choices(investigation: Investigation, job: Job | None) -> list[InvestigationJob]:
    """Return the investigation's other jobs (links, with their role), which a timeline of `job` can draw over it."""
    links = InvestigationJob.objects.filter(investigation=investigation).select_related("job")
    if job is not None:
        links = links.exclude(job=job)
    return list(links)


def compare_links(
    investigation: Investigation, job: Job | None, pks: Sequence[int]
) -> list[InvestigationJob]:
    """Return the links of the jobs `pks`, in that order; CompareError for a job shown or not in the investigation."""
    if not pks:
        return []
    links = {link.job_id: link for link in compare_choices(investigation, None) if link.job_id in pks}
    for pk in pks:
        if job is not None and pk == job.pk:
            raise CompareError(f"Job {pk} is the job this timeline shows: compare it with another job.", 400)
        if pk not in links:
            raise CompareError(
                f"Job {pk} is not a job of this investigation: add it to the investigation first."
            )
    return [links[pk] for pk in pks]


@dataclass
class _Compared:
    """A compared job opened in the request's thread (the data source is served there, which writes its state)."""

    label: str
    job_id: str
    role: str
    ds: DataSource | None = None
    client: PrometheusClient | None = None
    served: tuple[float, float] | None = None
    error: str = ""


def _compare_open(links: Sequence[InvestigationJob]) -> list[_Compared]:
    out = []
    for link in links:
        item = _Compared(f"{link.job.job_id} ({link.role})", link.job.job_id, link.role)
        item.ds = link.job.current_datasource()
        if item.ds is None:
            item.error = f"{item.label} has no data source: add its Prometheus to draw it."
        else:
            try:
                item.client, item.served = _datasource_connect(item.ds)
            except DataSourceError as exc:
                item.error = f"{item.label}: {exc}"
        out.append(item)
    return out


def _compare_fetch(
    item: _Compared, keys: Sequence[str], steps: tuple[float, float] | None
) -> tuple[dict[str, tl.Trace | str], int]:
    """Return ({panel key: the compared job's trace, or a note}, queries sent); never raises for its data source."""
    if item.client is None or item.ds is None:
        return dict.fromkeys(keys, item.error), 0
    try:
        ctx, queries = _context(item.ds, item.client, item.served)
    except (PrometheusError, TimelineError) as exc:
        return dict.fromkeys(keys, f"{item.label}: its Prometheus did not answer ({exc})."), 0
    ident = repr((item.client.base_url, steps))
    prefix = f"timeline-compare:{item.ds.pk}:{hashlib.sha256(ident.encode()).hexdigest()[:24]}:"
    cached = cache.get_many([prefix + k for k in keys])
    missing = [k for k in keys if prefix + k not in cached]
    fetched: dict[str, tl.Trace | str] = {}
    if missing:
        job = tl.CompareJob(item.job_id, item.role, ctx)
        fetched, sent = tl.compare_fetch(item.client, job, missing, steps, max_concurrency=MAX_CONCURRENCY)
        queries += sent
        cache.set_many({prefix + k: v for k, v in fetched.items() if isinstance(v, tl.Trace)}, CONTEXT_TTL_S)
    return {k: fetched[k] if k in fetched else cached[prefix + k] for k in keys}, queries


def _compare_steps(view: TimelineView, session: TimelineSession) -> tuple[float, float] | None | bool:
    """Return the steps the compared jobs are drawn over: a step zoom's, the primary's over a zoomed time
    range, None for the whole of each compared run, or False when the zoomed range holds no step."""
    if view.step_from is not None and view.step_to is not None:
        lo, hi = sorted((view.step_from, view.step_to))
        return lo, hi
    ctx = session.ctx
    if (session.start, session.end) == (ctx.start, ctx.end):
        return None
    return tl.step_window(ctx.axis, session.start, session.end) or False


# --- Figures ---------------------------------------------------------------------------------------


def _findings(investigation: Investigation, job: Job | None) -> list[dict[str, Any]]:
    rows = Finding.objects.filter(investigation=investigation, onset__isnull=False)
    if job is not None:
        rows = rows.filter(Q(job=job) | Q(job__isnull=True))
    return [
        {"id": f.pk, "title": f.title, "onset": f.onset, "hosts": f.hosts} for f in rows.order_by("onset")
    ]


def _triage(job: Job | None) -> dict[str, Any]:
    triage = (job.triage or {}) if job is not None else {}
    return triage if "job" in triage else {}


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

    Every panel's queries run in parallel (bounded); annotations come from the job's triage, the step
    axis and the investigation's findings.
    """
    links = compare_links(investigation, job, view.compare)
    session = timeline_open(ds, view)
    compared: list[_Compared] = []
    try:
        ctx = session.ctx
        try:
            keys = tl.parse_panels(panels if panels is not None else view.panels, ctx.profile)
        except tl.TimelineError as exc:
            raise TimelineError(str(exc)) from exc
        ident = repr((session.client.base_url, session.start, session.end, max_lines, tuple(view.hosts)))
        prefix = f"timeline-panel:{ds.pk if ds else ''}:{hashlib.sha256(ident.encode()).hexdigest()[:24]}:"
        cached = cache.get_many([prefix + k for k in keys])
        missing = [k for k in keys if prefix + k not in cached]

        def primary() -> list[tl.PanelData]:
            if not missing:
                return []
            return tl.panels_fetch(
                session.client,
                ctx,
                missing,
                session.start,
                session.end,
                max_lines=max_lines,
                hosts=view.hosts,
                max_concurrency=MAX_CONCURRENCY,
            )

        notes: list[str] = []
        overlays: list[tuple[dict[str, tl.Trace | str], int]] = []
        steps = _compare_steps(view, session) if links else None
        if links and view.xmode != "step":
            # Runs are compared by step: on a time axis they would sit at unrelated clocks.
            notes.append(tl.compare_step_note([f"{link.job.job_id} ({link.role})" for link in links]))
        elif links and steps is False:
            notes.append("The compared jobs are not drawn: this range holds no training step.")
        elif links:
            compared = _compare_open(links)
        if compared:
            # The compared jobs' queries go to their own Prometheus, in parallel with the primary's.
            with ThreadPoolExecutor(max_workers=1 + len(compared), thread_name_prefix="timeline") as pool:
                first = pool.submit(primary)
                rest = [pool.submit(_compare_fetch, item, keys, steps or None) for item in compared]
                fetched = first.result()
                overlays = [f.result() for f in rest]
        else:
            fetched = primary()
        # A failed panel is asked again next time; the others are kept for the context's lifetime.
        cache.set_many({prefix + p.spec.key: p for p in fetched if p.mode != "error"}, CONTEXT_TTL_S)
        by_key = {p.spec.key: p for p in fetched}
        data = [by_key[k] if k in by_key else cached[prefix + k] for k in keys]
        marks = tl.annotations_build(ctx, _triage(job), _findings(investigation, job))
        tz_offset_s = view.tz_offset_min * 60
        # A window (zoom, deep link) pins every panel's axis to it; the whole job autoranges.
        x_range = (
            tl.axis_range(ctx, view.xmode, session.start, session.end, tz_offset_s)
            if (view.start is not None and view.end is not None)
            or (view.step_from is not None and view.step_to is not None)
            else None
        )
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
                notes=notes + [o for o in found if isinstance(o, str)],
                x_range=x_range,
            )
        queries = session.queries + sum(len(p.queries) for p in fetched) + sum(n for _, n in overlays)
        return {
            "figures": figures,
            "start": session.start,
            "end": session.end,
            "queries": queries,
            "panels": keys,
            "profile": ctx.profile.name,
        }
    finally:
        session.close()
        for item in compared:
            if item.client is not None:
                item.client.close()


def timeline_panels(ds: DataSource | None) -> dict[str, Any]:
    """Return what the timeline region lists: {"profile", "domains": [(domain, [(key, title)])], "range"}.

    Raises TimelineError when the data source cannot be reached.
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
        raise TimelineError(f"Unknown panel {panel!r}.")
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
