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

import bisect
import math
import re
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from .anomaly import Shift, distribution_shift
from .diagnose import DiagnosisError, discover_source
from .profiles import PROFILES, Profile
from .prometheus import PrometheusClient, PrometheusError, Series, choose_step

__all__ = ["RUN_SPECIFIC_KEYS", "CompareError", "CompareJob", "compare_jobs", "config_diff"]

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
# Keys that set the job's scale (node count, parallelism): with them different, per-host figures differ by design.
_SCALE_KEYS = ("NNODES", "SLURM_JOB_NUM_NODES", "ici_fsdp_parallelism", "dcn_data_parallelism")

_WARMUP_STEPS = 10  # seeds: steady state begins 5-10 steps after the later job's first step
_CKPT_AFTER = 2  # a checkpoint step and the 1-2 steps after it are not steady state
_NOISE_K = 3.0  # a difference smaller than 3 robust standard deviations is noise
_UNIFORM_SHARE = 0.9  # a "uniform" delta is present on at least 90 % of the hosts
_LOCAL_SHARE = 0.5  # a "localised" one on fewer than half of them
_MAX_POINTS = 720  # per range query of a cluster figure


class CompareError(Exception):
    """The jobs cannot be compared (fewer than two, no data, no step gauge)."""


@dataclass(frozen=True)
class CompareJob:
    """One job of a comparison.

    Attributes:
        client: read-only client of the job's Prometheus.
        triage: the job's triage dict (`Triage.to_dict()`), or None when there is no log.
        profile: metric profile name, or "auto" to detect it from the TSDB.
    """

    client: PrometheusClient
    triage: Mapping[str, Any] | None = None
    profile: str = "auto"


@dataclass(frozen=True)
class _Metric:
    """One row of the comparison: a signal aggregated across hosts/GPUs.

    Attributes:
        name: row name in the output.
        signals: candidate signals, the first one every job has is used.
        agg: "median", "max", "min" or "sum" across the signal's series at each instant.
        abs_floor, rel_floor: smallest difference that counts, in the signal's unit / relative to the baseline.
        pct_floor: denominator floor for delta_pct, so that a rise from zero stays a finite number.
        stat: "median" over the kept instants (a steady level); "mean" for trouble counters, where what
            counts is how much happened in the window (a burst over half the window still counts); "p90" /
            "p10" for the extremes (hottest GPU, slowest clock), which count once they last a tenth of it.
    """

    name: str
    signals: tuple[str, ...]
    agg: str
    abs_floor: float = 0.0
    rel_floor: float = 0.0
    pct_floor: float = 1e-9
    stat: str = "median"


# The contention checklist of the seeds (Playbook 7), training figures first.
_METRICS: tuple[_Metric, ...] = (
    _Metric("step_time", ("step_time",), "max", rel_floor=0.02),
    _Metric("tokens_per_sec", ("tokens_per_sec",), "max", rel_floor=0.02),
    _Metric("gpu_power", ("gpu_power",), "median", rel_floor=0.03),
    _Metric("gpu_temp", ("gpu_temp",), "median", abs_floor=2.0),
    _Metric("gpu_temp_max", ("gpu_temp",), "max", abs_floor=3.0, stat="p90"),
    _Metric("gpu_clock", ("gpu_clock",), "median", rel_floor=0.02),
    _Metric("gpu_clock_min", ("gpu_clock",), "min", rel_floor=0.03, stat="p10"),
    _Metric("gpu_util", ("gpu_util",), "median", abs_floor=2.0),
    _Metric("procs_running", ("procs_running",), "median", abs_floor=1.0, pct_floor=1.0),
    _Metric("procs_blocked", ("procs_blocked",), "median", abs_floor=1.0, pct_floor=1.0),
    _Metric("mem_used", ("mem_used",), "median", rel_floor=0.05),
    _Metric(
        "rdma_retransmits",
        ("rdma_retransmits", "rdma_transmit_wait"),
        "sum",
        abs_floor=1.0,
        pct_floor=1.0,
        stat="mean",
    ),
    _Metric("tcp_retransmits", ("tcp_retransmits",), "sum", abs_floor=1.0, pct_floor=1.0, stat="mean"),
    _Metric("io_pressure", ("io_pressure",), "median", abs_floor=2.0, pct_floor=1.0),
)


