"""The decision: rank the root-cause candidates and name class, family, culprits, onset, confidence, chain."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .classes import load_classes
from .context import Context, Finding, Timeline, _r
from .hostnames import address_note, unnamed_addresses
from .log_evidence import apply_log_evidence
from .recurrence import recurs
from .report import fmt_time

__all__ = ["decide_diagnosis", "score"]

SEV_RANK = {"info": 0, "warning": 1, "critical": 2}


def decide_diagnosis(ctx: Context, findings: list[Finding]) -> dict[str, Any]:
    """Return the contract's `diagnosis` object; re-class and demote findings explained by the primary.

    Candidates are scored as a diagnostician weighs them (see `score`): severity, how specific the cause is,
    how far it stands out, what corroborates it and whether its timing can explain the job's fate. Onset
    only breaks ties.
    """
    tl = ctx.timeline
    apply_log_evidence(ctx, findings)  # the log's kills, node failures and Xids, mapped to hosts
    _demote_unsupported(ctx, findings)
    cands = [f for f in findings if f.role == "cause" and SEV_RANK[f.severity] >= 1 and f.klass != "healthy"]
    if not cands:
        return _healthy(ctx, findings)
    inf = float("inf")
    ranked = sorted(
        cands, key=lambda f: (-round(score(ctx, f, findings), 6), f.onset if f.onset is not None else inf)
    )
    tol = order_tol(tl)
    primary = _unless_explained(ctx, ranked, tol)
    klass = primary.klass
    klass, primary, onset = _reconcile(ctx, klass, primary, findings, tol)
    same = [f for f in findings if f.klass == klass]
    hosts = _culprit_hosts(ctx, klass, primary, findings)
    gpus = _culprit_gpus(klass, hosts, same)
    _explain(ctx, klass, primary, findings, hosts, onset, tol)
    corroboration = sum(1 for f in same if f is not primary and SEV_RANK[f.severity] >= 1)
    conf = (0.8 if primary.severity == "critical" else 0.65) + 0.05 * min(3, corroboration)
    if klass == "collective-hang" and not any(f.rule == "busy_wait" for f in findings):
        conf = 0.5
    if klass == "restore-resource-leak":
        conf = 0.45
    if (
        len(ranked) > 1
        and ranked[1].klass != klass
        and score(ctx, ranked[1], findings) > score(ctx, primary, findings) - 0.5
    ):
        conf -= 0.1  # a close second opinion
    chain = _chain(ctx, klass, primary, findings, onset)
    return {
        "class": klass,
        "root_cause_family": load_classes()[klass].family,
        "culprits": gpus,
        "onset": _r(onset),
        "confidence": round(min(0.95, max(0.05, conf)), 2),
        "summary": _summary(ctx, klass, hosts, gpus, onset, primary, findings),
        "chain": chain,
    }


def order_tol(tl: Timeline) -> float:
    """Return how close in time two events are too close to order: two steps (90 s at least), plus how
    uncertain the stall's own time is."""
    return max(90.0, 2 * (tl.step_s or 0.0)) + tl.stall_unc_s


def _unless_explained(ctx: Context, ranked: list[Finding], tol: float) -> Finding:
    """Return the best-scored cause, unless it is the fallback (a hang, the effect of nearly anything) and a
    cause of a class that stops jobs began before the steps stopped: that cause explains the stall."""
    classes = load_classes()
    last = ctx.timeline.last_advance
    if not classes[ranked[0].klass].fallback or last is None:
        return ranked[0]
    for f in ranked[1:]:
        spec = classes[f.klass]
        if spec.stops_job and not spec.fallback and f.onset is not None and f.onset <= last + tol:
            return f
    return ranked[0]


def _n_hosts(ctx: Context) -> int:
    return max(1, len(getattr(ctx.source, "hosts", ()) or ()))


