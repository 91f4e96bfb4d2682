"""Score the diagnosis engine on an outside corpus (job directories with a `truth.json`) (#10).

Usage: .venv/bin/python bench/outside_score.py ROOT [ROOT ...] [--jobs 2] [--json OUT] [--timeout 600]
       [--only CLASS,...] [--repo CHECKOUT]

Every directory under ROOT holding a `truth.json` is one case: a job directory is judged with
`manage.py diagnose --job-dir D --format json`; a pair directory (with `a/` and `b/`) with
`manage.py compare --job-dir D/a --job-dir D/b --format json`. Two run at a time by default.
`truth.json` is `{"class", "family", "culprits": [{"host", "gpu"}], "onset", "scrape_s", "story"}`
(see /work/brief/blind_common.md and the diagnosis contract).

Prints per-class precision / recall / F1 and macro-F1 (over the classes in the truth or the answers),
family accuracy, culprit-host F1 (micro over all cases; host names compared exactly, case aside),
onset error in scrape intervals (over the cases whose truth has an onset; a missing answer counts as
not within), healthy cases with any warning or critical finding, exit codes other than 0, seconds per
case, the machine's load, and one line per wrong case. `--json OUT` writes the same for later
comparison. Figures only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Case:
    """One judged case: the truth, the engine's answer and how it went."""

    name: str
    truth: dict
    kind: str  # diagnose | compare
    rc: int = 0
    seconds: float = 0.0
    got_class: str | None = None
    got_family: str | None = None
    got_hosts: list[str] = field(default_factory=list)
    got_onset: float | None = None
    flagged: list[str] = field(default_factory=list)  # warning/critical finding titles
    error: str = ""

    @property
    def truth_hosts(self) -> set[str]:
        return {str(c["host"]).lower() for c in self.truth.get("culprits") or [] if c.get("host")}

    @property
    def onset_err(self) -> float | None:
        """Onset error in scrape intervals; inf when the truth has an onset and the answer none."""
        t = self.truth.get("onset")
        if t is None:
            return None
        if self.got_onset is None:
            return math.inf
        return abs(self.got_onset - float(t)) / float(self.truth.get("scrape_s") or 15.0)


def find_cases(roots: list[Path], only: set[str]) -> list[Case]:
    """Every directory under the roots with a truth.json (pairs hold a/ and b/)."""
    cases = []
    for root in roots:
        for truth_file in sorted(root.rglob("truth.json")):
            d = truth_file.parent
            if d.name in ("a", "b") and (d.parent / "truth.json").exists():
                continue
            truth = json.loads(truth_file.read_text())
            if only and truth.get("class") not in only:
                continue
            kind = "compare" if (d / "a").is_dir() and (d / "b").is_dir() else "diagnose"
            cases.append(Case(name=str(d.relative_to(root.parent)), truth=truth, kind=kind))
            cases[-1].truth["_dir"] = str(d.resolve())
    return cases


def run_case(case: Case, timeout: float, repo: Path = REPO) -> Case:
    """Run the engine on one case and read its answer."""
    d = Path(case.truth["_dir"])
    if case.kind == "compare":
        cmd = ["compare", "--job-dir", str(d / "a"), "--job-dir", str(d / "b")]
    else:
        cmd = ["diagnose", "--job-dir", str(d)]
    t0 = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "manage.py", *cmd, "--format", "json"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        case.rc, case.error, case.seconds = -1, f"timeout after {timeout:.0f} s", time.monotonic() - t0
        return case
    case.seconds, case.rc = time.monotonic() - t0, done.returncode
    if done.returncode != 0:
        case.error = (done.stderr.strip().splitlines() or ["(no stderr)"])[-1][:200]
        return case
    try:
        out = json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        case.error = f"stdout is not JSON: {exc}"
        return case
    diag = out.get("diagnosis") or {}
    case.got_class, case.got_family = diag.get("class"), diag.get("root_cause_family")
    case.got_hosts = sorted({str(c.get("host")).lower() for c in diag.get("culprits") or [] if c.get("host")})
    case.got_onset = diag.get("onset")
    case.flagged = [
        f.get("title", "") for f in out.get("findings") or [] if f.get("severity") in ("warning", "critical")
    ]
    return case


def _prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def per_class(cases: list[Case]) -> dict[str, dict[str, float]]:
    """Precision, recall, F1 and support of every class in the truth or the answers."""
    labels = sorted({c.truth["class"] for c in cases} | {c.got_class for c in cases if c.got_class})
    table = {}
    for label in labels:
        tp = sum(1 for c in cases if c.truth["class"] == label and c.got_class == label)
        fp = sum(1 for c in cases if c.truth["class"] != label and c.got_class == label)
        fn = sum(1 for c in cases if c.truth["class"] == label and c.got_class != label)
        p, r, f = _prf(tp, fp, fn)
        table[label] = {"precision": p, "recall": r, "f1": f, "support": tp + fn}
    return table


def is_wrong(c: Case) -> bool:
    err = c.onset_err
    return (
        c.got_class != c.truth["class"]
        or set(c.got_hosts) != c.truth_hosts
        or (err is not None and err > 3)
        or (c.truth["class"] == "healthy" and bool(c.flagged))
    )