@dataclass
class _Job:
    """What the comparison knows about one job while it runs."""

    index: int
    client: PrometheusClient
    triage: Mapping[str, Any] | None
    profile: Profile
    url: str
    hosts: list[str]
    gpus_per_host: int | None
    time_range: tuple[float, float]
    step_t: list[float]
    step_v: list[float]
    restored: bool = False
    ckpt_period: int | None = None
    window: tuple[float, float] | None = None

    @property
    def config(self) -> Mapping[str, str]:
        return (self.triage or {}).get("config") or {}

    @property
    def label(self) -> str:
        jid = ((self.triage or {}).get("job") or {}).get("id")
        return f"job {jid}" if jid else f"job #{self.index + 1}"

    def step_at(self, t: float) -> float | None:
        """Return the step the gauge showed at `t` (the last sample at or before it)."""
        i = bisect.bisect_right(self.step_t, t) - 1
        return self.step_v[i] if i >= 0 else None

    def time_of(self, step: float) -> float | None:
        """Return when the gauge first reached `step`."""
        for t, s in zip(self.step_t, self.step_v, strict=True):
            if s >= step:
                return t
        return None

    def steady(self, t: float, lo: float, hi: float) -> bool:
        """Return whether `t` lies in a steady-state step of [lo, hi] (no checkpoint step nor the 2 after it)."""
        s = self.step_at(t)
        if s is None or not lo <= s <= hi:
            return False
        p = self.ckpt_period
        return not (p and p > 0 and s >= p and int(s) % p <= _CKPT_AFTER)


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


# ------------------------------------------------------------------------------------------ discovery


def _discover(spec: CompareJob, index: int) -> _Job:
    """Return the job's source facts (the diagnosis engine's discovery) and its step gauge samples."""
    client = spec.client
    try:
        src = discover_source(client, profile=spec.profile)
    except DiagnosisError as exc:
        raise CompareError(f"job #{index + 1} ({client.base_url}): {exc}") from exc
    profile = PROFILES[src.profile]
    t0, t1 = src.time_range or (0.0, 0.0)
    step_series = client.query_range(profile.expr("step"), t0, t1, choose_step(t0, t1, max_points=4000))
    if not step_series or not step_series[0].timestamps:
        raise CompareError(
            f"job #{index + 1}: no training step gauge ({profile.signal('step').selector}) in its TSDB"
        )
    pts = [(t, v) for t, v in zip(step_series[0].timestamps, step_series[0].values, strict=True) if v == v]
    job = _Job(
        index=index,
        client=client,
        triage=spec.triage,
        profile=profile,
        url=client.base_url,
        hosts=list(src.hosts),
        gpus_per_host=src.gpus_per_host,
        time_range=(t0, t1),
        step_t=[p[0] for p in pts],
        step_v=[p[1] for p in pts],
    )
    progress = (spec.triage or {}).get("progress") or {}
    # Without a log, a run whose step gauge starts past 0 resumed from a checkpoint (seed-system §4).
    job.restored = (
        progress.get("restored_from") is not None
        if spec.triage is not None
        else bool(job.step_v) and min(job.step_v) > 0
    )
    try:
        job.ckpt_period = int(job.config.get("checkpoint_period", "")) or None
    except ValueError:
        job.ckpt_period = None
    return job


def _step_range(job: _Job) -> tuple[int, int]:
    """Return the job's first and last step: the log's when triage has them, else the TSDB's."""
    tj = (job.triage or {}).get("job") or {}
    lo = tj.get("first_step")
    hi = tj.get("last_step")
    return (
        int(lo) if lo is not None else int(min(job.step_v)),
        int(hi) if hi is not None else int(max(job.step_v)),
    )


# ------------------------------------------------------------------------------------------- metrics


def _agg_expr(profile: Profile, signal: str, agg: str) -> str:
    inner = profile.expr(signal)
    if not profile.signal(signal).labels:
        return inner  # a job-scope signal is one series already
    if agg == "median":
        return f"quantile(0.5, {inner})"
    return f"{agg}({inner})"


def _robust_sd(values: Sequence[float]) -> float:
    if len(values) < 3:
        return 0.0
    med = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - med) for v in values)


def _pick_signal(metric: _Metric, jobs: Sequence[_Job]) -> str | None:
    for sig in metric.signals:
        if all(j.profile.has(sig) for j in jobs):
            return sig
    return None


