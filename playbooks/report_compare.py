"""Render a `compare` result as Markdown, in the shape of the seeds' "Report structure for comparison"."""

from __future__ import annotations

from typing import Any

from .compare import delta_text
from .report import fmt_time, md_code, md_line, md_name, md_text

__all__ = ["compare_markdown"]


def _cell(x: Any) -> str:
    if x is None:
        return "\u2014"
    if isinstance(x, float):
        return f"{x:.4g}" if abs(x) < 1e6 else f"{x:.3e}"
    return md_line(x).replace("|", "\\|")


def compare_markdown(d: dict[str, Any]) -> str:
    """Return the `## Multi-Job Comparison` report for a compare JSON object."""
    jobs = d["jobs"]
    names = [f"job {md_name(j['id'])}" for j in jobs]
    cmp_, diag = d["comparison"], d["diagnosis"]
    base = cmp_.get("baseline", 0)
    lines = [
        f"## Multi-Job Comparison: {' vs '.join(names)}",
        "",
        f"**Baseline:** {names[base]}  ",
        f"**Diagnosis:** {diag['class']} ({diag['root_cause_family']}), "
        f"confidence {diag['confidence']:.2f}  ",
        f"**Onset:** {fmt_time(diag['onset'])}",
        "",
    ]
    lines += [
        "### Jobs",
        "",
        "| job | status | steps | profile | hosts | data |",
        "|---|---|---|---|---|---|",
    ]
    sources = d.get("sources") or [d["source"]] * len(jobs)
    for name, j, s in zip(names, jobs, sources, strict=False):
        lines.append(
            f"| {name} | {_cell(j['status'])} | {_cell(j['first_step'])} \u2192 {_cell(j['last_step'])} | "
            f"{s['profile']} | {len(s['hosts'])} | {fmt_time(s['time_range'][0])} \u2192 "
            f"{fmt_time(s['time_range'][1])} |"
        )
    lines += ["", "### Config differences", ""]
    if cmp_["config_diff"]:
        lines += ["| Parameter | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        lines += [
            f"| `{md_code(k)}` | " + " | ".join(_cell(v) for v in vals) + " |"
            for k, vals in cmp_["config_diff"].items()
        ]
    else:
        lines.append("None (run-specific keys such as job id, node names, ports and paths left out).")
    ov = cmp_["overlap_steps"]
    lines += [
        "",
        f"### Overlapping step range: {ov[0]} to {ov[1]}" if ov else "### Overlapping step range: none",
        "",
        "Steady state only: warm-up after the later start and checkpoint steps are left out.",
        "",
    ]
    lines += [
        "### Metric comparison (steady-state medians over overlapping steps)",
        "",
        "| Metric | " + " | ".join(names) + " | Delta | Likely cause |",
        "|---" * (len(names) + 3) + "|",
    ]
    for m in cmp_["metrics"]:
        vals = " | ".join(_cell(v) for v in m["values"])
        lines.append(f"| {m['name']} | {vals} | {delta_text(m)} | {_cell(m['likely_cause'])} |")
    lines += ["", "### Root cause", "", md_text(diag["summary"]), ""]
    if diag["chain"]:
        lines += [" \u2192 ".join(md_text(c) for c in diag["chain"]), ""]
    if diag["culprits"]:
        lines += [
            "**Culprits:** "
            + ", ".join(
                md_name(c["host"]) + (f" GPU {md_name(c['gpu'])}" if c.get("gpu") else "")
                for c in diag["culprits"]
            ),
            "",
        ]
    lines += ["### Findings", ""]
    for f in d["findings"]:
        lines.append(f"- **{f['severity']}** {md_text(f['title'])}")
        for e in f["evidence"][:6]:
            lines.append(
                f"  - `{md_code(e['query'][:160])}` = {_cell(e['value'])}: {md_text(e['interpretation'])}"
            )
    t = d["timings"]
    lines += [
        "",
        f"_{t['queries']} queries, {t['total_s']:.1f} s ({t['prometheus_s']:.1f} s in Prometheus)._",
    ]
    return "\n".join(lines) + "\n"
