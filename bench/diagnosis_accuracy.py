"""Diagnosis accuracy on a generated corpus: confusion matrix, culprits, onset, false alarms (prints figures).

Usage: .venv/bin/python bench/diagnosis_accuracy.py [--seeds 2] [--seed-from 1] [--nodes 8,16,32] [--profiles amd,nvidia]
       [--scenarios a,b] [--gpus 8] [--hours H] [--out data/bench/accuracy] [--rebuild] [--json FILE]
       [--variant NAME[,NAME]]

1. Corpus: every scenario x seed x profile, the node count cycling through --nodes (8-64 nodes; the default
   keeps a first run to about 10-15 minutes on 2 cores). Jobs are cached under --out and reused while their
   build options are unchanged; --rebuild regenerates them. `--variant` asks for off-by-default generator
   variants (`playbooks/synth/_variants.py` OPT_IN, e.g. coarse_staircase): each applies to the scenario
   that has it (the others are built plain), and only the scenarios named by a variant are judged unless
   --scenarios is given.
2. Each job is served read-only (a private copy on a loopback port), triaged from its log and diagnosed with
   `run_diagnosis` (profile "auto"); restore-resource-leak is judged by `compare_jobs` against its fresh-start
   baseline, as the contract defines it; the baselines are diagnosed too, as healthy jobs.
3. Prints the confusion matrix (truth class x predicted class), accuracy overall / per profile / per class,
   culprit precision and recall (hosts, and (host, GPU) where the truth names a GPU), onset error
   (median / p90 seconds over correctly classified jobs), false alarms on healthy jobs (any warning or
   critical finding), and the time per diagnosis.

Nothing here tunes the engine: the figures are what the engine does on jobs it was not written against.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from playbooks import tsdb_guard, tsdb_server
from playbooks.compare import CompareJob, compare_jobs
from playbooks.diagnose import run_diagnosis, serves_copy
from playbooks.model import CLASSES
from playbooks.prometheus import PrometheusClient, PrometheusError
from playbooks.synth import SCENARIOS, generate_job
from playbooks.synth._variants import OPT_IN
from playbooks.triage import TriageError, triage_job

REPO = Path(__file__).resolve().parents[1]
SHORT = {
    "healthy": "ok",
    "collective-hang": "c-hang",
    "network-hang": "n-hang",
    "node-death": "node",
    "heartbeat-false-positive": "hb-fp",
    "host-oom": "oom",
    "thermal-straggler": "therm",
    "rdma-degradation": "rdma",
    "restore-resource-leak": "leak",
    "monitoring-ghost-data": "ghost",
    "gpu-driver-fault": "drv",
    "gpu-hardware-fault": "gpu-hw",
    "training-instability": "train",
    "error": "ERROR",
}


# ------------------------------------------------------------------------------------------- corpus


def _scenarios_of(variant: str) -> tuple[str, ...]:
    """Return the scenarios an opt-in variant applies to (OPT_IN names one or several)."""
    allowed = OPT_IN.get(variant, ())
    return (allowed,) if isinstance(allowed, str) else tuple(allowed)


def build_corpus(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Return one entry per job to judge: {dir, truth, role, compare_with}; generate what is not cached."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    nodes = [int(n) for n in args.nodes.split(",")]
    variants = [v for v in (args.variant or "").split(",") if v]
    entries: list[dict[str, Any]] = []
    i = 0
    for scenario in args.scenarios.split(","):
        for profile in args.profiles.split(","):
            for seed in range(args.seed_from, args.seed_from + args.seeds):
                n = nodes[i % len(nodes)]
                i += 1
                opts = {
                    "scenario": scenario,
                    "seed": seed,
                    "nodes": n,
                    "profile": profile,
                    "gpus": args.gpus,
                    "hours": args.hours,
                    "interval": args.interval,
                }
                mine = sorted(v for v in variants if scenario in _scenarios_of(v))
                if mine:
                    opts["variants"] = mine
                tag = "".join(f"-{v}" for v in mine)
                job_dir = out / f"{scenario}-{profile}-s{seed}-n{n}{tag}"
                marker = job_dir.with_name(job_dir.name + ".opts.json")
                fresh = (
                    marker.is_file()
                    and json.loads(marker.read_text()) == opts
                    and (job_dir / "truth.json").is_file()
                )
                if args.rebuild or not fresh:
                    t0 = time.monotonic()
                    generate_job(
                        scenario,
                        seed,
                        n,
                        job_dir,
                        profile=profile,
                        gpus=args.gpus,
                        hours=args.hours,
                        interval=args.interval,
                        variants=mine,
                    )
                    marker.write_text(json.dumps(opts))
                    print(f"  built {job_dir.name} in {time.monotonic() - t0:.1f} s", file=sys.stderr)
                truth = json.loads((job_dir / "truth.json").read_text())
                entries.append(
                    {
                        "dir": job_dir,
                        "truth": truth,
                        "profile": profile,
                        "nodes": n,
                        "compare_with": truth.get("compare_with"),
                    }
                )
                if truth.get("compare_with"):
                    base = Path(truth["compare_with"])
                    entries.append(
                        {
                            "dir": base,
                            "truth": json.loads((base / "truth.json").read_text()),
                            "profile": profile,
                            "nodes": n,
                            "compare_with": None,
                            "baseline_of": str(job_dir),
                        }
                    )
    return entries


# ------------------------------------------------------------------------------------------ judging


def _served(job_dir: Path, work_root: Path) -> tuple[tsdb_server.ServedTSDB, PrometheusClient]:
    for _attempt in range(3):
        s = tsdb_server.ensure_served(job_dir / "prometheus", work_root=work_root)
        # a port taken by another process between the free-port check and the bind answers for other data
        if serves_copy(s):
            return s, PrometheusClient(s.url, timeout=120.0, retries=3)
        print(f"  {s.url} answers for another TSDB; serving {job_dir.name} again", file=sys.stderr)
        tsdb_server.stop(s)
    raise tsdb_server.TSDBServerError(f"{job_dir}: no port of its own after 3 attempts")


def judge(entry: dict[str, Any], work_root: Path, concurrency: int) -> dict[str, Any]:
    """Return {predicted, culprits, onset, alarms, seconds, queries} for one corpus entry."""
    job_dir = Path(entry["dir"])
    t0 = time.monotonic()
    servers: list[tsdb_server.ServedTSDB] = []
    clients: list[PrometheusClient] = []
    try:
        s, c = _served(job_dir, work_root)
        servers.append(s)
        clients.append(c)
        triage = triage_job(job_dir).to_dict()
        if entry["compare_with"]:
            base_dir = Path(entry["compare_with"])
            bs, bc = _served(base_dir, work_root)
            servers.append(bs)
            clients.append(bc)
            result = compare_jobs(
                [CompareJob(bc, triage_job(base_dir).to_dict()), CompareJob(c, triage)],
                concurrency=concurrency,
            )
        else:
            result = run_diagnosis(c, triage=triage, profile="auto", concurrency=concurrency)
    except (PrometheusError, TriageError, tsdb_server.TSDBServerError) as exc:
        return {
            "predicted": "error",
            "error": f"{type(exc).__name__}: {exc}",
            "culprits": [],
            "onset": None,
            "alarms": 0,
            "seconds": time.monotonic() - t0,
            "queries": 0,
        }
    finally:
        for c in clients:
            c.close()
        for s in servers:
            tsdb_server.stop(s)
    diag = result["diagnosis"]
    return {
        "predicted": diag["class"],
        "culprits": diag.get("culprits") or [],
        "onset": diag.get("onset"),
        "alarms": sum(1 for f in result.get("findings", []) if f.get("severity") in ("warning", "critical")),
        "seconds": time.monotonic() - t0,
        "queries": (result.get("timings") or {}).get("queries", 0),
        "confidence": diag.get("confidence"),
        "summary": diag.get("summary", ""),
    }


def healthy_pairs(corpus: list[dict[str, Any]]) -> list[tuple[Path, Path]]:
    """Return pairs of healthy-scenario jobs of one profile (consecutive seeds): compare must call them healthy."""
    by_profile: dict[str, list[Path]] = {}
    for e in corpus:
        if e["truth"].get("scenario") == "healthy":
            by_profile.setdefault(e["profile"], []).append(Path(e["dir"]))
    return [(dirs[i], dirs[i + 1]) for dirs in by_profile.values() for i in range(len(dirs) - 1)]


def compare_pair(a: Path, b: Path, work_root: Path, concurrency: int) -> dict[str, Any]:
    """Return {pair, predicted, alarms} of compare_jobs on two job directories."""
    entry = {"dir": b, "compare_with": str(a)}
    got = judge(entry, work_root, concurrency)
    return {
        "pair": f"{a.name} vs {b.name}",
        "predicted": got["predicted"],
        "alarms": got["alarms"],
        "summary": got.get("summary") or got.get("error", ""),
    }


# ------------------------------------------------------------------------------------------ figures


def _pct(a: float, b: float) -> str:
    return f"{100.0 * a / b:.1f} %" if b else "n/a"


def _quantile(values: list[float], q: float) -> float:
    vs = sorted(values)
    return vs[min(len(vs) - 1, int(round(q * (len(vs) - 1))))]


def report(rows: list[dict[str, Any]]) -> None:
    """Print every figure of the module docstring."""
    truth_classes = [c for c in CLASSES if any(r["truth"] == c for r in rows)]
    _print_classes(rows, truth_classes)
    _print_culprits(rows)
    _print_f1(rows, truth_classes)
    _print_onsets(rows)
    _print_alarms_and_time(rows)
    _print_misses(rows)


def _right(r: dict[str, Any]) -> bool:
    return bool(r["predicted"] == r["truth"])


def _print_classes(rows: list[dict[str, Any]], truth_classes: list[str]) -> None:
    """The confusion matrix with each class's recall, and the accuracy overall, by profile and by size."""
    pred_classes = [c for c in (*CLASSES, "error") if any(r["predicted"] == c for r in rows)]
    cols = list(dict.fromkeys(truth_classes + pred_classes))
    width = max(6, *(len(SHORT[c]) for c in cols)) + 1
    print("\nConfusion matrix (rows: truth, columns: predicted)")
    print(" " * 26 + "".join(f"{SHORT[c]:>{width}}" for c in cols) + f"{'recall':>9}")
    for t in truth_classes:
        mine = [r for r in rows if r["truth"] == t]
        counts = Counter(r["predicted"] for r in mine)
        cells = "".join(f"{(counts.get(c) or '.')!s:>{width}}" for c in cols)
        print(f"{t:<26}{cells}{_pct(counts.get(t, 0), len(mine)):>9}")
    ok = sum(_right(r) for r in rows)
    print(f"\nAccuracy: {ok}/{len(rows)} = {_pct(ok, len(rows))}")
    for profile in sorted({r["profile"] for r in rows}):
        mine = [r for r in rows if r["profile"] == profile]
        good = sum(_right(r) for r in mine)
        print(f"  profile {profile:<8} {good}/{len(mine)} = {_pct(good, len(mine))}")
    for n in sorted({r["nodes"] for r in rows}):
        mine = [r for r in rows if r["nodes"] == n]
        good = sum(_right(r) for r in mine)
        print(f"  {n:>3} nodes       {good}/{len(mine)} = {_pct(good, len(mine))}")


