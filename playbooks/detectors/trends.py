"""Detectors of job-wide trends: training metric jumps, step-time shifts, uniform elevation, absent series."""

from __future__ import annotations

import math

import numpy as np

from playbooks.anomaly import Grid, change_points, climbs, first_sustained, nan_median, walk_back
from playbooks.context import Context, Finding, triage_get
from playbooks.departure import departure
from playbooks.log_series import LOG_QUERY, LOG_STEP_QUERY
from playbooks.model import Playbook, RuleSpec
from playbooks.profiles import PROFILES
from playbooks.report import SLOWDOWN, fmt_time

from ._base import _dur, _ev, _finding


def _det_change_point(
    ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]
) -> Finding | None:
    g = ctx.grid(rule.queries[0])
    if g is None:
        return None
    x = g.single()
    assert x is not None, "ctx.grid returns only grids with at least one series"
    tl = ctx.timeline
    # a training-level series (loss, grad norm) is what each step computed: a checkpoint save does not move
    # it, so only warm-up is left out (an instability that starts during a save is dated when it starts)
    valid = tl.training_mask(g.t) & g.mask(*focus) & ~tl.rewarming(g.t)
    if tl.warm_end is not None:
        valid &= g.t >= tl.warm_end
    # a restart re-runs steps from a checkpoint: the new run's values (the loss back at the checkpoint's
    # level) are judged against the new run's own history, never against the old run's last values
    runs = tl.segment(g.t)
    found = _first_move(rule, g.t, x, valid, runs)
    if found is None:
        return None
    i, cross, jump, anomalous = found
    valid &= runs == runs[i]  # the baseline and the departure are the run's own
    prev = x[:i][valid[:i] & ~np.isnan(x[:i])]
    base = nan_median(prev[-30:]) if len(prev) else float("nan")
    peak = float(np.nanmax(x[i:])) if np.isfinite(x[i:]).any() else float(x[i])
    window = _dur(rule, "baseline_window", 1200.0)
    t_on, prev_t = _change_onset(ctx, rule, g, x, valid, (i, cross, jump), window)
    ev = [
        _ev(
            ctx,
            rule.queries[0],
            {},
            float(x[i]),
            f"jumped from its recent {base:.4g} to {x[i]:.4g} at {fmt_time(t_on)} (peak {peak:.4g}; "
            f"{anomalous} anomalous points)",
        )
    ]
    return _finding(pb, rule, [], [], t_on, ev, cross=float(g.t[cross]), prev=prev_t, window=window)


def _first_move(
    rule: RuleSpec, t: np.ndarray, x: np.ndarray, valid: np.ndarray, runs: np.ndarray
) -> tuple[int, int, bool, int] | None:
    """Return (where the move began, where the rule saw it, whether a jump, the anomalous points) of the
    series' first confirmed move within its run, else None."""
    p = rule.params
    idx, _ = _per_run(rule, x, t, valid, runs, _origin(x, valid) if p.get("progress") else None)
    # an isolated one-step spike is ordinary noise in real training; instability lasts several points
    need, span = int(p.get("min_points", 3)), _dur(rule, "confirm_window", 600.0)

    def confirmed(found: list[int]) -> list[int]:
        return [i for i in found if sum(1 for k in found if t[i] <= t[k] <= t[i] + span) >= need]

    firsts = confirmed(idx)
    if firsts:
        return firsts[0], firsts[0], True, len(idx)
    # no jump against the last few points: a climb far above the series' own earlier level, dated where
    # it left that level
    idx, levels = _per_run(rule, x, t, valid, runs, None, climbing=True)
    firsts = confirmed(idx)
    if not firsts:
        return None
    cross = firsts[0]
    i = walk_back(np.where(valid & (runs == runs[cross]), x, np.nan), cross, levels[cross])
    return i, cross, False, len(idx)


