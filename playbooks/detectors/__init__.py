"""The generic detectors the playbook rules name, and `evaluate`, which applies every rule that ran.

Each detector reads its rule's query results from the context and returns one Finding (all the hosts/GPUs
it flagged) or None.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

from ..context import Context, Finding, focus_window
from ..model import Playbook, RuleSpec
from .counters import _det_counter_increase, _det_near_limit, _det_rate_outlier, _det_threshold_prior
from .hang import _det_accused_alive, _det_busy_wait, _det_host_silent, _det_step_stall
from .host import _det_own_excess
from .peers import _det_flatline, _det_gaps, _det_peer_outlier
from .trends import _det_change_point, _det_level_shift, _det_series_absent, _det_uniform_elevation

__all__ = ["DETECTORS", "evaluate"]

Detector = Callable[[Context, Playbook, RuleSpec, tuple[float, float]], Finding | None]

DETECTORS: dict[str, Detector] = {
    "step_stall": _det_step_stall, "busy_wait": _det_busy_wait, "host_silent": _det_host_silent,
    "counter_increase": _det_counter_increase, "rate_outlier": _det_rate_outlier,
    "peer_outlier": _det_peer_outlier, "flatline": _det_flatline, "gaps": _det_gaps,
    "threshold_prior": _det_threshold_prior, "change_point": _det_change_point, "level_shift": _det_level_shift,
    "near_limit": _det_near_limit, "accused_alive": _det_accused_alive,
    "uniform_elevation": _det_uniform_elevation, "series_absent": _det_series_absent,
    "own_excess": _det_own_excess,
}


def evaluate(ctx: Context, playbooks: Sequence[Playbook]) -> list[Finding]:
    """Return the findings of every rule of `playbooks` (rules whose queries returned nothing are skipped)."""
    out: list[Finding] = []
    with warnings.catch_warnings():
        # all-NaN columns (a host with no data at an instant) are expected; their medians are NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        for pb in playbooks:
            focus = focus_window(pb, ctx.timeline)
            for rule in pb.rules:
                f = DETECTORS[rule.detector](ctx, pb, rule, focus)
                if f is not None:
                    out.append(f)
    return out