def _print_culprits(rows: list[dict[str, Any]]) -> None:
    """Precision and recall of the culprit hosts and (where the truth names one) GPUs."""
    for kind in ("hosts", "gpus"):
        tp = n_pred = n_true = 0
        for r in rows:
            truth = r["truth_culprits"]
            if kind == "hosts":
                want = {c["host"] for c in truth}
                got = {c["host"] for c in r["culprits"]}
            else:
                if not any(c.get("gpu") is not None for c in truth):
                    continue
                want = {(c["host"], str(c["gpu"])) for c in truth if c.get("gpu") is not None}
                got = {(c["host"], str(c.get("gpu"))) for c in r["culprits"] if c.get("gpu") is not None}
            tp += len(want & got)
            n_pred += len(got)
            n_true += len(want)
        print(
            f"Culprit {kind}: precision {tp}/{n_pred} = {_pct(tp, n_pred)}, recall {tp}/{n_true} = {_pct(tp, n_true)}"
        )


def _print_f1(rows: list[dict[str, Any]], truth_classes: list[str]) -> None:
    """Per-class F1, its macro average, and the F1 of the culprit hosts."""
    f1s = {}
    for c in truth_classes:
        tp = sum(1 for r in rows if r["truth"] == c and r["predicted"] == c)
        fp = sum(1 for r in rows if r["truth"] != c and r["predicted"] == c)
        fn = sum(1 for r in rows if r["truth"] == c and r["predicted"] != c)
        f1s[c] = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 1.0
    print("Per-class F1: " + ", ".join(f"{SHORT[c]} {v:.2f}" for c, v in f1s.items()))
    print(f"Class macro-F1: {statistics.mean(f1s.values()):.3f}")
    tp = n_pred = n_true = 0
    for r in rows:
        want = {c["host"] for c in r["truth_culprits"]}
        got = {c["host"] for c in r["culprits"]}
        tp, n_pred, n_true = tp + len(want & got), n_pred + len(got), n_true + len(want)
    prec, rec = (tp / n_pred if n_pred else 1.0), (tp / n_true if n_true else 1.0)
    print(
        f"Culprit hosts F1: {2 * prec * rec / (prec + rec) if prec + rec else 0.0:.3f} "
        f"(precision {prec:.3f}, recall {rec:.3f}; jobs naming more hosts than the truth: "
        f"{sum(1 for r in rows if len(r['culprits']) > len(r['truth_culprits']))})"
    )