def _change_onset(
    ctx: Context,
    rule: RuleSpec,
    g: Grid,
    x: np.ndarray,
    valid: np.ndarray,
    move: tuple[int, int, bool],
    window: float,
) -> tuple[float, float]:
    """Return when the move (`_first_move`'s start, crossing, jump) began, and the time of the series' last
    distinct value before the rule saw it."""
    i, cross, jump = move
    tl = ctx.timeline
    step_s = tl.step_s if tl.step_s is not None and 0 < tl.step_s < 600 else 0.0
    # a climb crosses the thresholds late: it began where the series left its own baseline (a jump: midway
    # between the samples either side of it). A positive training metric diverges by factors, its noise in
    # proportion to it: judged on a log scale, where an exponential climb is a straight one
    y = np.where(valid, x, np.nan)
    # a step's value is one observation however many scrapes see it (a long step, a save): repeats are dropped
    seen = np.nonzero(np.isfinite(y))[0]
    y[seen[1:][y[seen[1:]] == y[seen[:-1]]]] = np.nan
    with np.errstate(all="ignore"):
        y = np.log(y) if np.nanmin(y) > 0 else y
    tau = departure(g.t, y, cross, i, earliest=float(g.t[i]) - window)
    # a training metric is reported when its step completes: the anomaly began when that step started
    t_on = min(float(g.t[i]) - g.step / 2, tau if tau is not None else np.inf) - step_s
    # where the rule saw the rise, and the series' last distinct value before it: the move happened in
    # between (the log's finer per-step losses may date it: `log_evidence`)
    before = np.nonzero(np.isfinite(y[:cross]))[0]
    prev = float(g.t[before[-1]]) if len(before) else float(g.t[cross])
    left = np.nonzero(np.isfinite(y[:i]))[0]  # the last distinct value before the departure
    if step_s and len(left) and float(g.t[i]) - float(g.t[left[-1]]) > 3 * step_s:
        # a move between two values several steps apart (a log that prints every 10th step, a gauge refreshed
        # every few steps): any of the steps between began it, none more likely: the middle of that span
        # (interval-censored). No earlier for a jump a fit dated before it; the middle for a move no fit dated,
        # unless the values are the log's at times it inferred (undated lines placed by their durations, a
        # progress bar's clock): the earliest the steps can have ended, dated where they show the move
        mid = (float(g.t[left[-1]]) + float(g.t[i]) - step_s) / 2
        if tau is None and not _inferred_log_times(ctx, rule.queries[0]):
            t_on = min(t_on, mid)
        elif tau is not None and jump:
            t_on = max(t_on, mid)
    return t_on, prev


def _inferred_log_times(ctx: Context, name: str) -> bool:
    """Whether the series `name` is the log's (`log_series`) at step times the log inferred."""
    return ctx.promql(name) in (LOG_QUERY, LOG_STEP_QUERY) and bool(
        triage_get(ctx.triage, "details", "step_times_inferred")
    )


def _per_run(
    rule: RuleSpec,
    x: np.ndarray,
    t: np.ndarray,
    valid: np.ndarray,
    runs: np.ndarray,
    origin: float | None,
    *,
    climbing: bool = False,
) -> tuple[list[int], dict[int, float]]:
    """Return the jumps (or, `climbing`, the climbs and their levels) of x, each run of the job on its own."""
    p = rule.params
    window, z = _dur(rule, "baseline_window", 1200.0), float(p.get("z", 8.0))
    min_rel = float(p.get("min_rel", 0.3))
    idx: list[int] = []
    levels: dict[int, float] = {}
    for r in np.unique(runs[valid]):
        if climbing:
            found, lv = climbs(x, t, valid & (runs == r), window=window, z=z, min_rel=min_rel)
            levels.update(lv)
        else:
            found = change_points(
                x, t, valid & (runs == r), window=window, z=z, min_rel=min_rel, origin=origin
            )
        idx += found
    return sorted(idx), levels


def _origin(x: np.ndarray, valid: np.ndarray) -> float | None:
    """Return the series' level when training began: the median of its first five valid points."""
    first = x[valid & np.isfinite(x)][:5]
    return float(np.median(first)) if len(first) else None


