"""Build one large generated job (default 128 nodes x 8 GPUs x 4 h at 15 s) and print what it cost.

Usage: .venv/bin/python bench/synth_scale.py [--nodes 128] [--gpus 8] [--hours 4] [--out DIR]
Prints series and sample counts, seconds per phase (OpenMetrics, promtool, WAL tail) and peak memory.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

from playbooks.synth import generate_job


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", default="thermal-straggler")
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=4.0)
    ap.add_argument("--interval", type=float, default=15.0)
    ap.add_argument("--profile", default="amd")
    ap.add_argument("--out", default=None, help="keep the job here (default: a temporary folder, removed)")
    args = ap.parse_args()
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="stepwise-bench-"))
    t0 = time.monotonic()
    built = generate_job(
        args.scenario,
        5,
        args.nodes,
        root / "job",
        profile=args.profile,
        gpus=args.gpus,
        hours=args.hours,
        interval=args.interval,
    )
    total = time.monotonic() - t0
    st = built.stats[0]
    tsdb = root / "job" / "prometheus"
    size = sum(p.stat().st_size for p in tsdb.rglob("*") if p.is_file())
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        f"job: {args.scenario} {args.nodes} nodes x {args.gpus} GPUs x {args.hours} h at {args.interval} s "
        f"({args.profile})"
    )
    print(
        f"series: {st['openmetrics']['series']:,}  samples in blocks: {st['openmetrics']['samples']:,}  "
        f"samples in WAL: {st['wal']['samples']:,}"
    )
    print(
        f"seconds: total {total:.1f}  openmetrics {st['seconds']['openmetrics']}  "
        f"promtool {st['seconds']['promtool']}  wal {st['seconds']['wal']}"
    )
    print(
        f"TSDB on disk: {size / 1e6:.0f} MB  peak RSS: python {own:.0f} MB, promtool/prometheus {child:.0f} MB"
    )
    if not args.out:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
