"""The comparison's jobs and figures: each job's source facts and step gauge, and one cluster-level figure
per job and contention metric over the steady steps (the aggregation across hosts and GPUs done by
Prometheus), plus the per-host and per-GPU figures a verdict asks for. Used by `playbooks.compare`.
"""

from __future__ import annotations

import bisect
import functools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .diagnose import DiagnosisError, discover_source
from .errors import PlaybooksError
from .hostnames import HostNames, host_names
from .profiles import PROFILES, Profile
from .prometheus import PrometheusClient, PrometheusError, Series, choose_step

# Keys that set the job's scale (node count, parallelism): with them different, per-host figures differ by design.
SCALE_KEYS = ("NNODES", "SLURM_JOB_NUM_NODES", "ici_fsdp_parallelism", "dcn_data_parallelism")

WARMUP_STEPS = 10  # seeds: steady state begins 5-10 steps after the later job's first step
_CKPT_AFTER = 2  # a checkpoint step and the 1-2 steps after it are not steady state
NOISE_K = 3.0  # a difference smaller than 3 robust standard deviations is noise
UNIFORM_SHARE = 0.9  # a "uniform" delta is present on at least 90 % of the hosts
LOCAL_SHARE = 0.5  # a "localised" one on fewer than half of them
_MAX_POINTS = 720  # per range query of a cluster figure


class CompareError(PlaybooksError):
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
class Metric:
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
METRICS: tuple[Metric, ...] = (
    Metric("step_time", ("step_time",), "max", rel_floor=0.02),
    Metric("tokens_per_sec", ("tokens_per_sec",), "max", rel_floor=0.02),
    Metric("gpu_power", ("gpu_power",), "median", rel_floor=0.03),
    Metric("gpu_temp", ("gpu_temp",), "median", abs_floor=2.0),
    Metric("gpu_temp_max", ("gpu_temp",), "max", abs_floor=3.0, stat="p90"),
    Metric("gpu_clock", ("gpu_clock",), "median", rel_floor=0.02),
    Metric("gpu_clock_min", ("gpu_clock",), "min", rel_floor=0.03, stat="p10"),
    Metric("gpu_util", ("gpu_util",), "median", abs_floor=2.0),
    Metric("procs_running", ("procs_running",), "median", abs_floor=1.0, pct_floor=1.0),
    Metric("procs_blocked", ("procs_blocked",), "median", abs_floor=1.0, pct_floor=1.0),
    Metric("mem_used", ("mem_used",), "median", rel_floor=0.05),
    Metric(
        "rdma_retransmits",
        ("rdma_retransmits", "rdma_transmit_wait"),
        "sum",
        abs_floor=1.0,
        pct_floor=1.0,
        stat="mean",
    ),
    Metric("tcp_retransmits", ("tcp_retransmits",), "sum", abs_floor=1.0, pct_floor=1.0, stat="mean"),
    Metric("io_pressure", ("io_pressure",), "median", abs_floor=2.0, pct_floor=1.0),
)


@dataclass
class Job:
    """What the comparison knows about one job while it runs.

    `aligned` is False when no step of the job is known within its TSDB's range: its whole data is compared.
    `hosts` are its hosts under their one name (the diagnosis's: `names`, from the source's hosts and the
    log's node list); every per-host figure is keyed by it, so a node node_exporter knows by its FQDN or
    address is one host, named as the GPU exporter and the scheduler name it.
    """

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
    names: HostNames = field(default_factory=HostNames)
    aligned: bool = True

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
        """Return whether `t` lies in a steady-state step of [lo, hi] (no checkpoint step nor the 2 after it);
        always for a job whose steps are not known within its data."""
        if not self.aligned:
            return True
        s = self.step_at(t)
        if s is None or not lo <= s <= hi:
            return False
        p = self.ckpt_period
        return not (p and p > 0 and s >= p and int(s) % p <= _CKPT_AFTER)


