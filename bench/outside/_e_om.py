"""Corpus E: targets' fates (death, gaps, restarts, frozen exporters, duplicate jobs, renamed pods) and the
OpenMetrics file promtool turns into a TSDB (#10).
"""

from __future__ import annotations

import random
import subprocess
from collections import defaultdict
from pathlib import Path

import numpy as np

from bench.outside._e_fleet import Fleet
from bench.outside._e_node import REAL_NAN, node_targets, trainer_target
from bench.outside._e_plan import Case
from bench.outside._e_series import Target, _pod, dcgm_targets
from bench.outside._e_time import Timeline


def _story_effects(
    case: Case, tl: Timeline, grid: np.ndarray, dcgm: list, node: list, rng: random.Random
) -> None:
    ev = tl.ev
    if "death" in ev:
        h = int(ev["dead_host"])
        for tgt in (dcgm[h], node[h]):
            tgt.alive[grid >= ev["death"]] = False
    if "freeze" in ev:
        h = int(ev["freeze_host"])
        tgt = dcgm[h] if case.variant == "dcgm" else node[h]
        tgt.freeze = int(np.searchsorted(grid, ev["freeze"]))
    if "driver" in ev:
        h = int(ev["drv_host"])
        after = grid >= ev["driver"]
        flaky = after & (np.array([rng.random() for _ in grid]) < 0.35)
        dcgm[h].alive[flaky] = False
        dcgm[h].slow_scrape = np.where(after, [rng.uniform(6.5, 9.9) for _ in grid], np.nan)


def _quirks(case: Case, tl: Timeline, grid: np.ndarray, dcgm: list, node: list, rng: random.Random) -> list:
    extra: list[Target] = []
    bad = {h for h, _ in tl.culprits} | set(tl.accused)
    calm = [i for i, h in enumerate(case.hosts) if h not in bad and i > 0]
    if not calm:
        return extra
    if "target_gap" in case.quirks:
        h = rng.choice(calm)
        lo = rng.uniform(tl.train_start, tl.t1 - 600)
        gap = (grid >= lo) & (grid < lo + rng.uniform(120, 420))
        for tgt in (dcgm[h], node[h]):
            tgt.alive[gap] = False
    if "exporter_restart" in case.quirks:
        h = rng.choice(calm)
        at = rng.uniform(tl.train_start, tl.t1 - 300)
        i = int(np.searchsorted(grid, at))
        dcgm[h].alive[i : i + 2] = False
        node[h].alive[i : i + 1] = False
        for name, _labels, v in node[h].series:  # the textfile script's counters restart from zero
            if name.startswith("node_rdma_hw_"):
                v[i:] -= v[i] - rng.uniform(0, 3)
        j = int(np.searchsorted(grid, rng.uniform(tl.train_start, tl.t1 - 120)))
        for name, _labels, v in node[
            rng.choice(calm)
        ].series:  # the fabric manager clears a host's port counters
            if name.startswith("node_infiniband_") and name.endswith("_total"):
                v[j:] -= v[j] - rng.uniform(0, 1e3) * (name.endswith("bytes_total"))
    if "dup_job" in case.quirks:
        for tgt in node:
            tgt.dup_job = "node-exporter-static" if tgt.job == "node-exporter" else "node-exporter"
    if "stale_series" in case.quirks:
        h = rng.choice(calm)
        at = rng.uniform(tl.train_start, tl.t1 - 400)
        old = dcgm[h]
        new = Target(
            job=old.job,
            instance=old.instance,
            host=h,
            offset=rng.uniform(0, case.scrape_s * 0.9),
            alive=old.alive & (grid >= at + 40),
            configured=grid >= at + 40,
            labels=dict(old.labels),
            series=old.series,
        )
        if "pod" in new.labels:
            new.labels["pod"] = f"nvidia-dcgm-exporter-{_pod(case, h, 1)}"
            new.instance = f"10.{200 + case.index % 50}.{h // 200}.{11 + h % 200}:9400"  # the new pod's IP
        else:
            new.instance = new.instance.replace(":9400", ":9401")
        old.alive = old.alive & (grid < at)
        old.configured = grid < at
        extra.append(new)
    return extra