def score(ctx: Context, f: Finding, findings: list[Finding]) -> float:
    """Return how strongly a cause candidate explains the job: higher is stronger.

    - severity: a critical finding weighs twice a warning;
    - specificity: a cause on one or two hosts (or a job-level fact, such as one fabric event that left
      every affected host's own history at once) is plausible, one on a quarter of the hosts much less, one
      on most hosts is no host's fault;
    - strength: how far it stands out (a detector's ratio to its background, 10x -> 0.5, 100x -> 1);
    - corroboration: other findings on the same hosts from other rules, from shortly before to 30 minutes
      after its onset;
    - timing: when the job stalled, a cause must come before the stall (what starts after it is an effect),
      and a class whose story does not stop the job cannot explain a stall;
    - prior: how specific the class is (a hang is the effect of nearly anything: it is the fallback).
    """
    tl = ctx.timeline
    k = _n_hosts(ctx)
    total = 1.5 * SEV_RANK[f.severity]
    n = len(f.hosts)
    if n == 0 or f.extra.get("no_culprits") or f.extra.get("common_event"):
        total += 0.5
    elif n <= max(2, 0.05 * k):
        total += 1.0
    elif n <= max(3, 0.25 * k):
        total += 0.5
    elif n > 0.5 * k:
        total -= 1.0
    ratio = f.extra.get("strength")
    total += 0.5 if not ratio else min(1.0, max(0.0, math.log10(max(float(ratio), 1.0)) / 2))
    total += min(0.75, 0.25 * sum(1 for o in findings if _corroborates(o, f)))
    tol = order_tol(tl)
    spec = load_classes()[f.klass]
    late = not spec.stops_job or (
        f.onset is not None and tl.last_advance is not None and f.onset > tl.last_advance + tol
    )
    if tl.stalled and tl.last_advance is not None and not spec.fallback and late:
        total -= 1.5
    total += -0.5 if spec.fallback else 0.06 * spec.priority
    return total


def _corroborates(o: Finding, f: Finding) -> bool:
    if o is f or o.rule == f.rule or o.role == "context" or o.onset is None or f.onset is None:
        return False
    if f.hosts and not set(o.hosts) & set(f.hosts):
        return False
    if not f.hosts and o.hosts:
        return False
    related = o.klass == f.klass or o.role == "symptom"
    return related and f.onset - 300 <= o.onset <= f.onset + 1800


#: triage classes that say nothing of a failure: inferred from the steps' timing or the log's end alone
_NO_FAILURE = frozenset({"hang", "unknown-death", "tgs-degradation", "soft-success"})


def _log_failure(ctx: Context) -> bool:
    """Whether the job's log shows a failure: a failed or cancelled status, or a line of any failure class."""
    tr = ctx.triage or {}
    job = tr.get("job") or {}
    if job.get("status") in ("failed", "cancelled", "hanging"):
        return True
    return any(m.get("class") not in _NO_FAILURE for m in tr.get("matches") or [] if isinstance(m, dict))


def _demote_unsupported(ctx: Context, findings: list[Finding]) -> None:
    """Turn findings that lack what their class needs into notes (info)."""
    if not any(f.rule == "busy_wait" for f in findings):
        # Without a log, steps that stop before the data ends may just be the job's end (exporters kept
        # running): only GPUs still spinning make it a hang. With a log that shows no failure, the job's own
        # GPUs going idle after its last step is its end too.
        for f in findings:
            if f.rule != "step_stall":
                continue
            if ctx.triage is None:
                f.severity = "info"
                f.title += " (GPUs not busy-waiting: the job may simply have ended)"
            elif f.extra.get("job_gpus_idle") and not _log_failure(ctx):
                f.severity = "info"
                f.title += " (the job's GPUs went idle and its log shows no failure: the job ended)"
    _no_hang_before_kill(findings)
    for f in findings:
        # a rule may need another rule's finding on the same host to stand (e.g. dmesg errors alone), or,
        # without it, its departure must recur (`recurs`: one stretch of scrape timeouts is an outage)
        needs = f.extra.get("needs") or ()
        if (
            needs
            and not any(o.rule in needs and set(o.hosts) & set(f.hosts) for o in findings)
            and not _recurs(ctx, f)
        ):
            f.severity = "info"
            if "recurs" in f.extra:
                f.title += (
                    " (no driver error on the host, and its timeouts are one outage or no more than the fleet's"
                    " own lost scrapes: the monitoring, not the GPU driver)"
                )
    # rdma-degradation means the job slowed down: without a step-time rise overlapping it, retransmits are a
    # note when the job's step times across their onset say it did not slow. A slowdown dated more than 15 min
    # before them is no evidence either way: the steps' own time across the retransmits' onset says whether
    # they slowed the job. Where no step time says either (none before the onset), the finding stands alone
    if ctx.grid("step_time") is not None and not ctx.timeline.stalled:
        slow = [f for f in findings if f.rule == "step_time_regression"]
        for f in findings:
            if (
                f.klass == "rdma-degradation"
                and SEV_RANK[f.severity] >= 1
                and f.onset is not None
                and not any(s.onset is not None and s.onset >= f.onset - 900 for s in slow)
            ):
                slowed = _slowed_at(ctx, f.onset)
                if slowed is False:
                    f.severity = "info"
                    f.title += " (the job did not slow down)"
                elif slowed is None:  # no step times on one side of the onset: judged on its own strength
                    f.title += " (no step times around it say whether the job slowed down)"