def _print_onsets(rows: list[dict[str, Any]]) -> None:
    """How far the onset of each rightly classified job is from the truth, in scrape intervals and seconds."""
    timed = [r for r in rows if _right(r) and r["onset"] is not None and r["truth_onset"] is not None]
    scr = [abs(r["onset"] - r["truth_onset"]) / float(r.get("interval") or 15.0) for r in timed]
    if scr:
        print(
            f"Onset error in scrape intervals (correct class, n={len(scr)}): median {statistics.median(scr):.2f}, "
            f"p90 {_quantile(scr, 0.9):.1f}; within 3 intervals {sum(x <= 3 for x in scr)}/{len(scr)}"
        )
    errors = [abs(r["onset"] - r["truth_onset"]) for r in timed]
    missing = sum(1 for r in rows if _right(r) and r["truth_onset"] is not None and r["onset"] is None)
    if errors:
        print(
            f"Onset error (correct class, n={len(errors)}): median {statistics.median(errors):.0f} s, "
            f"p90 {_quantile(errors, 0.9):.0f} s, max {max(errors):.0f} s; {missing} without an onset"
        )


def _print_alarms_and_time(rows: list[dict[str, Any]]) -> None:
    """False alarms on healthy jobs, and the time and queries per job."""
    healthy = [r for r in rows if r["truth"] == "healthy"]
    alarmed = [r for r in healthy if r["alarms"]]
    print(f"Healthy false alarms: {_pct(len(alarmed), len(healthy))} of healthy jobs with a warning or worse")
    print(
        f"False alarms on healthy jobs: {len(alarmed)}/{len(healthy)} jobs with a warning/critical finding "
        f"({sum(r['alarms'] for r in healthy)} findings); {sum(r['predicted'] != 'healthy' for r in healthy)} "
        "not called healthy"
    )
    secs = [r["seconds"] for r in rows]
    print(
        f"Time per job (serve + triage + diagnose): median {statistics.median(secs):.1f} s, "
        f"max {max(secs):.1f} s, total {sum(secs):.0f} s; queries median "
        f"{statistics.median(r['queries'] for r in rows):.0f}"
    )