def all_targets(case: Case, tl: Timeline, fl: Fleet) -> list[Target]:
    """Every scrape target of the job's Prometheus, with its story and quirks applied."""
    prng = random.Random(case.seed + 3)
    dcgm = dcgm_targets(case, tl, fl, prng)
    node = node_targets(case, fl, prng)
    _story_effects(case, tl, fl.grid, dcgm, node, prng)
    extra = _quirks(case, tl, fl.grid, dcgm, node, prng)
    out = dcgm + node + extra
    if case.trainer_gauges:
        trainer = trainer_target(case, tl, fl)
        trainer.alive &= node[0].alive  # it lives on the rank-0 node
        out.append(trainer)
    return out


def _fmt(v: float) -> str:
    if v == REAL_NAN:
        return "NaN"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


def _emit(families: dict, name: str, labels: dict[str, str], times: np.ndarray, vals: np.ndarray) -> None:
    body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    ok = ~np.isnan(vals)
    key = f"{name}{{{body}}}"
    families[name].append(
        "".join(f"{key} {_fmt(v)} {t:.3f}\n" for t, v in zip(times[ok], vals[ok], strict=True))
    )


def _meta(
    tgt: Target, base: dict[str, str], times: np.ndarray, rng: np.random.Generator, families: dict
) -> None:
    up = np.where(tgt.configured, tgt.alive.astype(float), np.nan)
    _emit(families, "up", base, times, up)
    dur = 0.02 + np.abs(rng.normal(0, 0.01, times.size)) + 0.0002 * len(tgt.series)
    if tgt.slow_scrape is not None:
        dur = np.where(np.isnan(tgt.slow_scrape), dur, tgt.slow_scrape)
    dur = np.where(tgt.alive & tgt.configured, dur.round(6), np.nan)
    if tgt.freeze is not None:
        dur[tgt.freeze :] = np.where(np.isnan(dur[tgt.freeze :]), np.nan, 0.001843)
    _emit(families, "scrape_duration_seconds", base, times, dur)
    n = np.where(tgt.alive & tgt.configured, float(len(tgt.series)), np.nan)
    _emit(families, "scrape_samples_scraped", base, times, n)


def write_openmetrics(path: Path, targets: list[Target], grid: np.ndarray, seed: int) -> int:
    """All targets' samples as one OpenMetrics file; returns the sample count."""
    families: dict[str, list[str]] = defaultdict(list)
    rng = np.random.default_rng(seed)
    count = 0
    for tgt in targets:
        jobs = [tgt.job] + ([tgt.dup_job] if tgt.dup_job else [])
        for k, job in enumerate(jobs):
            times = grid + tgt.offset + k * 1.7
            base = {"job": job, "instance": tgt.instance, **tgt.labels}
            _meta(tgt, base, times, rng, families)
            live = tgt.alive & tgt.configured
            for name, labels, vals in tgt.series:
                v = np.where(live, vals, np.nan)
                if tgt.freeze is not None:
                    v[tgt.freeze :] = np.where(live[tgt.freeze :], vals[tgt.freeze], np.nan)
                count += int((~np.isnan(v)).sum())
                _emit(families, name, {**base, **labels}, times, v)
    with path.open("w") as fh:
        for name in sorted(families):
            if name.endswith("_total"):
                fh.write(f"# TYPE {name[:-6]} counter\n")
            else:
                fh.write(f"# TYPE {name} gauge\n")
            fh.writelines(families[name])
        fh.write("# EOF\n")
    return count


def promtool(om: Path, tsdb: Path) -> None:
    """The TSDB from the OpenMetrics file (blocks only: a read-only Prometheus opens it)."""
    tsdb.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(tsdb)],
        check=True,
        capture_output=True,
        text=True,
    )
