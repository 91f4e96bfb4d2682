"""Diagnosis robustness: the same jobs under deployment perturbations must keep their verdicts (prints figures).

Usage: .venv/bin/python bench/diagnosis_robustness.py [--seeds 1] [--seed-from 1] [--nodes 4] [--gpus 4] [--hours 1.0]
       [--profile nvidia] [--scenarios a,b] [--perturbations plain,kubernetes,...] [--variant NAME[,NAME]]
       [--out DIR] [--json FILE]

1. For every scenario x seed, the generator builds the same job (same hosts, faults, timing: the seed
   decides them) once per perturbation of `playbooks.synth.PERTURBATIONS` (relabelled hosts, renamed scrape
   jobs, Kubernetes labels, dcgm-exporter without a host label, background counter noise, a GPU exporter one
   scrape late, DCGM's 30 s collection under a 15 s scrape) and once with a deployment drawn from the seed
   ("random": several at once). `--variant` asks for off-by-default generator variants (`_variants.OPT_IN`,
   e.g. nan_traceback): each applies to the scenario that has it, the others are built plain.
2. Each job is served read-only, triaged from its log and diagnosed with `run_diagnosis` (profile "auto").
   restore-resource-leak is a comparison of two jobs and is left out.
3. Per perturbation it prints: class macro-F1, culprit-host F1, the share of verdicts equal to the plain
   deployment's, onset error in scrape intervals (median, and the share within 3) over correctly classified
   jobs, and healthy jobs with a warning or worse.

Benches print; they assert nothing and time nothing they report as a goal.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from playbooks import tsdb_guard, tsdb_server  # noqa: E402
from playbooks.diagnose import run_diagnosis, serves_copy  # noqa: E402
from playbooks.prometheus import PrometheusClient, PrometheusError  # noqa: E402
from playbooks.synth import PERTURBATIONS, SCENARIOS, SynthError, generate_job  # noqa: E402
from playbooks.synth._variants import OPT_IN  # noqa: E402
from playbooks.triage import TriageError, triage_job  # noqa: E402


def _served(job_dir: Path, work_root: Path) -> tuple[tsdb_server.ServedTSDB, PrometheusClient]:
    for _attempt in range(3):
        s = tsdb_server.ensure_served(job_dir / "prometheus", work_root=work_root)
        if serves_copy(s):
            return s, PrometheusClient(s.url, timeout=120.0, retries=3)
        tsdb_server.stop(s)
    raise tsdb_server.TSDBServerError(f"{job_dir}: no port of its own after 3 attempts")


def judge(job_dir: Path, work_root: Path) -> dict[str, Any]:
    """Return {predicted, culprits, onset, alarms, profile} of one job's diagnosis."""
    server = client = None
    try:
        server, client = _served(job_dir, work_root)
        result = run_diagnosis(client, triage=triage_job(job_dir).to_dict(), profile="auto")
    except (PrometheusError, TriageError, tsdb_server.TSDBServerError) as exc:
        return {
            "predicted": "error",
            "error": f"{type(exc).__name__}: {exc}",
            "culprits": [],
            "onset": None,
            "alarms": 0,
            "profile": "",
        }
    finally:
        if client is not None:
            client.close()
        if server is not None:
            tsdb_server.stop(server)
    d = result["diagnosis"]
    return {
        "predicted": d["class"],
        "culprits": sorted({c["host"] for c in d.get("culprits") or []}),
        "onset": d.get("onset"),
        "profile": result["source"]["profile"],
        "alarms": sum(1 for f in result["findings"] if f.get("severity") in ("warning", "critical")),
    }


def macro_f1(pairs: list[tuple[str, str]]) -> float:
    classes = {t for t, _ in pairs} | {p for _, p in pairs}
    scores = []
    for c in classes:
        tp = sum(1 for t, p in pairs if t == c and p == c)
        fp = sum(1 for t, p in pairs if t != c and p == c)
        fn = sum(1 for t, p in pairs if t == c and p != c)
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 1.0)
    return statistics.fmean(scores) if scores else float("nan")


def culprit_f1(rows: list[dict[str, Any]]) -> float:
    tp = fp = fn = 0
    for r in rows:
        want, got = set(r["truth_culprits"]), set(r["culprits"])
        tp, fp, fn = tp + len(want & got), fp + len(got - want), fn + len(want - got)
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 1.0


def summarise(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    plain = {(r["scenario"], r["seed"]): r["predicted"] for r in rows if r["perturbation"] == "plain"}
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r["perturbation"] for r in rows):
        sub = [r for r in rows if r["perturbation"] == name]
        onsets = [
            abs(r["onset"] - r["truth_onset"]) / r["interval"]
            for r in sub
            if r["predicted"] == r["truth_class"] and r["onset"] is not None and r["truth_onset"] is not None
        ]
        healthy = [r for r in sub if r["truth_class"] == "healthy"]
        kept = [r for r in sub if (r["scenario"], r["seed"]) in plain]
        out[name] = {
            "jobs": len(sub),
            "class_macro_f1": macro_f1([(r["truth_class"], r["predicted"]) for r in sub]),
            "class_accuracy": sum(r["predicted"] == r["truth_class"] for r in sub) / len(sub),
            "culprit_f1": culprit_f1(sub),
            "kept_plain_verdict": (
                sum(r["predicted"] == plain[(r["scenario"], r["seed"])] for r in kept) / len(kept)
                if kept
                else float("nan")
            ),
            "onset_median_intervals": statistics.median(onsets) if onsets else float("nan"),
            "onset_within_3": f"{sum(o <= 3 for o in onsets)}/{len(onsets)}",
            "healthy_false_alarms": f"{sum(r['alarms'] > 0 for r in healthy)}/{len(healthy)}",
            "errors": sum(r["predicted"] == "error" for r in sub),
        }
    return out


