"""Time a whole diagnosis of a large job (default 128 nodes x 8 GPUs x 4 h at 15 s).

Usage: .venv/bin/python bench/diagnosis_speed.py [--job-dir DIR] [--scenario S] [--profile amd|nvidia]

Without --job-dir the job is generated once into data/bench/diagnosis-<nodes>x<gpus>x<hours>h-<profile>/
(about 100 s and a 3 GB peak, promtool's) and reused afterwards. The job's TSDB is served read-only on a
loopback port, diagnosed with `run_diagnosis` (discovery, every playbook, decision), and the server is
stopped. Prints total time, query count, time spent in Prometheus and the diagnosis.

Then the whole command, `manage.py diagnose --job-dir JOB -v 2`, is timed end to end (`--command-runs`,
default 2), with where its time went: start-up (interpreter, Django, imports and exit: the wall time the
command's own clock does not see), triage (in a thread, while the TSDB is served and discovered), serving the
TSDB copy, discovery, queries, decision; CPU of the command (of it, start-up's and triage's) and of its
Prometheus; and the load. The project's modules are compiled ahead, as the image's build does.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _query_cost import Recording, print_costs, process_cpu, replay_costs

from playbooks import tsdb_guard, tsdb_server
from playbooks.diagnose import run_diagnosis, serves_copy
from playbooks.synth import generate_job
from playbooks.triage import triage_job

ROOT = Path(__file__).resolve().parents[1] / "data" / "bench"


def _job(args: argparse.Namespace) -> Path:
    if args.job_dir:
        return Path(args.job_dir)
    cache = ROOT / f"diagnosis-{args.nodes}x{args.gpus}x{args.hours:g}h-{args.profile}-{args.scenario}"
    job = cache / "job"
    if not (job / "truth.json").exists():
        t0 = time.monotonic()
        generate_job(
            args.scenario,
            5,
            args.nodes,
            job,
            profile=args.profile,
            gpus=args.gpus,
            hours=args.hours,
            interval=15.0,
        )
        print(f"generated {job} in {time.monotonic() - t0:.0f} s")
    return job


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _compile_project(repo: Path) -> None:
    """Compile the project's modules ahead, as the image's build does (Dockerfile): under
    PYTHONDONTWRITEBYTECODE (the image's, often a developer's) each run would compile them again, 0.1-0.2 s
    of CPU that no installed command pays."""
    for package in ("stepwise", "investigations", "reports", "playbooks"):
        compileall.compile_dir(repo / package, quiet=1)


def _time_command(job: Path, runs: int) -> None:
    """Run `manage.py diagnose --job-dir JOB -v 2` `runs` times; print each run's wall time by phase."""
    manage = Path(__file__).resolve().parents[1] / "manage.py"
    _compile_project(manage.parent)
    for run in range(1, runs + 1):
        load0, cpu0, t0 = os.getloadavg()[0], _children_cpu(), time.monotonic()
        proc = subprocess.run(
            [sys.executable, str(manage), "diagnose", "--job-dir", str(job), "-v", "2"],
            capture_output=True,
            text=True,
            check=False,
        )
        wall, cpu = time.monotonic() - t0, _children_cpu() - cpu0
        line = next((x for x in proc.stderr.splitlines() if x.startswith("diagnose: timings ")), "")
        if proc.returncode != 0 or not line:
            raise SystemExit(f"diagnose exited {proc.returncode}: {proc.stderr[-2000:]}")
        t = {k: float(v) for k, v in (kv.split("=") for kv in line.split()[2:])}
        d = json.loads(proc.stdout)
        print(
            f"command run {run}: {wall:.2f} s end to end: start-up {wall - t['command_s']:.2f} s "
            f"(CPU {t.get('start_cpu_s', 0):.2f} s), triage {t.get('triage_s', 0):.2f} s "
            f"(CPU {t.get('triage_cpu_s', 0):.2f} s, in parallel with serve + discovery; then waited "
            f"{t.get('triage_wait_s', 0):.2f} s), serve {t['serve_s']:.2f} s, discovery {t['discovery_s']:.2f} s, "
            f"queries {t['queries_s']:.2f} s, decision {t['decision_s']:.2f} s; {d['timings']['queries']} requests; "
            f"CPU: command {t['cpu_s']:.2f} s, its Prometheus {cpu - t['cpu_s']:.2f} s; "
            f"load {load0:.1f} before, {os.getloadavg()[0]:.1f} after; {d['diagnosis']['class']} "
            f"culprits={d['diagnosis']['culprits']}"
        )