@dataclass
class _Row:
    """One metric's figures: per-job steady median, robust spread, and the expression used."""

    metric: _Metric
    signal: str
    exprs: list[str]
    values: list[float]
    noise: list[float]


def _series_figures(
    job: _Job, series: list[Series], lo: float, hi: float, stat: str
) -> tuple[float, float] | None:
    if not series:
        return None
    kept = [
        v
        for t, v in zip(series[0].timestamps, series[0].values, strict=True)
        if v == v and not math.isinf(v) and job.steady(t, lo, hi)
    ]
    if not kept:
        return None
    if stat == "mean":
        value = statistics.fmean(kept)
    elif stat in ("p90", "p10"):
        value = _quantile(kept, int(stat[1:]) / 100.0)
    else:
        value = statistics.median(kept)
    return value, _robust_sd(kept)


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _run(job: _Job, calls: Sequence[Callable[[], Any]], concurrency: int) -> list[Any]:
    return job.client.run_parallel(calls, max_concurrency=concurrency)


def _cluster_rows(jobs: Sequence[_Job], lo: int, hi: int, concurrency: int) -> tuple[list[_Row], list[str]]:
    """Return the metric rows over each job's steady window, and the metrics no job pair could compare."""
    plan: list[tuple[_Metric, str]] = []
    skipped: list[str] = []
    for m in _METRICS:
        sig = _pick_signal(m, jobs)
        if sig is None:
            skipped.append(m.name)
        else:
            plan.append((m, sig))

    def per_job(job: _Job) -> list[Any]:
        a, b = job.window or job.time_range
        res = choose_step(a, b, max_points=_MAX_POINTS)
        exprs = [_agg_expr(job.profile, sig, m.agg) for m, sig in plan]
        calls = [(lambda e=e: job.client.query_range(e, a, b, res)) for e in exprs]
        return _run(job, calls, concurrency)

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        results = list(pool.map(per_job, jobs))
    rows = []
    for i, (m, sig) in enumerate(plan):
        figures = []
        for job, res in zip(jobs, results, strict=True):
            got = res[i]
            figures.append(
                None if isinstance(got, PrometheusError) else _series_figures(job, got, lo, hi, m.stat)
            )
        if any(f is None for f in figures):
            skipped.append(m.name)
            continue
        rows.append(
            _Row(
                m,
                sig,
                [_agg_expr(j.profile, sig, m.agg) for j in jobs],
                [f[0] for f in figures],
                [f[1] for f in figures],
            )
        )  # type: ignore[index]
    return rows, skipped


def _significant(row: _Row, base: int, other: int) -> bool:
    a, b = row.values[base], row.values[other]
    # Outside the band the baseline's own figure moves in over time (its robust spread).
    noise = _NOISE_K * row.noise[base]
    floor = max(row.metric.abs_floor, row.metric.rel_floor * abs(a))
    return abs(b - a) > max(noise, floor)


def metric_signals(name: str) -> tuple[str, ...]:
    """Return the signals a comparison metric row reads ("gpu_temp_max" -> ("gpu_temp",)); () if unknown."""
    return next((m.signals for m in _METRICS if m.name == name), ())


def delta_text(metric: Mapping[str, Any]) -> str:
    """Return how a report shows one metric row's change: a percentage, or the absolute change when the
    baseline is below the metric's percentage floor (a rate near zero: "+0.001" says more than "+0.1 %")."""
    floor = next((m.pct_floor for m in _METRICS if m.name == metric["name"]), 1e-9)
    values = metric["values"]
    if len(values) >= 2 and abs(values[0]) < floor:
        return f"{values[-1] - values[0]:+.3g} (absolute)"
    return f"{metric['delta_pct']:+.1f} %"


def _delta_pct(row: _Row, base: int, other: int) -> float:
    a, b = row.values[base], row.values[other]
    return round(100.0 * (b - a) / max(abs(a), row.metric.pct_floor), 2)


def _per_host(job: _Job, signal: str, stats: Sequence[str], concurrency: int) -> list[dict[str, float]]:
    """Return, per statistic ("mean" or a quantile such as "0.5"), {host: statistic over the steady window}."""
    a, b = job.window or job.time_range
    res = choose_step(a, b, max_points=_MAX_POINTS)
    rng = f"({job.profile.expr(signal)})[{max(int(b - a), int(res))}s:{int(res)}s]"
    exprs = [f"avg_over_time({rng})" if st == "mean" else f"quantile_over_time({st}, {rng})" for st in stats]
    out = []
    for got in _run(job, [(lambda e=e: job.client.query(e, b)) for e in exprs], concurrency):
        if isinstance(got, PrometheusError):
            out.append({})
        else:
            out.append({s.labels.get("host", ""): s.value for s in got if s.value == s.value})
    return out