#: how much slower the steps after an onset must run than just before it to have slowed down at it: the
#: step_time_regression rule's own min_rel (training.toml)
_SLOWER = 0.06


def _slowed_at(ctx: Context, onset: float) -> bool | None:
    """Whether the job's steps ran slower from `onset` on than just before it: the median step time over the
    15 minutes (at least ten steps) after it against the median over as long before it, training steps only
    (warm-up, checkpoint saves and the pauses the log names left out), each median of five samples or more.
    None when that is unknown: no step time, or fewer samples on either side (a log whose first dated line
    comes after the onset, the job's first or last minutes)."""
    g = ctx.grid("step_time")
    x = g.single() if g is not None else None
    if g is None or x is None:
        return None
    tl = ctx.timeline
    span = max(900.0, 10 * float(tl.step_s or 0.0))
    valid = tl.valid_training(g.t) & np.isfinite(x)
    before = valid & (g.t >= onset - span) & (g.t < onset)
    after = valid & (g.t >= onset) & (g.t < onset + span)
    if before.sum() < 5 or after.sum() < 5:
        return None
    base = float(np.median(x[before]))
    return base > 0 and float(np.median(x[after])) / base - 1 >= _SLOWER


def _recurs(ctx: Context, f: Finding) -> bool:
    """Whether a finding's departure recurs on one of its hosts: at least `recurs` separate stretches
    where the host's value stands above the midpoint between the pack's level and its own peak (scrape
    timeouts that come and go, not one hung exporter that timed out for a few minutes once), more of them
    than the fleet's own lost scrapes give a host by chance (`recurrence.recurs`)."""
    if "recurs" not in f.extra or f.extra.get("censored"):
        return False  # a stretch the data's end cut short cannot show that it recurs: it needs corroboration
    want, query, mask, alpha = f.extra["recurs"]
    return recurs(ctx, f.hosts, int(want), str(query), str(mask), float(alpha))


def _no_hang_before_kill(findings: list[Finding]) -> None:
    """When the coordinator killed the job while the accused hosts trained with their peers up to the kill (a
    heartbeat false positive stands: the steps went on until it), no collective ever stalled: a network
    event before the kill triggered no hang; it is link trouble while the job trained (the seed's "high
    utilisation, retransmit spike": a false positive that a network blip may have set off)."""
    if not any(f.rule == "accused_alive" and SEV_RANK[f.severity] >= 1 for f in findings):
        return
    for f in findings:
        if f.klass == "network-hang" and f.role == "cause":
            f.klass = "rdma-degradation"
            f.title += " (the job trained on until the coordinator's kill: it triggered no hang)"