def summarise(cases: list[Case]) -> dict:
    """Every figure the scorer prints."""
    classes = per_class(cases)
    tp = sum(len(set(c.got_hosts) & c.truth_hosts) for c in cases)
    fp = sum(len(set(c.got_hosts) - c.truth_hosts) for c in cases)
    fn = sum(len(c.truth_hosts - set(c.got_hosts)) for c in cases)
    errs = [e for c in cases if (e := c.onset_err) is not None]
    healthy = [c for c in cases if c.truth["class"] == "healthy"]
    secs = [c.seconds for c in cases]
    return {
        "cases": len(cases),
        "classes": classes,
        "macro_f1": statistics.fmean(v["f1"] for v in classes.values()) if classes else 0.0,
        "class_accuracy": sum(c.got_class == c.truth["class"] for c in cases) / max(1, len(cases)),
        "family_accuracy": sum(c.got_family == c.truth.get("family") for c in cases) / max(1, len(cases)),
        "culprit": dict(zip(("precision", "recall", "f1"), _prf(tp, fp, fn), strict=True))
        | {"tp": tp, "fp": fp, "fn": fn},
        "onset": {
            "n": len(errs),
            "median": _quantile(errs, 0.5),
            "p90": _quantile(errs, 0.9),
            "within3": sum(e <= 3 for e in errs),
            "missing": sum(math.isinf(e) for e in errs),
        },
        "healthy_flagged": [c.name for c in healthy if c.flagged],
        "healthy_total": len(healthy),
        "bad_exit": {c.name: c.rc for c in cases if c.rc != 0},
        "seconds": {
            "mean": statistics.fmean(secs) if secs else 0.0,
            "median": _quantile(secs, 0.5),
            "total": sum(secs),
        },
        "load": os.getloadavg(),
        "wrong": [_wrong_line(c) for c in cases if is_wrong(c)],
    }


def _fmt_err(e: float | None) -> str:
    return "-" if e is None else ("missing" if math.isinf(e) else f"{e:.1f}")


def _wrong_line(c: Case) -> str:
    truth_hosts = ",".join(sorted(c.truth_hosts)) or "-"
    got_hosts = ",".join(c.got_hosts) or "-"
    extra = f" rc={c.rc} {c.error}" if c.rc else ""
    flag = f" flagged: {'; '.join(c.flagged)[:160]}" if c.truth["class"] == "healthy" and c.flagged else ""
    return (
        f"{c.name}: {c.truth['class']} [{truth_hosts}] -> {c.got_class} [{got_hosts}] "
        f"onset err {_fmt_err(c.onset_err)}{extra}{flag}"
    )


def report(s: dict) -> None:
    """Print the figures."""
    print(f"{s['cases']} cases, load {s['load'][0]:.1f} {s['load'][1]:.1f} {s['load'][2]:.1f}")
    print(f"{'class':26s} {'prec':>5s} {'rec':>5s} {'F1':>5s} {'n':>3s}")
    for label, v in s["classes"].items():
        print(f"{label:26s} {v['precision']:5.2f} {v['recall']:5.2f} {v['f1']:5.2f} {v['support']:3d}")
    print(
        f"class macro-F1 {s['macro_f1']:.3f}  class accuracy {s['class_accuracy']:.3f}  "
        f"family accuracy {s['family_accuracy']:.3f}"
    )
    cu = s["culprit"]
    print(
        f"culprit hosts: precision {cu['precision']:.3f} recall {cu['recall']:.3f} F1 {cu['f1']:.3f} "
        f"(tp {cu['tp']}, fp {cu['fp']}, fn {cu['fn']})"
    )
    on = s["onset"]
    print(
        f"onset error (scrape intervals): median {_fmt_err(on['median'])}, p90 {_fmt_err(on['p90'])}, "
        f"within 3: {on['within3']}/{on['n']} (no onset given: {on['missing']})"
    )
    print(f"healthy with a warning/critical finding: {len(s['healthy_flagged'])}/{s['healthy_total']}")
    print(f"exit codes other than 0: {len(s['bad_exit'])} {s['bad_exit'] or ''}")
    sec = s["seconds"]
    print(
        f"seconds per case: mean {sec['mean']:.1f}, median {sec['median'] or 0:.1f}, total {sec['total']:.0f}"
    )
    print(f"wrong ({len(s['wrong'])}):")
    for line in s["wrong"]:
        print("  " + line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("roots", nargs="+", type=Path)
    ap.add_argument("--jobs", type=int, default=2, help="cases judged at once")
    ap.add_argument("--json", type=Path, help="write the figures and every case's answer here")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds before a case counts as failed")
    ap.add_argument("--only", default="", help="comma-separated classes to judge")
    ap.add_argument(
        "--repo", type=Path, default=REPO, help="the checkout whose engine judges (another commit's worktree)"
    )
    args = ap.parse_args()
    cases = find_cases(args.roots, {c for c in args.only.split(",") if c})
    if not cases:
        sys.exit(f"no truth.json under {', '.join(map(str, args.roots))}")
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        cases = list(pool.map(lambda c: run_case(c, args.timeout, args.repo), cases))
    summary = summarise(cases)
    report(summary)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(summary | {"per_case": [asdict(c) for c in cases]}, indent=1, default=str)
        )


if __name__ == "__main__":
    main()
