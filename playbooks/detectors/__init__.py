"""The generic detectors the playbook rules name, and `evaluate`, which applies every rule that ran.

Each detector reads its rule's query results from the context and returns one Finding (all the hosts/GPUs
it flagged) or None.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from playbooks.context import Context, Finding, focus_window
from playbooks.model import Playbook, RuleSpec

from .accused import _det_accused_alive
from .counters import _det_counter_increase, _det_near_limit, _det_rate_outlier, _det_threshold_prior
from .frozen import _det_frozen_exporter
from .gaps import _det_gaps
from .hang import _det_busy_wait, _det_step_stall
from .host import _det_own_excess
from .peers import _det_peer_outlier
from .silent import _det_host_silent
from .trends import _det_change_point, _det_level_shift, _det_series_absent, _det_uniform_elevation

__all__ = ["DETECTORS", "DetectorSpec", "evaluate"]

Detector = Callable[[Context, Playbook, RuleSpec, tuple[float, float]], Finding | None]

#: Parameters every rule may carry, whatever its detector (read by the decision).
COMMON_PARAMS = frozenset({"needs", "recurs"})


@dataclass(frozen=True)
class DetectorSpec:
    """A detector, the queries it reads (by role, in order) and the parameters it accepts.

    Attributes:
        name: the name rules use.
        fn: the detector.
        queries: roles of the queries a rule must give, in order.
        optional: roles of the queries a rule may give after those.
        variadic: any number of queries of the first required role may come first (frozen_exporter: the
            change counts of several families, then the samples and the level).
        params: the parameter names it reads (plus COMMON_PARAMS).
        rest: the role of any number of queries that may follow the optional ones (host_silent: the
            hardware error changes per host, one per error family), or "".
    """

    name: str
    fn: Detector
    queries: tuple[str, ...]
    optional: tuple[str, ...] = ()
    variadic: bool = False
    params: frozenset[str] = field(default_factory=frozenset)
    rest: str = ""

    def check(self, queries: tuple[str, ...], params: Mapping[str, object]) -> str | None:
        """Return what is wrong with a rule's queries and params for this detector, or None."""
        n, lo, hi = len(queries), len(self.queries), len(self.queries) + len(self.optional)
        if n < lo or (n > hi and not self.variadic and not self.rest):
            want = ", ".join(self.queries) + (f" [, {', '.join(self.optional)}]" if self.optional else "")
            want += f" [, {self.rest} ...]" if self.rest else ""
            many = " (several of the first)" if self.variadic else ""
            return (
                f"detector {self.name!r} reads {lo}{'+' if self.variadic or self.rest else f'-{hi}' if hi > lo else ''} "
                f"queries ({want}{many}), the rule gives {n}"
            )
        unknown = sorted(set(params) - self.params - COMMON_PARAMS)
        if unknown:
            return (
                f"detector {self.name!r} has no parameter {', '.join(unknown)}; it accepts "
                f"{', '.join(sorted(self.params | COMMON_PARAMS))}"
            )
        return None


def _spec(
    name: str,
    fn: Detector,
    queries: tuple[str, ...],
    optional: tuple[str, ...] = (),
    *,
    variadic: bool = False,
    params: str = "",
    rest: str = "",
) -> DetectorSpec:
    return DetectorSpec(name, fn, queries, optional, variadic, frozenset(params.split()), rest)


DETECTORS: dict[str, DetectorSpec] = {
    s.name: s
    for s in (
        _spec(
            "step_stall",
            _det_step_stall,
            ("step",),
            ("last step time", "utilisation per GPU", "power per GPU"),
            params="idle_util trained_ratio",
        ),
        _spec(
            "busy_wait",
            _det_busy_wait,
            ("utilisation per host", "power per host"),
            ("lowest utilisation per host", "samples per host", "utilisation per GPU", "power per GPU"),
            params="util_min power_ratio_max idle_util presence gpu_query min_duration trained_ratio",
        ),
        _spec(
            "host_silent",
            _det_host_silent,
            ("samples per host",),
            ("up", "power per host", "utilisation per host", "GPUs reporting per host"),
            params="min_duration zero_ratio lookback error_lookback",
            rest="hardware error changes per host",
        ),
        _spec(
            "counter_increase",
            _det_counter_increase,
            ("increase per interval",),
            ("detail", "onset series"),
            params="min peers_clean gpu_detail onset_from",
        ),
        _spec(
            "rate_outlier",
            _det_rate_outlier,
            ("rate",),
            ("traffic",),
            params="floor factor min_duration min_fraction before_stall max_share",
            rest="counters of the same link that corroborate a lone tick",
        ),
        _spec(
            "peer_outlier",
            _det_peer_outlier,
            ("series",),
            ("up", "target up"),
            params="direction mask failed during_training z min_rel min_duration min_fraction max_share onset_z ramp_window alpha job_gpus corroborate corroborate_direction",
        ),
        _spec(
            "frozen_exporter",
            _det_frozen_exporter,
            ("changes per window", "samples per window", "level"),
            variadic=True,
            params="min_duration alpha level_ratio max_share exporter data",
        ),
        _spec(
            "gaps", _det_gaps, ("samples per host",), ("up",), params="mask ratio min_events min_share alpha"
        ),
        _spec(
            "threshold_prior",
            _det_threshold_prior,
            ("series",),
            ("detail",),
            params="codes above above_prior min_duration gpu_detail",
        ),
        _spec(
            "change_point",
            _det_change_point,
            ("series",),
            params="baseline_window z min_rel min_points confirm_window progress",
        ),
        _spec("level_shift", _det_level_shift, ("series",), params="min_duration min_rel"),
        _spec("near_limit", _det_near_limit, ("fraction of the limit",), params="limit"),
        _spec(
            "accused_alive",
            _det_accused_alive,
            ("power per host", "utilisation per host"),
            ("context",) * 8,
            params="power_ratio_min util_min margin presence",
        ),
        _spec(
            "uniform_elevation",
            _det_uniform_elevation,
            ("series",),
            params="requires base per_gpu factor min_share",
        ),
        _spec("series_absent", _det_series_absent, ()),
        _spec("own_excess", _det_own_excess, ("series per host",), params="min_rel min_abs min_duration"),
    )
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
                f = DETECTORS[rule.detector].fn(ctx, pb, rule, focus)
                if f is not None:
                    out.append(f)
    return out
