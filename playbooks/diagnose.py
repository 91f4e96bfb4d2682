"""Automated diagnosis: discover the source, plan the playbooks, execute their queries, decide.

The four steps are separate so that a task queue can run them apart (everything crossing the API is
JSON-serialisable through `to_dict`/`from_dict`); `run_diagnosis` chains them in one process.

Usage::

    result = run_diagnosis(client, triage=triage_job(job_dir).to_dict())   # the contract's object
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ._diagnose_execute import _Answers, _run_unique, execute, in_flight
from ._diagnose_partial import note_partial
from ._diagnose_query import render_query
from ._diagnose_source import discover_source
from ._diagnose_types import (
    DiagnosisError,
    PlannedQuery,
    PlaybookOutput,
    PlaybookPlan,
    SourceInfo,
)
from .analysis import build_context, decide_diagnosis, evaluate
from .context import Timeline
from .hostnames import host_names, rename_outputs, result_hosts, same_host
from .loader import load_playbooks
from .log_evidence import hw_xid_hosts
from .log_series import with_log_loss, with_log_step_time
from .model import Playbook
from .profiles import PROFILES
from .prometheus import PrometheusClient, PrometheusError

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
    "render_query",
    "run_diagnosis",
    "serves_copy",
]

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


def plan(
    source: SourceInfo,
    *,
    triage: dict[str, Any] | None,
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
            only = tuple(hw_xid_hosts(triage, source.hosts)) if q.log_hosts == "xid" else ()
            if q.log_hosts and not only:
                continue  # what it would place is not in the log
            queries.append(
                render_query(
                    q,
                    source.profile,
                    start=a,
                    end=b,
                    interval=source.interval,
                    hosts=len(source.hosts),
                    gpus=len(source.hosts) * (source.gpus_per_host or 0),
                    only_hosts=only,
                )
            )
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


# ------------------------------------------------------------------------------------------ decide


def decide(
    source: SourceInfo, outputs: Sequence[PlaybookOutput], *, triage: dict[str, Any] | None
) -> dict[str, Any]:
    """Return {"diagnosis": {...}, "findings": [...]} from the playbooks' outputs (each finding has a "rule")."""
    every = load_playbooks()
    ran = [every[o.name] for o in outputs if o.name in every]
    source, outputs = named_once(source, outputs, triage)
    outputs = with_log_loss(outputs, triage, source.interval)
    outputs = with_log_step_time(outputs, triage, source.interval)
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
    note_partial(diagnosis, findings, outputs)
    order = {"critical": 0, "warning": 1, "info": 2}
    findings.sort(key=lambda f: (order[f.severity], f.onset if f.onset is not None else float("inf"), f.rule))
    return {
        "diagnosis": diagnosis,
        "findings": [f.to_dict() for f in findings],
        "timeline": ctx.timeline.to_dict(),
    }


def named_once(
    source: SourceInfo, outputs: Sequence[PlaybookOutput], triage: Mapping[str, Any] | None
) -> tuple[SourceInfo, list[PlaybookOutput]]:
    """Return the source and outputs with each host under its one name (the log's, else the shortest an
    exporter gives it; see playbooks.hostnames), so that every finding and culprit names it alike."""
    # every name the results carry, not only the hosts reporting at the data's end: a host that died long
    # before stopped reporting its node_exporter's uname, yet its earlier series name it
    named = set(source.hosts) | {h for o in outputs for h in result_hosts(o.results)}
    names = host_names(sorted(named), [str(n) for n in (triage or {}).get("nodes") or []]).renames()
    if not names:
        return source, list(outputs)
    hosts = tuple(sorted({names.get(h, h) for h in source.hosts}))
    renamed = [replace(o, results=rename_outputs(o.results, names)) for o in outputs]
    return replace(source, hosts=hosts), renamed


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
        if not any(same_host(n, h) for n in nodes for h in hosts):
            return (
                f"the log's nodes ({', '.join(nodes[:4])}...) are not among the TSDB's hosts "
                f"({', '.join(hosts[:4])}...): this may be another job's Prometheus."
            )
        covered = sum(1 for n in nodes if any(same_host(n, h) for h in hosts))
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
    triage: dict[str, Any] | Callable[[], dict[str, Any] | None] | None = None,
    profile: str = "auto",
    start: float | None = None,
    end: float | None = None,
    playbooks: Sequence[str] | None = None,
    concurrency: int = 8,
    time_range: tuple[float, float] | None = None,
    gpu_model: str | None = None,
    source: SourceInfo | None = None,
    phases: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Return the contract's whole object (job, source, diagnosis, findings, timings) for one source.

    `time_range` is the data's (first, last) sample time when the caller knows it; `gpu_model` the user's
    choice when the labels do not name the GPUs (see discover_source). `source`, when given, is what
    `discover_source` already found (a caller that discovers while the log is being triaged); `phases`, when
    given, receives the seconds spent discovering, querying and deciding (`discovery_s`, `queries_s`,
    `decision_s`). `triage` may be a function that waits for the log's triage: the queries that do not
    depend on the log (all but those placing the log's hosts) then run before it is called.
    """
    t0 = time.monotonic()
    req0 = client.stats.requests
    discovered = source is None
    if source is None:
        source = discover_source(client, profile=profile, time_range=time_range, gpu_model=gpu_model)
    discovery_s = time.monotonic() - t0
    concurrency = in_flight(concurrency, len(source.hosts) * (source.gpus_per_host or 0))
    answers: _Answers = {}
    busy_s = 0.0
    if callable(triage):
        # the log's triage only adds queries and sets windows: what every plan reads does not wait for it
        early = plan(source, triage=None, playbooks=playbooks, start=start, end=end)
        busy_s = _run_unique(client, early, concurrency=concurrency, answers=answers)[2]
    log = triage() if callable(triage) else triage
    plans = plan(source, triage=log, playbooks=playbooks, start=start, end=end)
    results, errors, more_s = _run_unique(client, plans, concurrency=concurrency, answers=answers)
    busy_s += more_s
    t_decide = time.monotonic()
    outputs = [
        PlaybookOutput(
            name=p.name,
            results={q.name: results[q.name] for q in p.queries if q.name in results},
            errors={q.name: errors[q.name] for q in p.queries if q.name in errors},
            queries=len(p.queries),
        )
        for p in plans
    ]
    decided = decide(source, outputs, triage=log)
    if phases is not None:
        if discovered:
            phases["discovery_s"] = round(discovery_s, 3)
        phases.update(
            queries_s=round(t_decide - t0 - discovery_s, 3), decision_s=round(time.monotonic() - t_decide, 3)
        )
    tr = source.time_range or (0.0, 0.0)
    findings = [{k: v for k, v in f.items() if k != "rule"} for f in decided["findings"]]
    return {
        "job": _job(log),
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