def _time_in_process(job: Path, runs: int, costs: bool) -> None:
    """Serve the job's TSDB, run `run_diagnosis` `runs` times and print each run's figures."""
    work_root = tsdb_guard.private_root("stepwise-bench-diagnose-")
    try:
        t0 = time.monotonic()
        served = tsdb_server.ensure_served(job / "prometheus", work_root=work_root)
        if not serves_copy(served):
            raise SystemExit(
                f"{served.url} answers for another TSDB (a port race with another process); run again"
            )
        print(f"served {job} in {time.monotonic() - t0:.1f} s")
        triage = triage_job(job).to_dict()
        with Recording(served.url, timeout=120.0, retries=1) as client:
            for run in range(1, runs + 1):
                client.log.clear()
                prom0, own0 = process_cpu(served.pid), time.process_time()
                result = run_diagnosis(client, triage=triage, time_range=served.time_range)
                prom_cpu, own_cpu = process_cpu(served.pid) - prom0, time.process_time() - own0
                t = result["timings"]
                src = result["source"]
                print(
                    f"run {run}: total {t['total_s']:.2f} s wall, {t['queries']} requests, "
                    f"{t['prometheus_s']:.2f} s waiting on Prometheus; "
                    f"CPU: Prometheus {prom_cpu:.2f} s, Stepwise {own_cpu:.2f} s; "
                    f"{len(src['hosts'])} hosts x {src['gpus_per_host']} GPUs"
                )
            print(
                f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (wall time includes the "
                "wait for CPUs other processes hold)"
            )
            if costs:
                gpus = len(result["source"]["hosts"]) * (result["source"]["gpus_per_host"] or 0)
                print_costs(replay_costs(client, served.pid), gpus=gpus)
        d = result["diagnosis"]
        truth = json.loads((job / "truth.json").read_text()) if (job / "truth.json").exists() else {}
        print(
            f"diagnosis: {d['class']} culprits={d['culprits']} onset={d['onset']} confidence={d['confidence']}"
        )
        if truth:
            err = None if d["onset"] is None or truth.get("onset") is None else d["onset"] - truth["onset"]
            print(f"truth:     {truth['class']} culprits={truth['culprits']} onset error={err}")
    finally:
        tsdb_server.reap_leftovers(work_root)
        shutil.rmtree(work_root, ignore_errors=True)
        tsdb_guard.release(work_root)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--job-dir", default=None, help="diagnose this job instead of the cached generated one")
    ap.add_argument("--scenario", default="thermal-straggler")
    ap.add_argument("--profile", default="amd")
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=4.0)
    ap.add_argument(
        "--runs",
        type=int,
        default=2,
        help="diagnoses to time in process (the first warms the server's caches; 0: none)",
    )
    ap.add_argument(
        "--query-costs",
        action="store_true",
        help="after the in-process runs, replay each query one at a time and print its Prometheus CPU",
    )
    ap.add_argument("--command-runs", type=int, default=2, help="times to run `manage.py diagnose --job-dir`")
    args = ap.parse_args()
    job = _job(args)
    if args.runs > 0:
        _time_in_process(job, args.runs, args.query_costs)
    _time_command(job, args.command_runs)


if __name__ == "__main__":
    main()