def _extreme_gpus(job: _Job, signal: str, top: bool, concurrency: int) -> list[tuple[str, str, float]]:
    """Return the 3 GPUs with the highest (top) or lowest median of a GPU signal over the steady window."""
    a, b = job.window or job.time_range
    res = choose_step(a, b, max_points=_MAX_POINTS)
    dur = f"{max(int(b - a), int(res))}s"
    fn = "topk" if top else "bottomk"
    expr = f"{fn}(3, quantile_over_time(0.5, ({job.profile.expr(signal)})[{dur}:{int(res)}s]))"
    got = _run(job, [lambda: job.client.query(expr, b)], concurrency)[0]
    if isinstance(got, PrometheusError):
        return []
    return [(s.labels.get("host", ""), s.labels.get("gpu", ""), s.value) for s in got if s.value == s.value]


# ------------------------------------------------------------------------------------------ verdicts


@dataclass
class _Verdict:
    klass: str
    family: str
    confidence: float
    culprits: list[dict[str, str | None]]
    differentiator: str | None
    summary: str
    chain: list[str]
    evidence: list[dict[str, Any]]
    hosts: list[str]
    gpus: list[str]


def _host_delta(
    base: _Job, other: _Job, row: _Row, concurrency: int
) -> tuple[dict[str, float], float, Shift | None]:
    """Return ({host: other's figure minus the baseline's}, the baseline's per-host noise, the shift of the
    whole distribution of host figures with its interval).

    The figure is each host's median over the steady window (its mean for trouble counters). Hosts present
    in both jobs are compared with themselves; the others with the baseline's median host. Same-host
    deltas miss a uniform extra load when each host's own background differs between the runs (another
    allocation, other daemons); the shift of the distribution (Hodges-Lehmann, rank test) does not.
    """
    mid = "mean" if row.metric.stat == "mean" else "0.5"
    b_q = _per_host(base, row.signal, ("0.25", mid, "0.75"), concurrency)
    o_mid = _per_host(other, row.signal, (mid,), concurrency)[0]
    b_mid = b_q[1]
    if not b_mid or not o_mid:
        return {}, 0.0, None
    level = statistics.median(b_mid.values())
    iqrs = [b_q[2][h] - b_q[0][h] for h in b_mid if h in b_q[0] and h in b_q[2]]
    noise = max(_robust_sd(list(b_mid.values())), statistics.median(iqrs) / 1.349 if iqrs else 0.0)
    shift = distribution_shift(list(b_mid.values()), list(o_mid.values()))
    return {h: v - b_mid.get(h, level) for h, v in o_mid.items()}, noise, shift


