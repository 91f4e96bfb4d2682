"""Triage a job log of about 1 GB and print the time and the memory it took (the triage streams).

Usage: .venv/bin/python bench/triage_scale.py [--gb 1.0] [--nodes 64] [--scenario healthy] [--keep PATH]

A small generated job's log is stretched to the size asked for: its header and ending stay, and its
`completed step:` block is repeated with step numbers carried on, as a long run of many ranks writes it.
Prints the log size, seconds, peak resident memory before and during the triage, and what the triage
found (status, class, steps, lines it could not read).

Memory does not grow with the log's bytes but with its number of distinct steps (one small record
per step, for the step-time and TGS figures): fewer ranks per step (`--nodes`) mean more steps per GB.
"""

from __future__ import annotations

import argparse
import re
import resource
import tempfile
import time
from pathlib import Path

from playbooks.synth import generate_job
from playbooks.triage import triage_log

_STEP = re.compile(rb"completed step: (\d+)")


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def stretch(log: Path, out: Path, size: int) -> int:
    """Write `log` stretched to about `size` bytes into `out`; return the number of bytes written."""
    lines = log.read_bytes().splitlines(keepends=True)
    steps = [i for i, line in enumerate(lines) if _STEP.search(line)]
    first, last = steps[0], steps[-1] + 1
    head, body, tail = lines[:first], b"".join(lines[first:last]), lines[last:]
    span = max(int(m.group(1)) for m in _STEP.finditer(body)) + 1
    written = 0
    with out.open("wb") as fh:
        written += fh.write(b"".join(head))
        offset = 0
        while written < size - len(body):
            chunk = body if offset == 0 else _STEP.sub(
                lambda m, by=offset: b"completed step: %d" % (int(m.group(1)) + by), body
            )
            written += fh.write(chunk)
            offset += span
        written += fh.write(b"".join(tail))
    return written


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--scenario", default="healthy")
    ap.add_argument("--nodes", type=int, default=64, help="nodes of the job whose log is stretched (ranks per step)")
    ap.add_argument("--keep", default=None, help="write the big log here instead of a temporary folder")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stepwise-triage-") as tmp:
        built = generate_job(args.scenario, 1, args.nodes, Path(tmp) / "job", gpus=2, hours=2.5)
        big = Path(args.keep) if args.keep else Path(tmp) / "big.log"
        t0 = time.monotonic()
        size = stretch(Path(built.truth["log"]), big, int(args.gb * 1024**3))
        t_build = time.monotonic() - t0
        before = _peak_mb()
        t0 = time.monotonic()
        tri = triage_log(big)
        seconds = time.monotonic() - t0
        during = _peak_mb()
    print(f"log: {size / 1024**2:,.0f} MB (built in {t_build:.1f} s)")
    print(f"triage: {seconds:.1f} s, {size / 1024**2 / seconds:,.0f} MB/s")
    print(f"peak RSS: {before:,.0f} MB before the triage, {during:,.0f} MB after it")
    print(f"found: status={tri.status} class={tri.triage_class} steps={tri.first_step}..{tri.last_step} "
          f"unreadable={len(tri.unreadable)}")


if __name__ == "__main__":
    main()
