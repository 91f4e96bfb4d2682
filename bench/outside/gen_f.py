"""Outside corpus F (#10): job directories the diagnosis never saw, written blind.

Usage: python bench/outside/gen_f.py --seed N --out DIR [--jobs 1] [--small]

Each case is `DIR/<NN>-<class>/` with `job.log`, `prometheus/` (TSDB blocks built by promtool from
OpenMetrics) and `truth.json` (`class`, `family`, `culprits`, `onset`, `scrape_s`, `story`); a pair
(restore-resource-leak, a healthy pair) holds `a/` (fresh start) and `b/` (restored) under one truth.
F's exporters: nvidia_gpu_exporter (nvidia-smi) or dcgm-exporter behind kube-prometheus-stack,
node_exporter, telegraf's InfiniBand hw counters, some with Thanos-style external labels; logs of
PyTorch Lightning, torchtitan and NeMo under Slurm or `kubectl logs`, in local time zones.
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

from bench.outside._f_end import write_log
from bench.outside._f_om import Writer, gpu_target, node_target, promtool
from bench.outside._f_plan import Case, make_case, plan
from bench.outside._f_story import Story, make


def _launch(seed: int, index: int) -> float:
    """A job start in 2026, a few days apart per seed, hours apart per case."""
    rng = random.Random(seed * 97 + index)
    return 1772323200.0 + seed * 3 * 86400 + index * 7919.0 + rng.uniform(0, 3600)


def _write_job(st: Story, out: Path, restored_from: int | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "job.log").write_text(write_log(st, restored_from))
    fl = st.fleet
    w = Writer(fl.case.ext)
    rng = random.Random(fl.case.seed * 131 + fl.case.index * 7 + (1 if restored_from is not None else 0))
    for hi in range(len(fl.case.hosts)):
        gpu_target(fl, w, hi, rng)
        node_target(fl, w, hi, rng)
    om = out / "metrics.om"
    w.write(om)
    promtool(om, out / "prometheus")


def _pair(case: Case, out: Path) -> Story:
    """a/ a fresh start, b/ the same config restored from a checkpoint (with a leak for the leak class)."""
    leak = case.cls == "restore-resource-leak"
    launch = _launch(case.seed, case.index)
    fresh = make(dataclasses.replace(case, cls="healthy", rng=random.Random(case.rng.random())), launch)
    _write_job(fresh, out / "a", None)
    step = fresh.fleet.tl.ckpt_every * max(1, len(fresh.fleet.tl.saves))
    later = launch + fresh.fleet.tl.t1 - fresh.fleet.tl.t0 + 3600.0
    restored_case = dataclasses.replace(
        case, cls="healthy", restored=True, rng=random.Random(case.rng.random())
    )
    restored = make(
        restored_case, later, first_step=step + 1, extra_procs=case.rng.uniform(14, 20) if leak else 0.0
    )
    _write_job(restored, out / "b", step)
    restored.fleet.case = case
    if leak:
        restored.onset = restored.fleet.tl.begin
        restored.text = (
            f"the restored run (from step {step}) carries ~{restored.fleet.eff.extra_procs:.0f} extra "
            "runnable processes on every host that the fresh start does not"
        )
    else:
        restored.text = "a fresh start and a clean restore of the same config"
    return restored


def one(args: tuple[int, int, str, str, bool]) -> tuple[str, float]:
    """Build one case; returns its name and the seconds it took."""
    seed, index, cls, root, small = args
    started = time.monotonic()
    case = make_case(seed, index, cls, small)
    out = Path(root) / case.name
    if out.exists():
        shutil.rmtree(out)
    if cls in ("restore-resource-leak", "healthy-pair"):
        st = _pair(case, out)
    else:
        st = make(case, _launch(seed, index))
        _write_job(st, out, None)
    (out / "truth.json").write_text(json.dumps(st.truth(), indent=2) + "\n")
    return case.name, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--small", action="store_true", help="three small cases (for tests)")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    work = [(a.seed, i, cls, str(a.out), a.small) for i, cls in enumerate(plan(a.small))]
    started = time.monotonic()
    if a.jobs > 1:
        with Pool(a.jobs) as pool:
            done = pool.map(one, work, chunksize=1)
    else:
        done = [one(w) for w in work]
    for name, secs in done:
        print(f"{name:40s} {secs:6.1f} s")
    print(f"{len(done)} cases in {time.monotonic() - started:.0f} s -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