def _verdict(
    jobs: Sequence[_Job],
    base: int,
    other: int,
    rows: Mapping[str, _Row],
    diff: Mapping[str, Any],
    concurrency: int,
) -> _Verdict:
    """Return the comparison's diagnosis: the contention source that differs, else healthy."""
    b, o = jobs[base], jobs[other]
    sig = {name: _significant(r, base, other) for name, r in rows.items()}
    up = {name: sig[name] and r.values[other] > r.values[base] for name, r in rows.items()}
    scale = [k for k in _SCALE_KEYS if k in diff]

    # 1. CPU contention: more runnable processes on (nearly) every host.
    if up.get("procs_running"):
        deltas, noise, shift = _host_delta(b, o, rows["procs_running"], concurrency)
        thr = max(_NOISE_K * noise, rows["procs_running"].metric.abs_floor)
        raised = sorted(h for h, d in deltas.items() if d > thr)
        share = len(raised) / len(deltas) if deltas else 0.0
        med = statistics.median(deltas.values()) if deltas else 0.0
        # the whole distribution moved: its shift's interval lies above the floor and the ranks separate
        moved = shift is not None and shift.p < 0.05 and shift.low > rows["procs_running"].metric.abs_floor
        text = (
            f"+{med:.1f} runnable processes per host (median host), raised on {len(raised)} of "
            f"{len(deltas)} hosts"
        )
        if shift is not None:
            text += (
                f"; the hosts' distribution shifted by {shift.estimate:+.1f} ({shift.low:+.1f} to "
                f"{shift.high:+.1f}, rank test p = {shift.p:.2g})"
            )
        ev = [_evidence(rows["procs_running"], jobs, base, other, text)]
        if (share >= _UNIFORM_SHARE or moved) and not scale:
            med = shift.estimate if moved and shift is not None else med
            restored = o.restored and not b.restored
            why = (
                f"{o.label} restored from a checkpoint and {b.label} is a fresh start with the same config. "
                "Threads leaked by the restore (RCCL communicator polling threads cached by XLA)"
                if restored
                else "no restore of this run is in its log, so background processes are as likely "
                "as leaked threads. The extra threads"
            )
            slower = (
                f" ({_delta_pct(rows['step_time'], base, other):+.1f} % step time)"
                if up.get("step_time")
                else ""
            )
            return _Verdict(
                "restore-resource-leak",
                "cpu-contention",
                0.9 if restored else 0.55,
                [],
                "procs_running",
                f"{o.label} carries a uniform extra CPU load: about {med:.1f} more runnable processes on every "
                f"host ({len(raised)} of {len(deltas)}) than {b.label} over the same steps; {why} compete with "
                f"the data pipeline and the runtime: a constant tax on throughput{slower}.",
                [
                    "checkpoint restore path leaked threads" if restored else "extra background processes",
                    f"+{med:.1f} runnable processes on every host",
                    "CPU contention with the input pipeline and runtime",
                    "slower steps / lower tokens per second",
                ],
                ev,
                [],
                [],
            )
        if 0 < share < _LOCAL_SHARE:
            return _Verdict(
                "healthy",
                "none",
                0.5,
                [],
                None,
                f"{len(raised)} of {len(deltas)} hosts of {o.label} run more processes than in {b.label} "
                f"(background processes or a different node allocation); no other contention source differs.",
                [],
                ev,
                raised,
                [],
            )

    # 2. RDMA retransmits in one run and not the other: degraded links slow every collective.
    if up.get("rdma_retransmits"):
        row = rows["rdma_retransmits"]
        deltas, noise, _ = _host_delta(b, o, row, concurrency)
        thr = max(_NOISE_K * noise, row.metric.abs_floor)
        bad = sorted((h for h, d in deltas.items() if d > thr), key=lambda h: -deltas[h])
        if bad and len(bad) < max(2, _LOCAL_SHARE * len(deltas)):
            st = (
                f" and steps {_delta_pct(rows['step_time'], base, other):+.1f} % slower"
                if up.get("step_time")
                else ""
            )
            return _Verdict(
                "rdma-degradation",
                "network-rdma",
                0.75 if up.get("step_time") else 0.55,
                [{"host": h, "gpu": None} for h in bad],
                "rdma_retransmits",
                f"{o.label} shows sustained RDMA retransmits on {', '.join(bad)} that {b.label} does not{st}: "
                f"degraded links slow every collective of the job.",
                [
                    f"RDMA link trouble on {', '.join(bad)}",
                    "retransmitted packets",
                    "slower collectives",
                    "slower steps for every rank",
                ],
                [_evidence(row, jobs, base, other, f"RDMA retransmit rate up on {len(bad)} host(s)")],
                bad,
                [],
            )

    # 3. One GPU hot and throttled in one run: a thermal straggler. Judged against each job's own GPUs, as
    #    GPU models and cooling differ between runs: how far the hottest GPU is above the median one and how
    #    far the slowest clock is below the median clock.
    if all(n in rows for n in ("gpu_temp", "gpu_temp_max", "gpu_clock", "gpu_clock_min")):

        def excess(i: int) -> tuple[float, float]:
            clock = rows["gpu_clock"].values[i]
            return (
                rows["gpu_temp_max"].values[i] - rows["gpu_temp"].values[i],
                (clock - rows["gpu_clock_min"].values[i]) / clock if clock > 0 else 0.0,
            )

        (hot_b, slow_b), (hot_o, slow_o) = excess(base), excess(other)
        if (
            hot_o - hot_b > rows["gpu_temp_max"].metric.abs_floor
            and slow_o - slow_b > rows["gpu_clock_min"].metric.rel_floor
        ):
            hot = _extreme_gpus(o, rows["gpu_temp_max"].signal, True, concurrency)
            culprits = [{"host": h, "gpu": g} for h, g, _ in hot[:1]]
            return _Verdict(
                "thermal-straggler",
                "thermal",
                0.6,
                culprits,
                "gpu_temp_max",
                f"The hottest GPU of {o.label} runs {hot_o:.0f} °C above its median GPU (against {hot_b:.0f} °C "
                f"in {b.label}) and the slowest clock lags the median by {100 * slow_o:.0f} % (against "
                f"{100 * slow_b:.0f} %): one throttled GPU holds back every synchronous step.",
                ["GPU overheats", "clock throttles", "its rank is late at each collective", "slower steps"],
                [
                    _evidence(rows["gpu_temp_max"], jobs, base, other, "hottest GPU"),
                    _evidence(rows["gpu_clock_min"], jobs, base, other, "slowest GPU clock"),
                ],
                [c["host"] for c in culprits if c["host"]],
                [c["gpu"] for c in culprits if c["gpu"]],
            )

    # 4. Nothing differs beyond noise, or only what the config explains.
    moved = [n for n in ("step_time", "tokens_per_sec") if sig.get(n)]
    if moved and diff:
        why = f"the configs differ ({', '.join(sorted(diff)[:6])})"
        return _Verdict(
            "healthy",
            "none",
            0.6,
            [],
            None,
            f"Throughput differs between {b.label} and {o.label}, as {why} lead one to expect; no "
            "contention source (CPU, network, storage, GPU thermal) differs between them.",
            [],
            [],
            [],
            [],
        )
    if moved:
        return _Verdict(
            "healthy",
            "none",
            0.5,
            [],
            None,
            f"Step time differs between {b.label} and {o.label} "
            f"({_delta_pct(rows['step_time'], base, other):+.1f} %) although the configs match, but no "
            "contention source (CPU, network, storage, GPU thermal) differs: look at the GPU model, "
            "the software image and the data pipeline.",
            [],
            [],
            [],
            [],
        )
    return _Verdict(
        "healthy",
        "none",
        0.8,
        [],
        None,
        f"{b.label} and {o.label} match within noise over the compared steps: same throughput and no "
        "differing contention source.",
        [],
        [],
        [],
        [],
    )


