"""Outside corpus E (#10): a fifth blind generator, written from the contract, the seeds and real exporters only.

Usage: .venv/bin/python bench/outside/gen_e.py --seed N --out DIR [--jobs 2] [--only CLASS,...] [--small]

About 30 cases a seed over all 13 classes (plus healthy runs and restore pairs): 8-64 hosts, 20-90 min,
10-60 s scrapes. What E exercises: DCGM as deployed with dcp-metrics-included.csv (PROF_* fields, no ECC
counters, row remapping, the Xid gauge holding the last Xid, jobs without GPU_UTIL), jobs on 4 of 8 GPUs
beside another tenant's busy GPUs, node_exporter 1.8 (infiniband, hwmon, pressure, textfile RDMA counters,
RoCE hosts without node_infiniband_*), kube-style relabelled targets, exporter restarts, target gaps,
renamed pods (stale series), a second job scraping the same exporter; logs from Megatron-LM, HF Trainer,
JAX/absl, DeepSpeed and MaxText, in local time, with Slurm's compressed node lists and rank prefixes; red
herrings (checkpoint stalls, evaluations, warm-up loss spikes, a hot rack, an old Xid 13/43).

Each case directory holds `job.log`, `prometheus/` (blocks made by promtool) and `truth.json`; a restore
pair holds `a/` (fresh) and `b/` (restored) and a pair-level `truth.json`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import shutil
import sys
import time
from multiprocessing import Pool
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.outside._e_fleet import build
from bench.outside._e_log import ZONES, Log, header, phase_lines, startup, step_lines
from bench.outside._e_logend import story_lines
from bench.outside._e_om import all_targets, promtool, write_openmetrics
from bench.outside._e_plan import FAMILY, Case, make_case, plan
from bench.outside._e_story import story
from bench.outside._e_time import Timeline


def write_job(case: Case, job_dir: Path) -> tuple[Timeline, int]:
    """One job directory: the TSDB and the log. Returns the timeline and the sample count."""
    tl = story(case)
    if case.leak:
        tl.ev["leak"] = float(12 + case.seed % 9)
    fleet = build(case, tl)
    job_dir.mkdir(parents=True, exist_ok=True)
    om = job_dir / "metrics.om"
    n = write_openmetrics(om, all_targets(case, tl, fleet), fleet.grid, case.seed)
    promtool(om, job_dir / "prometheus")
    om.unlink()
    rng = random.Random(case.seed + 11)
    lg = Log(case=case, tl=tl, rng=rng, tz=ZONES[case.seed % len(ZONES)], job_id=700000 + case.seed % 299999)
    header(lg)
    startup(lg)
    step_lines(lg)
    phase_lines(lg)
    story_lines(lg)
    (job_dir / "job.log").write_text(lg.render())
    return tl, n


def _truth(case: Case, tl: Timeline, cls: str | None = None, onset: float | None = None) -> dict:
    cls = cls or case.cls
    return {
        "class": cls,
        "family": FAMILY[cls],
        "culprits": [{"host": h, "gpu": None if g is None else str(g)} for h, g in tl.culprits],
        "onset": onset if cls in ("restore-resource-leak", "healthy") else tl.onset,
        "scrape_s": case.scrape_s,
        "story": tl.story,
    }


def _pair(case: Case, out: Path) -> tuple[dict, int]:
    leak = case.cls == "restore-resource-leak"
    a = dataclasses.replace(case, role="a", herrings=set(case.herrings) | {"ckpt"}, quirks=set(case.quirks))
    b = dataclasses.replace(
        case,
        role="b",
        seed=case.seed + 1,
        start=case.start + 86400 * (1 + case.seed % 3) + 3600,
        herrings=set(case.herrings) | {"ckpt"},
        quirks=set(case.quirks),
        leak=leak,
    )
    _, na = write_job(a, out / "a")
    tlb, nb = write_job(b, out / "b")
    if leak:
        truth = _truth(case, tlb, onset=tlb.train_start)
        truth["culprits"] = []
        truth["story"] = (
            f"the restored job (b, from step {tlb.first_step}) carries +{tlb.ev['leak']:.0f} runnable "
            "processes on every host that the fresh job (a) does not; ~1% slower"
        )
    else:
        truth = _truth(case, tlb, cls="healthy")
        truth["culprits"] = []
        truth["story"] = f"a fresh run and its restore from step {tlb.first_step}: same load, nothing wrong"
    return truth, na + nb


def one(args: tuple[int, int, str, str, bool]) -> str:
    """Build case `index` of class `cls` for `seed` under `out`; returns a one-line summary."""
    seed, index, cls, out, small = args
    t0 = time.monotonic()
    case = make_case(seed, index, cls, small)
    d = Path(out) / case.name
    if d.exists():
        shutil.rmtree(d)
    if cls == "restore-resource-leak" or case.variant == "restore_pair":
        truth, n = _pair(case, d)
    else:
        tl, n = write_job(case, d)
        truth = _truth(case, tl)
    (d / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    size = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
    return (
        f"{case.name:34s} {len(case.hosts):3d} hosts x{len(case.gpus)} {case.gpu_model:4s} {case.minutes:3d} min "
        f"{case.scrape_s:3d} s {case.log_format:9s} {n / 1e6:5.2f} M samples {size / 1e6:6.1f} MB "
        f"{time.monotonic() - t0:5.1f} s  {truth['story'][:90]}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated classes")
    ap.add_argument("--small", action="store_true", help="4-8 hosts, 20-26 min: for tests")
    a = ap.parse_args()
    only = {c for c in a.only.split(",") if c}
    cases = plan(a.seed, a.small, only)
    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    work = [(a.seed, c.index, c.cls, str(a.out), a.small) for c in cases]
    with Pool(max(1, a.jobs)) as pool:
        for line in pool.imap(one, work):
            print(line, flush=True)
    print(f"{len(cases)} cases in {time.monotonic() - t0:.0f} s under {a.out}")


if __name__ == "__main__":
    main()