# ------------------------------------------------------------------------------------------ discovery


def discover(spec: CompareJob, index: int) -> Job:
    """Return the job's source facts (the diagnosis engine's discovery) and its step gauge samples."""
    client = spec.client
    try:
        src = discover_source(client, profile=spec.profile)
    except DiagnosisError as exc:
        raise CompareError(f"job #{index + 1} ({client.base_url}): {exc}") from exc
    profile = PROFILES[src.profile]
    t0, t1 = src.time_range or (0.0, 0.0)
    step_series = client.query_range(profile.expr("step"), t0, t1, choose_step(t0, t1, max_points=4000))
    if step_series and step_series[0].timestamps:
        pts = [
            (t, v) for t, v in zip(step_series[0].timestamps, step_series[0].values, strict=True) if v == v
        ]
    else:
        pts = _log_steps(spec.triage)
    if not pts:
        raise CompareError(
            f"job #{index + 1}: no training step gauge ({profile.signal('step').selector}) in its TSDB "
            "and no timed steps in its log"
        )
    names = host_names(src.hosts, [str(n) for n in (spec.triage or {}).get("nodes") or []])
    job = Job(
        index=index,
        client=client,
        triage=spec.triage,
        profile=profile,
        url=client.base_url,
        hosts=sorted({names.name(h) for h in src.hosts}),
        gpus_per_host=src.gpus_per_host,
        time_range=(t0, t1),
        step_t=[p[0] for p in pts],
        step_v=[p[1] for p in pts],
        names=names,
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


def _log_steps(triage: Mapping[str, Any] | None) -> list[tuple[float, float]]:
    """Return the log's step timeline when the TSDB has no step gauge (many trainers export none): the
    first and last timed steps, the steps between placed at the run's mean pace, one point a step."""
    tr = triage or {}
    job, details = tr.get("job") or {}, tr.get("details") or {}
    first, last = job.get("first_step"), job.get("last_step")
    t_first, t_last = details.get("first_step_time"), (tr.get("progress") or {}).get("last_step_time")
    if first is None or last is None or t_first is None or t_last is None or int(last) <= int(first):
        return []
    s0, s1, a, b = int(first), int(last), float(t_first), float(t_last)
    stride = max(1, (s1 - s0) // 4000)
    steps = list(range(s0, s1, stride)) + [s1]
    return [(a + (b - a) * (s - s0) / (s1 - s0), float(s)) for s in steps]


def step_range(job: Job) -> tuple[int, int]:
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


def robust_sd(values: Sequence[float]) -> float:
    if len(values) < 3:
        return 0.0
    med = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - med) for v in values)


def _pick_signal(metric: Metric, jobs: Sequence[Job]) -> str | None:
    for sig in metric.signals:
        if all(j.profile.has(sig) for j in jobs):
            return sig
    return None


@dataclass
class Row:
    """One metric's figures: per-job steady median, robust spread, and the expression used."""

    metric: Metric
    signal: str
    exprs: list[str]
    values: list[float]
    noise: list[float]