def _evidence(row: _Row, jobs: Sequence[_Job], base: int, other: int, meaning: str) -> dict[str, Any]:
    return {
        "query": row.exprs[other],
        "labels": {"job": jobs[other].label, "baseline": jobs[base].label},
        "value": round(row.values[other], 4),
        "interpretation": f"{meaning} (baseline {row.values[base]:.4g}, {_delta_pct(row, base, other):+.1f} %)",
    }


_CAUSES_UP = {
    "procs_running": "more runnable processes: CPU contention (leaked threads of a restored job, or background work)",
    "procs_blocked": "more processes blocked on I/O: storage or NFS contention",
    "io_pressure": "more I/O stall time: storage or NFS contention",
    "mem_used": "more host memory in use: checkpoint staging or a host-side leak (slows GPUs only if it swaps)",
    "rdma_retransmits": "RDMA retransmits: degraded links or congestion slowing the collectives",
    "tcp_retransmits": "TCP retransmits: NFS/gRPC traffic; not a cause of slower steps unless RDMA is also affected",
    "gpu_temp": "GPUs run hotter: cooling, ambient or a higher sustained load",
    "gpu_temp_max": "the hottest GPU runs hotter while the others do not: thermal straggler candidate",
    "gpu_clock_min": "the slowest GPU clock is higher",
    "gpu_power": "GPUs draw more power: more work per second or a different GPU model",
    "gpu_clock": "higher GPU clocks: different power/thermal headroom or GPU model",
    "gpu_util": "GPUs busier",
    "step_time": "slower steps",
    "tokens_per_sec": "higher throughput",
}
_CAUSES_DOWN = {
    "gpu_power": "GPUs draw less power: power or thermal cap, or GPUs waiting on others",
    "gpu_clock": "GPU clocks lower: thermal or power cap",
    "gpu_clock_min": "the slowest GPU clocks lower while the others do not: a throttled GPU (thermal or power cap)",
    "gpu_temp": "GPUs run cooler",
    "gpu_temp_max": "the hottest GPU runs cooler",
    "procs_blocked": "fewer processes blocked on I/O",
    "io_pressure": "less I/O stall time",
    "rdma_retransmits": "fewer RDMA retransmits",
    "tcp_retransmits": "fewer TCP retransmits",
    "gpu_util": "GPUs less busy: they wait on input, the network or a straggler",
    "tokens_per_sec": "lower throughput",
    "step_time": "faster steps",
    "procs_running": "fewer runnable processes",
    "mem_used": "less host memory in use",
}


