"""Multi-job comparison (seed 002, "Multi-Job Comparison"): why is one run slower or different from another?

The method of the seeds, step by step:

1. Triage every job (the caller passes the triage dicts): status, step range, restore, checkpoint period.
2. Diff the configs, ignoring run-specific keys (job id, node names, ports, paths, timestamps).
3. Align by training step, not wall time: the step gauge maps steps to time windows in each TSDB; only the
   overlapping steps are compared, minus the warm-up after the later start and the checkpoint steps.
4. Sweep the contention checklist over those windows: one cluster-level figure per job and metric, the
   aggregation across hosts and GPUs done by Prometheus (medians, sums, extremes), then one figure over
   the kept instants (median; mean for trouble counters; 90th/10th percentile for the extremes).
5. Name the differentiator: the one contention source that differs between the jobs while the others
   match (a uniform runnable-process delta on a restored job, RDMA retransmits on some hosts, a hot GPU),
   and turn it into the contract's `diagnosis` and `findings` (playbook "comparison").

Every job is judged against the baseline: the job that did not restore from a checkpoint, else the first
one given. `delta_pct` is the last other job against the baseline.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ._compare_figures import (
    CompareError,
    CompareJob,
    Job,
    Row,
    cluster_rows,
    delta_pct,
    delta_text,
    discover,
    metric_signals,
    significant,
    step_range,
)
from ._compare_verdict import WITHIN_NOISE, Verdict, likely_cause, onset_of, row_evidence, verdict_of
from ._compare_windows import set_windows
from .profiles import PROFILES

__all__ = [
    "PLAYBOOK",
    "RUN_SPECIFIC_KEYS",
    "WITHIN_NOISE",
    "CompareError",
    "CompareJob",
    "compare_jobs",
    "config_diff",
    "delta_text",
    "metric_signals",
]

PLAYBOOK = "comparison"

#: Config keys that name the run, not what it computes: never a difference worth reporting.
RUN_SPECIFIC_KEYS = frozenset(
    {
        "JOB_ID",
        "JOB_NAME",
        "SLURM_JOB_ID",
        "SLURM_JOB_NAME",
        "SLURM_JOB_NODELIST",
        "JOB_NODELIST",
        "NODELIST",
        "HOSTNAME",
        "HEAD_NODE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "JAX_COORDINATOR_ADDRESS",
        "JAX_COORDINATOR_PORT",
        "RAY_PORT",
        "PROMETHEUS_PORT",
        "EXP_TAG",
        "run_name",
        "PASSTHROUGH_ARGS",
    }
)
# PASSTHROUGH_ARGS is compared item by item (triage splits it into its own keys), EXP_TAG/JOB_NAME are
# derived from it. Keys that hold paths, ids, ports or times are run-specific whatever their name.
_RUN_SPECIFIC_PATTERN = re.compile(
    r"(^|_)(dir|path|job_id|run_id|uuid|port|timestamp|date|datetime|start_time|end_time|host|hostname|nodelist)$",
    re.IGNORECASE,
)
# ------------------------------------------------------------------------------------------- config


def _run_specific(key: str) -> bool:
    return key in RUN_SPECIFIC_KEYS or bool(_RUN_SPECIFIC_PATTERN.search(key))


def config_diff(configs: Sequence[Mapping[str, str]]) -> dict[str, list[str | None]]:
    """Return {key: [value per job]} for the config keys whose values differ, run-specific keys left out.

    A key missing from a job's config is None there. Values that are paths (start with "/") are
    run-specific too (output folders name the run).
    """
    keys = sorted({k for c in configs for k in c})
    out: dict[str, list[str | None]] = {}
    for key in keys:
        if _run_specific(key):
            continue
        values = [c.get(key) for c in configs]
        if any(v is not None and v.startswith("/") for v in values):
            continue
        if len(set(values)) > 1:
            out[key] = values
    return out


def _baseline(jobs: Sequence[Job]) -> int:
    for j in jobs:
        if not j.restored:
            return j.index
    return 0


def _job_dict(job: Job) -> dict[str, Any]:
    tj = dict((job.triage or {}).get("job") or {})
    lo, hi = step_range(job)
    return {
        "id": tj.get("id"),
        "status": tj.get("status"),
        "triage_class": tj.get("triage_class"),
        "first_step": lo,
        "last_step": hi,
        "crash_time": tj.get("crash_time"),
    }


def _source_dict(job: Job) -> dict[str, Any]:
    return {
        "url": job.url,
        "profile": job.profile.name,
        "hosts": job.hosts,
        "gpus_per_host": job.gpus_per_host,
        "time_range": [job.time_range[0], job.time_range[1]],
    }


def compare_jobs(jobs: Sequence[CompareJob | tuple[Any, ...]], *, concurrency: int = 8) -> dict[str, Any]:
    """Return the contract's `compare` object for two or more jobs.

    1. Discover each job's profile, hosts, data range and step gauge (in parallel).
    2. Overlapping steps: [latest first step, earliest last step]; steady state starts `WARMUP_STEPS`
       after it (fewer on short overlaps), checkpoint steps are left out per job.
    3. One cluster figure per metric and job: the median over the kept instants of a PromQL aggregate.
    4. The differentiator (uniform CPU load, RDMA, thermal) decides the class; the rest is info.
    Raises CompareError with a readable message when fewer than two jobs are given or one has no data.
    """
    t_start = time.monotonic()
    specs = [j if isinstance(j, CompareJob) else CompareJob(*j) for j in jobs]
    if len(specs) < 2:
        raise CompareError("a comparison needs at least two jobs")
    for s in specs:
        if s.profile != "auto" and s.profile not in PROFILES:
            raise CompareError(f"unknown profile {s.profile!r}; known: auto, {', '.join(PROFILES)}")
    before = [(s.client.stats.requests, s.client.stats.seconds) for s in specs]
    with ThreadPoolExecutor(max_workers=len(specs)) as pool:
        js = list(pool.map(discover, specs, range(len(specs))))

    base = _baseline(js)
    others = [i for i in range(len(js)) if i != base]
    last = others[-1]
    findings: list[dict[str, Any]] = []
    overlap, lo_s, hi_s, notes = set_windows(js)
    findings.extend(_finding("info", title, [], [], evidence) for title, evidence in notes)
    findings.extend(_log_mismatches(js))
    diff = config_diff([j.config for j in js])
    rows_list, skipped, empty = cluster_rows(js, lo_s, hi_s, concurrency)
    rows = {r.metric.name: r for r in rows_list}
    # Every job against the baseline; the diagnosis is the most confident difference found, the metric
    # table's deltas and causes are those of the last job.
    verdicts = {i: verdict_of(js, base, i, rows, diff, concurrency) for i in others}
    flagged = [i for i in others if verdicts[i].klass != "healthy"]
    other = max(flagged, key=lambda i: verdicts[i].confidence) if flagged else last
    verdict = verdicts[other]
    onset = None
    if verdict.differentiator in rows:
        row = rows[verdict.differentiator]
        onset = onset_of(js[other], row, row.values[base], row.values[other])

    metrics = [
        {
            "name": r.metric.name,
            "values": [round(v, 4) for v in r.values],
            "delta_pct": delta_pct(r, base, last),
            "likely_cause": likely_cause(r, base, last, verdicts[last], diff, rows),
        }
        for r in rows_list
    ]
    findings[:0] = _verdict_findings(verdict, onset)
    findings.extend(_other_findings(js, base, other, rows, diff, verdict, skipped, empty))

    requests = sum(s.client.stats.requests - b0 for s, (b0, _) in zip(specs, before, strict=True))
    prom_s = sum(s.client.stats.seconds - s0 for s, (_, s0) in zip(specs, before, strict=True))
    return {
        "jobs": [_job_dict(j) for j in js],
        "source": _source_dict(js[0]),
        "sources": [_source_dict(j) for j in js],
        "diagnosis": {
            "class": verdict.klass,
            "root_cause_family": verdict.family,
            "culprits": verdict.culprits,
            "onset": onset,
            "confidence": verdict.confidence,
            "summary": verdict.summary,
            "chain": verdict.chain,
        },
        "findings": findings,
        "timings": {
            "total_s": round(time.monotonic() - t_start, 3),
            "queries": requests,
            "prometheus_s": round(prom_s, 3),
        },
        "comparison": {"overlap_steps": overlap, "config_diff": diff, "metrics": metrics, "baseline": base},
    }


def _log_mismatches(js: Sequence[Job]) -> list[dict[str, Any]]:
    """Seeds: cross-check each TSDB against its log, or risk comparing another job's database."""
    out = []
    for j in js:
        log_last = ((j.triage or {}).get("job") or {}).get("last_step")
        if log_last is None or not j.step_v:
            continue
        tsdb_last = int(max(j.step_v))
        if abs(tsdb_last - int(log_last)) > max(10, 0.05 * int(log_last)):
            out.append(
                _finding(
                    "info",
                    f"{j.label}: the TSDB's last step {tsdb_last} disagrees with the log's {log_last} "
                    "(another job's Prometheus, or a lagging exporter)",
                    [],
                    [],
                    [
                        {
                            "query": j.profile.expr("step"),
                            "labels": {},
                            "value": float(tsdb_last),
                            "interpretation": f"log: last completed step {log_last}",
                        }
                    ],
                )
            )
    return out


