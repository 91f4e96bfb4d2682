"""Turn a job's stored triage (the contract's JSON) into what the triage region shows."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from investigations.models import TRIAGE_FINISHED, TRIAGE_PENDING, Job, TriageStatus
from investigations.times import utc

#: Matches shown per class before "n more".
MATCHES_SHOWN = 5
#: Host events shown before "n more" (the triage keeps one per kind, host and code, up to 2,000).
HOST_EVENTS_SHOWN = 25
#: How each kind of host event reads in the table.
EVENT_KINDS = {
    "node-failure": "node failure",
    "oom-kill": "OOM kill",
    "killed": "killed",
    "exited": "exited (failing status)",
    "xid": "Xid",
    "nccl-timeout": "NCCL timeout",
}


def duration(seconds: Any) -> str:
    """Return seconds as "3 h 07 min", "12 min 05 s" or "42.1 s"; "" for None."""
    if seconds is None:
        return ""
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        return ""
    if s < 60:
        return f"{s:.1f} s"
    minutes, sec = divmod(int(round(s)), 60)
    if minutes < 60:
        return f"{minutes} min {sec:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _progress_rows(t: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """Return (label, value, note) rows of the progress figures, skipping those the log did not give."""
    job, prog, details = t.get("job") or {}, t.get("progress") or {}, t.get("details") or {}
    total = prog.get("steps_total")
    last = job.get("last_step")
    rows: list[tuple[str, Any, str]] = [
        ("First step", job.get("first_step"), ""),
        ("Last step", last, f"of {total}" if total is not None else ""),
        ("Restored from", prog.get("restored_from"), "step"),
        (
            "Step time",
            f"{prog['step_time_s']:.2f} s" if prog.get("step_time_s") is not None else None,
            "steady state",
        ),
        ("Last step at", utc(prog.get("last_step_time")) or None, ""),
        ("Expected step now", details.get("expected_step_now"), "if still running"),
        (
            "Training vs wall time",
            f"{duration(details.get('training_time_s'))} / {duration(details.get('wall_s'))}"
            if details.get("training_time_s") is not None and details.get("wall_s") is not None
            else None,
            "",
        ),
        ("Stalled after last step", duration(details.get("stall_after_last_step_s")) or None, ""),
        ("Last checkpoint", prog.get("last_checkpoint_step"), "step"),
        ("Lost steps", prog.get("lost_steps"), "since the last checkpoint"),
        (
            "TGS trend",
            f"{prog['tgs_trend_pct']:+.1f} %" if prog.get("tgs_trend_pct") is not None else None,
            f"{details['tgs_early']:.0f} → {details['tgs_late']:.0f}" if "tgs_early" in details else "",
        ),
    ]
    return [row for row in rows if row[1] is not None and row[1] != ""]


def _grouped_matches(t: dict[str, Any]) -> list[dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for match in t.get("matches") or []:
        groups.setdefault(str(match.get("class")), []).append(match)
    return [
        {"klass": k, "matches": v[:MATCHES_SHOWN], "more": max(len(v) - MATCHES_SHOWN, 0), "count": len(v)}
        for k, v in groups.items()
    ]


def _event_code(kind: str, code: Any) -> str:
    """Return what an event's code means: "SIGKILL (137)" for a kill, "Xid 79" for an Xid, else ""."""
    if code is None:
        return ""
    if kind == "killed":
        return {137: "SIGKILL (137)", 143: "SIGTERM (143)"}.get(code, f"exit {code}")
    return f"Xid {code}" if kind == "xid" else str(code)


def _host_events(t: dict[str, Any]) -> dict[str, Any]:
    """Return the triage's host events (`details.host_events`) as table rows, in log order."""
    events = [e for e in (t.get("details") or {}).get("host_events") or [] if isinstance(e, dict)]
    rows = [
        {
            "kind": EVENT_KINDS.get(str(e.get("kind")), str(e.get("kind"))),
            "code": _event_code(str(e.get("kind")), e.get("code")),
            "host": e.get("host") or "",
            "time": utc(e.get("time")),
            "line": e.get("line"),
            "text": e.get("text") or "",
        }
        for e in events[:HOST_EVENTS_SHOWN]
    ]
    return {"rows": rows, "count": len(events), "more": max(len(events) - HOST_EVENTS_SHOWN, 0)}


def _iso_utc(stamp: Any) -> str:
    """Return an ISO 8601 stamp as "YYYY-MM-DD HH:MM:SS UTC" ("" for None or garbage)."""
    try:
        return utc(datetime.fromisoformat(stamp).timestamp())
    except (TypeError, ValueError):
        return ""


def triage_context(job: Job | None) -> dict[str, Any]:
    """Return the triage region's context for the job: its state, and the figures of the last good triage.

    While a re-run is queued, running or failed, `result` is the last good triage ("last_good"), shown
    with the re-run's state and failure (`error`, `failed_at`) beside it.
    """
    t: dict[str, Any] = dict(job.triage or {}) if job is not None else {}
    state = str(job.triage_status) if job is not None else TriageStatus.NO_LOG
    if job is not None and job.triage_stalled():
        state = "stalled"
        t["error"] = "No worker finished this triage in time (did the worker stop?). Run it again."
    context: dict[str, Any] = {
        "state": state or "none",
        "pending": state in TRIAGE_PENDING,
        "finished": state in TRIAGE_FINISHED or state == "stalled" or not state,
        "error": t.get("error", ""),
        "failed_at": _iso_utc(t.get("finished")) if state == "failed" else "",
    }
    if state != "done":
        last_good = t.get("last_good")
        if not isinstance(last_good, dict) or not last_good.get("job"):
            return context
        t = last_good
    context["result"] = True
    context["previous"] = state != "done"  # the figures are the last good triage's, not this run's
    context["last_good_at"] = _iso_utc(t.get("finished"))
    job_part = t.get("job") or {}
    prometheus = t.get("prometheus") or {}
    config = t.get("config") or {}
    context.update(
        status=job_part.get("status") or "unknown",
        klass=job_part.get("triage_class") or "",
        crash_time=utc(job_part.get("crash_time")),
        groups=_grouped_matches(t),
        match_count=len(t.get("matches") or []),
        progress=_progress_rows(t),
        config=sorted(config.items()),
        nodes=t.get("nodes") or [],
        head=prometheus.get("head") or "",
        port=prometheus.get("port"),
        tunnel=prometheus.get("tunnel") or "",
        accused=t.get("heartbeat_accused") or [],
        unreadable=t.get("unreadable") or [],
        log=t.get("log", ""),
        finished_at=t.get("finished", ""),
        lines=(t.get("details") or {}).get("lines"),
        host_events=_host_events(t),
    )
    return context
