"""Outside corpus D (#10, written blind): real deployments the other corpora missed.

    python -m bench.outside.gen_d --seed N --out DIR [--jobs 2] [--only CLASS,...] [--small]

About 30 cases a seed over the contract's 13 classes; each a job directory (`job.log`, `prometheus/` built by
`promtool tsdb create-blocks-from openmetrics`, `truth.json`), restore-leak pairs as `a/` + `b/` with a pair-level
truth. Exporters as clusters deploy them (`_d_fleet.py`): dcgm-exporter 3.1-4.2 with `Hostname`, `hostname` or
no host label, with or without `DCGM_FI_DEV_GPU_UTIL`, 30 s collection; node_exporter by FQDN:9100 or IP:9100
with `node_uname_info{nodename}` FQDN or short, InfiniBand counters (retransmits and ACK timeouts from 1.11);
kube-prometheus-stack targets (pod IP:9400, pod/namespace/container/service/endpoint, `node`, exported_*);
AWS, ParallelCluster, GCP and on-prem host names; trainer gauges polled slowly or absent. Fleet events that
are nobody's fault (`_d_herrings.py`), logs as people have them (`_d_log.py`, `_d_events.py`).
Deterministic per seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import random
import shutil
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench.outside._d_fleet import MODELS, make_hosts, make_layout, stable
from bench.outside._d_herrings import apply_herrings
from bench.outside._d_log import write_log
from bench.outside._d_node import node_series, trainer_series
from bench.outside._d_om import build_tsdb, write_openmetrics
from bench.outside._d_sim import Sim, dcgm_meta, gpu_series
from bench.outside._d_stories import STORIES
from bench.outside._d_timeline import Plan, simulate

MIX = {
    "healthy": 7,
    "collective-hang": 3,
    "network-hang": 2,
    "node-death": 2,
    "heartbeat-false-positive": 2,
    "host-oom": 2,
    "thermal-straggler": 2,
    "rdma-degradation": 2,
    "restore-resource-leak": 2,
    "monitoring-ghost-data": 2,
    "gpu-driver-fault": 2,
    "gpu-hardware-fault": 2,
    "training-instability": 2,
}
RETX = {"network-hang", "rdma-degradation"}


def make_plan(seed: int, index: int, cls: str, small: bool) -> Plan:
    """Draw a case: fleet, deployment, sizes, timing, log style."""
    rng = random.Random(stable("gen_d", seed, index, cls))
    hosts_n = rng.choice([4, 6, 8]) if small else rng.choice([8, 8, 12, 16, 16, 24, 32, 48, 64])
    dur = rng.uniform(1200, 1800) if small else rng.uniform(3600, 7200)
    scrape = next(
        s for s in (10, 15, 20, 30, 60) if hosts_n * dur / s <= 12000 and s >= rng.choice([10, 15, 15, 30])
    )
    hosts = make_hosts(rng, hosts_n, rng.choice([2, 4, 8]))
    layout = make_layout(rng, hosts, cls in RETX)
    style = "k8s" if layout.style == "k8s" else rng.choice(["glog", "torchrun"])
    family = "cpu-contention" if cls == "restore-resource-leak" else STORIES[cls][0]
    plan = Plan(
        name=f"d{seed:02d}-{index:02d}-{cls}",
        cls=cls,
        family=family,
        rng=rng,
        hosts=hosts,
        gpus=8,
        model=rng.choice(MODELS),
        layout=layout,
        scrape=scrape,
        dur=dur,
        t0=1795000000 + seed * 86400 * 3 + index * 9000 + rng.randrange(0, 3600),
        setup_s=rng.uniform(150, 480),
        step_s=rng.uniform(2.0, 11.0),
        ckpt_period=rng.choice([100, 200, 250, 500]),
        save_s=rng.uniform(25, 90),
        eval_period=rng.choice([0, 0, 150, 300]),
        eval_s=rng.uniform(60, 150),
        log_style=style,
    )
    plan.extra["tz_hours"] = rng.choice([0, 0, 1, -5, 8, 2])
    submitted = datetime.datetime.fromtimestamp(plan.t0 - rng.randrange(60, 900), tz=datetime.UTC)
    k8s_id = f"k8s-{submitted:%Y%m%d-%H%M%S}-{rng.randrange(16**4):04x}"  # the id carries the submission time
    plan.extra["job_id"] = k8s_id if style == "k8s" else str(rng.randint(40000, 990000))
    plan.extra["no_trainer"] = rng.random() < 0.12
    if rng.random() < 0.2 and cls not in ("host-oom",):
        plan.restart_at = dur * rng.uniform(0.12, 0.3)
        plan.story.append(
            "herring: torchrun elastic restart of all ranks, steps go back to the last checkpoint"
        )
    if cls == "collective-hang" and index % 3 == 0:
        plan.extra["pre_step"] = True
    return plan


def _log_traits(plan: Plan) -> list[str]:
    """The deployment facts of the log and the trainer that a reader of a wrong case needs."""
    out = [
        f"log {plan.log_style} (UTC{plan.extra['tz_hours']:+d})",
        f"step {plan.step_s:.1f} s, scrape {plan.scrape} s",
    ]
    if plan.extra["no_trainer"]:
        out.append("no trainer gauges: steps only in the log")
    if plan.eval_period:
        out.append(f"evaluation every {plan.eval_period} steps ({plan.eval_s:.0f} s, GPUs part idle)")
    return out


def build_case(plan: Plan, out: Path, apply_story: Callable[[Sim], list] | None = None) -> dict:
    """Walk the plan into a job directory; returns its truth."""
    _, prep, apply = STORIES[plan.cls] if plan.cls in STORIES else STORIES["healthy"]
    prep(plan)
    plan.story += _log_traits(plan)
    tl = simulate(plan)
    sim = Sim(plan, tl)
    events = (apply_story or apply)(sim)
    events += apply_herrings(sim)
    out.mkdir(parents=True, exist_ok=True)
    om = out / "data.om"
    series = (
        s for gen in (gpu_series(sim), dcgm_meta(sim), node_series(sim), trainer_series(sim)) for s in gen
    )
    write_openmetrics(series, om)
    build_tsdb(om, out / "prometheus")
    if plan.restart_at is not None and tl.restart is None:
        plan.story.append("(the elastic restart fell after the stop)")
    write_log(plan, tl, events, out / "job.log")
    return {
        "class": plan.cls,
        "family": plan.family,
        "culprits": plan.culprits,
        "onset": None if plan.onset is None else round(plan.t0 + plan.onset, 3),
        "scrape_s": plan.scrape,
        "story": "; ".join(
            plan.story
            + plan.layout.traits
            + [f"{len(plan.hosts)} hosts, {plan.model.name}, log {plan.log_style}"]
        ),
    }


def build_pair(plan: Plan, out: Path) -> dict:
    """Restore leak: a fresh start (a/) and the restored run (b/) with ~17 more runnable tasks a host."""
    rng = plan.rng
    leak = rng.uniform(14, 20)
    plan.restart_at = None
    fresh_steps = len(simulate(plan).step_n)  # the restore point lies inside the fresh run: steps overlap
    k = max(1, int(fresh_steps * rng.uniform(0.3, 0.6)) // plan.ckpt_period)
    restored = dataclasses.replace(
        plan,
        name=plan.name + "-b",
        rng=random.Random(stable(plan.name, "b")),
        step_s=plan.step_s * 1.01,
        first_step=plan.ckpt_period * k + 1,
        t0=plan.t0 + int(plan.dur) + rng.randrange(600, 7200),
        story=[],
        extra=dict(plan.extra),
    )
    plan.cls = restored.cls = "healthy"
    # one config for both runs: the fresh run was cancelled (preempted) and restored from its checkpoint
    plan.planned_steps = restored.planned_steps = simulate(restored).step_n[-1] + 1
    plan.status, plan.exit_code = "cancelled", 143
    truth_a = build_case(plan, out / "a", lambda sim: [(sim.tl.job_end - 1, None, "scancel", {})])

    def apply_leak(sim: Sim) -> list:
        sim.procs_add[:, :] = leak + sim.np.normal(0, 1.0, (sim.H, 1))
        restored.story.append(f"restored from step {restored.first_step - 1}")
        return []

    truth_b = build_case(restored, out / "b", apply_leak)
    return {
        "class": "restore-resource-leak",
        "family": "cpu-contention",
        "culprits": [],
        "onset": None,
        "scrape_s": plan.scrape,
        "story": f"restored run carries +{leak:.0f} runnable tasks on every host; per-host background differs "
        f"between runs; a: {truth_a['story']} | b: {truth_b['story']}",
    }


def one(args: tuple[int, int, str, str, bool]) -> str:
    seed, index, cls, root, small = args
    out = Path(root) / f"{index:02d}-{cls}"
    if out.exists():
        shutil.rmtree(out)
    plan = make_plan(seed, index, cls, small)
    truth = build_pair(plan, out) if cls == "restore-resource-leak" else build_case(plan, out)
    (out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return f"{out.name}: {truth['story'][:150]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated classes")
    ap.add_argument("--small", action="store_true", help="4-8 hosts, 20-30 min: for tests")
    args = ap.parse_args()
    only = {c for c in args.only.split(",") if c}
    todo = []
    for cls, n in MIX.items():
        todo += [cls] * n
    random.Random(stable("order", args.seed)).shuffle(todo)
    work = [
        (args.seed, i, cls, str(args.out), args.small)
        for i, cls in enumerate(todo)
        if not only or cls in only
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for line in pool.map(one, work):
            print(line, flush=True)


if __name__ == "__main__":
    main()