def _print_misses(rows: list[dict[str, Any]]) -> None:
    """The jobs classified wrongly, and those classified rightly with other culprits."""
    wrong = [r for r in rows if not _right(r)]
    if wrong:
        print("\nMisclassified:")
        for r in wrong:
            extra = f" ({r['error']})" if r.get("error") else ""
            print(f"  {r['job']}: truth {r['truth']}, predicted {r['predicted']}{extra}")
    off = [
        r
        for r in rows
        if _right(r) and {c["host"] for c in r["culprits"]} != {c["host"] for c in r["truth_culprits"]}
    ]
    if off:
        print("\nRight class, other culprits:")
        for r in off:
            print(
                f"  {r['job']}: truth {sorted(c['host'] for c in r['truth_culprits'])}, "
                f"named {sorted(c['host'] for c in r['culprits'])[:8]}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2, help="N seeds per scenario and profile")
    ap.add_argument("--seed-from", type=int, default=1, help="the first seed (seeds FROM..FROM+N-1)")
    ap.add_argument("--nodes", default="8,16,32", help="node counts, cycled over the corpus (8-64)")
    ap.add_argument("--profiles", default="amd,nvidia")
    ap.add_argument("--scenarios", default=None, help="default: all, or those the variants apply to")
    ap.add_argument("--variant", default=None, help="off-by-default generator variants, comma-separated")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument(
        "--hours", type=float, default=None, help="job length (default: the generator's, 2.2-3.2 h)"
    )
    ap.add_argument("--interval", type=float, default=15.0)
    ap.add_argument("--out", default=str(REPO / "data" / "bench" / "accuracy"))
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--json", default=None, help="also write the per-job results here")
    args = ap.parse_args()
    unknown = [v for v in (args.variant or "").split(",") if v and v not in OPT_IN]
    if unknown:
        ap.error(f"unknown variant {', '.join(unknown)}; known: {', '.join(OPT_IN)}")
    if args.scenarios is None:
        named = [s for v in (args.variant or "").split(",") if v for s in _scenarios_of(v)]
        args.scenarios = ",".join(dict.fromkeys(named)) if named else ",".join(SCENARIOS)

    t0 = time.monotonic()
    corpus = build_corpus(args)
    t_built = time.monotonic()
    print(
        f"corpus: {len(corpus)} jobs under {args.out} ({t_built - t0:.0f} s to build or check)",
        file=sys.stderr,
    )
    work_root = tsdb_guard.private_root("stepwise-accuracy-")
    rows = []
    try:
        for entry in corpus:
            got = judge(entry, work_root, args.concurrency)
            truth = entry["truth"]
            row = {
                "job": Path(entry["dir"]).name,
                "profile": entry["profile"],
                "nodes": entry["nodes"],
                "truth": truth["class"],
                "truth_culprits": truth.get("culprits") or [],
                "truth_onset": truth.get("onset"),
                "interval": truth.get("interval_s"),
                **got,
            }
            rows.append(row)
            print(
                f"  {row['job']:<48} {row['truth']:<26} -> {row['predicted']:<26} {row['seconds']:5.1f} s",
                file=sys.stderr,
            )
        pairs = healthy_pairs(corpus)
        compared = [compare_pair(a, b, work_root, args.concurrency) for a, b in pairs]
    finally:
        tsdb_server.reap_leftovers(work_root)
        shutil.rmtree(work_root, ignore_errors=True)
        tsdb_guard.release(work_root)
    print(
        f"\n{len(rows)} jobs: corpus {t_built - t0:.0f} s, judging {time.monotonic() - t_built:.0f} s "
        f"(seeds {args.seed_from}-{args.seed_from + args.seeds - 1}, nodes {args.nodes}, profiles {args.profiles}, {args.gpus} GPUs/node)"
    )
    report(rows)
    if compared:
        bad = [c for c in compared if c["predicted"] != "healthy" or c["alarms"]]
        print(
            f"Comparisons of two healthy jobs (same profile, different seeds): {len(bad)}/{len(compared)} "
            "not healthy or with a warning"
            + "".join(f"\n  {c['pair']}: {c['predicted']}: {c['summary'][:300]}" for c in bad)
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
