"""Render triage (and later diagnosis) results as Markdown, in the seed report templates' shape."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

__all__ = [
    "SLOWDOWN",
    "diagnosis_markdown",
    "fmt_time",
    "md_cell",
    "md_code",
    "md_line",
    "md_name",
    "md_text",
    "slowdown",
    "triage_markdown",
]

#: the `measure` label of the step-time finding's evidence that holds the steps' mean excess over the job's
#: steady state from the onset to the end of training (0.15: steps took 15 % longer)
SLOWDOWN = "mean slowdown"

#: control characters (a label value or a log line may hold any): shown as `\xNN`, never a line break
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")
#: characters Markdown gives a meaning to inside a line
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~#!])")
#: the ones that open raw HTML, a link, an image, a code span or a table cell
_MD_STRUCTURE = re.compile(r"([\\`\[\]<>|!])")


def fmt_time(ts: float | None) -> str:
    """Return a unix time as ISO 8601 UTC, or an em dash."""
    if ts is None:
        return "\u2014"
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _v(x: Any) -> str:
    return "\u2014" if x is None else str(x)


def md_line(x: Any) -> str:
    """Return text for one Markdown line: control characters (a newline in a label value) as `\\xNN`."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", _v(x))


def md_text(x: Any) -> str:
    """Return the engine's prose (which quotes host names and label values) for one Markdown line: what
    could open raw HTML, a link, an image, a code span or a table cell is escaped; emphasis is left."""
    return _MD_STRUCTURE.sub(r"\\\1", md_line(x))


def md_cell(x: Any) -> str:
    """Return text for one table cell: one line, its pipes escaped."""
    return md_line(x).replace("|", "\\|")


def md_code(x: Any) -> str:
    """Return text for a code span in a table cell: one line, pipes escaped, no backtick to end it early."""
    return md_cell(x).replace("`", "'")


def md_name(x: Any) -> str:
    """Return a name read from the data (a host, a GPU, a job id) with every Markdown character escaped,
    so that it reads as written and cannot open a link, an image, a heading or a table cell."""
    return _MD_SPECIAL.sub(r"\\\1", md_line(x))


def triage_markdown(d: dict[str, Any]) -> str:
    """Return the `## Job triage` report for a triage JSON object."""
    job, prog, prom = d["job"], d["progress"], d["prometheus"]
    lines = [
        f"## Job triage: {md_name(job['id'])}",
        "",
        f"**Status:** {_v(job['status'])}  ",
        f"**Primary failure:** {_v(job['triage_class'])}  ",
        f"**Crash time:** {fmt_time(job['crash_time'])}  ",
        f"**Steps:** {_v(job['first_step'])} \u2192 {_v(job['last_step'])} of {_v(prog['steps_total'])}",
        "",
    ]
    lines += ["### Progress", "", "| figure | value |", "|---|---|"]
    for key, label in (
        ("restored_from", "restored from step"),
        ("step_time_s", "steady step time (s)"),
        ("last_step_time", "last step at"),
        ("last_checkpoint_step", "last checkpoint step"),
        ("lost_steps", "steps lost since checkpoint"),
        ("tgs_trend_pct", "TGS trend (%)"),
    ):
        val = fmt_time(prog[key]) if key == "last_step_time" and prog[key] is not None else _v(prog[key])
        lines.append(f"| {label} | {val} |")
    det = d.get("details", {})
    if det.get("training_time_s") is not None:
        lines.append(f"| training time vs wall (s) | {det['training_time_s']} / {_v(det.get('wall_s'))} |")
    lines += ["", "### Evidence", ""]
    if d["matches"]:
        lines += ["| class | line | text |", "|---|---|---|"]
        for m in d["matches"][:40]:
            text = m["text"].replace("|", "\\|")
            lines.append(f"| {m['class']} | {m['line'] or '\u2014'} | `{text[:160]}` |")
    else:
        lines.append("No failure signature.")
    if d["heartbeat_accused"]:
        lines += ["", f"**Heartbeat accused:** {', '.join(d['heartbeat_accused'])}"]
    lines += _host_events_md(d.get("details", {}).get("host_events") or [])
    lines += [
        "",
        "### Live dashboards",
        "",
        f"Prometheus on `{_v(prom['head'])}:{_v(prom['port'])}`"
        + (f" \u2014 `{prom['tunnel']}`" if prom["tunnel"] else ""),
    ]
    if d["config"]:
        keys = [
            k
            for k in (
                "NNODES",
                "steps",
                "checkpoint_period",
                "per_device_batch_size",
                "jax_distributed_heartbeat_timeout_seconds",
            )
            if k in d["config"]
        ]
        if keys:
            lines += ["", "### Config", "", *[f"- `{k}` = `{d['config'][k]}`" for k in keys]]
    if d["unreadable"]:
        lines += ["", "### Could not read", "", *[f"- {u}" for u in d["unreadable"]]]
    return "\n".join(lines) + "\n"


#: Host events listed in the Markdown before "n more" (the JSON keeps them all).
HOST_EVENTS_LISTED = 40


