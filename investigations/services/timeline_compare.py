"""Other jobs of an investigation drawn over a timeline by step: which may be, and their traces, from the
shared cache or their own Prometheus."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from investigations.models import DataSource, Investigation, InvestigationJob, Job
from playbooks import timeline as tl
from playbooks.prometheus import PrometheusClient, PrometheusError

from . import DataSourceError, SourceBusy, _datasource_connect, panel_cache
from .timeline_session import (
    MAX_CONCURRENCY,
    TimelineSession,
    _context_build,
    _context_cached,
    _profile_hint,
)
from .timeline_view import TimelineCompareError, TimelineView, TimelineViewError


def compare_choices(investigation: Investigation, job: Job | None) -> list[InvestigationJob]:
    """Return the investigation's other jobs (links, with their role), which a timeline of `job` can draw over it."""
    links = InvestigationJob.objects.filter(investigation=investigation).select_related("job")
    if job is not None:
        links = links.exclude(job=job)
    return list(links)


def compare_links(
    investigation: Investigation, job: Job | None, pks: Sequence[int]
) -> list[InvestigationJob]:
    """Return the links of the jobs `pks`, in that order; TimelineCompareError for a job shown or not in the investigation."""
    if not pks:
        return []
    links = {link.job_id: link for link in compare_choices(investigation, None) if link.job_id in pks}
    for pk in pks:
        if job is not None and pk == job.pk:
            raise TimelineCompareError(
                f"Job {pk} is the job this timeline shows: compare it with another job.", 400
            )
        if pk not in links:
            raise TimelineCompareError(
                f"Job {pk} is not a job of this investigation: add it to the investigation first."
            )
    return [links[pk] for pk in pks]


@dataclass
class _Compared:
    """A compared job, prepared in the request's thread (serving a data source writes its state, and the
    shared cache may be the database): what the cache holds, and a client only when something is missing.
    """

    label: str
    job_id: str
    role: str
    ds: DataSource | None = None
    identity: panel_cache.SourceIdentity | None = None
    ctx: tl.TimelineContext | None = None
    client: PrometheusClient | None = None
    served: tuple[float, float] | None = None
    cached: dict[str, tl.Trace | str] = field(default_factory=dict)
    built_ctx: bool = False
    error: str = ""


def _compare_keys(item: _Compared, keys: Sequence[str], steps: tuple[float, float] | None) -> dict[str, str]:
    """Return {panel key: the cache key of the compared job's trace}: its source, query, range and step."""
    if item.ctx is None or item.identity is None:
        return {}
    rng = tl.compare_range(item.ctx, steps)
    out = {}
    for key in keys:
        plan = tl.compare_query(tl.PANELS[key], item.ctx, *rng) if rng else None
        out[key] = panel_cache.result_key("compare", item.identity, item.job_id, item.role, key, plan, rng)
    return out


def _compare_open(
    links: Sequence[InvestigationJob], keys: Sequence[str], steps: tuple[float, float] | None
) -> list[_Compared]:
    out = []
    for link in links:
        item = _Compared(f"{link.job.job_id} ({link.role})", link.job.job_id, link.role)
        item.ds = link.job.current_datasource()
        out.append(item)
        if item.ds is None:
            item.error = f"{item.label} has no data source: add its Prometheus to draw it."
            continue
        item.identity = panel_cache.files_identity(item.ds)
        _compare_lookup(item, keys, steps)
        if len(item.cached) == len(keys):
            continue
        try:
            item.client, item.served = _datasource_connect(item.ds)
        except (DataSourceError, SourceBusy) as exc:  # busy: a note on the panel, the primary still draws
            item.error = f"{item.label}: {exc}"
            continue
        if item.identity is None:
            item.identity = panel_cache.live_identity(item.ds, item.client)
            _compare_lookup(item, keys, steps)
    return out


def _compare_lookup(item: _Compared, keys: Sequence[str], steps: tuple[float, float] | None) -> None:
    """Fill a compared job's cached context and traces from the shared cache."""
    assert item.ds is not None
    item.ctx = _context_cached(item.identity, _profile_hint(item.ds))
    cache_keys = _compare_keys(item, keys, steps)
    found = panel_cache.get_many(list(cache_keys.values()))
    item.cached = {k: found[ck] for k, ck in cache_keys.items() if ck in found}


def _compare_fetch(
    item: _Compared, keys: Sequence[str], steps: tuple[float, float] | None
) -> tuple[dict[str, tl.Trace | str], int]:
    """Return ({panel key: the compared job's trace, or a note}, queries sent); never raises for its data source.

    Runs in a worker thread: Prometheus only, no database and no cache (`_compare_store` keeps the results).
    """
    missing = [k for k in keys if k not in item.cached]
    if not missing:
        return dict(item.cached), 0
    if item.client is None or item.ds is None:
        return dict.fromkeys(keys, item.error), 0
    queries = 0
    try:
        if item.ctx is None:
            item.ctx = _context_build(item.ds, item.client, item.served)
            item.built_ctx, queries = True, item.ctx.queries
    except (PrometheusError, TimelineViewError) as exc:
        return dict.fromkeys(keys, f"{item.label}: its Prometheus did not answer ({exc})."), 0
    job = tl.CompareJob(item.job_id, item.role, item.ctx)
    fetched, sent = tl.compare_fetch(item.client, job, missing, steps, max_concurrency=MAX_CONCURRENCY)
    return {**item.cached, **fetched}, queries + sent


def _compare_store(
    item: _Compared, found: dict[str, tl.Trace | str], steps: tuple[float, float] | None
) -> None:
    """Keep what a compared job's fetch produced (its context, its traces) in the shared cache."""
    if item.identity is None or item.ctx is None or item.ds is None:
        return
    values: dict[str, Any] = {}
    if item.built_ctx:
        values[panel_cache.context_key(item.identity, _profile_hint(item.ds))] = item.ctx
    cache_keys = _compare_keys(item, list(found), steps)
    values |= {cache_keys[k]: v for k, v in found.items() if isinstance(v, tl.Trace) and k not in item.cached}
    panel_cache.set_many(values, item.identity)


def _compare_steps(
    view: TimelineView, session: TimelineSession
) -> tuple[float, float] | None | Literal[False]:
    """Return the steps the compared jobs are drawn over: a step zoom's, the primary's over a zoomed time
    range, None for the whole of each compared run, or False when the zoomed range holds no step."""
    if view.step_from is not None and view.step_to is not None:
        lo, hi = sorted((view.step_from, view.step_to))
        return lo, hi
    ctx = session.ctx
    if (session.start, session.end) == (ctx.start, ctx.end):
        return None
    return tl.step_window(ctx.axis, session.start, session.end) or False
