"""Outside corpus G (#10): job directories the diagnosis never saw, written blind.

Usage: python bench/outside/gen_g.py --seed N --out DIR [--jobs 1] [--only CLASS[,CLASS]] [--small]

Each case is `DIR/<NN>-<class>/` with `job.log`, `prometheus/` (TSDB blocks built by promtool from
OpenMetrics) and `truth.json` (`class`, `family`, `culprits`, `onset`, `scrape_s`, `story`); a pair
(restore-resource-leak, one healthy pair) holds `a/` (fresh start) and `b/` (restored) under one truth.

What G covers that A-F do not: host names of other sites (GCP `a3-megagpu-8g-<cluster>-<n>` with
`.c.<project>.internal` FQDNs, AWS `ip-10-x-y-z.ec2.internal`, Cray `nid00xxxx` GB200 trays with 4 GPUs
and aarch64 hosts, on-prem `hgx-r07-n3`); H100, H200, B200 and GB200 GPUs; dcgm-exporter scraped
either from static targets (`instance` IP:9400 or FQDN:9400) or through the gpu-operator's service with
Kubernetes labels (`node`, the exporter's `pod`, and the workload's `exported_pod`/`exported_namespace`),
in its 3.x/4.x forms (CLOCK_EVENT_REASONS, XID `err_code`/`err_msg` labels, driver-version label,
DCP profiling and ECC fields, the experimental `DCGM_EXP_XID_ERRORS_COUNT`, remapped rows, NVLink
bandwidth); node_exporter with IP:9100 or FQDN:9100 instances, `node_uname_info`, meminfo, vmstat
`oom_kill`, pressure and the infiniband collector's IB/RoCE hw counters (or EFA counters through the
textfile collector); scrape intervals of 10, 20 or 30 s with jitter, scrape timeouts, exporter
restarts, a Prometheus restart gap; training gauges from a pushgateway in some jobs. Logs: torchrun's
elastic agent under Slurm (`srun -l`, ISO times with the site's UTC offset, ChildFailedError blocks),
Kubeflow PyTorchJob through `kubectl logs --timestamps` with Accelerate's log format, JobSet pods with
MosaicML Composer's console blocks (no wall clock on step lines), and Ray Train (epoch seconds in the
results, Ray's dead-node verdicts); NCCL INFO/WARN lines in NCCL's grammar, ProcessGroupNCCL watchdog
timeouts with SeqNum and Timeout(ms), NVRM Xid lines from dmesg -T. Red herrings: RDMA retransmit
trickles on every host, a warm rack, an old Xid, a slightly less busy host, correctable ECC ticking,
a data-loader stall that recovers, checkpoint and evaluation pauses, a co-tenant's busy GPUs on every
node, a monitoring outage of one exporter, an exporter restart, a Prometheus restart.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from multiprocessing import Pool
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.outside import _g_story as s1
from bench.outside import _g_story2 as s2
from bench.outside._g_gpu import gpu_series
from bench.outside._g_logev import render
from bench.outside._g_node import node_series, train_series
from bench.outside._g_story import Story
from bench.outside._g_tsdb import Om

MAKERS = {
    "healthy": s1.healthy,
    "collective-hang": s1.collective_hang,
    "network-hang": s1.network_hang,
    "node-death": s1.node_death,
    "heartbeat-false-positive": s1.heartbeat_fp,
    "host-oom": s1.host_oom,
    "thermal-straggler": s2.thermal,
    "rdma-degradation": s2.rdma,
    "monitoring-ghost-data": s2.ghost,
    "gpu-driver-fault": s2.driver,
    "gpu-hardware-fault": s2.hardware,
    "training-instability": s2.instability,
}
PAIRS = {"restore-resource-leak", "healthy-pair"}


def plan(small: bool = False) -> list[tuple[str, int]]:
    """(class, variant) of every case of a seed: each class twice, healthy four times plus a pair."""
    if small:
        return [("healthy", 1), ("network-hang", 0), ("gpu-hardware-fault", 0), ("restore-resource-leak", 0)]
    out = [("healthy", v) for v in range(4)] + [("healthy-pair", 0)]
    for cls in MAKERS:
        if cls != "healthy":
            out += [(cls, 0), (cls, 1)]
    out += [("restore-resource-leak", 0), ("restore-resource-leak", 1)]
    return out


def _launch(seed: int, index: int) -> float:
    """A job start in 2026 (before November), a day apart per seed and hours apart per case."""
    rng = random.Random(seed * 7_919 + index)
    return 1_767_300_000.0 + (seed % 250) * 86_400 + index * 10_800 + rng.uniform(0, 3_000)


def write_job(st: Story, out: Path, rng: random.Random) -> int:
    """job.log and prometheus/ of one job; returns the sample count."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "job.log").write_text(render(st, random.Random(rng.random())))
    om = Om()
    for hi in range(len(st.fleet.hosts)):
        gpu_series(om, st.fleet, st.tl, st.eff, hi, random.Random(rng.random()))
        node_series(om, st.fleet, st.tl, st.eff, hi, random.Random(rng.random()))
    if st.fleet.train_gauges:
        train_series(om, st.fleet, st.tl, st.eff, random.Random(rng.random()), st.tokens_per_step)
    om.write(out / "prometheus")
    return om.samples


def one(args: tuple[int, int, str, int, str, bool]) -> str:
    """Build case `index` of `seed` into `root`; returns a one-line summary."""
    seed, index, cls, variant, root, small = args
    rng = random.Random(seed * 1_000_003 + index * 7_919 + variant)
    name = "healthy" if cls == "healthy-pair" else cls
    case = Path(root) / f"{index:02d}-{name}"
    if case.exists():
        shutil.rmtree(case)
    if small:
        s1.SIZES.update(nodes=[8], max_minutes=36.0)
    t0 = time.monotonic()
    if cls in PAIRS:
        fresh, restored, truth = s2.pair(rng, _launch(seed, index), leak=cls == "restore-resource-leak")
        n = write_job(fresh, case / "a", rng) + write_job(restored, case / "b", rng)
    else:
        st = MAKERS[cls](rng, _launch(seed, index), variant)
        truth = st.truth()
        n = write_job(st, case, rng)
    (case / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return f"{case.name}: {n} samples, {time.monotonic() - t0:.1f} s — {truth['story']}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated classes")
    ap.add_argument("--small", action="store_true", help="a few small cases (tests)")
    a = ap.parse_args(argv)
    only = {c for c in a.only.split(",") if c}
    cases = [(i, c, v) for i, (c, v) in enumerate(plan(a.small))]
    if only:
        cases = [x for x in cases if x[1] in only or (x[1] == "healthy-pair" and "healthy" in only)]
    a.out.mkdir(parents=True, exist_ok=True)
    work = [(a.seed, i, c, v, str(a.out), a.small) for i, c, v in cases]
    t0 = time.monotonic()
    if a.jobs > 1:
        with Pool(a.jobs) as pool:
            for line in pool.imap_unordered(one, work):
                print(line, flush=True)
    else:
        for w in work:
            print(one(w), flush=True)
    print(f"{len(work)} cases in {time.monotonic() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