def report(rows: list[dict[str, Any]], summary: dict[str, dict[str, Any]]) -> None:
    print(
        f"\n{'perturbation':<18} {'jobs':>4} {'class F1':>8} {'acc':>5} {'culprit F1':>10} {'=plain':>6} "
        f"{'onset med':>9} {'<=3 int':>7} {'healthy FA':>10} {'errors':>6}"
    )
    for name, s in summary.items():
        print(
            f"{name:<18} {s['jobs']:>4} {s['class_macro_f1']:>8.2f} {s['class_accuracy']:>5.2f} "
            f"{s['culprit_f1']:>10.2f} {s['kept_plain_verdict']:>6.2f} {s['onset_median_intervals']:>9.1f} "
            f"{s['onset_within_3']:>7} {s['healthy_false_alarms']:>10} {s['errors']:>6}"
        )
    changed = [r for r in rows if r["predicted"] != r["truth_class"]]
    if changed:
        print("\nwrong verdicts (scenario, perturbation: predicted):")
        for r in changed:
            print(
                f"  {r['scenario']} s{r['seed']}, {r['perturbation']}: {r['predicted']} "
                f"(culprits {', '.join(r['culprits']) or '-'}; want {', '.join(r['truth_culprits']) or '-'})"
                + (f" [{r['error']}]" if r.get("error") else "")
            )


def _row(scenario: str, seed: int, name: str, truth: dict, got: dict[str, Any]) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "seed": seed,
        "perturbation": name,
        "truth_class": truth["class"],
        "interval": truth["interval_s"],
        "truth_culprits": sorted({c["host"] for c in truth["culprits"]}),
        "truth_onset": truth["onset"],
        **got,
    }


def _variants_of(scenario: str, asked: str) -> tuple[str, ...]:
    """The asked variants that `scenario` has (OPT_IN names each one's scenario or scenarios)."""
    has = {v: (s,) if isinstance(s, str) else s for v, s in OPT_IN.items()}
    return tuple(v for v in asked.split(",") if v and scenario in has.get(v, ()))


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    out = Path(args.out or tempfile.mkdtemp(prefix="stepwise-robustness-"))
    work_root = out / "views"
    work_root.mkdir(parents=True, exist_ok=True)
    tsdb_guard.guard(work_root)  # its servers stop even if this bench is killed
    rows: list[dict[str, Any]] = []
    perturbations = args.perturbations.split(",")
    try:
        for scenario in args.scenarios.split(","):
            for seed in range(args.seed_from, args.seed_from + args.seeds):
                for name in perturbations:
                    job_dir = out / f"{scenario}-s{seed}-{name}"
                    t0 = time.monotonic()
                    if args.reuse and (job_dir / "truth.json").exists():
                        truth = json.loads((job_dir / "truth.json").read_text())
                        rows.append(_row(scenario, seed, name, truth, judge(job_dir, work_root)))
                        continue
                    try:
                        built = generate_job(
                            scenario,
                            seed,
                            args.nodes,
                            job_dir,
                            profile=args.profile,
                            gpus=args.gpus,
                            hours=args.hours,
                            interval=args.interval,
                            exporters=name,
                            variants=_variants_of(scenario, args.variant),
                        )
                    except SynthError as exc:
                        print(f"  {job_dir.name}: build failed: {exc}", file=sys.stderr)
                        continue
                    got = judge(job_dir, work_root)
                    rows.append(_row(scenario, seed, name, built.truth, got))
                    print(
                        f"  {job_dir.name}: {got['predicted']} ({time.monotonic() - t0:.1f} s)",
                        file=sys.stderr,
                    )
                    if not args.keep:
                        shutil.rmtree(job_dir, ignore_errors=True)
                        job_dir.with_name(job_dir.name + ".log").unlink(missing_ok=True)
    finally:
        tsdb_server.reap_leftovers(work_root)
        tsdb_guard.release(work_root)
        if not args.keep and not args.out:
            shutil.rmtree(out, ignore_errors=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument(
        "--seed-from", type=int, default=1, help="first seed (a range the engine was not tried on)"
    )
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--interval", type=float, default=15.0)
    ap.add_argument("--profile", default="nvidia", choices=("nvidia", "amd-dme"))
    ap.add_argument("--scenarios", default=",".join(s for s in SCENARIOS if s != "restore-resource-leak"))
    ap.add_argument("--perturbations", default=",".join([*PERTURBATIONS, "random"]))
    ap.add_argument(
        "--variant", default="", help="off-by-default generator variants (OPT_IN), comma-separated"
    )
    ap.add_argument("--out", default="", help="build jobs here (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the generated jobs")
    ap.add_argument(
        "--reuse", action="store_true", help="judge jobs already built under --out (e.g. with another engine)"
    )
    ap.add_argument("--json", default="", help="also write rows and summary to this file")
    args = ap.parse_args()
    t0 = time.monotonic()
    rows = run(args)
    summary = summarise(rows)
    report(rows, summary)
    print(
        f"\n{len(rows)} jobs ({args.nodes} nodes x {args.gpus} GPUs, {args.hours} h, profile {args.profile}) "
        f"in {time.monotonic() - t0:.0f} s"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
