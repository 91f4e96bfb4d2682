"""Corpus C (#10): a third outside corpus of incident jobs, written blind.

Usage: .venv/bin/python -m bench.outside.gen_c --seed N [--out data/outside/gen_c/seed-N] [--jobs 2]
       [--only CLASS,...]

About 40 cases a seed over the 13 classes of the diagnosis contract, each a job directory
(`job.log`, `prometheus/` TSDB built with promtool, `truth.json` as `bench/outside_score.py` reads
it) or a restore pair (`a/` fresh, `b/` restored). What it stresses beyond corpora A and B: AMD
device-metrics-exporter hosts (prefixed or not, package or board power), Kubernetes pod names as
hosts and Kubernetes labels, node_exporter scraped by IP with `node_uname_info`, counter resets when
an exporter restarts, a whole GPU exporter DaemonSet rolling (1-3 missed scrapes), red herrings on
healthy jobs (a host 4-6 C warmer, a slow disk during saves, one correctable-ECC burst, a few RDMA
retransmits, evaluation phases, a loss spike that recovers), scrapes of 5-60 s with jitter, 16-96
hosts x 4-8 GPUs, 1-3 h. Deterministic per seed.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench.outside import _c_herr, _c_scen, _c_sim
from bench.outside._c_lay import build_store
from bench.outside._c_log import write_log
from bench.outside._c_om import write_tsdb
from bench.outside._c_plan import FAMILY, Spec, plan_cases

REPO = Path(__file__).resolve().parents[2]


def _job_id(spec: Spec) -> str:
    if spec.slurm:
        return str(100000 + spec.seed % 800000)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(spec.start))
    return f"k8s-{stamp}-{spec.seed % 0xFFFF:04x}"


def _write_job(w: _c_sim.World, d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    last = w.steps[-1][0] if w.steps else 0
    total = last + 1 if w.log.get("completed") and w.stop_t is None else last + 1 + 500
    (d / "job.log").write_text(write_log(w, _job_id(w.spec), total))
    write_tsdb(build_store(w), d / "prometheus")


def _truth(cls: str, w: _c_sim.World | None, story: str) -> dict:
    culprits = [] if w is None else [{"host": h, "gpu": g} for h, g in w.culprits]
    return {
        "class": cls,
        "family": FAMILY[cls],
        "culprits": culprits,
        "onset": None if w is None else w.onset,
        "scrape_s": (w.spec.interval if w else 15.0),
        "story": story,
    }


def build_single(spec: Spec, d: Path) -> dict:
    w = _c_sim.new_world(spec)
    _c_herr.before(w)
    _c_scen.build(w)
    _c_herr.after(w)
    _write_job(w, d)
    truth = _truth(spec.cls, w, f"{w.story}; herrings: {', '.join(spec.herrings) or 'none'}")
    (d / "truth.json").write_text(json.dumps(truth, indent=1))
    return truth


def build_pair(spec: Spec, d: Path) -> dict:
    """A fresh run and a run restored from its last checkpoint; a leak adds runnable processes on every
    host of the restored run (each run draws its own per-host background)."""
    fresh = _c_sim.new_world(spec)
    _c_sim.run_steps(fresh)
    _c_sim.fill(fresh)
    spec_b = copy.deepcopy(spec)
    spec_b.seed = spec.seed + 1
    spec_b.start = float(fresh.t[-1] + 600 + (spec.seed % 3000))
    spec_b.herrings = []
    restored = _c_sim.new_world(spec_b)
    restored.ckpt_period = fresh.ckpt_period
    restored.first_step = (fresh.saves[-1][2] if fresh.saves else fresh.steps[-1][0]) + 1
    _c_sim.run_steps(restored)
    _c_sim.fill(restored)
    leak, extra = spec.cls == "restore-resource-leak", 0.0
    if leak:
        extra = float(fresh.rng.integers(14, 21))
        busy = restored.arr["mode"][:, 0, :] != _c_sim.IDLE
        restored.arr["running"] += busy * (extra + restored.rng.integers(-1, 2, busy.shape))
        restored.slow[:] = 1.01
    _write_job(fresh, d / "a")
    _write_job(restored, d / "b")
    story = (
        f"restore pair: +{extra:.0f} runnable a host on the restored run" if leak else "restore pair: no leak"
    )
    truth = {
        "class": spec.cls,
        "family": FAMILY[spec.cls],
        "culprits": [],
        "onset": None,
        "scrape_s": spec.interval,
        "story": story,
    }
    (d / "truth.json").write_text(json.dumps(truth, indent=1))
    return truth


def build_case(spec: Spec, out: Path) -> str:
    d = out / spec.name
    if (d / "truth.json").exists():
        return f"{spec.name}: kept"
    shutil.rmtree(d, ignore_errors=True)
    t0 = time.monotonic()
    try:
        truth = build_pair(spec, d) if spec.variant == "pair" else build_single(spec, d)
    except (ValueError, RuntimeError, IndexError) as exc:
        shutil.rmtree(d, ignore_errors=True)
        return f"{spec.name}: FAILED {type(exc).__name__}: {exc}"
    hosts = ",".join(c["host"] for c in truth["culprits"]) or "-"
    return f"{spec.name}: {len(spec.hosts)}x{spec.gpus} @{spec.interval:.0f}s {spec.hours}h [{hosts}] {time.monotonic() - t0:.1f}s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated classes")
    ap.add_argument("--first", type=int, default=0, help="build only the first N cases (0: all)")
    args = ap.parse_args()
    out = args.out or REPO / "data" / "outside" / "gen_c" / f"seed-{args.seed}"
    out.mkdir(parents=True, exist_ok=True)
    specs = plan_cases(args.seed)
    if args.only:
        specs = [s for s in specs if s.cls in set(args.only.split(","))]
    if args.first:
        specs = specs[: args.first]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for line in pool.map(build_case, specs, [out] * len(specs)):
            print(line, flush=True)


if __name__ == "__main__":
    main()