def _det_level_shift(
    ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]
) -> Finding | None:
    g = ctx.grid(rule.queries[0])
    if g is None:
        return None
    x = g.single()
    assert x is not None, "ctx.grid returns only grids with at least one series"
    tl = ctx.timeline
    valid = tl.valid_training(g.t) & ~np.isnan(x)
    base_m = tl.steady_mask(g.t) & valid
    if base_m.sum() < 5:
        return None
    base = nan_median(x[base_m])
    w = max(1, int(round(_dur(rule, "min_duration", 600.0) / max(g.step, 1e-9))))
    xs = np.where(valid, x, np.nan)
    roll = np.full(len(x), np.nan)
    for k in range(len(x)):
        seg = xs[max(0, k - w + 1) : k + 1]
        if np.isfinite(seg).sum() >= max(3, w // 3):
            roll[k] = np.nanmedian(seg)
    shift = roll / base - 1
    hit = shift >= float(rule.params.get("min_rel", 0.08))
    i = first_sustained(hit, w, 0.8)
    if i is None:
        return None
    j = walk_back(
        np.where(valid, x / base - 1, np.nan), max(0, i - w + 1), float(rule.params.get("min_rel", 0.08)) / 2
    )
    t_on = float(g.t[j])
    peak = float(np.nanmax(shift[i:]))
    ev = [
        _ev(
            ctx,
            rule.queries[0],
            {},
            float(roll[i]),
            f"steady state {base:.4g}; rolling median {peak:+.0%} at most, from {fmt_time(t_on)}",
        )
    ]
    # what the slowdown cost: the steps' mean excess from the onset to the end of training (a step that
    # takes (1 + s) times as long does 1 / (1 + s) of the work: s / (1 + s) of the job's throughput is lost)
    after = valid & (g.t >= t_on)
    mean = float(np.mean(x[after]) / base - 1) if after.any() else float("nan")
    if math.isfinite(mean) and mean > 0:
        ev.append(
            _ev(
                ctx,
                rule.queries[0],
                {"measure": SLOWDOWN},
                round(mean, 4),
                f"steps {mean:.0%} slower on average from {fmt_time(t_on)} to the end of training: "
                f"{mean / (1 + mean):.0%} of the job's throughput lost over that span",
            )
        )
    return _finding(pb, rule, [], [], t_on, ev, value=f"{peak:+.0%}")


def _det_uniform_elevation(
    ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]
) -> Finding | None:
    g = ctx.grid(rule.queries[0])
    tl = ctx.timeline
    p = rule.params
    if g is None or (p.get("requires") == "restored" and not tl.restored):
        return None
    m = tl.valid_training(g.t)
    if not m.any():
        return None
    per_host = [nan_median(v[m]) for v in g.values]
    per_host = [v for v in per_host if math.isfinite(v)]
    gpus = getattr(ctx.source, "gpus_per_host", None) or 8
    expected = float(p.get("base", 8.0)) + float(p.get("per_gpu", 0.5)) * gpus
    high = [v for v in per_host if v >= float(p.get("factor", 1.5)) * expected]
    if not per_host or len(high) < float(p.get("min_share", 0.8)) * len(per_host):
        return None
    med = nan_median(per_host)
    if (max(per_host) - min(per_host)) > 0.5 * med:
        return None
    ev = [
        _ev(
            ctx,
            rule.queries[0],
            {},
            med,
            f"median {med:.0f} runnable per host on {len(high)}/{len(per_host)} hosts (spread "
            f"{min(per_host):.0f}-{max(per_host):.0f}) vs a prior of about {expected:.0f} for {gpus} GPUs per host",
        )
    ]
    return _finding(pb, rule, [], [], tl.train_start, ev, value=f"{med:.0f}")


def _det_series_absent(
    ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]
) -> Finding | None:
    prof = PROFILES.get(getattr(ctx.source, "profile", ""))
    if prof is None:
        return None
    name = prof.base or prof.name  # "nvidia", not the per-TSDB choices that follow it
    # Two different facts: signals this exporter family never has (Xid on AMD: by design), and signals it
    # has that this TSDB lacks (an exporter plugin that did not run: worth a look). The title names the latter.
    by_design = prof.unavailable()
    absent = [s for s in prof.unavailable(getattr(ctx.source, "metric_names", ())) if s not in by_design]
    if not absent and not by_design:
        return None
    ev = []
    if absent:
        needs = "; ".join(f"{s}: {' or '.join(prof.signal(s).metrics)}" for s in absent)
        ev.append(
            {
                "query": "/api/v1/label/__name__/values",
                "labels": {},
                "value": ", ".join(absent),
                "interpretation": f"{rule.meaning} The {name} profile reads them from {needs}.",
            }
        )
    if by_design:
        ev.append(
            {
                "query": f"profile {name}",
                "labels": {},
                "value": ", ".join(by_design),
                "interpretation": f"The {name} exporters have no such metrics; they are not guessed.",
            }
        )

    def names(items: list[str]) -> str:
        return ", ".join(items[:6]) + ("…" if len(items) > 6 else "")

    never = f"{names(by_design)} that the {name} exporters never have" if by_design else ""
    value = names(absent) + (f" (and {never})" if never else "") if absent else f"only {never}"
    return _finding(pb, rule, [], [], None, ev, value=value)
