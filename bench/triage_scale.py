"""Triage a job log of about 1 GB and print the time and the memory it took (the triage streams).

Usage: .venv/bin/python bench/triage_scale.py [--gb 1.0] [--nodes 128] [--ranks 8] [--scenario healthy] [--keep PATH]

A generated job's log (128 nodes; only the log is written, no TSDB) is stretched to the size asked for:
its header and ending stay, every node's `completed step:` line becomes `--ranks` lines (srun labels
node x ranks + r, as 8 ranks per node print every step), and the step block is repeated with step
numbers carried on, as a long run writes it. Prints the log size, wall and CPU seconds, the load of
the (shared) machine, peak resident memory before and during the triage, and what the triage found.

Memory does not grow with the log's bytes but with its number of distinct steps (one small record
per step, for the step-time and TGS figures).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from playbooks.synth import _config as synth_config
from playbooks.synth import _log, _sim

_STEP = re.compile(rb"completed step: (\d+)")
_LABEL = re.compile(rb"^\s*(\d+): ")


CHILD = """
import json, sys, time
from playbooks.triage import triage_log
def hwm():  # peak RSS of this process image (ru_maxrss would carry the forking parent's over exec)
    line = next(x for x in open("/proc/self/status") if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024.0
rss0 = hwm()
t0, cpu0 = time.monotonic(), time.process_time()
tri = triage_log(sys.argv[1])
print(json.dumps({"seconds": time.monotonic() - t0, "cpu": time.process_time() - cpu0,
                  "rss_mb": hwm(), "import_mb": rss0,
                  "status": tri.status, "class": tri.triage_class, "steps": f"{tri.first_step}..{tri.last_step}",
                  "unreadable": len(tri.unreadable)}))
"""


def _triage_in_child(log: Path) -> dict:
    """Return the triage's time, CPU and peak memory, measured in a process of its own."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(log)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def write_log(scenario: str, nodes: int, path: Path) -> Path:
    """Write the log of a generated job of `nodes` nodes (the generator's log writer, no TSDB)."""
    job = _sim.simulate(_sim.plan(scenario, 1, nodes, profile="amd", gpus=1, interval=15.0, hours=2.5))
    job.job_name = f"JAX-{job.model_name}-bench"
    job.config = synth_config(job, path.stem)
    _log.write_log(job, path, path.stem)
    return path


def _ranks(lines: list[bytes], ranks: int) -> bytes:
    """Return the lines with every labelled step line repeated for `ranks` ranks of its node."""
    out = []
    for line in lines:
        m = _LABEL.match(line)
        if m and ranks > 1 and _STEP.search(line):
            node, rest = int(m.group(1)), line[m.end() :]
            out += [b"%4d: " % (node * ranks + r) + rest for r in range(ranks)]
        else:
            out.append(line)
    return b"".join(out)


def stretch(log: Path, out: Path, size: int, ranks: int = 1) -> int:
    """Write `log` stretched to about `size` bytes into `out`; return the number of bytes written."""
    lines = log.read_bytes().splitlines(keepends=True)
    steps = [i for i, line in enumerate(lines) if _STEP.search(line)]
    first, last = steps[0], steps[-1] + 1
    head, body, tail = lines[:first], _ranks(lines[first:last], ranks), lines[last:]
    span = max(int(m.group(1)) for m in _STEP.finditer(body)) + 1
    written = 0
    with out.open("wb") as fh:
        written += fh.write(b"".join(head))
        offset = 0
        while written < size - len(body):
            chunk = (
                body
                if offset == 0
                else _STEP.sub(lambda m, by=offset: b"completed step: %d" % (int(m.group(1)) + by), body)
            )
            written += fh.write(chunk)
            offset += span
        written += fh.write(b"".join(tail))
    return written


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--scenario", default="healthy")
    ap.add_argument("--nodes", type=int, default=128, help="nodes of the job whose log is stretched")
    ap.add_argument("--ranks", type=int, default=8, help="ranks per node printing every step")
    ap.add_argument("--keep", default=None, help="write the big log here instead of a temporary folder")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stepwise-triage-") as tmp:
        small = write_log(args.scenario, args.nodes, Path(tmp) / "job.log")
        big = Path(args.keep) if args.keep else Path(tmp) / "big.log"
        t0 = time.monotonic()
        size = stretch(small, big, int(args.gb * 1024**3), args.ranks)
        t_build = time.monotonic() - t0
        load0 = os.getloadavg()[0]
        run = _triage_in_child(big)
        seconds, cpu = run["seconds"], run["cpu"]
    mb = size / 1024**2
    print(
        f"log: {mb:,.0f} MB, {args.nodes} nodes x {args.ranks} ranks printing every step (built in {t_build:.1f} s)"
    )
    print(
        f"triage: {seconds:.1f} s wall ({mb / seconds:,.0f} MB/s), {cpu:.1f} s CPU ({mb / cpu:,.0f} MB/s of one core); "
        f"load {load0:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} CPUs"
    )
    print(
        f"peak RSS of the triage process: {run['rss_mb']:,.0f} MB for a {mb:,.0f} MB log "
        f"({run['import_mb']:,.0f} MB of it before the triage started: Python and the imports)"
    )
    print(
        f"found: status={run['status']} class={run['class']} steps={run['steps']} unreadable={run['unreadable']}"
    )


if __name__ == "__main__":
    main()