def _reconcile(
    ctx: Context, klass: str, primary: Finding, findings: list[Finding], tol: float
) -> tuple[str, Finding, float | None]:
    """Return (class, primary, onset) once the causal story is settled.

    A host that went silent is a node death even when its GPU reported errors first: those errors (within a
    bounded lookback) are its onset. A hang's onset is when the steps stopped (or, before the first step,
    when the busy-wait pattern settled).
    """
    tl = ctx.timeline
    silent = [f for f in findings if f.rule == "host_silent" and SEV_RANK[f.severity] >= 1]
    if silent and klass in ("gpu-hardware-fault", "gpu-driver-fault", "node-death"):
        dead = silent[0]
        # the errors are judged against when it fell silent, not against an onset its own errors moved earlier
        t_dead = dead.extra.get("silent_at", dead.onset if dead.onset is not None else float("inf"))
        before = [
            f
            for f in findings
            if f.klass in ("gpu-hardware-fault", "gpu-driver-fault")
            and set(f.hosts) & (set(dead.hosts) | set(dead.extra.get("aliases") or {}))
            and f.onset is not None
            and t_dead - 1800 <= f.onset <= t_dead + tol
        ]
        if klass == "node-death" or before:
            onset = min(
                [dead.onset] + [f.onset for f in before if f.onset is not None],
                key=lambda x: x if x is not None else float("inf"),
            )
            for f in before:
                f.klass = "node-death"
            return "node-death", dead, onset
    if klass == "collective-hang":
        bw = next((f for f in findings if f.rule == "busy_wait"), None)
        onset = (
            tl.last_advance
            if tl.last_advance is not None and tl.stalled
            else (bw.onset if bw else primary.onset)
        )
        return klass, primary, onset
    if klass == "network-hang":
        trig = [
            f
            for f in findings
            if f.klass == "network-hang" and f.role == "cause" and SEV_RANK[f.severity] >= 1
        ]
        return klass, primary, min((f.onset for f in trig if f.onset is not None), default=primary.onset)
    return klass, primary, primary.onset


def _culprit_hosts(ctx: Context, klass: str, primary: Finding, findings: list[Finding]) -> list[str]:
    k = _n_hosts(ctx)
    hosts: list[str] = []
    if klass in ("rdma-degradation", "network-hang"):
        for f in findings:
            if (
                f.klass == klass
                and f.role == "cause"
                and SEV_RANK[f.severity] >= 1
                and (len(f.hosts) <= max(3, 0.25 * k) or f.extra.get("common_event"))
            ):
                hosts += [h for h in f.hosts if h not in hosts]
        return hosts or list(primary.hosts)
    if klass == "collective-hang":
        bw = [f for f in findings if f.rule == "busy_wait"]
        return list(bw[0].hosts) if bw else []
    if primary.extra.get("no_culprits"):
        return []
    return list(primary.hosts)


def _culprit_gpus(klass: str, hosts: list[str], same: list[Finding]) -> list[dict[str, Any]]:
    gpu_by_host: dict[str, list[str]] = {}
    for f in same:
        if f.gpus and len(f.hosts) == 1:
            gpu_by_host.setdefault(f.hosts[0], [])
            gpu_by_host[f.hosts[0]] += [g for g in f.gpus if g not in gpu_by_host[f.hosts[0]]]
    if klass in ("thermal-straggler", "gpu-hardware-fault"):
        for f in same:
            if f.gpus and len(f.hosts) == 1 and f.hosts[0] in hosts and f.role == "cause":
                gpu_by_host[f.hosts[0]] = list(f.gpus)
                break
    out: list[dict[str, Any]] = []
    # a driver fault is named on the GPUs whose driver reported its own error (an Xid names its GPU)
    named = ("thermal-straggler", "gpu-hardware-fault", "gpu-driver-fault")
    for h in hosts:
        gl = gpu_by_host.get(h) or [] if klass in named else []
        out += [{"host": h, "gpu": g} for g in gl] if gl else [{"host": h, "gpu": None}]
    return out


def _explain(
    ctx: Context,
    klass: str,
    primary: Finding,
    findings: list[Finding],
    hosts: list[str],
    onset: float | None,
    tol: float,
) -> None:
    """Re-class findings that are the primary's effects; demote data problems its fault explains."""
    inf = float("inf")
    tl = ctx.timeline
    classes = load_classes()
    spec = classes[klass]
    for f in findings:
        if f is primary:
            continue
        if (
            spec.stops_job
            and classes[f.klass].fallback
            or f.klass in spec.absorbs
            and set(f.hosts) <= set(hosts)
            and (f.onset or inf) <= (tl.last_advance or inf) + 60
        ):
            f.klass = klass
        elif (
            f.klass in spec.explains and set(f.hosts) & set(hosts) and (f.onset or inf) >= (onset or 0) - tol
        ):
            f.severity = "info"
            f.title += f" (explained by the {klass.replace('-', ' ')})"


