"""Render triage (and later diagnosis) results as Markdown, in the seed report templates' shape."""

from __future__ import annotations

import datetime as dt
from typing import Any

__all__ = ["fmt_time", "triage_markdown"]


def fmt_time(ts: float | None) -> str:
    """Return a unix time as ISO 8601 UTC, or an em dash."""
    if ts is None:
        return "\u2014"
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _v(x: Any) -> str:
    return "\u2014" if x is None else str(x)


def triage_markdown(d: dict[str, Any]) -> str:
    """Return the `## Job triage` report for a triage JSON object."""
    job, prog, prom = d["job"], d["progress"], d["prometheus"]
    lines = [f"## Job triage: {_v(job['id'])}", "",
             f"**Status:** {_v(job['status'])}  ", f"**Primary failure:** {_v(job['triage_class'])}  ",
             f"**Crash time:** {fmt_time(job['crash_time'])}  ",
             f"**Steps:** {_v(job['first_step'])} \u2192 {_v(job['last_step'])} of {_v(prog['steps_total'])}", ""]
    lines += ["### Progress", "", "| figure | value |", "|---|---|"]
    for key, label in (("restored_from", "restored from step"), ("step_time_s", "steady step time (s)"),
                       ("last_step_time", "last step at"), ("last_checkpoint_step", "last checkpoint step"),
                       ("lost_steps", "steps lost since checkpoint"), ("tgs_trend_pct", "TGS trend (%)")):
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
    lines += ["", "### Live dashboards", "",
              f"Prometheus on `{_v(prom['head'])}:{_v(prom['port'])}`" + (f" \u2014 `{prom['tunnel']}`"
                                                                           if prom["tunnel"] else "")]
    if d["config"]:
        keys = [k for k in ("NNODES", "steps", "checkpoint_period", "per_device_batch_size",
                            "jax_distributed_heartbeat_timeout_seconds") if k in d["config"]]
        if keys:
            lines += ["", "### Config", "", *[f"- `{k}` = `{d['config'][k]}`" for k in keys]]
    if d["unreadable"]:
        lines += ["", "### Could not read", "", *[f"- {u}" for u in d["unreadable"]]]
    return "\n".join(lines) + "\n"