def _verdict_findings(verdict: Verdict, onset: float | None) -> list[dict[str, Any]]:
    """The verdict's own finding, first in the list: a warning for an incident, else its info (if any)."""
    if verdict.klass != "healthy":
        return [
            _finding(
                "warning",
                verdict.summary.split(";")[0],
                verdict.hosts,
                verdict.gpus,
                verdict.evidence,
                verdict.klass,
                onset,
            )
        ]
    if verdict.evidence:
        return [_finding("info", verdict.summary, verdict.hosts, verdict.gpus, verdict.evidence)]
    return []


def _other_findings(
    js: Sequence[Job],
    base: int,
    other: int,
    rows: Mapping[str, Row],
    diff: Mapping[str, Any],
    verdict: Verdict,
    skipped: Sequence[str],
    empty: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Info findings: the config difference, every other metric beyond noise, the metrics not compared (a
    job lacks the signal, or has no sample of it in the compared steps)."""
    out = []
    if diff:
        out.append(
            _finding(
                "info",
                f"Config differs: {', '.join(sorted(diff))}",
                [],
                [],
                [
                    {
                        "query": "",
                        "labels": {"key": k},
                        "value": " | ".join(str(v) for v in vals),
                        "interpretation": "performance may differ by design",
                    }
                    for k, vals in diff.items()
                ],
            )
        )
    for r in rows.values():
        if r.metric.name != verdict.differentiator and significant(r, base, other):
            out.append(
                _finding(
                    "info",
                    f"{r.metric.name.replace('_', ' ')}: {delta_pct(r, base, other):+.1f} % "
                    f"in {js[other].label} vs {js[base].label}",
                    [],
                    [],
                    [row_evidence(r, js, base, other, likely_cause(r, base, other, verdict, diff, rows))],
                    verdict.klass,
                )
            )
    if skipped:
        out.append(
            _finding("info", f"Not compared (signal missing in a job): {', '.join(skipped)}", [], [], [])
        )
    if empty:
        out.append(
            _finding(
                "info",
                f"Not compared (a job has no sample in the compared steps): {', '.join(empty)}",
                [],
                [],
                [],
            )
        )
    return out


def _finding(
    severity: str,
    title: str,
    hosts: list[str],
    gpus: list[str],
    evidence: list[dict[str, Any]],
    klass: str = "healthy",
    onset: float | None = None,
) -> dict[str, Any]:
    return {
        "playbook": PLAYBOOK,
        "class": klass,
        "severity": severity,
        "hosts": hosts,
        "gpus": gpus,
        "onset": onset,
        "title": title,
        "evidence": evidence,
    }
