"""Outside generator A: job directories (log + TSDB + truth) for seven incident classes (#10).

Usage: .venv/bin/python -m bench.outside.gen_a --seed 7 [--count 35] [--out data/outside/gen_a]
       [--classes healthy,node-death] [--jobs 2]

Writes `<out>/seed-<N>/<job>/` with `job.log`, `prometheus/` (promtool blocks from OpenMetrics) and
`truth.json` ({class, family, culprits, onset, scrape_s, story}). The same seed gives the same corpus.
Classes: healthy, collective-hang (mid-run or before step 0, with or without one odd host),
network-hang, node-death (silent, Xid 79 then silent, climbing ECC then silent, GPUs at 0 W; Slurm node
failure or heartbeat ending), heartbeat-false-positive, rdma-degradation (1-3 hosts or a leaf fault on
several), monitoring-ghost-data. Exporters: dcgm-exporter and node_exporter as deployed (see _a_plan).
This generator shares no code with playbooks/ (it was written without reading it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from bench.outside._a_log import write_log
from bench.outside._a_node import add_node_exporter, add_trainer
from bench.outside._a_plan import Plan
from bench.outside._a_series import add_dcgm
from bench.outside._a_stories import PLANNERS, base_plan
from bench.outside._om import Store, write_tsdb

# class -> number of variants its planner knows
VARIANTS = {
    "healthy": 2,
    "collective-hang": 4,
    "network-hang": 2,
    "node-death": 4,
    "heartbeat-false-positive": 2,
    "rdma-degradation": 2,
    "monitoring-ghost-data": 1,
}
# jobs per class in a default corpus of 35: healthy first, the rest by how many variants they have
SHARE = {
    "healthy": 7,
    "collective-hang": 6,
    "network-hang": 4,
    "node-death": 6,
    "heartbeat-false-positive": 4,
    "rdma-degradation": 5,
    "monitoring-ghost-data": 3,
}


def job_list(count: int, classes: list[str]) -> list[tuple[str, int]]:
    """Return (class, variant) for `count` jobs, cycling through the variants of each class."""
    weights = np.array([SHARE[c] for c in classes], float)
    quota = np.floor(weights / weights.sum() * count).astype(int)
    for i in np.argsort(-weights)[: count - int(quota.sum())]:
        quota[i] += 1
    return [(c, v % VARIANTS[c]) for c, q in zip(classes, quota, strict=True) for v in range(int(q))]


def make_plan(seed: int, index: int, cls: str, variant: int) -> Plan:
    """Plan job `index` of the seed's corpus."""
    rng = np.random.default_rng([seed, index, 0xA])
    name = f"{index:02d}-{cls}-v{variant}"
    plan = base_plan(rng, seed, name, cls)
    PLANNERS[cls](plan, rng, variant)
    return plan


def build_job(seed: int, index: int, cls: str, variant: int, out: Path) -> dict[str, object]:
    """Write one job directory; return its truth."""
    return write_job(make_plan(seed, index, cls, variant), index, out)


def write_job(plan: Plan, index: int, out: Path) -> dict[str, object]:
    """Write the job directory of a plan under `out`; return its truth."""
    seed = plan.seed
    rng = np.random.default_rng([seed, index, 0xB])
    job_dir = out / plan.name
    if job_dir.exists():
        shutil.rmtree(job_dir)
    job_dir.mkdir(parents=True)
    store = Store()
    add_dcgm(plan, rng, store)
    add_node_exporter(plan, rng, store)
    add_trainer(plan, rng, store)
    write_tsdb(store, job_dir / "prometheus")
    job_id = 70000 + seed * 100 + index
    (job_dir / "job.log").write_text(write_log(plan, rng, job_id))
    truth: dict[str, object] = {
        "class": plan.cls,
        "family": plan.family,
        "culprits": plan.culprits,
        "onset": plan.onset,
        "scrape_s": plan.interval,
        "story": plan.story,
        "hosts": len(plan.hosts),
        "gpus": plan.gpus,
        "samples": store.sample_count(),
        "layout": {
            "dcgm_host_label": plan.layout.dcgm_host_label,
            "dcgm_job": plan.layout.dcgm_job,
            "node_by_ip": plan.layout.node_by_ip,
            "dcgm_collect_s": plan.layout.dcgm_collect_s,
            "ecc_fields": plan.layout.ecc_fields,
            "ne_hw_counters": plan.layout.ne_hw_counters,
            "trainer_gauges": plan.layout.trainer_gauges,
            "first_step": plan.first_step,
        },
    }
    (job_dir / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return truth


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--count", type=int, default=35)
    ap.add_argument("--out", type=Path, default=Path("data/outside/gen_a"))
    ap.add_argument("--classes", default=",".join(SHARE), help="comma-separated subset of the classes")
    ap.add_argument("--jobs", type=int, default=2, help="jobs built at once")
    args = ap.parse_args()
    classes = [c.strip() for c in args.classes.split(",") if c.strip()]
    unknown = sorted(set(classes) - set(SHARE))
    if unknown:
        ap.error(f"unknown classes: {', '.join(unknown)}")
    out = args.out / f"seed-{args.seed}"
    todo = job_list(args.count, classes)
    t0 = time.monotonic()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futs = [pool.submit(build_job, args.seed, i, c, v, out) for i, (c, v) in enumerate(todo)]
        for (c, v), fut in zip(todo, futs, strict=True):
            truth = fut.result()
            print(
                f"{c:26s} v{v} {truth['hosts']:>2}x{truth['gpus']} @{truth['scrape_s']:>4.0f}s "
                f"{truth['samples']:>9,} samples  {truth['story']}"
            )
    print(f"{len(todo)} jobs in {out} in {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
