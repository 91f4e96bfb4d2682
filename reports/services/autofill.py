"""The machine's text of each report section, built from what the investigation already holds: the latest
diagnosis and comparison, the triage, the pinned charts (seed 002, "Output Format" and the comparison's
report structure; plus what a postmortem needs: summary, impact, timeline of events, next steps).

Pure reads: `machine_sections(investigation)` returns {key: markdown}; `fingerprint(investigation)` says
whether anything those texts come from changed since the last fill.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Max

from investigations.models import DiagnosisRun, Investigation, InvestigationJob, Job, TaskStatus
from investigations.services import comparison as comparison_svc
from investigations.services import diagnosis_overview as diagnosis_svc
from investigations.services import investigations as inv
from investigations.services.verdict import Verdict, investigation_verdict
from playbooks.classes import load_classes
from playbooks.report import fmt_time, slowdown

from .remedies import culprits_text

#: The report's sections, in order: (key, title). `comparison` is present when jobs were compared.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("summary", "Summary"),
    ("impact", "Impact"),
    ("timeline", "Timeline of events"),
    ("findings", "Findings"),
    ("metric_evidence", "Metric evidence"),
    ("anomalies", "Anomalies detected"),
    ("log_evidence", "Log evidence"),
    ("source_trace", "Source code trace"),
    ("triage_correlation", "Correlation with triage"),
    ("comparison", "Multi-Job Comparison"),
    ("next_steps", "Recommended next steps"),
)
TITLES = dict(SECTIONS)


@dataclass
class Inputs:
    """What the machine text is built from."""

    investigation: Investigation
    job: Job | None
    triage: dict[str, Any] = field(default_factory=dict)
    run: DiagnosisRun | None = None
    result: dict[str, Any] = field(default_factory=dict)
    compare: dict[str, Any] = field(default_factory=dict)
    compare_run: DiagnosisRun | None = None
    charts: list[Any] = field(default_factory=list)
    #: The investigation's reconciled answer (the page header's): the diagnosis and the comparison together.
    verdict: Verdict | None = None


def gather(investigation: Investigation) -> Inputs:
    job = inv.investigation_primary_job(investigation)
    overview = diagnosis_svc.diagnosis_overview(investigation, job)
    comparison = comparison_svc.comparison_overview(investigation)
    done = job is not None and job.triage_status == job.TriageStatus.DONE
    return Inputs(
        investigation=investigation,
        job=job,
        triage=(job.triage or {}) if done and job is not None else {},
        run=overview["decided"],
        result=(overview["decided"].result or {}) if overview["decided"] else {},
        compare=comparison["result"] or {},
        compare_run=comparison["decided"],
        charts=list(investigation.pinned_charts.order_by("created", "pk")),
        verdict=investigation_verdict(investigation),
    )


def fingerprint(investigation: Investigation) -> str:
    """Return a short string that changes when any input of the machine text may have changed: the primary
    job and its triage's end, the finished diagnoses and comparisons (a new one may be the latest, or
    change the verdict; a finished run's result never changes), the pinned charts.

    Three small queries, so that a page can tell that nothing changed without gathering the inputs."""
    primary = investigation.job_links.filter(role=InvestigationJob.Role.PRIMARY).order_by("position", "pk")
    job = primary.values_list("job_id", "job__triage__finished").first() or ("-", "-")
    runs = DiagnosisRun.objects.filter(investigation=investigation, status=TaskStatus.DONE).aggregate(
        n=Count("pk"), last=Max("pk")
    )
    charts = investigation.pinned_charts.order_by("pk").values_list("pk", flat=True)
    parts = (*job, runs["n"], runs["last"], ",".join(map(str, charts)) or "-")
    return ":".join(str(x) for x in parts)[:200]


def latest_done_run(investigation: Investigation) -> DiagnosisRun | None:
    return investigation.diagnosis_runs.filter(status=TaskStatus.DONE).order_by("-finished", "-pk").first()


def _cell(x: Any) -> str:
    return "\u2014" if x is None else str(x).replace("|", "\\|").replace("\n", " ")


def impact(inputs: Inputs) -> dict[str, Any]:
    """Return GPU-hours lost between the onset and the kill/restart (nodes x GPUs x hours, from the data)
    and steps lost since the last checkpoint, with how each was found; None where the data lacks it."""
    res, prog = inputs.result, (inputs.triage.get("progress") or {})
    source, diagnosis = res.get("source") or {}, res.get("diagnosis") or {}
    hosts, gpus = len(source.get("hosts") or []), source.get("gpus_per_host")
    onset = diagnosis.get("onset")
    end = diagnosis_svc.crash_time(inputs.job, inputs.run) if inputs.job is not None else None
    time_range = source.get("time_range") or [None, None]
    end = end if end is not None else time_range[1]
    hours = (end - onset) / 3600 if onset is not None and end is not None and end >= onset else None
    gpu_hours = hosts * gpus * hours if hours is not None and hosts and gpus else None
    # a job that trained on (a straggler, a degraded link) lost the share of its throughput its slower steps
    # cost, not every GPU's hour; a job that stopped lost them all
    spec = load_classes().get(str(diagnosis.get("class")))
    trained_on = spec is not None and not spec.stops_job
    slow = slowdown(res.get("findings") or []) if trained_on else None
    lost_share = slow / (1 + slow) if slow is not None and slow > 0 else None
    return {
        "class": diagnosis.get("class"),
        "hosts": hosts,
        "gpus_per_host": gpus,
        "onset": onset,
        "end": end,
        "hours": hours,
        "trained_on": trained_on,
        "slowdown": slow,
        "gpu_hours_spent": gpu_hours,
        "gpu_hours": gpu_hours
        if not trained_on
        else gpu_hours * lost_share
        if gpu_hours and lost_share
        else None,
        "lost_steps": prog.get("lost_steps"),
        "last_checkpoint_step": prog.get("last_checkpoint_step"),
    }


def _summary(i: Inputs) -> str:
    """The investigation's verdict (the page header's: the diagnosis reconciled with the comparison)."""
    v = i.verdict
    if v is None:
        return "_No diagnosis yet: run one from the investigation page, then this fills itself._"
    d = v.diagnosis
    return (
        f"**{v.klass}** (root cause: {d.get('root_cause_family') or '\u2014'}, confidence {v.confidence:.0%}). "
        f"Culprits: {culprits_text(d)}. Onset {fmt_time(d.get('onset'))}.\n\n{d.get('summary', '')}"
        f"\n\n_{v.origin}_"
    )


def _impact(i: Inputs) -> str:
    m = impact(i)
    lines = []
    span = (
        f"{m['hosts']} nodes \u00d7 {m['gpus_per_host']} GPUs \u00d7 {m['hours']:.2f} h from the onset "
        f"({fmt_time(m['onset'])}) to the kill or end of data ({fmt_time(m['end'])})"
        if m["gpu_hours_spent"] is not None
        else ""
    )
    if m["class"] == "healthy":
        lines.append("- No GPU-hours lost: the diagnosis found no incident.")
    elif m["gpu_hours_spent"] is None:
        lines.append("- GPU-hours lost: unknown (needs a diagnosis with an onset, hosts and GPUs per host).")
    elif not m["trained_on"]:
        lines.append(f"- **{m['gpu_hours']:,.1f} GPU-hours lost**: {span} (the incident stopped the job).")
    elif m["gpu_hours"] is not None:
        lines.append(
            f"- **{m['gpu_hours']:,.1f} GPU-hours of throughput lost**: the job trained on with steps "
            f"{m['slowdown']:.0%} slower, so {m['slowdown'] / (1 + m['slowdown']):.0%} of "
            f"{m['gpu_hours_spent']:,.1f} GPU-hours ({span})."
        )
    else:
        lines.append(
            f"- GPU-hours lost: none measured: the job trained on without slower steps "
            f"({m['gpu_hours_spent']:,.1f} GPU-hours since the onset: {span})."
        )
    if m["lost_steps"] is not None:
        lines.append(
            f"- **{m['lost_steps']} steps lost** since the last checkpoint (step {_cell(m['last_checkpoint_step'])})."
        )
    else:
        lines.append("- Steps lost since the last checkpoint: unknown (no triaged log with checkpoints).")
    return "\n".join(lines)


def _timeline(i: Inputs) -> str:
    events: list[tuple[float, str]] = []
    job, prog = i.triage.get("job") or {}, i.triage.get("progress") or {}
    d = i.result.get("diagnosis") or {}
    if d.get("onset") is not None:
        events.append((d["onset"], f"Onset of **{d['class']}** (diagnosis)"))
    for f in i.result.get("findings") or []:
        if f.get("onset") is not None and f.get("severity") != "info":
            events.append((f["onset"], f"{f['severity']}: {f['title']}"))
    if prog.get("last_step_time") is not None:
        events.append((prog["last_step_time"], f"Last step logged (step {_cell(job.get('last_step'))})"))
    if job.get("crash_time") is not None:
        events.append((job["crash_time"], f"Job {job.get('status') or 'ended'} (crash time from the log)"))
    if not events:
        return "_No timed events yet (triage and diagnosis give them)._"
    rows = ["| Time (UTC) | Event |", "|---|---|"]
    rows += [f"| {fmt_time(t)} | {_cell(text)} |" for t, text in sorted(events, key=lambda e: e[0])[:40]]
    return "\n".join(rows)


def _findings(i: Inputs) -> str:
    d = i.result.get("diagnosis")
    if not d:
        return "_No diagnosis yet._"
    chain = d.get("chain") or []
    return (d.get("summary") or "") + (
        "\n\n**Causal chain:**\n\n" + "\n".join(f"{n}. {c}" for n, c in enumerate(chain, 1)) if chain else ""
    )


def _metric_evidence(i: Inputs) -> str:
    findings = i.result.get("findings") or []
    shown = [f for f in findings if f.get("severity") != "info"] or findings[:3]
    if not shown:
        return "_No metric evidence yet._"
    out = []
    for f in shown[:8]:
        out += [
            f"**{f['title']}** ({f['severity']}, {f['playbook']}, onset {fmt_time(f.get('onset'))})",
            "",
            "| Host | GPU | Value | Interpretation |",
            "|---|---|---|---|",
        ]
        for e in (f.get("evidence") or [])[:10]:
            lab = e.get("labels") or {}
            out.append(
                f"| {_cell(lab.get('host'))} | {_cell(lab.get('gpu'))} | {_cell(e.get('value'))} | "
                f"{_cell(e.get('interpretation'))} |"
            )
        if f.get("evidence"):
            out += ["", f"Query: `{f['evidence'][0]['query'][:300]}`"]
        out.append("")
    for chart in i.charts:
        out.append(
            f"- Pinned chart: **{_cell(chart.title)}**" + (f" \u2014 {chart.note}" if chart.note else "")
        )
    return "\n".join(out).strip()


def _anomalies(i: Inputs) -> str:
    findings = i.result.get("findings") or []
    if not i.result:
        return "_No diagnosis yet._"
    hits = [
        f"- {f['severity']}: {f['title']}" + (f" ({', '.join(f['hosts'][:6])})" if f.get("hosts") else "")
        for f in findings
        if f.get("severity") != "info"
    ]
    return "\n".join(hits) or "None"


def _log_evidence(i: Inputs) -> str:
    matches = i.triage.get("matches") or []
    if not matches:
        return "_No log matches (no triaged log, or no failure signature in it)._"
    rows = ["| Class | Line | Text |", "|---|---|---|"]
    rows += [
        f"| {_cell(m.get('class'))} | {_cell(m.get('line'))} | `{_cell(m.get('text'))[:160].replace('`', '')}` |"
        for m in matches[:15]
    ]
    accused = i.triage.get("heartbeat_accused") or []
    if accused:
        rows += ["", f"Heartbeat accused: {', '.join(accused)}"]
    return "\n".join(rows)


def _triage_correlation(i: Inputs) -> str:
    job, d = i.triage.get("job") or {}, i.result.get("diagnosis")
    if not job:
        return "_No job log was triaged._"
    if not d:
        return f"Triage classified the job as `{job.get('triage_class')}` (status {job.get('status')}); no diagnosis yet."
    return (
        f"Triage classified the job as `{job.get('triage_class')}` (status {job.get('status')}); the TSDB "
        f"points at `{d['class']}` (root cause {d['root_cause_family']})."
    )


def _comparison(i: Inputs) -> str:
    c = i.compare
    if not c:
        return ""
    cmp_, d = c.get("comparison") or {}, c.get("diagnosis") or {}
    names = [f"job {_cell(j.get('id'))}" for j in c.get("jobs") or []]
    out = ["**Config differences**", ""]
    diff = cmp_.get("config_diff") or {}
    if diff:
        out += ["| Parameter | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        out += [f"| `{k}` | " + " | ".join(_cell(v) for v in vals) + " |" for k, vals in diff.items()]
    else:
        out.append("None.")
    ov = cmp_.get("overlap_steps")
    out += [
        "",
        f"**Overlapping steps:** {ov[0]} to {ov[1]}" if ov else "**Overlapping steps:** none",
        "",
        "| Metric | " + " | ".join(names) + " | Delta % | Likely cause |",
        "|---" * (len(names) + 3) + "|",
    ]
    for m in cmp_.get("metrics") or []:
        delta = m.get("delta_pct")
        out.append(
            f"| {_cell(m.get('name'))} | "
            + " | ".join(_cell(v) for v in m.get("values") or [])
            + f" | {'\u2014' if delta is None else f'{delta:+.1f}'} | {_cell(m.get('likely_cause'))} |"
        )
    out += ["", f"**Root cause:** {d.get('class', '\u2014')} \u2014 {d.get('summary', '')}"]
    return "\n".join(out)


def _next_steps(i: Inputs) -> str:
    if i.verdict is None:
        return "1. Run the diagnosis (and a comparison with a healthy baseline if there is one)."
    return "\n".join(f"{n}. {s}" for n, s in enumerate(i.verdict.next_steps, 1))


_BUILDERS = {
    "summary": _summary,
    "impact": _impact,
    "timeline": _timeline,
    "findings": _findings,
    "metric_evidence": _metric_evidence,
    "anomalies": _anomalies,
    "log_evidence": _log_evidence,
    "source_trace": lambda i: (
        "_Not traced yet: add the code path (file \u2192 function \u2192 effect) if known._"
    ),
    "triage_correlation": _triage_correlation,
    "comparison": _comparison,
    "next_steps": _next_steps,
}


def machine_sections(inputs: Inputs) -> dict[str, str]:
    """Return {section key: the machine's Markdown}; the comparison section only when jobs were compared."""
    texts = {key: _BUILDERS[key](inputs) for key, _ in SECTIONS}
    if not texts["comparison"]:
        del texts["comparison"]
    return texts
