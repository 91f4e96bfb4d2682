"""When a silent host began to die: what its own series showed in a bounded lookback before the silence.

A host that goes silent is a node death; what it reported in the minutes before is where the death began
(the contract). Two signs are read on the dying host itself, not against its peers:

- a GPU fell off the bus: the host reported fewer GPUs than its own usual count up to the silence;
- a hardware error counter changed (uncorrectable or correctable ECC/RAS, remapped rows, PCIe fatal
  errors; a hardware Xid is a finding of its own, which the decision takes as the onset): one change is
  specific on a host that then died, so one is enough. It must be news: the data shows the host's
  counters still for a lookback-long stretch before it. A host that trickles errors all along, or whose
  data began too shortly before (a trickle from the job's start looks the same), is not dated by them;
  nor is a family that changed in the same lookback on one in twenty of the other hosts (the fleet's
  background: correctable errors ticking on many GPUs), which the dying host shows as likely by chance.

The rule's queries after the four of `host_silent`'s presence: the GPUs reporting per host, then any number
of hardware error changes per host (one per error family the profile has).
"""

from __future__ import annotations

import numpy as np

from playbooks.anomaly import Grid
from playbooks.context import Context
from playbooks.model import RuleSpec
from playbooks.report import fmt_time

from ._base import _dur

__all__ = ["silence_onset"]


def silence_onset(ctx: Context, rule: RuleSpec, host: str, t_sil: float, t_on: float) -> tuple[float, str]:
    """Return (onset, what dated it, as a clause to append to the evidence) of a host silent from the grid
    point `t_sil` whose silence alone dates it at `t_on`."""
    text = ""
    gq = rule.queries[4] if len(rule.queries) > 4 else ""
    gpus = ctx.grid(gq) if gq else None
    fell = _gpus_fell_off(gpus, host, t_sil, _dur(rule, "lookback", 600.0))
    if fell is not None and gpus is not None:
        t_on = min(t_on, float(gpus.t[fell[0]]) - max(ctx.window_s(gq), gpus.step))
        text += f"; before that, {fell[1]} of its GPUs' series vanished from {fmt_time(t_on)}"
    errs = [(q, g) for q in rule.queries[5:] if (g := ctx.grid(q)) is not None]
    first = _errors_changed(errs, host, t_sil, _dur(rule, "error_lookback", 1800.0))
    if first is not None and first[0] < t_on:
        t_on = first[0]
        text += f"; before that, its GPUs' {first[1]} changed from {fmt_time(t_on)}"
    return t_on, text


def _errors_changed(
    grids: list[tuple[str, Grid]], host: str, t_sil: float, lookback: float
) -> tuple[float, str] | None:
    """Return (time, which counter) of the host's first hardware-error change within `lookback` seconds
    before its silence at `t_sil` that follows a lookback-long quiet stretch within the data, or None.

    Each grid holds the change of one error family per window ending at its points (NaN or 0: none). A
    change first seen at a point happened after the point before it: it is dated half a step earlier."""
    best: tuple[float, str] | None = None
    for name, g in grids:
        row = g.row(host=host)
        if row is None or _background(g, host, t_sil, lookback):
            continue
        changed = np.nan_to_num(row, nan=0.0) > 0
        quiet = max(1, int(round(lookback / max(g.step, 1e-9))))
        for i in np.nonzero(changed & (g.t >= t_sil - lookback) & (g.t <= t_sil))[0]:
            if i >= quiet and not changed[i - quiet : i].any():
                t = float(g.t[i]) - g.step / 2
                if best is None or t < best[0]:
                    best = (t, name.replace("_", " "))
                break
    return best


#: Share of the other hosts whose counter of an error family changed in the same lookback, from which a change
#: is the fleet's background (a trickle of correctable errors many GPUs show), not news on the dying host.
BACKGROUND_SHARE = 0.05


def _background(g: Grid, host: str, t_sil: float, lookback: float) -> bool:
    """Return True if the error family changed, within the same `lookback` before `t_sil`, on at least
    BACKGROUND_SHARE of the other hosts (at least one): a change the dying host would as likely show by chance."""
    within = (g.t >= t_sil - lookback) & (g.t <= t_sil)
    others = [r for r, lab in enumerate(g.labels) if lab.get("host") != host]
    if not others or not within.any():
        return False
    moved = sum(bool((np.nan_to_num(g.values[r, within], nan=0.0) > 0).any()) for r in others)
    return moved >= max(1.0, BACKGROUND_SHARE * len(others))


def _gpus_fell_off(g: Grid | None, host: str, t_sil: float, lookback: float) -> tuple[int, int] | None:
    """Return (first index, GPUs missing) of the run, ending just before the silence at `t_sil`, in which the
    host reported fewer GPUs than its own usual count (a GPU fallen off the bus while the host still
    reports), within `lookback` seconds; None when its count held.

    The usual count is the host's median over its reporting windows before the lookback: one series per GPU
    with a sample in the window, so a late scrape (jitter) does not lower it.
    """
    row = g.row(host=host) if g is not None else None
    if g is None or row is None:
        return None
    t = g.t
    i = int(np.searchsorted(t, t_sil - 1e-6, side="left"))
    if i <= 0:
        return None
    first = int(np.searchsorted(t, float(t[i - 1]) - lookback, side="left"))
    before = row[:first]
    before = before[np.isfinite(before) & (before > 0)]
    if len(before) < 3:
        return None
    usual = float(np.median(before))
    j = i
    while j > first and np.isfinite(row[j - 1]) and 0 < row[j - 1] <= usual - 1:
        j -= 1
    if j == i:
        return None
    return j, int(round(usual - float(np.nanmax(row[j:i]))))
