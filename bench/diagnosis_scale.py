"""Diagnosis at 1,024 nodes x 8 GPUs (8,192 GPUs), 2 h, lite metric set: end to end time, memory, and
where the time goes.

Usage: .venv/bin/python bench/diagnosis_scale.py [--nodes 1024] [--gpus 8] [--hours 2] [--scenario S]

1. Generates the job once into data/bench/diagnosis-scale-<nodes>x<gpus>x<hours>h/ with the lite metric
   set: only the families the metric profile reads for the default timeline panels and the playbooks'
   core signals (GPU power, temperature, utilisation, clock, VRAM; host processes, memory, I/O
   pressure, RDMA and TCP counters, OOM kills; the training gauges; scrape durations). Prints the
   build time and the peak memory of the build (this process and its children: promtool, Prometheus).
2. Serves the TSDB read-only, triages the log, and runs the whole diagnosis (`run_diagnosis`:
   discovery, every playbook, decision), recording every query: wall time, series returned.
3. Prints end-to-end time, Prometheus wait and CPU, Stepwise CPU, peak memory of this process and of
   Prometheus, the slowest queries with their series counts (a query returning one series per GPU is
   flagged: PromQL could aggregate it), the diagnosis against the truth, and the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import time
from pathlib import Path

from _query_cost import Recording, print_costs, replay_costs

from playbooks import tsdb_guard, tsdb_server
from playbooks.diagnose import run_diagnosis
from playbooks.synth import _emit, generate_job
from playbooks.triage import triage_job

ROOT = Path(__file__).resolve().parents[1] / "data" / "bench"

#: The lite metric set (seed system names): what the default timeline and the core playbooks read.
LITE = frozenset({
    "hw_gpu_power_watts", "hw_gpu_temperature_celsius", "ray_node_gpus_utilization", "hw_gpu_clock_mhz",
    "hw_gpu_vram_used_bytes", "hw_procs_running", "hw_procs_blocked", "ray_node_mem_used",
    "hw_io_pressure_some_pct", "hw_rdma_tx_retx_pkts_total", "hw_rdma_tx_ack_timeout_total",
    "hw_tcp_retransmits_total", "hw_oom_kills_total", "scrape_duration_seconds", "tb_step",
    "tb_learning_loss", "tb_learning_grad_norm", "tb_learning_current_learning_rate",
    "tb_perf_step_time_seconds", "tb_perf_per_device_tokens_per_sec", "tb_metrics_plugin_staleness_fill",
})  # fmt: skip


def _peak_gb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024**2


def _job(args: argparse.Namespace) -> Path:
    cache = ROOT / f"diagnosis-scale-{args.nodes}x{args.gpus}x{args.hours:g}h-{args.scenario}"
    job = cache / "job"
    if (job / "truth.json").exists():
        return job
    full = _emit.series

    def lite(j):
        return (item for item in full(j) if item[0] in LITE)

    _emit.series = lite  # the generator's builder reads the module attribute
    try:
        t0 = time.monotonic()
        generate_job(args.scenario, 5, args.nodes, job, profile="amd", gpus=args.gpus, hours=args.hours,
                     interval=15.0)  # fmt: skip
    finally:
        _emit.series = full
    print(
        f"generated {job} in {time.monotonic() - t0:.0f} s; peak memory {_peak_gb():.1f} GB "
        f"(this process and its children: promtool, Prometheus); load {os.getloadavg()[0]:.1f}"
    )
    return job


def _proc(pid: int, field: str) -> float:
    """Return a /proc/<pid>/status memory field in GB, or a CPU time from /proc/<pid>/stat in seconds."""
    if field == "cpu":
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024**2
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", default="thermal-straggler")
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=2.0)
    args = ap.parse_args()
    job = _job(args)
    work_root = tsdb_guard.private_root("stepwise-bench-scale-")
    try:
        served = tsdb_server.ensure_served(job / "prometheus", work_root=work_root)
        triage = triage_job(job).to_dict()
        with Recording(served.url, timeout=300.0, retries=1) as client:
            load0 = os.getloadavg()[0]
            prom0, own0, rss0 = _proc(served.pid, "cpu"), time.process_time(), _peak_gb()
            result = run_diagnosis(client, triage=triage, time_range=served.time_range)
            prom_cpu, own_cpu = _proc(served.pid, "cpu") - prom0, time.process_time() - own0
            prom_rss = _proc(served.pid, "VmHWM")
        t = result["timings"]
        gpus = len(result["source"]["hosts"]) * result["source"]["gpus_per_host"]
        print(
            f"diagnosis of {len(result['source']['hosts'])} hosts x {result['source']['gpus_per_host']} GPUs: "
            f"{t['total_s']:.1f} s end to end, {t['queries']} requests, {t['prometheus_s']:.1f} s waiting on "
            f"Prometheus, {t['total_s'] - t['prometheus_s']:.1f} s in Stepwise; CPU: Prometheus {prom_cpu:.1f} s, "
            f"Stepwise {own_cpu:.1f} s; load {load0:.1f} before, {os.getloadavg()[0]:.1f} after"
        )
        print(f"memory: this process peak {max(rss0, _peak_gb()):.2f} GB, Prometheus peak {prom_rss:.2f} GB")
        costs = replay_costs(client, served.pid)
        d = result["diagnosis"]
        truth = json.loads((job / "truth.json").read_text())
        print_costs(costs, gpus=gpus)
        err = None if d["onset"] is None or truth.get("onset") is None else d["onset"] - truth["onset"]
        print(
            f"diagnosis: {d['class']} culprits={d['culprits']}; truth: {truth['class']} "
            f"culprits={truth['culprits']}; onset error {err}"
        )
    finally:
        tsdb_server.reap_leftovers(work_root)
        shutil.rmtree(work_root, ignore_errors=True)
        tsdb_guard.release(work_root)


if __name__ == "__main__":
    main()
