"""Render a playbook's declared query as PromQL for a metric profile (windows, grids, aggregation push-down)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from typing import Any

from ._diagnose_bits import _plain, bits_expr, with_matcher
from ._diagnose_peers import PEERS_MIN_POINTS, PeerFollowUp, peer_expr
from ._diagnose_relabel import Relabel
from ._diagnose_types import COARSE_POINTS, FINE_POINTS, SERIES_POINTS, PlannedQuery
from .model import QuerySpec
from .profiles import PROFILES
from .profiles._signal import _ADDRESS, _is_simple_selector, _regex_literal
from .prometheus import choose_step, parse_duration


def _window_s(q: QuerySpec, step: float, interval: float, start: float, end: float) -> float:
    if q.window == "auto":
        # consecutive windows share a scrape: with windows exactly a grid step long, an increment between
        # the last sample of one window and the first of the next falls in neither (a UE counter's 0 -> 1
        # vanishes whenever it straddles a grid point)
        return max(step + interval, 4.0 * interval)
    if q.window == "job":
        return max(step, end - start)
    if q.window == "step":
        # the samples since the previous grid point: none, and the point's value is one the lookback held
        return step
    return parse_duration(q.window)


def render_query(
    q: QuerySpec,
    profile_name: str,
    *,
    start: float,
    end: float,
    interval: float,
    hosts: int = 0,
    gpus: int = 0,
    only_hosts: Sequence[str] = (),
) -> PlannedQuery:
    """Return the PromQL of a declared query for a profile (raises ProfileError if it lacks a signal).

    `hosts` and `gpus` (the source's counts, 0 when unknown) bound the work of a query over many series:
    Prometheus evaluates every series it reads at every step, so the fine grid of a query that reads one
    series per GPU has at most `SERIES_POINTS / gpus` points (8,192 GPUs over 2 h: a 60 s step, not 15 s).
    `only_hosts` (normalised names) narrows the signal's selector to those hosts where the exporter's own label
    names them, so Prometheus reads no other host's series.
    """
    prof = PROFILES[profile_name]
    reads = gpus if any(prof.signal(s).scope == "gpu" for s in q.signals) else hosts
    points = min(FINE_POINTS, max(COARSE_POINTS, SERIES_POINTS // reads)) if reads > 0 else FINE_POINTS
    fine = choose_step(start, end, min_step=max(1.0, interval), max_points=points)
    step = fine if q.resolution == "fine" else max(fine, choose_step(start, end, max_points=COARSE_POINTS))
    w = _window_s(q, step, interval, start, end)
    wtxt = f"{int(math.ceil(w))}s"
    # the grid ends at the data's end, so that an increment in the last scrapes is on its last point (a grid
    # anchored at the start may stop up to a step short of the end)
    aligned = end - math.ceil((end - start) / step - 1e-9) * step
    rel: Relabel | None = None
    follow: PeerFollowUp | None = None
    if q.signal:
        grid = (aligned, end, (end - aligned) / step + 1)
        sig = _narrowed(prof.signal(q.signal), only_hosts)
        expr, rel = _signal_expr(q, sig, wtxt, hosts, gpus, grid)
        if _peers(q, sig, gpus, grid[2]) and q.kind != "instant":
            # asked in two: the second part knows the pack's median and the candidates from the first
            follow = PeerFollowUp.of(sig, q.agg or sig.agg, direction=q.peers, start=aligned, end=end)
    else:
        expr = q.promql.replace("{window}", wtxt)
        for s in q.signals:
            expr = expr.replace("{" + s + "}", f"({prof.signal(s).expr(window=wtxt)})")
    above = re.fullmatch(r">\s*(-?[0-9.]+)", q.post.strip())
    agg = rel.agg if rel else ""
    if rel and above and (agg == "max" or (agg == "sum" and float(above[1]) == 0 and q.fn in _NON_NEGATIVE)):
        # a filter on the renamed series, applied after the rename (`Relabel.above`) and already on the
        # exporter's series, so that the series it drops are not sent: the same series when the largest is
        # above it, or a sum of values never negative is above 0, exactly when one of its parts is
        expr, rel = f"({expr}) {q.post}", dataclasses.replace(rel, above=float(above[1]))
    elif q.post:
        # any other filter applies to the renamed series: PromQL renames them first
        expr, rel = f"({rel.promql(expr) if rel else expr}) {q.post}", None
    uses_window = bool(q.fn) or (q.signal and prof.signal(q.signal).is_counter)
    window_s = w if uses_window else 0.0
    if q.kind == "instant":
        return PlannedQuery(q.name, expr, "instant", start, end, None, window_s, rel)
    gate = _gate(q, _narrowed(prof.signal(q.signal), only_hosts), w, aligned, end) if q.signal else ""
    return PlannedQuery(q.name, expr, "range", aligned, end, step, window_s, rel, follow, gate)


def _bits(q: QuerySpec, sig: Any, gpus: int, points: float) -> bool:
    """Return whether a declared query asks which GPUs reach a value as bits per host (`_diagnose_bits`)."""
    if q.at_least is None or sig.scope != "gpu" or q.fn or not _plain(sig) or sig.gpu_index:
        return False
    return gpus * points >= PEERS_MIN_POINTS


def _peers(q: QuerySpec, sig: Any, gpus: int, points: float) -> bool:
    """Return whether a declared query compares each GPU with the pack in Prometheus (`_diagnose_peers`)."""
    if not q.peers or sig.scope != "gpu" or q.fn or _bits(q, sig, gpus, points):
        return False
    return gpus * points >= PEERS_MIN_POINTS


def _signal_expr(
    q: QuerySpec, sig: Any, wtxt: str, hosts: int, gpus: int, grid: tuple[float, float, float]
) -> tuple[str, Relabel | None]:
    """Return (the PromQL of a declared query on one signal, how Stepwise renames its answer or None): per-GPU
    bits or peers where one series per GPU would cost more, a sum of a counter's parts joined after summing,
    else the signal's own expression, aggregated by the exporter's own labels where it can be renamed after.
    `grid` is the range query's (first, end, points)."""
    points = grid[2]
    fn = q.fn or None
    parts = sig.selector.split(" | ")
    if q.at_least is not None and _bits(q, sig, gpus, points):
        # which GPUs reach a value, as bits per host: only where one series per GPU costs more to send
        # and parse than the bits cost Prometheus (8,192 GPUs; not 1,024, where the bits cost it 0.1 s more)
        agg = q.agg or sig.agg
        expr = bits_expr(
            sig,
            q.at_least,
            round(gpus / max(hosts, 1)),
            agg,
            lambda s: (
                _pushdown(s, None, wtxt, ("host", "gpu"), agg) or s.expr(None, by=("host", "gpu"), agg=agg)
            ),
        )
    elif _peers(q, sig, gpus, points):
        expr = peer_expr(sig, q.agg or sig.agg, direction=q.peers, start=grid[0], end=grid[1])
    elif len(parts) > 1 and sig.is_counter and (q.agg or sig.agg) == "sum":
        # Sum each counter by the output labels first, then join the small results: joining every raw
        # series of several counters with `or` at each step costs ten times more on a large job.
        by = tuple(q.by if q.by is not None else sig.labels)
        ones = [dataclasses.replace(sig, selector=part, metrics=(part.split("{")[0],)) for part in parts]
        # each part is summed by the exporter's own host label and the parts joined, then renamed once (a
        # regex over every GPU's series at every step cost 0.5-0.6 s of Prometheus CPU a query on 1,024 GPUs)
        pushed = [_pushed(one, fn, wtxt, by, "sum") for one in ones]
        if all(pushed) and len({p[1] for p in pushed if p}) == 1:
            subs, rel = [p[0] for p in pushed if p], pushed[0][1] if pushed[0] else None
            by = _raw_by(sig, by)
        else:
            subs, rel = [one.expr(fn, window=wtxt, by=by, agg="sum") for one in ones], None
        tagged = " or ".join(
            f'label_replace({e}, "stepwise_part", "{i}", "", "")' for i, e in enumerate(subs)
        )
        return (f"sum by ({', '.join(by)}) ({tagged})" if by else f"sum({tagged})"), rel
    else:
        one = _sent_raw(sig, fn, q.by, q.agg or sig.agg) or _pushed(sig, fn, wtxt, q.by, q.agg or sig.agg)
        if one:
            return one
        expr = (
            sig.expr(fn, window=wtxt, by=q.by, agg=q.agg or None)
            if (fn or sig.is_counter)
            else sig.expr(None, by=q.by, agg=q.agg or None)
        )
    return expr, None


def _narrowed(sig: Any, hosts: Sequence[str]) -> Any:
    """Return `sig` reading only `hosts`' series (a matcher on its host label), or `sig` itself when its host
    name is not one plain label of one selector (taken from `instance`, joined, aliased, or a sum of parts)."""
    if not hosts or not _plain(sig) or sig.host_from in ("", "instance") or "," in sig.host_from:
        return sig
    if sig.host_join or sig.host_alias:
        return sig
    alternatives = "|".join(_regex_literal(h) for h in sorted(hosts))
    return with_matcher(sig, f'{sig.host_from}=~"{alternatives}"')


#: functions of a window that are 0 wherever none of its series' samples changed within the window (no
#: sample pair then adds to an increase, a rate, a count of changes or resets, or a difference)
_STILL_IS_ZERO = frozenset({"increase", "rate", "irate", "changes", "resets", "delta", "idelta"})


def _gate(q: QuerySpec, sig: Any, window: float, first: float, end: float) -> str:
    """Return the PromQL of an instant query at `end` whose empty answer means the range query's is empty, or "".

    Two kinds of range query answer nothing when none of the series they read changed in the union of their
    windows, which one instant query of `changes` over that union tells, reading it once where the range
    query evaluates every GPU's windows at each step (1,024 GPUs x 4 h at a 30 s grid: 0.05 s of Prometheus's
    CPU instead of 0.15-0.23 s, on counters that most jobs never see move):

    - a counter's increase (rate, changes, ...) kept only above some c >= 0 (`post = "> 0"`: the hosts where
      uncorrectable errors grew), over the union `(first - window, end]`: every window's value is 0 there (a
      sum, maximum, minimum or average of zeros too), which the filter drops;
    - a signal present only where its gauge changed within a lookback D (DCGM's Xid: `(x and changes(x[D])
      > 0)`), read as it is, over `(first - D, end]`.

    The selectors must be the signal's own raw series, unjoined and unfiltered.
    """
    if (q.agg or sig.agg) not in ("sum", "max", "min", "avg") or sig.fill_filter or sig.host_join:
        return ""
    changed = _CHANGED_ONLY.fullmatch(sig.selector)
    if changed and not q.fn and not sig.gpu_index:
        parts, window = [changed["sel"]], parse_duration(changed["within"])
    else:
        above = re.fullmatch(r">\s*([0-9]+(?:\.[0-9]*)?)", q.post.strip())
        parts = sig.selector.split(" | ")
        if not above or (q.fn or ("rate" if sig.is_counter else "")) not in _STILL_IS_ZERO:
            return ""
        if sig.gpu_index or not all(_is_simple_selector(p) for p in parts):
            return ""
    # one second more: the instant and the range query's last point may round apart by a millisecond
    span = f"{math.ceil(end - first + window) + 1}s"
    return " or ".join(f"group(changes({p}[{span}]) > 0)" for p in parts)


#: a signal present only where its selector's series changed within a lookback: `(x and changes(x[D]) > 0)`
_CHANGED_ONLY = re.compile(
    r"\((?P<sel>[A-Za-z_:][A-Za-z0-9_:]*(?:\{[^{}]*\})?) and changes\((?P=sel)\[(?P<within>[0-9]+[smh])\]\) > 0\)"
)


#: functions whose values are never negative (a filter `> 0` on a sum's parts drops none of its value)
_NON_NEGATIVE = frozenset({"increase", "rate", "irate", "changes", "resets", "count_over_time"})

_OUTER = {"sum": "sum", "max": "max", "min": "min", "avg": "avg", "count": "sum"}


def _sent_raw(sig: Any, fn: str | None, by: tuple[str, ...] | None, agg: str) -> tuple[str, Relabel] | None:
    """Return (a host gauge's own selector, how Stepwise names and combines its series) for a gauge read by
    host, or None.

    Each host is one series of such a gauge: PromQL's `max by (host)` makes a group of each at every step,
    which costs Prometheus four times reading it (1,024 hosts x 481 steps: 0.38 s of its CPU, 0.09 s for the
    series as they are). Combined here (`Relabel`), the series are the same; a host that has several is
    combined as PromQL would. Not a GPU's: Prometheus counts every sample of a selector's whole window
    against its `--query.max-samples` whatever the step, so a coarser grid (`_diagnose_partial`) would no
    longer bring one series per GPU under it (the aggregation counts the steps asked).
    """
    out_by = tuple(by if by is not None else sig.labels)
    if fn or sig.is_counter or sig.scope != "host" or not _plain(sig) or sig.renamed or sig.scale != 1.0:
        return None
    if not sig.host_from:
        return None
    if not out_by or out_by != tuple(sig.labels) or agg not in ("max", "min", "avg", "sum"):
        return None
    copies = () if sig.host_from == "host" else (("host", sig.host_from, _host_regex(sig)),)
    return sig.selector, Relabel(copies, out_by, agg)


def _host_regex(sig: Any) -> str:
    """Return the regex that takes the host's name from the signal's own host label (`instance` less its port)."""
    return _ADDRESS if sig.host_from == "instance" else "(.+)"


def _pushdown(sig: Any, fn: str | None, window: str, by: tuple[str, ...] | None, agg: str) -> str | None:
    """Return the signal's PromQL with the aggregation done before the host label is renamed, or None
    (`_pushed`, renamed in PromQL: for an expression that joins it with others by host)."""
    pushed = _pushed(sig, fn, window, by, agg)
    return pushed[1].promql(pushed[0]) if pushed else None


def _pushed(
    sig: Any, fn: str | None, window: str, by: tuple[str, ...] | None, agg: str
) -> tuple[str, Relabel] | None:
    """Return (the signal's PromQL aggregated by the exporter's own labels, the rename to host/gpu), or None.

    A profile copies `host` from the exporter's own label (DCGM's `Hostname`, `instance`) on every raw
    series before aggregating; on 1,024 GPUs that label_replace runs over every series at every step.
    Aggregating by the exporter's own labels first and renaming the (few) results gives the same series
    for one exporter instance per host, at a fraction of the cost; renaming them in Stepwise costs
    Prometheus nothing.
    """
    if (
        sig.host_from in ("", "host")
        or sig.fill_filter
        or " | " in sig.selector
        or agg not in _OUTER
        or sig.host_join
        or sig.host_alias
        or "," in sig.host_from
    ):
        return None
    out_by = tuple(by if by is not None else sig.labels)
    if not set(out_by) <= {"host", "gpu"} or (sig.gpu_index and "gpu" in out_by):
        return None
    inner = dataclasses.replace(sig, host_from="host", gpu_from="gpu" if sig.scope == "gpu" else "")
    expr = inner.expr(fn, window=window, by=_raw_by(sig, out_by), agg=agg)
    copies = [("host", sig.host_from, _host_regex(sig))]
    if "gpu" in out_by and (sig.gpu_from or "gpu") != "gpu":
        copies.append(("gpu", sig.gpu_from, "(.+)"))
    return expr, Relabel(tuple(copies), out_by, _OUTER[agg])


def _raw_by(sig: Any, by: tuple[str, ...]) -> tuple[str, ...]:
    """Return the exporter's own labels for the normalised `by` (host, gpu) of a signal."""
    raw = {"host": sig.host_from, "gpu": sig.gpu_from or "gpu"}
    return tuple(raw.get(b, b) for b in by)
