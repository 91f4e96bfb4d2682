"""The investigation's verdict: one answer for the page header, reconciling the diagnosis and the comparison.

An investigation can hold two decided answers about its primary job: the single-job diagnosis (the latest
done DiagnosisRun of that job) and the multi-job comparison (the latest done comparison run). They may
disagree: a restored job's diagnosis sees a uniform CPU load it cannot judge alone ("confirm with
compare", 45 %) while the comparison against its fresh-start baseline names the leak (90 %). The page
shows one verdict and says where it came from:

- only one of them is decided: that one;
- both name the same class: that class, at the higher confidence, "the diagnosis and the comparison agree";
- they differ: a named incident wins over "healthy" (a fault one of them saw is not cancelled by the
  other not seeing it); between two incidents the higher confidence wins, the comparison on a tie (it
  saw more: the baseline). The other's word is kept as `other`, so the page can say what it said.

`next_steps` turns the verdict into the numbered actions of the seeds' report ("Recommended next steps"):
the report's own table (`reports.services.remedies.next_steps`), so the page and the report say the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from investigations.models import DiagnosisRun, Investigation, InvestigationJob, TaskStatus
from reports.services.remedies import next_steps as report_next_steps

HEALTHY = "healthy"
#: Below this the verdict's first next step is to confirm it (a comparison with a healthy run).
LOW_CONFIDENCE = 0.6


@dataclass(frozen=True)
class Opinion:
    """One decided run's diagnosis object, with which kind of run it came from."""

    kind: str  # "diagnosis" or "comparison"
    run: DiagnosisRun
    diagnosis: dict[str, Any]

    @property
    def klass(self) -> str:
        return str(self.diagnosis.get("class") or HEALTHY)

    @property
    def confidence(self) -> float:
        try:
            return max(0.0, min(1.0, float(self.diagnosis.get("confidence") or 0)))
        except (TypeError, ValueError):
            return 0.0


@dataclass(frozen=True)
class Verdict:
    """The investigation's answer: the diagnosis object it shows, the run it came from, and why."""

    diagnosis: dict[str, Any]
    source: Opinion
    other: Opinion | None = None
    agree: bool = False
    next_steps: list[str] = field(default_factory=list)

    @property
    def klass(self) -> str:
        return self.source.klass

    @property
    def confidence(self) -> float:
        if self.agree and self.other is not None:
            return max(self.source.confidence, self.other.confidence)
        return self.source.confidence

    @property
    def origin(self) -> str:
        """Where the verdict came from, in one sentence for the header."""
        src = self.source
        what = f"the {src.kind} (run #{src.run.pk})"
        if self.other is None:
            return f"From {what}."
        other = self.other
        if self.agree:
            return f"The diagnosis and the comparison agree (runs #{src.run.pk} and #{other.run.pk})."
        return (
            f"From {what}; the {other.kind} (run #{other.run.pk}) said {other.klass} "
            f"at {round(100 * other.confidence)} %."
        )


def _latest_done(investigation: Investigation, *, comparison: bool) -> DiagnosisRun | None:
    runs = DiagnosisRun.objects.filter(investigation=investigation, status=TaskStatus.DONE)
    if comparison:
        runs = runs.filter(kind=DiagnosisRun.Kind.COMPARISON)
    else:
        primary = InvestigationJob.objects.filter(
            investigation=investigation, role=InvestigationJob.Role.PRIMARY
        ).values("job_id")
        runs = runs.filter(kind=DiagnosisRun.Kind.DIAGNOSIS, job_id__in=primary)
    return runs.order_by("-finished", "-pk").first()


def _opinion(kind: str, run: DiagnosisRun | None) -> Opinion | None:
    diagnosis = ((run.result or {}).get("diagnosis") if run else None) or None
    if run is None or not isinstance(diagnosis, dict) or not diagnosis.get("class"):
        return None
    return Opinion(kind, run, diagnosis)


def reconcile(diagnosis: Opinion | None, comparison: Opinion | None) -> Verdict | None:
    """Return the verdict of two opinions (either may be None), by the rules of the module docstring."""
    if diagnosis is None and comparison is None:
        return None
    if diagnosis is None or comparison is None:
        only = diagnosis or comparison
        assert only is not None  # one of the two is set (both None returned above)
        return _verdict(only, None, agree=False)
    if diagnosis.klass == comparison.klass:
        lead = comparison if comparison.confidence >= diagnosis.confidence else diagnosis
        other = diagnosis if lead is comparison else comparison
        return _verdict(lead, other, agree=True)
    if (diagnosis.klass == HEALTHY) != (comparison.klass == HEALTHY):
        lead = comparison if diagnosis.klass == HEALTHY else diagnosis
    else:
        lead = comparison if comparison.confidence >= diagnosis.confidence else diagnosis
    return _verdict(lead, diagnosis if lead is comparison else comparison, agree=False)


