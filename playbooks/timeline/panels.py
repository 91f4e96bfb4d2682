"""The timeline's panels: one semantic signal each, in stacking order, and how a view names them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from playbooks.errors import PlaybooksError
from playbooks.profiles import DOMAINS, Profile, signal_info

XMODES = ("step", "time-utc", "time-local")


class TimelineError(PlaybooksError):
    """A panel or view cannot be built: unknown panel, bad x-axis mode or range."""


@dataclass(frozen=True)
class PanelSpec:
    """One panel: a semantic signal on its own y-axis.

    Attributes:
        key: the panel's name in URLs, the signal's name ("gpu_temp").
        signal: the semantic signal (`playbooks.profiles.SIGNALS`).
        domain: training, gpu, network or host.
        title, unit: for the chart; counters are shown per second.
        core: part of every timeline (a profile lacking it says so); False for vendor extras, shown only
            when the profile has them.
        fn: the function applied to a counter ("rate", "increase"); None for gauges.
        min_outlier: the smallest deviation from the median worth naming, in the panel's unit. Whole-number
            counts (runnable or blocked processes) tie at the median on most hosts, so the typical score
            is 0 and one process more would otherwise name a host.
    """

    key: str
    signal: str
    domain: str
    title: str
    unit: str
    core: bool = True
    fn: str | None = None
    min_outlier: float = 0.0


def _spec(signal: str, *, core: bool = True, title: str = "", min_outlier: float = 0.0) -> PanelSpec:
    info = signal_info(signal)
    counter = info["kind"] == "counter"
    unit = f"{info['unit']}/s" if counter and info["unit"] else info["unit"]
    return PanelSpec(
        key=signal,
        signal=signal,
        domain=info["domain"],
        title=title or (f"{info['title']} (rate)" if counter else info["title"]),
        unit=unit,
        core=core,
        fn="rate" if counter else None,
        min_outlier=min_outlier,
    )


#: Every panel, in stacking order.
PANELS: dict[str, PanelSpec] = {
    s.key: s
    for s in (
        _spec("loss"),
        _spec("grad_norm"),
        _spec("step_time"),
        _spec("tokens_per_sec"),
        _spec("learning_rate"),
        _spec("gpu_power"),
        _spec("gpu_temp"),
        _spec("gpu_clock"),
        _spec("gpu_util"),
        _spec("gpu_vram_used"),
        _spec("tcp_retransmits"),
        _spec("rdma_retransmits"),
        _spec("rdma_ack_timeouts"),
        _spec("rdma_transmit_wait", core=False, title="InfiniBand transmit wait (rate)"),
        _spec("rdma_link_error_recovery", core=False, title="InfiniBand link error recoveries (rate)"),
        _spec("rdma_link_downed", core=False, title="InfiniBand link downed (rate)"),
        _spec("io_pressure"),
        _spec("mem_used"),
        _spec("procs_running", min_outlier=2.0),
        _spec("procs_blocked", min_outlier=2.0),
        _spec("oom_kills"),
    )
}


#: The training panel every finding's view starts with: how the job paid for what the evidence shows.
FINDING_CONTEXT_PANELS = ("step_time",)
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def finding_panels(playbook: str, rule: str, playbooks: Mapping[str, Any] | None = None) -> list[str]:
    """Return the panels that show a finding's evidence: step time, then the signals its rule reads.

    Read from the playbook's declaration (the rule's queries and their signals, templates' `{signal}`
    placeholders included), in stacking order; a rule or playbook not found gives its whole playbook's
    signals, or only the context panel. `rule` is "<playbook>.<rule id>" as findings store it, or the id.
    """
    if playbooks is None:
        from playbooks.loader import load_playbooks  # the loader imports the profiles, not this module

        playbooks = load_playbooks()
    pb = playbooks.get(playbook)
    signals: set[str] = set()
    if pb is not None:
        rid = rule[len(playbook) + 1 :] if rule.startswith(playbook + ".") else rule
        spec = next((r for r in pb.rules if r.id == rid), None)
        names = set(spec.queries) if spec is not None else {q.name for q in pb.queries}
        for q in pb.queries:
            if q.name in names:
                signals |= {q.signal} if q.signal else set(_PLACEHOLDER.findall(q.promql)) - {"window"}
    wanted = set(FINDING_CONTEXT_PANELS) | signals
    return [k for k in PANELS if k in wanted]


def default_panels(profile: Profile) -> list[str]:
    """Return the panels of a timeline for this profile: every core panel plus the extras it exports."""
    return [k for k, s in PANELS.items() if s.core or profile.has(s.signal)]


def parse_panels(text: str | Iterable[str] | None, profile: Profile) -> list[str]:
    """Return panel keys from "a,b,c" (or a list) in stacking order; empty or None gives the defaults."""
    if text is None:
        return default_panels(profile)
    items = [p.strip() for p in (text.split(",") if isinstance(text, str) else text) if p.strip()]
    if not items:
        return default_panels(profile)
    unknown = [p for p in items if p not in PANELS]
    if unknown:
        raise TimelineError(f"unknown panel(s): {', '.join(unknown)}; known: {', '.join(PANELS)}")
    return [k for k in PANELS if k in items]


def domains_of(keys: Iterable[str]) -> list[tuple[str, list[str]]]:
    """Return [(domain, [panel keys])] in stacking order."""
    keys = list(keys)
    return [
        (d, [k for k in keys if PANELS[k].domain == d])
        for d in DOMAINS
        if any(PANELS[k].domain == d for k in keys)
    ]