def _healthy(ctx: Context, findings: list[Finding]) -> dict[str, Any]:
    tl = ctx.timeline
    notes = []
    if tl.restored:
        notes.append(
            "The job restored from a checkpoint; compare it with a fresh-start baseline (`compare`) to "
            "see a restore leak, which a single job cannot show against itself."
        )
    infos = [f.title for f in findings if f.severity == "info" and f.role != "context"]
    summary = (
        "Nothing beyond normal behaviour: training ran at its own steady pace; checkpoint spikes and warm-up "
        "were excluded, counters were judged by their growth within the job, and no host or GPU left its "
        "peers."
    )
    if infos:
        summary += " Minor observations: " + "; ".join(infos[:3]) + "."
    if notes:
        summary += " " + " ".join(notes)
    return {
        "class": "healthy",
        "root_cause_family": "none",
        "culprits": [],
        "onset": None,
        "confidence": 0.7 if not infos else 0.6,
        "summary": summary,
        "chain": [],
    }


def _chain(
    ctx: Context, klass: str, primary: Finding, findings: list[Finding], onset: float | None
) -> list[str]:
    tl = ctx.timeline
    steps: list[tuple[float, str]] = [(onset or 0.0, f"{fmt_time(onset)}: {primary.title}")]
    seen = {primary.title}
    for f in sorted(findings, key=lambda f: f.onset or 0.0):
        if f is primary or f.title in seen or f.role == "context" or f.onset is None:
            continue
        related = f.klass == klass or f.role == "symptom"
        if related and f.onset >= (onset or 0.0) - 60:
            steps.append((f.onset, f"{fmt_time(f.onset)}: {f.title}"))
            seen.add(f.title)
    if tl.stalled and tl.last_advance and not any("steps stopped" in s.lower() for _, s in steps):
        steps.append(
            (
                tl.last_advance,
                f"{fmt_time(tl.last_advance)}: training steps stopped at step {int(tl.last_step or 0)}",
            )
        )
    if tl.crash_time:
        steps.append((tl.crash_time, f"{fmt_time(tl.crash_time)}: the job ended (time from the log)"))
    steps.sort(key=lambda s: s[0])
    return [s for _, s in steps[:8]]


def _summary(
    ctx: Context,
    klass: str,
    hosts: list[str],
    gpus: list[dict[str, Any]],
    onset: float | None,
    primary: Finding,
    findings: list[Finding],
) -> str:
    tl = ctx.timeline
    odd = ""
    if klass == "collective-hang" and hosts:
        odd = f" Some GPUs of {', '.join(hosts)} never entered the collective: start there."
    gpu = (
        ", ".join(
            str(g["gpu"]) if len(hosts) == 1 else f"{g['host']}:{g['gpu']}"
            for g in gpus
            if g.get("gpu") is not None
        )
        or "?"
    )
    moved = sorted(
        {
            f.title.removesuffix(" jumps")
            for f in findings
            # the training metrics that moved (not the stall it explains)
            if f.klass == "training-instability" and f.playbook == "training" and SEV_RANK[f.severity] >= 1
        },
        key=str.lower,
    )
    moved = [m if sum(c.isupper() for c in m.split()[0]) >= 2 else m[0].lower() + m[1:] for m in moved]
    what = (
        (", ".join(moved[:-1]) + " and " + moved[-1] if len(moved) > 1 else moved[0]) if moved else "the loss"
    )
    text = load_classes()[klass].summary.format(
        hosts=", ".join(hosts) or "the hosts",
        onset=fmt_time(onset),
        stall=fmt_time(tl.last_advance if tl.stalled else onset),
        odd=odd,
        gpu=gpu,
        what=what,
        accused=", ".join(primary.hosts),
        exporter=primary.extra.get("exporter", "exporter"),
        data=primary.extra.get("data", "metrics"),
    )
    others = sorted(
        {f.klass for f in findings if SEV_RANK[f.severity] >= 1 and f.klass not in (klass, "healthy")}
    )
    if others:
        text += " Also seen: " + ", ".join(others) + "."
    bare = unnamed_addresses(hosts, [str(n) for n in (ctx.triage or {}).get("nodes") or []])
    return text + " " + address_note(bare) if bare else text
