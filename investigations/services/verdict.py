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

`next_steps` turns the verdict into the numbered actions of the seeds' report ("Recommended next steps"),
naming the culprits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..models import DiagnosisRun, Investigation, InvestigationJob, TaskStatus
from .diagnosis import COMPARISON_PLAYBOOKS

HEALTHY = "healthy"


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
        runs = runs.filter(playbooks=COMPARISON_PLAYBOOKS)
    else:
        primary = InvestigationJob.objects.filter(
            investigation=investigation, role=InvestigationJob.Role.PRIMARY
        ).values("job_id")
        runs = runs.exclude(playbooks=COMPARISON_PLAYBOOKS).filter(job_id__in=primary)
    return runs.order_by("-finished", "-pk").first()


def _opinion(kind: str, run: DiagnosisRun | None) -> Opinion | None:
    diagnosis = ((run.result or {}).get("diagnosis") if run else None) or None
    if not isinstance(diagnosis, dict) or not diagnosis.get("class"):
        return None
    return Opinion(kind, run, diagnosis)


def reconcile(diagnosis: Opinion | None, comparison: Opinion | None) -> Verdict | None:
    """Return the verdict of two opinions (either may be None), by the rules of the module docstring."""
    if diagnosis is None and comparison is None:
        return None
    if diagnosis is None or comparison is None:
        only = diagnosis or comparison
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


# Per class: what to do, from the seeds' playbooks (002: "Recommended next steps"; 004: Xid handling).
# "{culprits}" is replaced by the culprit list, "{hosts}" by "the culprit hosts" when there are none named.
_STEPS: dict[str, list[str]] = {
    HEALTHY: [
        "Nothing beyond normal behaviour (checkpoint spikes, warm-up): if the job still failed, read the "
        "log triage's primary match and check the scheduler's record of the job.",
    ],
    "collective-hang": [
        "Restart from the last checkpoint{on_hosts}.",
        "Compare the busy-wait GPU sets per host: a host whose set differs ({culprits}) is where to look "
        "first; capture a stack dump before killing a hung job next time.",
    ],
    "network-hang": [
        "Exclude {culprits} from the next run and open a ticket for their RDMA links (retransmits, ACK timeouts).",
        "Restart from the last checkpoint on the remaining nodes.",
    ],
    "node-death": [
        "Drain {culprits} and send it to hardware triage (RAS/ECC and Xid history, dmesg, BMC log).",
        "Restart from the last checkpoint without it.",
    ],
    "heartbeat-false-positive": [
        "Do not drain the accused hosts: they were training normally.",
        "Raise the heartbeat timeout (seeds: at least 2x the longest checkpoint save + restore) and restart.",
    ],
    "host-oom": [
        "Lower host memory use at checkpoint save on {culprits} (fewer in-flight save buffers, async "
        "save limits), or move replica-0 saves to hosts with more memory.",
        "Restart from the last checkpoint.",
    ],
    "thermal-straggler": [
        "Drain {culprits} (it slows every step of the job) and ask the data-centre team to check its cooling.",
        "Restart without it; step time should return to the baseline.",
    ],
    "rdma-degradation": [
        "Exclude {culprits} from the next run: sustained RDMA retransmits cost the whole job throughput.",
        "Open a network ticket for their NICs, cables and switch ports.",
    ],
    "restore-resource-leak": [
        "Compare the restored run with its fresh-start baseline (the comparison) before restoring again.",
        "Restart fresh from the checkpoint (a new process) rather than restoring in place; "
        "jax.clear_caches() does not release the leaked communicators.",
    ],
    "monitoring-ghost-data": [
        "Do not act on these metrics: {culprits_or_exporter} froze. Restart the exporter and re-check.",
    ],
    "gpu-driver-fault": [
        "Schedule a driver reset or reboot of {culprits} at the next checkpoint; training is not affected yet.",
    ],
    "gpu-hardware-fault": [
        "Drain {culprits} and file an RMA with the Xid/ECC evidence.",
        "Restart from the last checkpoint without it.",
    ],
    "training-instability": [
        "Inspect the training metrics that moved first (loss, grad norm, MoE load balance) and the data "
        "or learning-rate change before the onset; the hardware followed, it did not lead.",
    ],
}


def next_steps(diagnosis: dict[str, Any], confidence: float) -> list[str]:
    """Return the numbered actions for a diagnosis object (class and culprits), most urgent first."""
    klass = str(diagnosis.get("class") or HEALTHY)
    culprits = culprit_names(diagnosis)
    values = {
        "culprits": culprits or "the culprit hosts",
        "on_hosts": f" (after draining {culprits})" if culprits else "",
        "culprits_or_exporter": culprits or "the exporter",
    }
    steps = [step.format(**values) for step in _STEPS.get(klass, [])]
    if klass != HEALTHY and confidence < 0.6:
        steps.insert(0, "Confirm before acting: the confidence is low; compare with a healthy run of the same config.")
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
