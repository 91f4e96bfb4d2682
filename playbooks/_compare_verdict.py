"""The comparison's verdict for one pair of jobs (baseline, other): which contention source differs (a
uniform CPU load, RDMA retransmits on some hosts, one hot and throttled GPU), else healthy; the likely
cause of each metric's difference and the differentiator's onset. Used by `playbooks.compare`.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._compare_figures import (
    LOCAL_SHARE,
    NOISE_K,
    SCALE_KEYS,
    UNIFORM_SHARE,
    Job,
    Row,
    delta_pct,
    extreme_gpus,
    per_host,
    quantile,
    robust_sd,
    significant,
)
from .prometheus import PrometheusError, choose_step
from .shift import Shift, distribution_shift


@dataclass
class Verdict:
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
    base: Job, other: Job, row: Row, concurrency: int
) -> tuple[dict[str, float], float, Shift | None]:
    """Return ({host: other's figure minus the baseline's}, the baseline's per-host noise, the shift of the
    whole distribution of host figures with its interval).

    The figure is each host's median over the steady window (its mean for trouble counters). Hosts present
    in both jobs are compared with themselves; the others with the baseline's median host. Same-host
    deltas miss a uniform extra load when each host's own background differs between the runs (another
    allocation, other daemons); the shift of the distribution (Hodges-Lehmann, rank test) does not.
    """
    mid = "mean" if row.metric.stat == "mean" else "0.5"
    b_q = per_host(base, row.signal, ("0.25", mid, "0.75"), concurrency)
    o_mid = per_host(other, row.signal, (mid,), concurrency)[0]
    b_mid = b_q[1]
    if not b_mid or not o_mid:
        return {}, 0.0, None
    level = statistics.median(b_mid.values())
    iqrs = [b_q[2][h] - b_q[0][h] for h in b_mid if h in b_q[0] and h in b_q[2]]
    noise = max(robust_sd(list(b_mid.values())), statistics.median(iqrs) / 1.349 if iqrs else 0.0)
    shift = distribution_shift(list(b_mid.values()), list(o_mid.values()))
    return {h: v - b_mid.get(h, level) for h, v in o_mid.items()}, noise, shift


@dataclass(frozen=True)
class _Pair:
    """One pair judged: the jobs, the baseline's and the other's index, the metric rows and the config diff."""

    jobs: Sequence[Job]
    base: int
    other: int
    rows: Mapping[str, Row]
    diff: Mapping[str, Any]
    concurrency: int

    @property
    def sig(self) -> dict[str, bool]:
        """{metric: whether it differs beyond noise}."""
        return {name: significant(r, self.base, self.other) for name, r in self.rows.items()}

    @property
    def up(self) -> dict[str, bool]:
        """{metric: whether it is significantly higher in the other job}."""
        sig = self.sig
        return {n: sig[n] and r.values[self.other] > r.values[self.base] for n, r in self.rows.items()}


def verdict_of(
    jobs: Sequence[Job],
    base: int,
    other: int,
    rows: Mapping[str, Row],
    diff: Mapping[str, Any],
    concurrency: int,
) -> Verdict:
    """Return the comparison's diagnosis: the contention source that differs, else healthy."""
    pair = _Pair(jobs, base, other, rows, diff, concurrency)
    for judge in (_cpu_verdict, _rdma_verdict, _thermal_verdict):
        found = judge(pair)
        if found is not None:
            return found
    return _healthy_verdict(pair)