#: The likely cause of a difference below the metric's floors (the others are worth a look).
WITHIN_NOISE = "within noise"


def _likely_cause(
    row: _Row, base: int, other: int, verdict: _Verdict, diff: Mapping[str, Any], rows: Mapping[str, _Row]
) -> str:
    """Return a plain-English likely cause of one metric's difference (or "within noise")."""
    name = row.metric.name
    if not _significant(row, base, other):
        return WITHIN_NOISE
    if name == verdict.differentiator:
        if verdict.klass == "restore-resource-leak":
            return (
                "runnable processes up uniformly on every host with the same config: CPU contention from "
                "leaked threads of a restored job (restore-resource-leak, cpu-contention)"
            )
        return f"{verdict.summary.split(':')[0]} ({verdict.klass}, {verdict.family})"
    if name in ("step_time", "tokens_per_sec") and verdict.differentiator:
        if (row.values[other] > row.values[base]) == (name == "step_time"):
            return (
                f"symptom of {verdict.differentiator.replace('_', ' ')} ({verdict.klass}, {verdict.family})"
            )
        elsewhere = (
            f"the config ({', '.join(sorted(diff)[:4])})"
            if diff
            else "something else (GPU model, software image, data pipeline)"
        )
        return f"faster despite {verdict.differentiator.replace('_', ' ')}: {elsewhere} differs"
    overall = {"gpu_temp_max": "gpu_temp", "gpu_clock_min": "gpu_clock"}.get(name)
    if overall in rows:
        # The extreme moved as much as the typical GPU: the whole fleet differs, not one straggler.
        ref = rows[overall]
        gap_b, gap_o = row.values[base] - ref.values[base], row.values[other] - ref.values[other]
        if abs(gap_o - gap_b) <= max(row.metric.abs_floor, row.metric.rel_floor * abs(ref.values[base])):
            return f"every GPU moved with it ({overall.replace('_', ' ')}): GPU model, cooling or load, not one straggler"
    scale = [k for k in _SCALE_KEYS if k in diff]
    if scale:
        return f"scale: {', '.join(scale)} differ between the jobs"
    if diff and name in ("step_time", "tokens_per_sec", "gpu_power", "gpu_util", "mem_used"):
        return f"config: {', '.join(sorted(diff)[:4])} differ between the jobs"
    up = row.values[other] > row.values[base]
    return (_CAUSES_UP if up else _CAUSES_DOWN).get(name, "higher" if up else "lower")


def _onset(job: _Job, row: _Row, base_value: float, other_value: float) -> float | None:
    """Return when the differentiating metric of `job` first crossed half-way from the baseline level."""
    t0, t1 = job.time_range
    expr = row.exprs[job.index]
    try:
        series = job.client.query_range(expr, t0, t1, choose_step(t0, t1, max_points=2000))
    except PrometheusError:
        return None
    if not series:
        return None
    mid = (base_value + other_value) / 2.0
    rising = other_value > base_value
    for t, v in zip(series[0].timestamps, series[0].values, strict=True):
        if v == v and ((v > mid) if rising else (v < mid)):
            return t
    return None


# ------------------------------------------------------------------------------------------- public


def _baseline(jobs: Sequence[_Job]) -> int:
    for j in jobs:
        if not j.restored:
            return j.index
    return 0


def _job_dict(job: _Job) -> dict[str, Any]:
    tj = dict((job.triage or {}).get("job") or {})
    lo, hi = _step_range(job)
    return {
        "id": tj.get("id"),
        "status": tj.get("status"),
        "triage_class": tj.get("triage_class"),
        "first_step": lo,
        "last_step": hi,
        "crash_time": tj.get("crash_time"),
    }


def _source_dict(job: _Job) -> dict[str, Any]:
    return {
        "url": job.url,
        "profile": job.profile.name,
        "hosts": job.hosts,
        "gpus_per_host": job.gpus_per_host,
        "time_range": [job.time_range[0], job.time_range[1]],
    }


