"""Automated diagnosis: discover the source, plan the playbooks, execute their queries, decide.

The four steps are separate so that a task queue can run them apart (everything crossing the API is
JSON-serialisable through `to_dict`/`from_dict`); `run_diagnosis` chains them in one process.

Usage::

    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())   # the contract's object
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .analysis import Finding, build_context, decide_diagnosis, evaluate
from .context import Timeline
from .discovery import gpus_per_host, source_hosts, typical_count
from .errors import PlaybooksError
from .gpus import choose_gpu_model, gpu_model_named
from .loader import load_playbooks
from .model import Playbook, QuerySpec
from .profiles import PROFILES, ProfileError, resolve_profile
from .prometheus import PrometheusClient, PrometheusError, PrometheusUnreachable, Series, choose_step

__all__ = [
    "DiagnosisError",
    "PlannedQuery",
    "PlaybookOutput",
    "PlaybookPlan",
    "SourceInfo",
    "decide",
    "discover_source",
    "execute",
    "plan",
    "run_diagnosis",
    "serves_copy",
]

#: Points of the fine grid every range query shares, and of the coarse grid of per-GPU queries.
FINE_POINTS = 720
COARSE_POINTS = 120


class DiagnosisError(PlaybooksError):
    """The source cannot be diagnosed (no data, no known metric profile)."""


@dataclass(frozen=True)
class SourceInfo:
    """What the data source holds.

    Attributes:
        url: Prometheus base URL.
        profile: metric profile name ("amd", "nvidia").
        metric_names: every metric name in the TSDB.
        hosts: normalised host names.
        gpus_per_host: GPUs per host (the most common count), None when no GPU metric.
        time_range: (first, last) sample time, None when the TSDB is empty.
        gpu_model: GPU model name (a key of `playbooks.gpus.GPU_MODELS`) or None.
        interval: scrape interval in seconds (estimated).
    """

    url: str
    profile: str
    metric_names: tuple[str, ...]
    hosts: tuple[str, ...]
    gpus_per_host: int | None
    time_range: tuple[float, float] | None
    gpu_model: str | None = None
    interval: float = 15.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "profile": self.profile,
            "metric_names": list(self.metric_names),
            "hosts": list(self.hosts),
            "gpus_per_host": self.gpus_per_host,
            "time_range": list(self.time_range) if self.time_range else None,
            "gpu_model": self.gpu_model,
            "interval": self.interval,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SourceInfo:
        tr = d.get("time_range")
        return cls(
            url=d["url"],
            profile=d["profile"],
            metric_names=tuple(d.get("metric_names", ())),
            hosts=tuple(d.get("hosts", ())),
            gpus_per_host=d.get("gpus_per_host"),
            time_range=(float(tr[0]), float(tr[1])) if tr else None,
            gpu_model=d.get("gpu_model"),
            interval=float(d.get("interval", 15.0)),
        )


@dataclass(frozen=True)
class PlannedQuery:
    """One query to run.

    Attributes:
        name: result key (the playbook declaration's query name).
        promql: the rendered PromQL.
        kind: "instant" (evaluated at `end`) or "range".
        start, end: window (unix seconds).
        step: range step in seconds (None for instant queries).
        window_s: the range of the query's function in seconds (0 when none), for the detectors.
    """

    name: str
    promql: str
    kind: str
    start: float
    end: float
    step: float | None
    window_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "promql": self.promql,
            "kind": self.kind,
            "start": self.start,
            "end": self.end,
            "step": self.step,
            "window_s": self.window_s,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PlannedQuery:
        return cls(
            name=d["name"],
            promql=d["promql"],
            kind=d["kind"],
            start=float(d["start"]),
            end=float(d["end"]),
            step=None if d.get("step") is None else float(d["step"]),
            window_s=float(d.get("window_s", 0.0)),
        )


@dataclass(frozen=True)
class PlaybookPlan:
    """A playbook ready to run.

    Attributes:
        name, title: the playbook's.
        queries: its queries, rendered for the source's profile (signals it lacks are left out).
        window: where its rules look (from the triage; refined from the data when deciding).
        unavailable: signals it wanted that the source lacks.
    """

    name: str
    title: str
    queries: tuple[PlannedQuery, ...]
    window: tuple[float, float]
    unavailable: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "queries": [q.to_dict() for q in self.queries],
            "window": list(self.window),
            "unavailable": list(self.unavailable),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PlaybookPlan:
        return cls(
            name=d["name"],
            title=d["title"],
            queries=tuple(PlannedQuery.from_dict(q) for q in d["queries"]),
            window=(float(d["window"][0]), float(d["window"][1])),
            unavailable=tuple(d.get("unavailable", ())),
        )


@dataclass
class PlaybookOutput:
    """What running one playbook's queries gave.

    Attributes:
        name: playbook name.
        results: query name -> {"kind", "promql", "window_s", and for range results "start", "step", "n",
            "series": [{"labels", "values" (null = no value)}], for instant ones "samples": [{"labels", "value"}]}.
        errors: query name -> error message (results are partial when not empty).
        prometheus_s: wall time during which at least one of its requests was in flight.
        queries: number of queries sent.
    """

    name: str
    results: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    prometheus_s: float = 0.0
    queries: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "results": self.results,
            "errors": self.errors,
            "prometheus_s": self.prometheus_s,
            "queries": self.queries,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PlaybookOutput:
        return cls(
            name=d["name"],
            results=dict(d.get("results", {})),
            errors=dict(d.get("errors", {})),
            prometheus_s=float(d.get("prometheus_s", 0.0)),
            queries=int(d.get("queries", 0)),
        )


# ----------------------------------------------------------------------------------------- discovery


def discover_source(
    client: PrometheusClient,
    *,
    profile: str = "auto",
    time_range: tuple[float, float] | None = None,
    gpu_model: str | None = None,
) -> SourceInfo:
    """Return what the source holds: metric names, profile, hosts, GPUs per host, time range, GPU model.

    `time_range` skips the search for the data's first and last samples when the caller knows them (a
    served TSDB copy reads them from its blocks). `gpu_model` (a name of `playbooks.gpus.GPU_MODELS`; None
    or "auto": chosen from the data) is the user's word when the labels do not name the GPUs. Raises
    DiagnosisError when the TSDB is empty, no known profile matches or the GPU model is unknown;
    PrometheusError when the server cannot be reached.
    """
    chosen = None
    if gpu_model and gpu_model.strip().lower() != "auto":
        try:
            chosen = gpu_model_named(gpu_model)
        except ValueError as exc:
            raise DiagnosisError(str(exc)) from None
    names = tuple(sorted(client.label_values("__name__")))
    try:
        prof = resolve_profile(client, names, prefer=profile)
    except ProfileError as exc:
        raise DiagnosisError(str(exc)) from None
    tr = time_range or client.data_time_range()
    if tr is None:
        raise DiagnosisError("the TSDB holds no samples")
    start, end = float(tr[0]), float(tr[1])
    span = f"{max(60, int(end - start) + 60)}s"
    avail = prof.available(names)

    def q_hosts() -> list[str]:
        return sorted(source_hosts(client, prof, span, end))

    def q_gpus() -> int | None:
        return typical_count(list(gpus_per_host(client, prof, span, end).values()))

    def q_interval() -> float:
        sig = (
            "up"
            if avail.get("up")
            else next((s for s in ("gpu_power", "procs_running") if avail.get(s)), None)
        )
        if sig is None:
            return 15.0
        w = min(1800.0, max(120.0, (end - start) / 2))
        expr = prof.expr(sig, "count_over_time", window=f"{int(w)}s", by=("host",), agg="max")
        res = client.query(f"max({expr})", at=start + w + (end - start - w) / 2)
        n = max((s.value for s in res if math.isfinite(s.value)), default=0.0)
        return float(w / n) if n > 1 else 15.0

    def q_model() -> tuple[list[str], float | None, float | None]:
        model_names: list[str] = []
        for sig in ("gpu_temp", "gpu_util", "gpu_power"):
            if prof.gpu_model_label and avail.get(sig):
                model_names += client.label_values(prof.gpu_model_label, [prof.signal(sig).metrics[0]])
        vram = power = None
        if avail.get("gpu_vram_total"):
            r = client.query(f"max({prof.expr('gpu_vram_total', 'max_over_time', window=span)})", at=end)
            vram = r[0].value if r else None
        if avail.get("gpu_power"):
            r = client.query(f"max({prof.expr('gpu_power', 'max_over_time', window=span)})", at=end)
            power = r[0].value if r else None
        return model_names, vram, power

    hosts, gpus, interval, (mnames, vram, power) = client.run_parallel(
        [q_hosts, q_gpus, q_interval, q_model], max_concurrency=4
    )  # type: ignore[misc]
    for r in (hosts, gpus, interval):
        if isinstance(r, PrometheusError):
            raise r
    if isinstance(mnames, PrometheusError):
        mnames, vram, power = [], None, None
    model = chosen or choose_gpu_model(names=mnames, vendor=prof.vendor, vram_bytes=vram, max_power_w=power)
    return SourceInfo(
        url=client.base_url,
        profile=prof.name,
        metric_names=names,
        hosts=tuple(hosts),
        gpus_per_host=gpus,
        time_range=(start, end),
        gpu_model=model.name if model else None,
        interval=float(interval),
    )


# -------------------------------------------------------------------------------------------- plan


def select_playbooks(triage: Mapping[str, Any] | None, names: Sequence[str] | None = None) -> list[Playbook]:
    """Return the playbooks to run: `names` (["all"] for every one), else every playbook."""
    every = load_playbooks()
    if names:
        if "all" in names:
            return list(every.values())
        unknown = [n for n in names if n not in every]
        if unknown:
            raise DiagnosisError(f"unknown playbook(s) {', '.join(unknown)}; known: {', '.join(every)}")
        return [every[n] for n in names]
    # Every data playbook runs (a few dozen aggregated queries): a log's class picks windows and priors,
    # never what is looked at (a job cancelled before step 0, or a node failure triaged as a stage failure,
    # must still be judged for a hang or a dead node).
    return list(every.values())


def _window_s(q: QuerySpec, step: float, interval: float, start: float, end: float) -> float:
    if q.window == "auto":
        return max(step, 4.0 * interval)
    if q.window == "job":
        return max(step, end - start)
    from .prometheus import parse_duration

    return parse_duration(q.window)


def render_query(
    q: QuerySpec, profile_name: str, *, start: float, end: float, interval: float
) -> PlannedQuery:
    """Return the PromQL of a declared query for a profile (raises ProfileError if it lacks a signal)."""
    prof = PROFILES[profile_name]
    fine = choose_step(start, end, min_step=max(1.0, interval), max_points=FINE_POINTS)
    step = fine if q.resolution == "fine" else max(fine, choose_step(start, end, max_points=COARSE_POINTS))
    w = _window_s(q, step, interval, start, end)
    wtxt = f"{int(math.ceil(w))}s"
    if q.signal:
        sig = prof.signal(q.signal)
        fn = q.fn or None
        parts = sig.selector.split(" | ")
        if len(parts) > 1 and sig.is_counter and (q.agg or sig.agg) == "sum":
            # Sum each counter by the output labels first, then join the small results: joining every raw
            # series of several counters with `or` at each step costs ten times more on a large job.
            by = tuple(q.by if q.by is not None else sig.labels)
            subs = [
                dataclasses.replace(sig, selector=part, metrics=(part.split("{")[0],)).expr(
                    fn, window=wtxt, by=by, agg="sum"
                )
                for part in parts
            ]
            tagged = " or ".join(
                f'label_replace({e}, "stepwise_part", "{i}", "", "")' for i, e in enumerate(subs)
            )
            expr = f"sum by ({', '.join(by)}) ({tagged})" if by else f"sum({tagged})"
        else:
            expr = _pushdown(sig, fn, wtxt, q.by, q.agg or sig.agg) or (
                sig.expr(fn, window=wtxt, by=q.by, agg=q.agg or None)
                if (fn or sig.is_counter)
                else sig.expr(None, by=q.by, agg=q.agg or None)
            )
    else:
        expr = q.promql.replace("{window}", wtxt)
        for s in q.signals:
            expr = expr.replace("{" + s + "}", f"({prof.signal(s).expr(window=wtxt)})")
    if q.post:
        expr = f"({expr}) {q.post}"
    uses_window = bool(q.fn) or (q.signal and prof.signal(q.signal).is_counter)
    if q.kind == "instant":
        return PlannedQuery(q.name, expr, "instant", start, end, None, w if uses_window else 0.0)
    # the grid ends at the data's end, so that an increment in the last scrapes is on its last point (a grid
    # anchored at the start may stop up to a step short of the end)
    aligned = end - math.ceil((end - start) / step - 1e-9) * step
    return PlannedQuery(q.name, expr, "range", aligned, end, step, w if uses_window else 0.0)


_OUTER = {"sum": "sum", "max": "max", "min": "min", "avg": "avg", "count": "sum"}


def _pushdown(sig: Any, fn: str | None, window: str, by: tuple[str, ...] | None, agg: str) -> str | None:
    """Return the signal's PromQL with the aggregation done before the host label is renamed, or None.

    A profile copies `host` from the exporter's own label (DCGM's `Hostname`, `instance`) on every raw
    series before aggregating; on 1,024 GPUs that label_replace runs over every series at every step.
    Aggregating by the exporter's own labels first and renaming the (few) results gives the same series
    for one exporter instance per host, at a fraction of the cost.
    """
    if (
        sig.host_from in ("", "host")
        or sig.fill_filter
        or " | " in sig.selector
        or agg not in _OUTER
        or sig.host_join
        or sig.host_alias
        or "," in sig.host_from
    ):
        return None
    out_by = tuple(by if by is not None else sig.labels)
    if not set(out_by) <= {"host", "gpu"}:
        return None
    raw = {"host": sig.host_from, "gpu": sig.gpu_from or "gpu"}
    inner = dataclasses.replace(sig, host_from="host", gpu_from="gpu" if sig.scope == "gpu" else "")
    expr = inner.expr(fn, window=window, by=tuple(raw[b] for b in out_by), agg=agg)
    if sig.host_from == "instance":
        expr = f'label_replace({expr}, "host", "$1", "instance", "(.+?)(?::[0-9]+)?")'
    else:
        expr = f'label_replace({expr}, "host", "$1", "{sig.host_from}", "(.+)")'
    if "gpu" in out_by and raw["gpu"] != "gpu":
        expr = f'label_replace({expr}, "gpu", "$1", "{raw["gpu"]}", "(.+)")'
    return f"{_OUTER[agg]} by ({', '.join(out_by)}) ({expr})" if out_by else f"{_OUTER[agg]}({expr})"


def plan(
    source: SourceInfo,
    *,
    triage: dict | None,
    playbooks: Sequence[str] | None = None,
    start: float | None = None,
    end: float | None = None,
) -> list[PlaybookPlan]:
    """Return the plans of the playbooks the triage calls for (plus the always-on ones), or of `playbooks`.

    Queries cover [start, end] (default: the source's data range); each plan's window is where its rules
    will look, anchored on the triage's crash or last-step time when it has one.
    """
    if source.time_range is None:
        raise DiagnosisError("the source has no data range")
    a = float(start) if start is not None else source.time_range[0]
    b = float(end) if end is not None else source.time_range[1]
    if b <= a:
        raise DiagnosisError(f"empty window: end {b} is not after start {a}")
    prof = PROFILES[source.profile]
    avail = prof.available(source.metric_names)
    job = (triage or {}).get("job") or {}
    prog = (triage or {}).get("progress") or {}
    out = []
    for pb in select_playbooks(triage, playbooks):
        queries, missing = [], []
        for q in pb.queries:
            lacking = [s for s in q.signals if not avail.get(s)]
            if lacking:
                missing += [s for s in lacking if s not in missing]
                continue
            queries.append(render_query(q, source.profile, start=a, end=b, interval=source.interval))
        anchor = {
            "crash": job.get("crash_time") or prog.get("last_step_time"),
            "stall": prog.get("last_step_time"),
        }.get(pb.window.anchor)
        if anchor is None:
            window = (a, b)
        else:
            window = (
                a if pb.window.before is None else max(a, anchor - pb.window.before),
                b if pb.window.after is None else min(b, anchor + pb.window.after),
            )
        out.append(
            PlaybookPlan(
                name=pb.name,
                title=pb.title,
                queries=tuple(queries),
                window=window,
                unavailable=tuple(missing),
            )
        )
    return out


# ----------------------------------------------------------------------------------------- execute


def _to_result(q: PlannedQuery, data: Any) -> dict[str, Any]:
    if q.kind == "instant":
        return {
            "kind": "instant",
            "promql": q.promql,
            "window_s": q.window_s,
            "at": q.end,
            "samples": [
                {"labels": s.labels, "value": s.value if math.isfinite(s.value) else None} for s in data
            ],
        }
    step = float(q.step or 1.0)
    n = int(round((q.end - q.start) / step)) + 1
    series = []
    for s in data:
        assert isinstance(s, Series)
        vals: list[float | None] = [None] * n
        for ts, v in zip(s.timestamps, s.values, strict=True):
            i = int(round((ts - q.start) / step))
            if 0 <= i < n and math.isfinite(v):
                vals[i] = v
        series.append({"labels": s.labels, "values": vals})
    return {
        "kind": "range",
        "promql": q.promql,
        "window_s": q.window_s,
        "start": q.start,
        "step": step,
        "n": n,
        "series": series,
    }


def _run_queries(
    client: PrometheusClient,
    queries: Sequence[PlannedQuery],
    *,
    concurrency: int,
    should_cancel: Callable[[], bool] | None,
    on_query_done: Callable[[str, bool], None] | None,
) -> tuple[dict, dict, float]:
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    spans: list[tuple[float, float]] = []

    def one(q: PlannedQuery) -> None:
        if should_cancel is not None and should_cancel():
            errors[q.name] = "cancelled"
            if on_query_done:
                on_query_done(q.name, False)
            return
        t0 = time.monotonic()
        try:
            if q.kind == "instant":
                data: Any = client.query(q.promql, at=q.end)
            else:
                data = client.query_range(q.promql, q.start, q.end, q.step)
            results[q.name] = _to_result(q, data)
            ok = True
        except PrometheusError as exc:
            errors[q.name] = str(exc) or type(exc).__name__
            ok = False
        finally:
            spans.append((t0, time.monotonic()))
        if on_query_done:
            on_query_done(q.name, ok)

    with ThreadPoolExecutor(
        max_workers=max(1, min(concurrency, len(queries) or 1)), thread_name_prefix="diagnose"
    ) as pool:
        list(pool.map(one, queries))
    return results, errors, _busy(spans)


def _busy(spans: Sequence[tuple[float, float]]) -> float:
    """Return the wall time during which at least one request was in flight (the union of the spans)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def execute(
    client: PrometheusClient,
    plan: PlaybookPlan,
    *,
    concurrency: int = 4,
    should_cancel: Callable[[], bool] | None = None,
    on_query_done: Callable[[str, bool], None] | None = None,
) -> PlaybookOutput:
    """Return the output of one playbook's queries, run in parallel (at most `concurrency` at a time).

    A query that fails keeps its error in `.errors` and the others still run (partial results). When
    `should_cancel()` turns true, queries not yet started are recorded as "cancelled".
    """
    results, errors, spent = _run_queries(
        client,
        plan.queries,
        concurrency=concurrency,
        should_cancel=should_cancel,
        on_query_done=on_query_done,
    )
    return PlaybookOutput(
        name=plan.name,
        results=results,
        errors=errors,
        prometheus_s=round(spent, 4),
        queries=len(plan.queries),
    )


# ------------------------------------------------------------------------------------------ decide


def decide(source: SourceInfo, outputs: Sequence[PlaybookOutput], *, triage: dict | None) -> dict:
    """Return {"diagnosis": {...}, "findings": [...]} from the playbooks' outputs (each finding has a "rule")."""
    every = load_playbooks()
    ran = [every[o.name] for o in outputs if o.name in every]
    with warnings.catch_warnings():
        # medians over all-NaN columns (an instant where a host has no data) are expected to be NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        ctx = build_context(source, outputs, triage)
        findings = evaluate(ctx, ran)
        diagnosis = decide_diagnosis(ctx, findings)
    mismatch = _source_mismatch(source, ctx.timeline, triage)
    if mismatch:
        # The seeds' pitfall: querying another job's Prometheus. Say so before anything else.
        diagnosis["summary"] = f"Check the data source first: {mismatch} " + diagnosis["summary"]
        diagnosis["confidence"] = min(diagnosis["confidence"], 0.2)
    failed = {name: err for o in outputs for name, err in o.errors.items()}
    if failed:
        # Partial results: say what could not be looked at, and trust the verdict less.
        names = ", ".join(sorted(failed))
        diagnosis["summary"] += (
            f" {len(failed)} quer{'y' if len(failed) == 1 else 'ies'} failed ({names}): "
            "what they would have shown is missing from this diagnosis."
        )
        diagnosis["confidence"] = round(max(0.05, diagnosis["confidence"] - min(0.4, 0.1 * len(failed))), 2)
        findings.append(
            Finding(
                playbook="exporter_health",
                rule="queries_failed",
                klass="healthy",
                severity="info",
                role="context",
                hosts=[],
                gpus=[],
                onset=None,
                title=f"{len(failed)} queries failed: {names}",
                evidence=[
                    {"query": name, "labels": {}, "value": "error", "interpretation": err[:300]}
                    for name, err in sorted(failed.items())
                ][:12],
            )
        )
    order = {"critical": 0, "warning": 1, "info": 2}
    findings.sort(key=lambda f: (order[f.severity], f.onset if f.onset is not None else float("inf"), f.rule))
    return {
        "diagnosis": diagnosis,
        "findings": [f.to_dict() for f in findings],
        "timeline": ctx.timeline.to_dict(),
    }


def _source_mismatch(source: SourceInfo, tl: Timeline, triage: Mapping[str, Any] | None) -> str:
    """Return why the TSDB may not be this job's (hosts or last step disagree with the log), or "".

    A step gauge that lags the log (refreshed less often than steps complete) is behind by the steps its lag
    covers: that is no mismatch."""
    if not triage:
        return ""
    tsdb_last_step = tl.last_step
    nodes = [str(n) for n in triage.get("nodes") or []]
    hosts = list(source.hosts)
    if nodes and hosts:

        def same(a: str, b: str) -> bool:
            return a == b or a.startswith(b + ".") or b.startswith(a + ".")

        if not any(same(n, h) for n in nodes for h in hosts):
            return (
                f"the log's nodes ({', '.join(nodes[:4])}...) are not among the TSDB's hosts "
                f"({', '.join(hosts[:4])}...): this may be another job's Prometheus."
            )
        covered = sum(1 for n in nodes if any(same(n, h) for h in hosts))
        if covered < 0.5 * len(nodes):
            return (
                f"the TSDB holds data for only {covered} of the log's {len(nodes)} nodes: it is incomplete "
                "or not this job's."
            )
    elif nodes and not hosts:
        return "the TSDB holds no per-host data for this job's nodes."
    last = (triage.get("job") or {}).get("last_step")
    if (
        last is not None
        and tsdb_last_step is None
        and "step" in PROFILES[source.profile].signals
        and PROFILES[source.profile].available(source.metric_names).get("step")
    ):
        return f"the log reached step {last} but the TSDB's training step metric returned nothing."
    if (
        last is not None
        and tsdb_last_step is not None
        and abs(float(last) - tsdb_last_step) > max(50, 0.2 * last) + tl.gauge_lag_s / (tl.step_s or 1e9)
    ):
        return (
            f"the log's last step is {last} but the TSDB's is {tsdb_last_step:.0f}: this may be another job's "
            "Prometheus, or its training metrics are incomplete."
        )
    return ""


def serves_copy(served: Any) -> bool:
    """Return True when the Prometheus answering at `served.url` stores its data inside `served.copy_dir`.

    A served copy's readiness probe can be answered by another process that took the port first; a
    diagnosis must never read someone else's TSDB, so callers check this before querying.
    """
    try:
        with PrometheusClient(served.url, timeout=10.0, retries=2, backoff=0.2) as client:
            path = str(client.flags().get("storage.tsdb.path", ""))
    except PrometheusError:
        return False
    try:
        return Path(path).resolve().is_relative_to(Path(served.copy_dir).resolve())
    except (OSError, ValueError):
        return False


# ---------------------------------------------------------------------------------------------- run


def _job(triage: Mapping[str, Any] | None) -> dict[str, Any]:
    job = dict((triage or {}).get("job") or {})
    return {k: job.get(k) for k in ("id", "status", "triage_class", "first_step", "last_step", "crash_time")}


def run_diagnosis(
    client: PrometheusClient,
    *,
    triage: dict | None = None,
    profile: str = "auto",
    start=None,
    end=None,
    playbooks=None,
    concurrency: int = 8,
    time_range: tuple[float, float] | None = None,
    gpu_model: str | None = None,
) -> dict:
    """Return the contract's whole object (job, source, diagnosis, findings, timings) for one source.

    `time_range` is the data's (first, last) sample time when the caller knows it; `gpu_model` the user's
    choice when the labels do not name the GPUs (see discover_source).
    """
    t0 = time.monotonic()
    req0 = client.stats.requests
    source = discover_source(client, profile=profile, time_range=time_range, gpu_model=gpu_model)
    discovery_s = time.monotonic() - t0
    plans = plan(source, triage=triage, playbooks=playbooks, start=start, end=end)
    # one query shared by several playbooks runs once
    unique: dict[tuple, PlannedQuery] = {}
    for p in plans:
        for q in p.queries:
            unique.setdefault((q.name, q.promql, q.kind, q.start, q.end, q.step), q)
    results, errors, busy_s = _run_queries(
        client, list(unique.values()), concurrency=concurrency, should_cancel=None, on_query_done=None
    )
    if unique and len(errors) == len(unique):
        raise PrometheusUnreachable(f"every diagnosis query failed, e.g. {next(iter(errors.values()))}")
    outputs = [
        PlaybookOutput(
            name=p.name,
            results={q.name: results[q.name] for q in p.queries if q.name in results},
            errors={q.name: errors[q.name] for q in p.queries if q.name in errors},
            queries=len(p.queries),
        )
        for p in plans
    ]
    decided = decide(source, outputs, triage=triage)
    tr = source.time_range or (0.0, 0.0)
    findings = [{k: v for k, v in f.items() if k != "rule"} for f in decided["findings"]]
    return {
        "job": _job(triage),
        "source": {
            "url": source.url,
            "profile": source.profile,
            "hosts": list(source.hosts),
            "gpus_per_host": source.gpus_per_host,
            "time_range": [float(tr[0]), float(tr[1])],
        },
        "diagnosis": decided["diagnosis"],
        "findings": findings,
        # prometheus_s: wall time waiting on Prometheus (discovery, then while any query was in flight)
        "timings": {
            "total_s": round(time.monotonic() - t0, 3),
            "queries": client.stats.requests - req0,
            "prometheus_s": round(discovery_s + busy_s, 3),
        },
    }
