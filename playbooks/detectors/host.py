"""A host against its own typical level: pressure that needs no peers (one host, or every host alike)."""

from __future__ import annotations

import numpy as np

from playbooks.context import Context, Finding
from playbooks.model import Playbook, RuleSpec
from playbooks.report import fmt_time

from ._base import _dur, _ev, _finding

__all__ = ["_det_own_excess"]


def _episodes(hit: np.ndarray, length: int) -> list[tuple[int, int]]:
    """Return (start, end) index pairs of runs where `hit` holds for at least `length` points (80 % of them)."""
    out: list[tuple[int, int]] = []
    i, n = 0, len(hit)
    while i < n:
        if not hit[i]:
            i += 1
            continue
        j, misses = i, 0
        while j + 1 < n and (hit[j + 1] or misses < max(1, length // 5)):
            misses = 0 if hit[j + 1] else misses + 1
            j += 1
        while j > i and not hit[j]:
            j -= 1
        if j - i + 1 >= length:
            out.append((i, j))
        i = j + 1
    return out


def _det_own_excess(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    """Flag hosts whose series stay above their own typical level (median over the window) for a while.

    Params: min_rel (share above the typical level, default 0.5), min_abs (in the series' unit, default 0),
    min_duration (default 60 s). Start-up, warm-up and checkpoint windows are left out. The finding's onset is the start of the strongest episode (the largest
    excess over the typical level, held for the duration); every episode is listed in the evidence.
    """
    g = ctx.grid(rule.queries[0])
    if g is None:
        return None
    p = rule.params
    min_rel, min_abs = float(p.get("min_rel", 0.5)), float(p.get("min_abs", 0.0))
    length = max(2, int(round(_dur(rule, "min_duration", 60.0) / max(g.step, 1e-9))))
    # start-up, warm-up and checkpoint saves are the job's own normal pressure: only steady training is
    # judged (all of the data when the TSDB holds no training steps)
    m = g.mask(*focus) & ctx.timeline.valid_training(g.t)
    hosts, ev, best = [], [], None
    for r, lab in enumerate(g.labels):
        x = np.where(m, g.values[r], np.nan)
        if np.isfinite(x).sum() < 3 * length:
            continue
        typical = float(np.nanmedian(x))
        with np.errstate(invalid="ignore"):
            hit = (x > typical * (1 + min_rel)) & (x - typical > min_abs)
        eps = _episodes(np.nan_to_num(hit, nan=False).astype(bool), length)
        if not eps:
            continue
        host = lab.get("host", "")
        hosts.append(host)
        for a, b in eps:
            level = float(np.nanmedian(x[a : b + 1]))
            t0, t1 = float(g.t[a]) - g.step / 2, float(g.t[b]) + g.step / 2
            ev.append(
                _ev(
                    ctx,
                    rule.queries[0],
                    {"host": host},
                    level,
                    f"{level:.4g} from {fmt_time(t0)} to {fmt_time(t1)} against its typical {typical:.4g}",
                )
            )
            score = (level - typical) * (b - a + 1)
            if best is None or score > best[0]:
                best = (score, t0)
    if not hosts or best is None:
        return None
    return _finding(pb, rule, hosts, [], best[1], ev, value=str(len(ev)))