def compare_jobs(jobs: Sequence[CompareJob | tuple], *, concurrency: int = 8) -> dict[str, Any]:
    """Return the contract's `compare` object for two or more jobs.

    1. Discover each job's profile, hosts, data range and step gauge (in parallel).
    2. Overlapping steps: [latest first step, earliest last step]; steady state starts `_WARMUP_STEPS`
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
        js = list(pool.map(_discover, specs, range(len(specs))))

    base = _baseline(js)
    others = [i for i in range(len(js)) if i != base]
    last = others[-1]
    ranges = [_step_range(j) for j in js]
    lo, hi = max(r[0] for r in ranges), min(r[1] for r in ranges)
    findings: list[dict[str, Any]] = []
    overlap: list[int] | None = [lo, hi]
    if lo > hi:
        overlap = None
        lo_s, hi_s = -math.inf, math.inf
        findings.append(
            _finding(
                "info",
                "No overlapping steps: each job's whole steady range is compared",
                [],
                [],
                [
                    {
                        "query": "",
                        "labels": {},
                        "value": f"{r[0]}-{r[1]}",
                        "interpretation": f"{js[i].label} steps",
                    }
                    for i, r in enumerate(ranges)
                ],
            )
        )
    else:
        span = hi - lo
        warm = _WARMUP_STEPS if span >= 5 * _WARMUP_STEPS else max(1, span // 5)
        lo_s, hi_s = lo + warm, hi
    for j in js:
        a = j.time_of(lo_s) if lo_s != -math.inf else j.step_t[0]
        b = j.time_of(hi_s) if hi_s != math.inf else j.step_t[-1]
        j.window = (a if a is not None else j.time_range[0], b if b is not None else j.time_range[1])
        if j.window[1] <= j.window[0]:
            j.window = j.time_range

    for j in js:
        # Seeds: cross-check each TSDB against its log, or risk comparing another job's database.
        log_last = ((j.triage or {}).get("job") or {}).get("last_step")
        if log_last is not None and j.step_v:
            tsdb_last = int(max(j.step_v))
            if abs(tsdb_last - int(log_last)) > max(10, 0.05 * int(log_last)):
                findings.append(
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
    diff = config_diff([j.config for j in js])
    rows_list, skipped = _cluster_rows(js, lo_s, hi_s, concurrency)
    rows = {r.metric.name: r for r in rows_list}
    # Every job against the baseline; the diagnosis is the most confident difference found, the metric
    # table's deltas and causes are those of the last job.
    verdicts = {i: _verdict(js, base, i, rows, diff, concurrency) for i in others}
    flagged = [i for i in others if verdicts[i].klass != "healthy"]
    other = max(flagged, key=lambda i: verdicts[i].confidence) if flagged else last
    verdict = verdicts[other]
    onset = None
    if verdict.differentiator in rows:
        row = rows[verdict.differentiator]
        onset = _onset(js[other], row, row.values[base], row.values[other])

    metrics = [
        {
            "name": r.metric.name,
            "values": [round(v, 4) for v in r.values],
            "delta_pct": _delta_pct(r, base, last),
            "likely_cause": _likely_cause(r, base, last, verdicts[last], diff, rows),
        }
        for r in rows_list
    ]
    if verdict.klass != "healthy":
        findings.insert(
            0,
            _finding(
                "warning",
                verdict.summary.split(";")[0],
                verdict.hosts,
                verdict.gpus,
                verdict.evidence,
                verdict.klass,
                onset,
            ),
        )
    elif verdict.evidence:
        findings.insert(0, _finding("info", verdict.summary, verdict.hosts, verdict.gpus, verdict.evidence))
    if diff:
        findings.append(
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
    for r in rows_list:
        if r.metric.name != verdict.differentiator and _significant(r, base, other):
            findings.append(
                _finding(
                    "info",
                    f"{r.metric.name.replace('_', ' ')}: {_delta_pct(r, base, other):+.1f} % "
                    f"in {js[other].label} vs {js[base].label}",
                    [],
                    [],
                    [_evidence(r, js, base, other, _likely_cause(r, base, other, verdict, diff, rows))],
                    verdict.klass,
                )
            )
    if skipped:
        findings.append(
            _finding("info", f"Not compared (signal missing in a job): {', '.join(skipped)}", [], [], [])
        )

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
