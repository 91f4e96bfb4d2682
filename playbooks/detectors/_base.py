"""What every detector shares: the finding and evidence builders, durations, the job's steady level."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from playbooks.anomaly import Grid, nan_median
from playbooks.context import Context, Finding, _num
from playbooks.model import Playbook, RuleSpec

__all__ = ["_blind", "_dur", "_ev", "_finding", "_gaps", "_gkey", "_match_host", "_steady_level"]


def _dur(rule: RuleSpec, key: str, default: float) -> float:
    from playbooks.prometheus import parse_duration

    v = rule.params.get(key)
    if v is None:
        return default
    return float(v) if isinstance(v, int | float) else parse_duration(str(v))


def finding_title(template: str, hosts: list[str], gpus: list[str], value: str = "") -> str:
    """Return a rule's title for these hosts and GPUs; with no GPU index known (an exporter without one,
    an event read from a log), the GPU part is left out rather than shown as "GPU ?"."""
    host_txt = ", ".join(hosts[:6]) + (f" and {len(hosts) - 6} more" if len(hosts) > 6 else "")
    if not gpus:
        template = template.replace(" GPU {gpus}", "").replace("GPU {gpus}", "A GPU")
    return template.format(hosts=host_txt or "the job", gpus=", ".join(gpus), n=len(hosts), value=value)


def _finding(
    pb: Playbook,
    rule: RuleSpec,
    hosts: list[str],
    gpus: list[str],
    onset: float | None,
    evidence: list[dict[str, Any]],
    value: str = "",
    **extra: Any,
) -> Finding:
    title = finding_title(rule.title, hosts, gpus, value)
    if rule.params.get("needs"):
        extra = {**extra, "needs": tuple(rule.params["needs"])}
    if rule.params.get("recurs"):
        # (stretches, the query, its node `up` mask, the chance below which they beat the fleet's own)
        mask, alpha = str(rule.params.get("mask", "")), float(rule.params.get("alpha", 1e-3))
        extra = {**extra, "recurs": (int(rule.params["recurs"]), rule.queries[0], mask, alpha)}
    return Finding(
        playbook=pb.name,
        rule=rule.id,
        klass=rule.klass,
        severity=rule.severity,
        role=rule.role,
        hosts=hosts,
        gpus=gpus,
        onset=onset,
        title=title,
        evidence=evidence[:12],
        extra=extra,
    )


def _ev(ctx: Context, q: str, labels: Mapping[str, Any], value: Any, text: str) -> dict[str, Any]:
    lab = {k: str(v) for k, v in labels.items() if v is not None}
    return {
        "query": ctx.promql(q),
        "labels": lab,
        "value": value if isinstance(value, str) else _num(value),
        "interpretation": text,
    }


def _steady_level(ctx: Context, g: Grid) -> float:
    """Return the job's own steady-state level of a per-host signal (median across hosts and time)."""
    m = ctx.timeline.steady_mask(g.t)
    if not m.any():
        m = ctx.timeline.valid_training(g.t)
    return nan_median(g.values[:, m].ravel()) if m.any() else float("nan")


def _blind(g: Grid) -> np.ndarray:
    """Return the instants of a presence grid (samples or `up` per host) where the monitoring itself saw
    (almost) nobody: fewer than half the hosts present (Prometheus down or restarting, the data's edges). Such
    an instant is no evidence about any one host: it is neither its silence nor its health. With one host
    nobody else tells the two apart: its own silence counts."""
    if len(g.labels) < 2:
        return np.zeros(len(g.t), bool)
    seen = np.nan_to_num(g.values, nan=0.0) > 0
    blind: np.ndarray = seen.mean(axis=0) < 0.5
    return blind


def _gaps(seg: np.ndarray, blind: np.ndarray | None = None) -> bool:
    """Whether a host's presence series (samples or `up`) over a window shows it silent: missing at the
    window's end or at two instants running. One missed scrape with the host reporting right after is an
    exporter's hiccup that every fleet shows now and then, no silence. Instants where the monitoring saw
    nobody (`blind`, see `_blind`) are left out: a silence of everyone is not this host's."""
    if blind is not None:
        seg = seg[~blind]
    if not len(seg):
        return False
    miss = ~(np.nan_to_num(seg, nan=0.0) > 0)
    return bool(miss[-1] or (miss[1:] & miss[:-1]).any())


def _gkey(g: str) -> tuple[int, str]:
    return (int(g), g) if g.isdigit() else (1 << 30, g)


def _match_host(name: str, hosts: Sequence[str]) -> str | None:
    for h in hosts:
        if h == name or h.startswith(name + ".") or name.startswith(h + "."):
            return h
    return None