def _cpu_verdict(p: _Pair) -> Verdict | None:
    """CPU contention: more runnable processes on (nearly) every host (or on a few: healthy, said so)."""
    jobs, base, other, rows, concurrency = p.jobs, p.base, p.other, p.rows, p.concurrency
    b, o, up = jobs[base], jobs[other], p.up
    scale = [k for k in SCALE_KEYS if k in p.diff]
    if up.get("procs_running"):
        deltas, noise, shift = _host_delta(b, o, rows["procs_running"], concurrency)
        thr = max(NOISE_K * noise, rows["procs_running"].metric.abs_floor)
        raised = sorted(h for h, d in deltas.items() if d > thr)
        share = len(raised) / len(deltas) if deltas else 0.0
        med = statistics.median(deltas.values()) if deltas else 0.0
        # the whole distribution moved: the ranks separate (one-sided, 5 %) and the shift's lower bound at
        # that level is at least the floor (a count: at least one more runnable process a host)
        moved = shift is not None and shift.p < 0.05 and shift.low >= rows["procs_running"].metric.abs_floor
        text = (
            f"+{med:.1f} runnable processes per host (median host), raised on {len(raised)} of "
            f"{len(deltas)} hosts"
        )
        if shift is not None:
            text += (
                f"; the hosts' distribution shifted by {shift.estimate:+.1f} ({shift.low:+.1f} to "
                f"{shift.high:+.1f}, rank test p = {shift.p:.2g})"
            )
        ev = [row_evidence(rows["procs_running"], jobs, base, other, text)]
        if (share >= UNIFORM_SHARE or moved) and not scale:
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
                f" ({delta_pct(rows['step_time'], base, other):+.1f} % step time)"
                if up.get("step_time")
                else ""
            )
            return Verdict(
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
        if 0 < share < LOCAL_SHARE:
            return Verdict(
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
    return None


def _rdma_verdict(p: _Pair) -> Verdict | None:
    """RDMA retransmits in one run and not the other: degraded links slow every collective."""
    jobs, base, other, rows, concurrency = p.jobs, p.base, p.other, p.rows, p.concurrency
    b, o, up = jobs[base], jobs[other], p.up
    if up.get("rdma_retransmits"):
        row = rows["rdma_retransmits"]
        deltas, noise, _ = _host_delta(b, o, row, concurrency)
        thr = max(NOISE_K * noise, row.metric.abs_floor)
        bad = sorted((h for h, d in deltas.items() if d > thr), key=lambda h: -deltas[h])
        if bad and len(bad) < max(2, LOCAL_SHARE * len(deltas)):
            st = (
                f" and steps {delta_pct(rows['step_time'], base, other):+.1f} % slower"
                if up.get("step_time")
                else ""
            )
            return Verdict(
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
                [row_evidence(row, jobs, base, other, f"RDMA retransmit rate up on {len(bad)} host(s)")],
                bad,
                [],
            )
    return None


def _thermal_verdict(p: _Pair) -> Verdict | None:
    """One GPU hot and throttled in one run: a thermal straggler. Judged against each job's own GPUs, as
    GPU models and cooling differ between runs: how far the hottest GPU is above the median one and how
    far the slowest clock is below the median clock, and the same GPU among the three hottest and the three
    slowest (a hot GPU that keeps its clock beside a cool one that clocks low is no straggler)."""
    jobs, base, other, rows, concurrency = p.jobs, p.base, p.other, p.rows, p.concurrency
    b, o = jobs[base], jobs[other]
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
            hot = extreme_gpus(o, rows["gpu_temp_max"].signal, True, concurrency)
            slow = {(h, g) for h, g, _ in extreme_gpus(o, rows["gpu_clock_min"].signal, False, concurrency)}
            both = [x for x in hot if (x[0], x[1]) in slow]
            if hot and slow and not both:
                # the hottest GPUs are not the slowest: a cooler or another model's GPU clocks low beside a
                # warm one that keeps its clock, two spreads and no GPU both hot and throttled
                return None
            culprits: list[dict[str, str | None]] = [{"host": h, "gpu": g} for h, g, _ in (both or hot)[:1]]
            return Verdict(
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
                    row_evidence(rows["gpu_temp_max"], jobs, base, other, "hottest GPU"),
                    row_evidence(rows["gpu_clock_min"], jobs, base, other, "slowest GPU clock"),
                ],
                [c["host"] for c in culprits if c["host"]],
                [c["gpu"] for c in culprits if c["gpu"]],
            )
    return None


def _healthy_verdict(p: _Pair) -> Verdict:
    """Nothing differs beyond noise, or only what the config explains."""
    base, other, rows, diff, sig = p.base, p.other, p.rows, p.diff, p.sig
    b, o = p.jobs[base], p.jobs[other]
    moved = [n for n in ("step_time", "tokens_per_sec") if sig.get(n)]
    if moved and diff:
        why = f"the configs differ ({', '.join(sorted(diff)[:6])})"
        return Verdict(
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
        return Verdict(
            "healthy",
            "none",
            0.5,
            [],
            None,
            f"Step time differs between {b.label} and {o.label} "
            f"({delta_pct(rows['step_time'], base, other):+.1f} %) although the configs match, but no "
            "contention source (CPU, network, storage, GPU thermal) differs: look at the GPU model, "
            "the software image and the data pipeline.",
            [],
            [],
            [],
            [],
        )
    return Verdict(
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


def row_evidence(row: Row, jobs: Sequence[Job], base: int, other: int, meaning: str) -> dict[str, Any]:
    return {
        "query": row.exprs[other],
        "labels": {"job": jobs[other].label, "baseline": jobs[base].label},
        "value": round(row.values[other], 4),
        "interpretation": f"{meaning} (baseline {row.values[base]:.4g}, {delta_pct(row, base, other):+.1f} %)",
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


def likely_cause(
    row: Row, base: int, other: int, verdict: Verdict, diff: Mapping[str, Any], rows: Mapping[str, Row]
) -> str:
    """Return a plain-English likely cause of one metric's difference (or "within noise")."""
    name = row.metric.name
    if not significant(row, base, other):
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
    if overall is not None and overall in rows:
        # The extreme moved as much as the typical GPU: the whole fleet differs, not one straggler.
        ref = rows[overall]
        gap_b, gap_o = row.values[base] - ref.values[base], row.values[other] - ref.values[other]
        if abs(gap_o - gap_b) <= max(row.metric.abs_floor, row.metric.rel_floor * abs(ref.values[base])):
            return f"every GPU moved with it ({overall.replace('_', ' ')}): GPU model, cooling or load, not one straggler"
    scale = [k for k in SCALE_KEYS if k in diff]
    if scale:
        return f"scale: {', '.join(scale)} differ between the jobs"
    if diff and name in ("step_time", "tokens_per_sec", "gpu_power", "gpu_util", "mem_used"):
        return f"config: {', '.join(sorted(diff)[:4])} differ between the jobs"
    up = row.values[other] > row.values[base]
    return (_CAUSES_UP if up else _CAUSES_DOWN).get(name, "higher" if up else "lower")


def onset_of(job: Job, row: Row, base_value: float, other_value: float) -> float | None:
    """Return when the differentiating metric of `job` first crossed half-way from the baseline level, no
    earlier than the job began to train.

    The comparison judges training: a difference already there while the processes set up (a restored run's
    threads come up with them, before the restore) became the training's difference when training began.
    """
    t0, t1 = job.time_range
    t0 = max(t0, training_start(job) or t0)
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


def training_start(job: Job) -> float | None:
    """Return when `job`'s GPUs began to train: one grid step before the hosts' upper-quartile power first
    reached its training level (85 % of its 90th percentile over the data, as the diagnosis places undated
    steps); None without a power signal.

    Every host starts at once, but each exporter sees it at its own next scrape: the earliest hosts date the
    start (the pack's median lags by half a scrape interval), the upper quartile keeps one host's spike out.

    Not the log's first step: a log without step stamps places it after the restore's line, early by any
    setup after it, and a log that prints every Nth step prints it late.
    """
    if not job.profile.has("gpu_power"):
        return None
    t0, t1 = job.time_range
    grid = choose_step(t0, t1, max_points=2000)
    try:
        series = job.client.query_range(f"quantile(0.75, {job.profile.expr('gpu_power')})", t0, t1, grid)
    except PrometheusError:
        return None
    pts = (
        [(t, v) for t, v in zip(series[0].timestamps, series[0].values, strict=True) if v == v]
        if series
        else []
    )
    if len(pts) < 5:
        return None
    level = quantile([v for _, v in pts], 0.9)
    first = next((t for t, v in pts if v >= 0.85 * level), None)
    return None if level <= 0 or first is None else first - grid