def _host_events_md(events: list[dict[str, Any]]) -> list[str]:
    """Return the `### Host events` lines: kind, host, time, line and code of each event the log mapped."""
    if not events:
        return []
    out = [
        "",
        "### Host events",
        "",
        "| kind | host | time | line | code | text |",
        "|---|---|---|---|---|---|",
    ]
    for e in events[:HOST_EVENTS_LISTED]:
        text = md_code((e.get("text") or "")[:160])
        out.append(
            f"| {e.get('kind')} | {md_name(e.get('host'))} | {fmt_time(e.get('time'))} "
            f"| {e.get('line') or '\u2014'} | {md_cell(e.get('code'))} | `{text}` |"
        )
    if len(events) > HOST_EVENTS_LISTED:
        out += ["", f"and {len(events) - HOST_EVENTS_LISTED} more"]
    return out


_ANALYSIS_TYPE = {
    "collective-hang": "hang",
    "network-hang": "hang",
    "node-death": "hardware",
    "heartbeat-false-positive": "heartbeat",
    "host-oom": "oom",
    "thermal-straggler": "gpu-health",
    "rdma-degradation": "network-health",
    "restore-resource-leak": "multi-job-comparison",
    "monitoring-ghost-data": "gpu-health",
    "gpu-driver-fault": "hardware",
    "gpu-hardware-fault": "hardware",
    "training-instability": "training-stability",
    "healthy": "gpu-health",
}


def diagnosis_markdown(d: dict[str, Any]) -> str:
    """Return the seeds' `## TSDB Diagnosis` report for a diagnosis JSON object."""
    job, src, dg = d["job"], d["source"], d["diagnosis"]
    t0, t1 = src["time_range"]
    hosts = src["hosts"]
    lines = [
        f"## TSDB Diagnosis: {md_name(job.get('id'))}",
        "",
        f"**Analysis type:** {_ANALYSIS_TYPE.get(dg['class'], 'gpu-health')}  ",
        f"**Time window:** {fmt_time(t0)} to {fmt_time(t1)} ({(t1 - t0) / 60:.0f} min)  ",
        f"**Nodes:** {len(hosts)} ({', '.join(md_name(h) for h in hosts[:16])}{', ...' if len(hosts) > 16 else ''})  ",
        f"**Class:** {dg['class']} (root cause: {dg['root_cause_family']}, confidence {dg['confidence']:.0%})  ",
        f"**Onset:** {fmt_time(dg['onset'])}  ",
        "**Culprits:** "
        + (
            ", ".join(
                md_name(c["host"]) + (f" GPU {md_name(c['gpu'])}" if c.get("gpu") is not None else "")
                for c in dg["culprits"]
            )
            or "none"
        ),
        "",
        "### Findings",
        "",
        md_text(dg["summary"]),
        "",
    ]
    if dg["chain"]:
        lines += ["**Causal chain:**", "", *[f"{i}. {md_text(c)}" for i, c in enumerate(dg["chain"], 1)], ""]
    lines += ["### Metric evidence", ""]
    shown = [f for f in d["findings"] if f["severity"] != "info"] or d["findings"][:3]
    for f in shown:
        lines += [
            f"**{md_text(f['title'])}** ({f['severity']}, {f['playbook']}, onset {fmt_time(f['onset'])})",
            "",
            "| Host | GPU | Value | Interpretation |",
            "|------|-----|-------|----------------|",
        ]
        for e in f["evidence"][:10]:
            lab = e["labels"]
            lines.append(
                f"| {md_name(lab.get('host'))} | {md_name(lab.get('gpu'))} | {md_cell(e['value'])} | "
                f"{md_text(e['interpretation'])} |"
            )
        if f["evidence"]:
            lines += ["", f"Query: `{md_code(f['evidence'][0]['query'][:300])}`"]
        lines.append("")
    lines += ["### Anomalies detected", ""]
    anomalies = [f for f in d["findings"] if f["severity"] != "info"]
    lines += [f"- {f['severity']}: {md_text(f['title'])}" for f in anomalies] or ["None"]
    infos = [f for f in d["findings"] if f["severity"] == "info"]
    if infos:
        lines += ["", "Other observations:", *[f"- {md_text(f['title'])}" for f in infos]]
    lines += ["", "### Correlation with triage", ""]
    tc = job.get("triage_class")
    lines.append(
        f"Triage classified the job as `{tc}` (status {_v(job.get('status'))}); the TSDB points at "
        f"`{dg['class']}`."
        if tc or job.get("status")
        else "No job log was triaged."
    )
    t = d.get("timings", {})
    lines += [
        "",
        f"_{t.get('queries', 0)} queries, {t.get('prometheus_s', 0):.2f} s in Prometheus, "
        f"{t.get('total_s', 0):.2f} s in total._",
    ]
    return "\n".join(lines) + "\n"


def slowdown(findings: list[dict[str, Any]]) -> float | None:
    """Return the steps' mean excess over the job's steady state from a diagnosis's findings (the step-time
    finding's `SLOWDOWN` evidence), or None when no slowdown was measured."""
    for f in findings:
        for e in f.get("evidence") or []:
            if (e.get("labels") or {}).get("measure") == SLOWDOWN and isinstance(e.get("value"), int | float):
                return float(e["value"])
    return None