def _verdict(lead: Opinion, other: Opinion | None, *, agree: bool) -> Verdict:
    shown = dict(lead.diagnosis)
    if agree and other is not None:
        # The comparison names no culprit hosts when a fault is uniform; the diagnosis may have.
        if not shown.get("culprits") and other.diagnosis.get("culprits"):
            shown["culprits"] = other.diagnosis["culprits"]
        if shown.get("onset") is None and other.diagnosis.get("onset") is not None:
            shown["onset"] = other.diagnosis["onset"]
    confidence = max(lead.confidence, other.confidence) if agree and other else lead.confidence
    return Verdict(
        diagnosis=shown, source=lead, other=other, agree=agree, next_steps=next_steps(shown, confidence)
    )


def investigation_verdict(investigation: Investigation) -> Verdict | None:
    """Return the investigation's verdict from its latest decided diagnosis and comparison, or None."""
    return reconcile(
        _opinion("diagnosis", _latest_done(investigation, comparison=False)),
        _opinion("comparison", _latest_done(investigation, comparison=True)),
    )


# --- Next steps ----------------------------------------------------------------------------------


def culprit_names(diagnosis: dict[str, Any]) -> str:
    """Return the diagnosis' culprits as "h1 GPU 3, h2", or "" when it names none."""
    names = []
    for c in diagnosis.get("culprits") or []:
        if isinstance(c, dict) and c.get("host"):
            gpu = c.get("gpu")
            names.append(f"{c['host']}" + (f" GPU {gpu}" if gpu not in (None, "") else ""))
    return ", ".join(names)


def next_steps(diagnosis: dict[str, Any], confidence: float) -> list[str]:
    """Return the numbered actions for a diagnosis object: the report's next steps (one table, by root-cause
    family, the culprits first), preceded by a word of caution when the confidence is low."""
    steps = report_next_steps(diagnosis)
    if str(diagnosis.get("class") or HEALTHY) != HEALTHY and confidence < LOW_CONFIDENCE:
        steps.insert(
            0, "Confirm before acting: the confidence is low; compare with a healthy run of the same config."
        )
    return steps


# --- Findings' place in the causal chain ---------------------------------------------------------

#: Playbooks whose informational findings are the job-level symptoms a root cause produces (step time
#: up, throughput down): "effect" under a named incident; every other informational finding is "context".
EFFECT_PLAYBOOKS = frozenset({"training"})
#: A symptom that starts more than this before its cause's onset is flagged (about two scrape intervals
#: of the slower exporters: closer than that is the detectors' resolution, not an order).
ORDER_TOLERANCE_S = 60.0


def finding_role(finding: Any, diagnosis: dict[str, Any] | None) -> tuple[str, str]:
    """Return (label, note) for a finding row of a decided diagnosis.

    label: the finding's class for warnings and criticals (the cause and its chain); for informational
    ones "effect" (told by the diagnosis' causal chain, or a job-level symptom such as step time under a
    named incident) or "context" (true, but not the story).
    note: for an effect that began before its cause's onset, a sentence saying so and what it means.
    """
    if finding.severity != "info":
        return finding.incident_class, ""
    klass = str((diagnosis or {}).get("class") or HEALTHY)
    in_chain = any(finding.title in str(link) for link in (diagnosis or {}).get("chain") or [])
    if klass == HEALTHY or not (in_chain or finding.playbook in EFFECT_PLAYBOOKS):
        return "context", ""
    if klass == "training-instability" and not in_chain:
        return "context", ""
    cause_onset = (diagnosis or {}).get("onset")
    if finding.onset is None or not isinstance(cause_onset, int | float):
        return "effect", ""
    lead = float(cause_onset) - float(finding.onset)
    if lead <= ORDER_TOLERANCE_S:
        return "effect", ""
    return "effect", (
        f"Began {_span(lead)} before the {klass} onset: an effect cannot precede its cause, so the cause "
        f"probably started below its detection threshold, or this slowdown has a second source."
    )


def _span(seconds: float) -> str:
    whole = int(round(seconds))
    minutes, secs = divmod(whole, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"