def _series_figures(
    job: Job, series: list[Series], lo: float, hi: float, stat: str
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
        value = quantile(kept, int(stat[1:]) / 100.0)
    else:
        value = statistics.median(kept)
    return value, robust_sd(kept)


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _run(job: Job, calls: Sequence[Callable[[], Any]], concurrency: int) -> list[Any]:
    return job.client.run_parallel(calls, max_concurrency=concurrency)


def cluster_rows(
    jobs: Sequence[Job], lo: float, hi: float, concurrency: int
) -> tuple[list[Row], list[str], list[str]]:
    """Return the metric rows over each job's steady window, the metrics a job lacks the signal of, and the
    metrics a job has no sample of in its window."""
    plan: list[tuple[Metric, str]] = []
    skipped: list[str] = []
    empty: list[str] = []
    for m in METRICS:
        sig = _pick_signal(m, jobs)
        if sig is None:
            skipped.append(m.name)
        else:
            plan.append((m, sig))

    def per_job(job: Job) -> list[Any]:
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
        known = [f for f in figures if f is not None]
        if len(known) < len(figures):
            # no series at all: the TSDB lacks the signal; series, but none in the steady steps: no sample there
            nothing = any(isinstance(res[i], list) and not res[i] for res in results)
            (skipped if nothing else empty).append(m.name)
            continue
        rows.append(
            Row(
                m,
                sig,
                [_agg_expr(j.profile, sig, m.agg) for j in jobs],
                [f[0] for f in known],
                [f[1] for f in known],
            )
        )
    return rows, skipped, empty


def significant(row: Row, base: int, other: int) -> bool:
    a, b = row.values[base], row.values[other]
    # Outside the band the baseline's own figure moves in over time (its robust spread).
    noise = NOISE_K * row.noise[base]
    floor = max(row.metric.abs_floor, row.metric.rel_floor * abs(a))
    return abs(b - a) > max(noise, floor)


def metric_signals(name: str) -> tuple[str, ...]:
    """Return the signals a comparison metric row reads ("gpu_temp_max" -> ("gpu_temp",)); () if unknown."""
    return next((m.signals for m in METRICS if m.name == name), ())


def delta_text(metric: Mapping[str, Any]) -> str:
    """Return how a report shows one metric row's change: a percentage, or the absolute change when the
    baseline is below the metric's percentage floor (a rate near zero: "+0.001" says more than "+0.1 %")."""
    floor = next((m.pct_floor for m in METRICS if m.name == metric["name"]), 1e-9)
    values = metric["values"]
    if len(values) >= 2 and abs(values[0]) < floor:
        return f"{values[-1] - values[0]:+.3g} (absolute)"
    return f"{metric['delta_pct']:+.1f} %"


def delta_pct(row: Row, base: int, other: int) -> float:
    a, b = row.values[base], row.values[other]
    return round(100.0 * (b - a) / max(abs(a), row.metric.pct_floor), 2)


def per_host(job: Job, signal: str, stats: Sequence[str], concurrency: int) -> list[dict[str, float]]:
    """Return, per statistic ("mean" or a quantile such as "0.5"), {host: statistic over the steady window}."""
    a, b = job.window or job.time_range
    res = choose_step(a, b, max_points=_MAX_POINTS)
    rng = f"({job.profile.expr(signal)})[{max(int(b - a), int(res))}s:{int(res)}s]"
    exprs = [f"avg_over_time({rng})" if st == "mean" else f"quantile_over_time({st}, {rng})" for st in stats]
    out: list[dict[str, float]] = []
    calls: list[Callable[[], Any]] = [functools.partial(job.client.query, e, b) for e in exprs]
    for got in _run(job, calls, concurrency):
        if isinstance(got, PrometheusError):
            out.append({})
        else:
            out.append({job.names.name(s.labels.get("host", "")): s.value for s in got if s.value == s.value})
    return out


def extreme_gpus(job: Job, signal: str, top: bool, concurrency: int) -> list[tuple[str, str, float]]:
    """Return the 3 GPUs with the highest (top) or lowest median of a GPU signal over the steady window."""
    a, b = job.window or job.time_range
    res = choose_step(a, b, max_points=_MAX_POINTS)
    dur = f"{max(int(b - a), int(res))}s"
    fn = "topk" if top else "bottomk"
    expr = f"{fn}(3, quantile_over_time(0.5, ({job.profile.expr(signal)})[{dur}:{int(res)}s]))"
    got = _run(job, [lambda: job.client.query(expr, b)], concurrency)[0]
    if isinstance(got, PrometheusError):
        return []
    return [
        (job.names.name(s.labels.get("host", "")), s.labels.get("gpu", ""), s.value)
        for s in got
        if s.value == s.value
    ]
