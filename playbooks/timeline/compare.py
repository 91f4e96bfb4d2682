"""Compared jobs: other runs of an investigation drawn over a panel, aligned by training step."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from playbooks.alignment import StepAxis
from playbooks.profiles import signal_info
from playbooks.prometheus import PrometheusClient, PrometheusError, Series

from .context import TimelineContext
from .panels import PANELS, PanelSpec
from .promql import _bare_ok, _device_expr, _fmt_seconds
from .queries import query_step
from .traces import Trace, _unavailable_message


@dataclass(frozen=True)
class CompareJob:
    """Another job drawn over a timeline's panels (a baseline, a run to compare).

    Attributes:
        job_id: its id, for the legend.
        role: its role in the investigation ("baseline", "compare").
        ctx: its own timeline context (profile, data range, step axis), on its own data source.
    """

    job_id: str
    role: str
    ctx: TimelineContext

    @property
    def label(self) -> str:
        return f"{self.job_id} ({self.role})"


def compare_step_note(labels: Sequence[str]) -> str:
    """Return what a panel says when compared jobs are asked for on a time axis: they align by step only."""
    return (
        f"The overlay of {', '.join(labels)} needs the step axis: runs are compared by training step, "
        "not by clock. Switch the x-axis to step to draw it."
    )


def step_window(axis: StepAxis, start: float, end: float) -> tuple[float, float] | None:
    """Return the smallest and largest step a job reaches over [start, end], or None when it has none there."""
    if axis.empty or not end > start:
        return None
    steps = np.asarray(axis.step_at(np.linspace(start, end, 257)))
    steps = steps[np.isfinite(steps)]
    if not len(steps):
        return None
    return float(steps.min()), float(steps.max())


def compare_range(ctx: TimelineContext, steps: tuple[float, float] | None) -> tuple[float, float] | None:
    """Return the time range of a compared job holding `steps` (lo, hi) through its own step axis.

    None for `steps` gives its whole data range; None is returned when it reaches none of those steps.
    A step below its first (a restored run's) starts at its first step, one above its last ends there.
    """
    if steps is None:
        return ctx.start, ctx.end
    axis = ctx.axis
    lo, hi = sorted(steps)
    if axis.empty or hi < axis.first_step or lo > axis.last_step:
        return None
    t0 = axis.start if lo <= axis.first_step else float(axis.time_at(lo, occurrence="earliest"))
    t1 = axis.end if hi >= axis.last_step else float(axis.time_at(hi))
    t0, t1 = max(ctx.start, t0), min(ctx.end, t1)
    if not (math.isfinite(t0) and math.isfinite(t1) and t1 > t0):
        return None
    return t0, t1


def compare_query(
    spec: PanelSpec, ctx: TimelineContext, start: float, end: float
) -> tuple[str, float] | None:
    """Return (PromQL, step) of a compared job's one trace on a panel, or None when its profile lacks the signal.

    A job-scope signal (loss, step time) is the series itself; a host or GPU signal is the median across
    hosts or GPUs, computed by Prometheus (`quantile(0.5, ...)`) on the compared job's data source.
    """
    profile = ctx.profile
    if not profile.has(spec.signal):
        return None
    step = query_step(ctx, start, end, 1)
    window = _fmt_seconds(max(4 * ctx.interval, step))
    sig = profile.signal(spec.signal)
    fn = spec.fn if sig.is_counter else None
    if sig.scope == "job":
        return profile.expr(spec.signal, fn, window=window), step
    bare = spec.signal in ctx.unique and _bare_ok(profile, spec.signal)
    return f"quantile(0.5, {_device_expr(sig, fn, window, bare)})", step


def compare_trace(
    spec: PanelSpec, job: CompareJob, series: Sequence[Series], step: float = 0.0
) -> Trace | None:
    """Return a compared job's trace from its query's result (role "compare", its own step axis), or None if empty."""
    found = next((s for s in series if s.timestamps), None)
    if found is None:
        return None
    single = signal_info(spec.signal)["scope"] == "job"
    return Trace(
        job.label if single else f"{job.label} median",
        "compare",
        {"job": job.job_id, "job_role": job.role},
        np.asarray(found.timestamps, dtype=float),
        np.asarray(found.values, dtype=float),
        axis=job.ctx.axis,
        step=step,
    )


def compare_fetch(
    client: PrometheusClient,
    job: CompareJob,
    keys: Sequence[str],
    steps: tuple[float, float] | None,
    *,
    max_concurrency: int = 4,
) -> tuple[dict[str, Trace | str], int]:
    """Return ({panel key: a compared job's trace over `steps` (None: its whole run) or why not}, queries sent).

    One range query per panel on the compared job's own Prometheus, all in parallel (bounded).
    """
    rng = compare_range(job.ctx, steps)
    if rng is None:
        return dict.fromkeys(keys, f"{job.label} has no steps in this range."), 0
    start, end = rng
    out: dict[str, Trace | str] = {}
    plans: dict[str, tuple[str, float]] = {}
    for key in keys:
        spec = PANELS[key]
        plan = compare_query(spec, job.ctx, start, end)
        if plan is None:
            out[key] = f"{job.label}: {_unavailable_message(job.ctx.profile, spec)}"
        else:
            plans[key] = plan
    calls = [lambda q=q, st=st: client.query_range(q, start, end, st) for q, st in plans.values()]
    for (key, (_, st)), result in zip(
        plans.items(), client.run_parallel(calls, max_concurrency=max_concurrency), strict=True
    ):
        spec = PANELS[key]
        if isinstance(result, PrometheusError):
            out[key] = f"{job.label}: its Prometheus did not answer ({result})."
            continue
        trace = compare_trace(spec, job, result, st)
        out[key] = (
            trace if trace is not None else f"{job.label} has no {spec.title.lower()} data in this range."
        )
    return out, len(calls)
