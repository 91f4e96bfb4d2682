"""Read playbook results: the job's timeline, the interpretation rules, and the decision.

1. `build_context` turns stored query results into grids and derives the job's own timeline from the
   data (training start, when steps stopped, typical step time, warm-up, checkpoint windows, the early
   steady window used as the job's own baseline), with the triage as a hint.
2. `evaluate` applies every rule of every playbook that ran (one detector of `playbooks.anomaly` each)
   and returns findings.
3. `decide` ranks the root-cause candidates by onset (critical first; near-simultaneous ones by how
   specific the cause is), names the class, family, culprits, onset, confidence, chain and summary.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .anomaly import Grid, change_points, first_sustained, nan_median, peer_deviation, rate_excess, walk_back
from .gpus import GPU_MODELS, GpuModel
from .model import Playbook, RuleSpec
from .profiles import PROFILES
from .report import fmt_time

__all__ = ["Context", "Finding", "Timeline", "build_context", "decide_diagnosis", "evaluate"]

FAMILY = {
    "healthy": "none", "collective-hang": "collective", "network-hang": "network-rdma", "node-death": "node",
    "heartbeat-false-positive": "heartbeat", "host-oom": "host-memory", "thermal-straggler": "thermal",
    "rdma-degradation": "network-rdma", "restore-resource-leak": "cpu-contention",
    "monitoring-ghost-data": "monitoring", "gpu-driver-fault": "gpu-driver", "gpu-hardware-fault": "gpu-hardware",
    "training-instability": "training",
}
# How specific a cause is, to order findings whose onsets coincide (a hang is the effect of nearly anything).
PRIORITY = {
    "gpu-hardware-fault": 10, "host-oom": 9, "node-death": 8, "heartbeat-false-positive": 7, "network-hang": 7,
    "training-instability": 6, "thermal-straggler": 5, "rdma-degradation": 5, "monitoring-ghost-data": 4,
    "gpu-driver-fault": 4, "restore-resource-leak": 3, "collective-hang": 1, "healthy": 0,
}
# Classes whose story includes the job stopping; their stall/busy-wait findings are effects.
STOPPING = {"collective-hang", "network-hang", "node-death", "heartbeat-false-positive", "host-oom",
            "gpu-hardware-fault"}
SEV_RANK = {"info": 0, "warning": 1, "critical": 2}


@dataclass
class Timeline:
    """The job's own timeline, derived from its training metrics (triage as a hint).

    Attributes:
        start, end: analysed range.
        train_start: first training step seen.
        last_advance: when the step counter last advanced.
        last_step: the last step value.
        stalled: steps stopped well before the data ends, and the job did not complete.
        crash_time: from triage.
        step_s: typical step time (median).
        warm_end: end of warm-up (compile + first steps).
        checkpoints: [(start, end)] windows of checkpoint saves.
        steady: (start, end) the early steady window: the job's own baseline.
        restored: the job restored from a checkpoint (triage).
    """

    start: float
    end: float
    train_start: float | None = None
    last_advance: float | None = None
    last_step: float | None = None
    stalled: bool = False
    crash_time: float | None = None
    step_s: float | None = None
    warm_end: float | None = None
    checkpoints: list[tuple[float, float]] = field(default_factory=list)
    steady: tuple[float, float] | None = None
    restored: bool = False

    def in_checkpoint(self, t: np.ndarray) -> np.ndarray:
        m = np.zeros(len(t), bool)
        for a, b in self.checkpoints:
            m |= (t >= a) & (t <= b)
        return m

    def steady_mask(self, t: np.ndarray) -> np.ndarray:
        if self.steady is None:
            return np.zeros(len(t), bool)
        inside = (t >= self.steady[0]) & (t <= self.steady[1])
        clean = inside & ~self.in_checkpoint(t)
        return clean if clean.sum() >= 5 else inside

    def training_mask(self, t: np.ndarray) -> np.ndarray:
        if self.train_start is None:
            return np.ones(len(t), bool)
        end = self.last_advance if self.last_advance is not None else self.end
        return (t >= self.train_start) & (t <= end)

    def valid_training(self, t: np.ndarray) -> np.ndarray:
        """Training, after warm-up, outside checkpoint windows."""
        m = self.training_mask(t) & ~self.in_checkpoint(t)
        if self.warm_end is not None:
            m &= t >= self.warm_end
        return m

    def to_dict(self) -> dict[str, Any]:
        return {"train_start": self.train_start, "last_advance": self.last_advance, "last_step": self.last_step,
                "stalled": self.stalled, "crash_time": self.crash_time, "step_s": self.step_s,
                "warm_end": self.warm_end, "checkpoints": len(self.checkpoints), "steady": self.steady,
                "restored": self.restored}


@dataclass
class Context:
    """What the rules read: results by query name, the timeline, the triage and the source."""

    results: dict[str, Any]
    meta: dict[str, dict[str, Any]]
    timeline: Timeline
    triage: dict[str, Any] | None
    source: Any
    gpu: GpuModel | None

    def grid(self, name: str) -> Grid | None:
        r = self.results.get(name)
        return r if isinstance(r, Grid) and len(r.labels) else None

    def instant(self, name: str) -> list[dict[str, Any]]:
        r = self.results.get(name)
        return r if isinstance(r, list) else []

    def promql(self, name: str) -> str:
        return str(self.meta.get(name, {}).get("promql", name))

    def window_s(self, name: str) -> float:
        return float(self.meta.get(name, {}).get("window_s") or 0.0)


@dataclass
class Finding:
    """One finding of one rule (all the hosts/GPUs it flagged)."""

    playbook: str
    rule: str
    klass: str
    severity: str
    role: str
    hosts: list[str]
    gpus: list[str]
    onset: float | None
    title: str
    evidence: list[dict[str, Any]]
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"playbook": self.playbook, "class": self.klass, "severity": self.severity,
                "hosts": list(self.hosts), "gpus": list(self.gpus), "onset": _r(self.onset), "title": self.title,
                "evidence": self.evidence, "rule": f"{self.playbook}.{self.rule}"}


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), nd)


def _num(x: float) -> float | str:
    if x is None or not math.isfinite(float(x)):
        return "NaN"
    ax = abs(float(x))
    return round(float(x), 4 if ax < 1 else 2 if ax < 1000 else 0)


# ----------------------------------------------------------------------------------------- context

def build_context(source: Any, outputs: Sequence[Any], triage: Mapping[str, Any] | None) -> Context:
    """Return the rules' context: every output's results as grids/instant samples plus the job timeline."""
    results: dict[str, Any] = {}
    meta: dict[str, dict[str, Any]] = {}
    for out in outputs:
        for name, data in out.results.items():
            if not isinstance(data, Mapping):
                continue
            meta[name] = {"promql": data.get("promql", name), "window_s": data.get("window_s")}
            if data.get("kind") == "range":
                results[name] = Grid.from_result(data)
            else:
                results[name] = list(data.get("samples", []))
    gpu = GPU_MODELS.get(getattr(source, "gpu_model", None) or "")
    tl = _timeline(source, results, triage)
    return Context(results=results, meta=meta, timeline=tl, triage=dict(triage) if triage else None,
                   source=source, gpu=gpu)


def _triage_get(triage: Mapping[str, Any] | None, *path: str) -> Any:
    cur: Any = triage
    for p in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


def _timeline(source: Any, results: Mapping[str, Any], triage: Mapping[str, Any] | None) -> Timeline:
    tr = source.time_range or (0.0, 0.0)
    grids = [r for r in results.values() if isinstance(r, Grid) and len(r.t)]
    if grids:
        # the analysed window (--start/--end may cut the data): a job is not "stalled" at a window's edge
        a, b = min(float(g.t[0]) for g in grids), max(float(g.t[-1]) for g in grids)
        tr = (max(float(tr[0]), a), min(float(tr[1]), b)) if source.time_range else (a, b)
    tl = Timeline(start=float(tr[0]), end=float(tr[1]))
    tl.crash_time = _triage_get(triage, "job", "crash_time")
    tl.restored = _triage_get(triage, "progress", "restored_from") is not None
    step = results.get("step")
    st = results.get("step_time")
    if isinstance(st, Grid) and len(st.labels):
        tl.step_s = nan_median(st.single())
    if not isinstance(step, Grid) or not len(step.labels):
        tl.step_s = tl.step_s or _triage_get(triage, "progress", "step_time_s")
        return tl
    t, s = step.t, step.single()
    have = ~np.isnan(s)
    if not have.any():
        return tl
    i0 = int(np.argmax(have))
    tl.train_start = float(t[i0])
    smax = float(np.nanmax(s))
    i_last = int(np.argmax(have & (s >= smax)))
    tl.last_step = smax
    tl.last_advance = float(t[i_last]) - step.step / 2 if i_last > i0 else float(t[i_last])
    lst = results.get("last_step_ts")
    if isinstance(lst, Grid) and len(lst.labels):
        v = lst.single()
        if np.isfinite(v).any():
            tl.last_advance = float(np.nanmax(v))
    if tl.step_s is None or not math.isfinite(tl.step_s):
        smin = float(s[i0])
        span = (tl.last_advance or tl.train_start) - tl.train_start
        tl.step_s = span / (smax - smin) if smax > smin and span > 0 else _triage_get(triage, "progress", "step_time_s")
    step_s = float(tl.step_s or 30.0)
    # warm-up: the compile step and the first few steps run slow
    first = float(s[i0])
    warm = np.nonzero(have & (s >= first + 8))[0]
    tl.warm_end = float(t[warm[0]]) if len(warm) else tl.train_start + 10 * step_s
    # checkpoints: steps at multiples of checkpoint_period, and step-time spikes
    period = _int(_triage_get(triage, "config", "checkpoint_period"))
    # the save's I/O tail; never so long that checkpoint windows cover the whole job
    after = max(120.0, 3 * step_s)
    if period:
        after = min(after, 0.5 * period * step_s)
        prev = np.concatenate([[np.nan], s[:-1]])
        hit = have & (s != prev) & (np.mod(s, period) == 0)
        tl.checkpoints += [(float(t[i]) - step.step, float(t[i]) + after) for i in np.nonzero(hit)[0]]
    if isinstance(st, Grid) and len(st.labels):
        x = st.single()
        med = nan_median(x)
        if math.isfinite(med):
            spikes = np.nonzero(x > 1.5 * med)[0]
            tl.checkpoints += [(float(st.t[i]) - float(x[i]) - st.step, float(st.t[i]) + after) for i in spikes]
    # stalled: the counter stopped well before the data ends, and the job did not complete
    status = _triage_get(triage, "job", "status")
    gap = tl.end - (tl.last_advance or tl.end)
    if status == "completed" or status == "soft-success":
        tl.stalled = False
    elif status is not None:
        tl.stalled = gap >= max(120.0, 4 * step_s)
    else:
        tl.stalled = gap >= max(300.0, 5 * step_s)
    train_end = tl.last_advance or tl.end
    length = max(600.0, 0.25 * max(0.0, train_end - tl.warm_end))
    tl.steady = (tl.warm_end, min(train_end, tl.warm_end + length))
    return tl


def _int(x: Any) -> int | None:
    try:
        v = int(str(x).strip())
        return v if v > 0 else None
    except (TypeError, ValueError):
        return None


def _focus(pb: Playbook, tl: Timeline) -> tuple[float, float]:
    w = pb.window
    if w.anchor == "crash":
        anchor = tl.crash_time or tl.last_advance or tl.end
    elif w.anchor == "stall":
        anchor = tl.last_advance if tl.stalled and tl.last_advance else tl.end
    else:
        return tl.start, tl.end
    a = tl.start if w.before is None else max(tl.start, anchor - w.before)
    b = tl.end if w.after is None else min(tl.end, anchor + w.after)
    return a, b


# ----------------------------------------------------------------------------------------- rules

def evaluate(ctx: Context, playbooks: Sequence[Playbook]) -> list[Finding]:
    """Return the findings of every rule of `playbooks` (rules whose queries returned nothing are skipped)."""
    out: list[Finding] = []
    with warnings.catch_warnings():
        # all-NaN columns (a host with no data at an instant) are expected; their medians are NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        for pb in playbooks:
            focus = _focus(pb, ctx.timeline)
            for rule in pb.rules:
                f = _DETECTORS[rule.detector](ctx, pb, rule, focus)
                if f is not None:
                    out.append(f)
    return out


def _dur(rule: RuleSpec, key: str, default: float) -> float:
    from .prometheus import parse_duration

    v = rule.params.get(key)
    if v is None:
        return default
    return float(v) if isinstance(v, int | float) else parse_duration(str(v))


def _finding(pb: Playbook, rule: RuleSpec, hosts: list[str], gpus: list[str], onset: float | None,
             evidence: list[dict[str, Any]], value: str = "", **extra: Any) -> Finding:
    host_txt = ", ".join(hosts[:6]) + (f" and {len(hosts) - 6} more" if len(hosts) > 6 else "")
    title = rule.title.format(hosts=host_txt or "the job", gpus=", ".join(gpus) or "?", n=len(hosts), value=value)
    if rule.params.get("needs"):
        extra = {**extra, "needs": tuple(rule.params["needs"])}
    return Finding(playbook=pb.name, rule=rule.id, klass=rule.klass, severity=rule.severity, role=rule.role,
                   hosts=hosts, gpus=gpus, onset=onset, title=title, evidence=evidence[:12], extra=extra)


def _ev(ctx: Context, q: str, labels: Mapping[str, Any], value: Any, text: str) -> dict[str, Any]:
    lab = {k: str(v) for k, v in labels.items() if v is not None}
    return {"query": ctx.promql(q), "labels": lab, "value": value if isinstance(value, str) else _num(value),
            "interpretation": text}


def _det_step_stall(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    tl = ctx.timeline
    if not tl.stalled or tl.last_advance is None:
        return None
    gap = tl.end - tl.last_advance
    text = (f"last step {int(tl.last_step or 0)} at {fmt_time(tl.last_advance)}; no step for {gap / 60:.1f} min "
            f"while data continues (typical step {tl.step_s or 0:.1f} s)")
    q = "last_step_ts" if ctx.grid("last_step_ts") else "step"
    return _finding(pb, rule, [], [], tl.last_advance, [_ev(ctx, q, {}, tl.last_step or 0, text)])


def _steady_level(ctx: Context, g: Grid) -> float:
    """Return the job's own steady-state level of a per-host signal (median across hosts and time)."""
    m = ctx.timeline.steady_mask(g.t)
    if not m.any():
        m = ctx.timeline.valid_training(g.t)
    return nan_median(g.values[:, m].ravel()) if m.any() else float("nan")


def _det_busy_wait(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    tl = ctx.timeline
    util, power = ctx.grid(rule.queries[0]), ctx.grid(rule.queries[1])
    umin = ctx.grid(rule.queries[2]) if len(rule.queries) > 2 else None
    if not tl.stalled or util is None or power is None or tl.last_advance is None:
        return None
    p = rule.params
    a = tl.last_advance + max(60.0, 2 * power.step)
    b = (tl.crash_time if tl.crash_time and tl.crash_time > a else tl.end) - power.step
    win_p, win_u = power.mask(a, b), util.mask(a, b)
    if win_p.sum() < 1 or win_u.sum() < 1:
        return None
    active = _steady_level(ctx, power)
    if not math.isfinite(active) or active <= 0:
        return None
    rows = []
    busy = 0
    hosts_seen = 0
    umin_by_host: dict[str, float] = {}
    if umin is not None:
        wm = umin.mask(a, b)
        umin_by_host = {lab.get("host", ""): nan_median(v[wm]) for lab, v in zip(umin.labels, umin.values, strict=True)}
    silent: set[str] = set()
    for q in p.get("presence", ()):
        pg = ctx.grid(str(q))
        for lab, v in zip(pg.labels if pg else [], pg.values if pg else [], strict=True):
            seg = v[pg.mask(a, b)]
            if len(seg) and not (np.nan_to_num(seg, nan=0.0) > 0).all():
                silent.add(lab.get("host", ""))
    for lab, pv in zip(power.labels, power.values, strict=True):
        h = lab.get("host", "")
        if h in silent:
            continue
        uv = util.row(host=h)
        pu = nan_median(pv[win_p])
        uu = nan_median(uv[win_u]) if uv is not None else float("nan")
        if not math.isfinite(pu):
            continue
        hosts_seen += 1
        is_busy = math.isfinite(uu) and uu >= p.get("util_min", 70.0) and pu <= p.get("power_ratio_max", 0.6) * active
        busy += is_busy
        rows.append((h, uu, pu, is_busy))
    if not hosts_seen or busy < max(1, 0.5 * hosts_seen):
        return None
    odd = []
    for h in silent:
        umin_by_host.pop(h, None)
    if umin_by_host:
        typical = nan_median([v for v in umin_by_host.values() if math.isfinite(v)])
        for h, v in umin_by_host.items():
            if math.isfinite(v) and math.isfinite(typical) and v < p.get("idle_util", 20.0) <= typical:
                odd.append(h)
    ev = [_ev(ctx, rule.queries[0], {"host": h}, uu,
              f"utilisation {uu:.0f} % at {pu:.0f} W ({pu / active:.0%} of the job's own training power "
              f"{active:.0f} W){'' if busy_ else ' - not busy-waiting'}")
          for h, uu, pu, busy_ in sorted(rows, key=lambda r: (r[0] not in odd, r[3], r[0]))]
    for h in odd:
        ev.insert(0, _ev(ctx, rule.queries[2], {"host": h}, umin_by_host[h],
                         "some GPUs of this host sit idle while the others spin: they never entered the collective"))
    return _finding(pb, rule, sorted(odd), [], tl.last_advance, ev, busy_hosts=busy, hosts_seen=hosts_seen)


def _det_rate_outlier(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    g = ctx.grid(rule.queries[0])
    tl = ctx.timeline
    if g is None:
        return None
    p = rule.params
    a, b = focus
    if "before_stall" in p:
        if not tl.stalled or tl.last_advance is None:
            return None
        a, b = tl.last_advance - _dur(rule, "before_stall", 1800.0), tl.last_advance + 60.0
    base = tl.steady_mask(g.t) & ~g.mask(a, b)
    if base.sum() < 5:
        base = tl.training_mask(g.t) & (g.t < a) & ~tl.in_checkpoint(g.t)
    if base.sum() < 5:
        base = tl.steady_mask(g.t)
    exc = rate_excess(g.values, base, floor=float(p.get("floor", 0.0)), factor=float(p.get("factor", 10.0)))
    exc &= g.mask(a, b)[None, :]
    if p.get("exclude_checkpoints"):
        exc &= ~tl.in_checkpoint(g.t)[None, :]
    length = max(1, int(round(_dur(rule, "min_duration", 300.0) / max(g.step, 1e-9))))
    if g.mask(a, b).sum() < length:
        length = max(1, int(g.mask(a, b).sum()))
    hosts, onset, ev = [], None, []
    for r in range(len(g.labels)):
        i = first_sustained(exc[r], length, float(p.get("min_fraction", 0.8)))
        if i is None:
            continue
        x = g.values[r]
        own = nan_median(x[base]) if base.any() else 0.0
        pack = nan_median(g.values[:, base].ravel()) if base.any() else 0.0
        usual = max(v for v in (own, pack, 0.0) if math.isfinite(v))
        j = walk_back(x, i, max(float(p.get("floor", 0.0)), 0.3 * float(p.get("factor", 10.0)) * usual))
        j = max(j, int(np.argmax(g.mask(a, b))))
        t_on = float(g.t[j]) - min(ctx.window_s(rule.queries[0]), g.step) / 2
        h = g.labels[r].get("host", "")
        hosts.append(h)
        onset = t_on if onset is None else min(onset, t_on)
        level = nan_median(x[exc[r]])
        peer = nan_median(np.delete(g.values, r, axis=0)[:, exc[r]].ravel()) if len(g.labels) > 1 else float("nan")
        ev.append(_ev(ctx, rule.queries[0], {"host": h}, level,
                      f"{level:.3g}/s sustained from {fmt_time(t_on)} (peers {peer:.3g}/s at the same times)"))
    if not hosts:
        return None
    return _finding(pb, rule, hosts, [], onset, ev)


def _det_counter_increase(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    g = ctx.grid(rule.queries[0])
    if g is None:
        return None
    p = rule.params
    m = g.mask(*focus)
    hit = (g.values > float(p.get("min", 0.0))) & m[None, :]
    rows = [r for r in range(len(g.labels)) if hit[r].any()]
    if not rows:
        return None
    with_data = int((~np.isnan(g.values[:, m])).any(axis=1).sum())
    if p.get("peers_clean") and len(rows) > max(1, 0.5 * with_data):
        return None
    hosts, gpus, ev = [], [], []
    onset = None
    detail = ctx.instant(str(p.get("gpu_detail", ""))) if p.get("gpu_detail") else []
    for r in rows:
        h = g.labels[r].get("host", "")
        i = int(np.argmax(hit[r]))
        t_on = float(g.t[i]) - g.step / 2
        src = p.get("onset_from")
        if src and ctx.grid(str(src)) is not None:
            mg = ctx.grid(str(src))
            row = mg.row(host=h)
            if row is not None:
                k = mg.index(float(g.t[i]))
                seg = row[: k + 1]
                if np.isfinite(seg).any():
                    peak = int(np.nanargmax(seg))
                    own = nan_median(row[ctx.timeline.steady_mask(mg.t)]) if ctx.timeline.steady_mask(mg.t).any() \
                        else nan_median(row)
                    spread = float(np.nanstd(row[ctx.timeline.steady_mask(mg.t)])) if \
                        ctx.timeline.steady_mask(mg.t).any() else 0.0
                    j = walk_back(row, peak, own + max(0.02 * abs(own), 3 * spread))
                    t_on = min(t_on, float(mg.t[j]) - mg.step / 2)
        onset = t_on if onset is None else min(onset, t_on)
        hosts.append(h)
        g_here = sorted({s["labels"].get("gpu", "") for s in detail if s["labels"].get("host") == h} - {""}, key=_gkey)
        gpus += g_here
        total = float(np.nanmax(g.values[r][m]))
        ev.append(_ev(ctx, rule.queries[0], {"host": h, "gpu": ",".join(g_here) or None}, total,
                      f"grew within the job (first at {fmt_time(t_on)}, up to {total:.3g} per interval); "
                      "its lifetime value is ignored"))
    for s in detail:
        if s["labels"].get("host") in hosts:
            ev.append(_ev(ctx, str(p["gpu_detail"]), s["labels"], s["value"], "increase over the whole window"))
    return _finding(pb, rule, hosts, gpus, onset, ev)


def _gkey(g: str) -> tuple[int, str]:
    return (int(g), g) if g.isdigit() else (1 << 30, g)


def _det_peer_outlier(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    g = ctx.grid(rule.queries[0])
    if g is None or len(g.labels) < 3:
        return None
    p = rule.params
    tl = ctx.timeline
    sign = 1.0 if p.get("direction", "up") == "up" else -1.0
    vals = g.values.copy()
    up = ctx.grid(str(p["mask"])) if p.get("mask") else None
    if up is not None:
        for r, lab in enumerate(g.labels):
            u = up.row(host=lab.get("host", ""))
            if u is not None and len(u) == vals.shape[1]:
                vals[r, ~(u >= 1)] = np.nan
    m = g.mask(*focus)
    if p.get("during_training", pb.name != "exporter_health"):
        m &= tl.training_mask(g.t)
        if tl.warm_end is not None:
            m &= g.t >= tl.warm_end
    enough = (~np.isnan(vals)).sum(axis=0) >= 3
    m &= enough
    if not m.any():
        return None
    base = tl.steady_mask(g.t) & enough
    dev, spread, med = peer_deviation(vals, base)
    d = sign * dev
    scale = np.maximum(spread, 0.01 * np.abs(med))
    scale = np.where(scale > 0, scale, np.nan)
    with np.errstate(all="ignore"):
        zz = d / scale[None, :]
        cond = (zz >= float(p.get("z", 6.0))) & (d >= float(p.get("min_rel", 0.0)) * np.abs(med)[None, :])
    cond &= m[None, :]
    cond &= ~np.isnan(vals)
    length = max(1, int(round(_dur(rule, "min_duration", 300.0) / max(g.step, 1e-9))))
    flagged = []
    for r in range(len(g.labels)):
        i = first_sustained(cond[r], length, float(p.get("min_fraction", 0.8)))
        if i is not None:
            flagged.append((r, i))
    if not flagged or len(flagged) > max(1, float(p.get("max_share", 0.25)) * len(g.labels)):
        return None
    hosts, gpus, ev, onset = [], [], [], None
    for r, i in flagged:
        z = np.where(np.isnan(zz[r]), -np.inf, zz[r])
        j = walk_back(z, i, float(p.get("onset_z", 2.0)))
        t_on = float(g.t[j]) - g.step / 2
        h, gpu = g.key(r)
        if p.get("extrapolate"):
            t_on = _extrapolate_onset(g.t, z, j, t_on, g.step)
        onset = t_on if onset is None else min(onset, t_on)
        if h not in hosts:
            hosts.append(h)
        if gpu is not None:
            gpus.append(gpu)
        peak_i = int(np.nanargmax(np.where(cond[r], d[r], -np.inf)))
        ev.append(_ev(ctx, rule.queries[0], {"host": h, "gpu": gpu}, vals[r, peak_i],
                      f"{'above' if sign > 0 else 'below'} the pack's median {med[peak_i]:.4g} by "
                      f"{abs(d[r, peak_i]):.3g} (beyond its own usual offset; pack spread {spread[peak_i]:.2g}) "
                      f"at {fmt_time(float(g.t[peak_i]))}; left the pack at {fmt_time(t_on)}"))
    return _finding(pb, rule, hosts, gpus, onset, ev)


def _extrapolate_onset(t: np.ndarray, z: np.ndarray, j: int, t_on: float, step: float) -> float:
    """Return where a ramp that left the pack at index j started: the straight line through its rising
    part (from z = 2 up to 60 % of its peak), extended back to zero deviation. A gradual ramp is only
    distinguishable from noise some way in; the line recovers its start. Bounded to 4 steps before j.
    The rising part is taken up to 60 % of the peak, at least two points."""
    zz = np.where(np.isfinite(z), z, np.nan)
    peak = np.nanmax(zz[j:j + 20]) if np.isfinite(zz[j:j + 20]).any() else np.nan
    if not np.isfinite(peak) or peak < 6:
        return t_on
    k = j
    while k < len(zz) - 1 and np.isfinite(zz[k]) and zz[k] < 0.6 * peak:
        k += 1
    if k - j < 1 or not np.isfinite(zz[j:k + 1]).all():
        return t_on
    a, b = np.polyfit(t[j:k + 1], zz[j:k + 1], 1)
    if a <= 0:
        return t_on
    t0 = -b / a
    return float(min(t_on, max(t0, float(t[j]) - 4 * step)))


def _det_flatline(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    p = rule.params
    level = ctx.grid(rule.queries[-1])
    hosts: dict[str, float] = {}
    ev = []
    for q in rule.queries[:-1]:
        g = ctx.grid(q)
        if g is None or len(g.labels) < 2:
            continue
        w = ctx.window_s(q)
        m = g.mask(*focus)
        with np.errstate(all="ignore"):
            peer = np.nanmedian(g.values, axis=0)
            # A host reading (near) zero is dead, not frozen: below half the pack's lowest level in the job
            # (its idle level), a flat value belongs to the node playbook.
            lvl_floor = float(p.get("level_ratio", 0.5)) * float(np.nanmin(np.nanmedian(level.values, axis=0))) \
                if level is not None and np.isfinite(level.values).any() else None
        length = max(1, int(round(_dur(rule, "min_duration", 600.0) / max(g.step, 1e-9))))
        for r, lab in enumerate(g.labels):
            h = lab.get("host", "")
            flat = (g.values[r] == 0) & (peer > 0) & m
            if level is not None and lvl_floor is not None:
                lv = level.row(host=h)
                if lv is not None and len(lv) == len(flat):
                    with np.errstate(all="ignore"):
                        flat &= lv >= lvl_floor
            i = first_sustained(flat, length, 0.9)
            if i is None:
                continue
            t_on = float(g.t[i]) - w
            hosts[h] = min(hosts.get(h, t_on), t_on)
            ev.append(_ev(ctx, q, {"host": h}, 0.0,
                          f"no change at all for {flat[i:].sum() * g.step / 60:.0f} min from {fmt_time(t_on)} "
                          f"while peers changed {nan_median(peer[flat]):.0f} times per window"))
    if not hosts:
        return None
    return _finding(pb, rule, sorted(hosts), [], min(hosts.values()), ev)


def _det_gaps(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    g = ctx.grid(rule.queries[0])
    if g is None or len(g.labels) < 2:
        return None
    p = rule.params
    up = ctx.grid(str(p["mask"])) if p.get("mask") else None
    m = g.mask(*focus)
    with np.errstate(all="ignore"):
        peer = np.nanmedian(g.values, axis=0)
    hosts, ev, onset = [], [], None
    for r, lab in enumerate(g.labels):
        h = lab.get("host", "")
        x = np.where(np.isnan(g.values[r]), 0.0, g.values[r])
        miss = (x < float(p.get("ratio", 0.75)) * peer) & (peer > 0) & m
        if up is not None:
            u = up.row(host=h)
            if u is not None and len(u) == len(miss):
                miss &= u >= 1
        idx = np.nonzero(miss)[0]
        if not len(idx):
            continue
        events = 1 + int((np.diff(idx) > 1).sum())
        tail = miss[int(0.8 * len(miss)):]
        share = miss[idx[0]:].sum() / max(1, m[idx[0]:].sum())
        if events < int(p.get("min_events", 3)) or (len(tail) and tail.all()) or \
                share < float(p.get("min_share", 0.05)):
            continue
        t_on = float(g.t[idx[0]]) - ctx.window_s(rule.queries[0])
        hosts.append(h)
        onset = t_on if onset is None else min(onset, t_on)
        ev.append(_ev(ctx, rule.queries[0], {"host": h}, float(miss.sum() / max(1, m.sum())),
                      f"{events} gaps from {fmt_time(t_on)}: {miss.sum() / max(1, m.sum()):.0%} of intervals "
                      f"short of samples while the exporter answered (peers complete)"))
    if not hosts or len(hosts) > max(1, 0.5 * len(g.labels)):
        return None
    return _finding(pb, rule, hosts, [], onset, ev)


def _det_host_silent(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    samples = ctx.grid(rule.queries[0])
    up, power, util = (ctx.grid(q) for q in rule.queries[1:4])
    ref = samples or power
    if ref is None:
        return None
    p = rule.params
    t = ref.t
    hosts = [lab.get("host", "") for lab in ref.labels]
    if up is not None:
        hosts += [lab.get("host", "") for lab in up.labels if lab.get("host", "") not in hosts]
    if len(hosts) < 2:
        return None

    def row(g: Grid | None, h: str) -> np.ndarray | None:
        if g is None or len(g.t) != len(t):
            return None
        return g.row(host=h)

    with np.errstate(all="ignore"):
        p_med = np.nanmedian(power.values, axis=0) if power is not None and len(power.t) == len(t) else None
    absent: dict[str, np.ndarray] = {}
    via_up: dict[str, np.ndarray] = {}
    dead: dict[str, np.ndarray] = {}
    for h in hosts:
        s = row(samples, h)
        a = np.ones(len(t), bool) if s is None else ~(s > 0)
        u = row(up, h)
        vu = np.zeros(len(t), bool) if u is None else (u < 1)
        if s is None and u is not None:
            a = ~(u >= 1)
        a = a | vu
        z = np.zeros(len(t), bool)
        pw, ut = row(power, h), row(util, h)
        if pw is not None and p_med is not None:
            with np.errstate(all="ignore"):
                z = (pw < float(p.get("zero_ratio", 0.2)) * p_med) & ((ut < 5) if ut is not None else True)
        absent[h], via_up[h], dead[h] = a, vu, a | z
    present_share = np.mean([~absent[h] for h in hosts], axis=0)
    alive_idx = np.nonzero(present_share >= 0.5)[0]
    if not len(alive_idx):
        return None
    e = int(alive_idx[-1])
    length = _dur(rule, "min_duration", 180.0)
    # a host that stops when the steps stop may have little data left after it (a short heartbeat timeout
    # ends the job soon after): then a shorter silence, still several scrapes long, is enough
    tl = ctx.timeline
    short, near = max(60.0, 4 * ref.step), max(120.0, 2 * (tl.step_s or 0.0))
    out_hosts, ev, onset = [], [], None
    for h in hosts:
        d = dead[h]
        if not d[e]:
            continue
        i = e
        while i > 0 and d[i - 1]:
            i -= 1
        at_stall = tl.stalled and tl.last_advance is not None and abs(float(t[i]) - tl.last_advance) <= near
        if i == 0 or t[e] - t[i] < (short if at_stall else length):
            continue
        if via_up[h][i]:
            t_on = float(t[i]) - ref.step / 2
            how = "exporter target down"
        elif absent[h][i]:
            t_on = float(t[i]) - max(ctx.window_s(rule.queries[0]), ref.step)
            how = "no samples any more"
        else:
            t_on = float(t[i]) - ref.step / 2
            how = "GPUs at 0 W / 0 %"
        out_hosts.append(h)
        onset = t_on if onset is None else min(onset, t_on)
        ev.append(_ev(ctx, rule.queries[0], {"host": h}, how,
                      f"{how} from {fmt_time(t_on)} while the other hosts still report"))
    if not out_hosts or len(out_hosts) > max(1, 0.5 * len(hosts)):
        return None
    return _finding(pb, rule, out_hosts, [], onset, ev)


def _match_host(name: str, hosts: Sequence[str]) -> str | None:
    for h in hosts:
        if h == name or h.startswith(name + ".") or name.startswith(h + "."):
            return h
    return None


def _det_accused_alive(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    """The accused hosts trained like the rest of the job around the heartbeat-stop time and up to the kill.

    Their training level is judged only at the instants where the other hosts trained (their median power
    at the job's own training level): a checkpoint save or any other job-wide pause drops every host at
    once and says nothing about the accused. From the heartbeat-stop time to the kill they must also move
    with their peers whatever the job does (a dead task idles while its peers spin in their collectives),
    and the job must have gone on after the heartbeats stopped: a task that really died stops every step
    with it, so without training after the heartbeat-stop time the accusation may be true.
    """
    tr = ctx.triage or {}
    tl = ctx.timeline
    accused = list(tr.get("heartbeat_accused") or [])
    crash = _triage_get(tr, "job", "crash_time")
    timeout = _int(_triage_get(tr, "config", "jax_distributed_heartbeat_timeout_seconds"))
    power, util = ctx.grid(rule.queries[0]), ctx.grid(rule.queries[1])
    if not accused or crash is None or timeout is None or power is None:
        return None
    if util is not None and len(util.t) != len(power.t):
        util = None
    p = rule.params
    ratio, umin = float(p.get("power_ratio_min", 0.7)), float(p.get("util_min", 60.0))
    crash = float(crash)
    hb_stop = crash - timeout
    active = _steady_level(ctx, power)
    if not math.isfinite(active) or active <= 0:
        return None
    hosts_all = [lab.get("host", "") for lab in power.labels]
    rows = {name: _match_host(name, hosts_all) for name in accused}
    if any(h is None for h in rows.values()):
        return None

    def pack(g: Grid) -> np.ndarray:
        peers = [i for i, lab in enumerate(g.labels) if lab.get("host") not in rows.values()]
        return np.nanmedian(g.values[peers or list(range(len(g.labels)))], axis=0)

    pack_p = pack(power)
    pack_u = pack(util) if util is not None else None
    pack_trains = pack_p >= ratio * active
    tail = (power.t > hb_stop) & (power.t <= crash)
    if not (pack_trains & tail).any() and not (tl.last_advance is not None and tl.last_advance > hb_stop):
        return None  # nothing trained after the heartbeats stopped: the accusation may be true
    margin = _dur(rule, "margin", 120.0)
    need = max(3, int(round(margin / max(power.step, 1e-9) / 2)))
    # widen the window (up to 4x) until enough instants where the job trained are seen
    for k in (1, 2, 4):
        a, b = hb_stop - k * margin, min(hb_stop + k * margin, crash)
        judged = pack_trains & power.mask(a, b)
        if judged.sum() >= need:
            break
    if judged.sum() < need:
        return None
    n_before, n_after = int((judged & (power.t <= hb_stop)).sum()), int((judged & (power.t > hb_stop)).sum())
    ev, alive = [], []
    for name in accused:
        h = rows[name]
        pr = power.row(host=h)
        ur = util.row(host=h) if util is not None else None
        pw = nan_median(pr[judged])
        uu = nan_median(ur[judged]) if ur is not None else float("nan")
        low = int((np.nan_to_num(pr[judged], nan=0.0) < ratio * active).sum())
        ok = (math.isfinite(pw) and pw >= ratio * active and low <= 0.2 * judged.sum()
              and (not math.isfinite(uu) or uu >= umin))
        # up to the kill it moves with its peers (training, saving a checkpoint, or waiting with them)
        lag = 0
        if tail.any():
            with np.errstate(invalid="ignore"):
                moves = np.nan_to_num(pr[tail], nan=0.0) >= ratio * pack_p[tail]
                if ur is not None and pack_u is not None:
                    moves &= np.nan_to_num(ur[tail], nan=0.0) >= ratio * pack_u[tail]
            lag = int((~moves).sum())
            ok = ok and lag <= 0.2 * tail.sum()
        for q in p.get("presence", ()):
            pg = ctx.grid(str(q))
            prs = pg.row(host=h) if pg is not None else None
            if prs is not None:
                seg = prs[pg.mask(a, crash + pg.step)]
                if len(seg) and not (np.nan_to_num(seg, nan=0.0) > 0).all():
                    ok = False
        alive.append(ok)
        ev.append(_ev(ctx, rule.queries[0], {"host": h}, pw,
                      f"{pw:.0f} W ({pw / active:.0%} of the job's training power) and {uu:.0f} % utilisation at "
                      f"the {int(judged.sum())} instants its peers trained between {fmt_time(a)} and {fmt_time(b)} "
                      f"({n_before} before, {n_after} after the heartbeat-stop time {fmt_time(hb_stop)}); "
                      f"{int(tail.sum()) - lag}/{int(tail.sum())} instants in step with its peers up to the kill: "
                      f"{'training' if ok else 'NOT training'}"))
        for q in [q for q in rule.queries[2:] if q not in p.get("presence", ())]:
            g = ctx.grid(q)
            r = g.row(host=h) if g is not None else None
            if r is not None:
                ev.append(_ev(ctx, q, {"host": h}, nan_median(r[g.mask(hb_stop - margin, hb_stop)]),
                              "at the heartbeat-stop time"))
    if not all(alive):
        return None
    if tl.last_advance is not None and tl.last_advance > hb_stop and ctx.grid("step") is not None:
        ev.insert(0, _ev(ctx, "step", {}, tl.last_step or 0,
                         f"training steps went on for {(tl.last_advance - hb_stop) / 60:.1f} min after the "
                         f"heartbeat-stop time, up to {fmt_time(tl.last_advance)}: every task was alive"))
    return _finding(pb, rule, list(rows.values()), [], hb_stop, ev, no_culprits=True)


def _det_near_limit(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    g = ctx.grid(rule.queries[0])
    if g is None:
        return None
    limit = float(rule.params.get("limit", 0.95))
    m = g.mask(*focus)
    hosts, ev, onset = [], [], None
    sm = ctx.timeline.steady_mask(g.t)
    for r, lab in enumerate(g.labels):
        x = g.values[r]
        hit = (x >= limit) & m
        if not hit.any():
            continue
        i = int(np.argmax(hit))
        base = x[sm] if sm.any() else x
        own = nan_median(base)
        spread = float(np.nanstd(base)) if np.isfinite(base).any() else 0.0
        j = walk_back(x, i, own + max(0.02 * abs(own), 3 * spread))
        t_on = float(g.t[j]) - g.step / 2
        h = lab.get("host", "")
        hosts.append(h)
        onset = t_on if onset is None else min(onset, t_on)
        ev.append(_ev(ctx, rule.queries[0], {"host": h}, float(np.nanmax(x[m])),
                      f"from its usual {own:.0%} to {np.nanmax(x[m]):.1%} of the total between {fmt_time(t_on)} and "
                      f"{fmt_time(float(g.t[i]))}"))
    return _finding(pb, rule, hosts, [], onset, ev) if hosts else None


def _det_threshold_prior(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    g = ctx.grid(rule.queries[0])
    if g is None:
        return None
    p = rule.params
    m = g.mask(*focus)
    codes = p.get("codes")
    if codes is not None:
        hit = np.isin(g.values, [float(c) for c in codes]) & m[None, :]
        length = 1
    else:
        above = p.get("above")
        if above is None:
            prior = p.get("above_prior")
            if ctx.gpu is None or not prior or not hasattr(ctx.gpu, str(prior)):
                return None
            above = getattr(ctx.gpu, str(prior))
        hit = (g.values > float(above)) & m[None, :]
        length = max(1, int(round(_dur(rule, "min_duration", 60.0) / max(g.step, 1e-9))))
    hosts, gpus, ev, onset, vals = [], [], [], None, []
    detail = ctx.instant(str(p.get("gpu_detail", ""))) if p.get("gpu_detail") else []
    for r, lab in enumerate(g.labels):
        i = first_sustained(hit[r], length, 0.8)
        if i is None:
            continue
        h = lab.get("host", "")
        t_on = float(g.t[i]) - g.step / 2
        if h not in hosts:
            hosts.append(h)
        onset = t_on if onset is None else min(onset, t_on)
        v = float(g.values[r][i])
        vals.append(v)
        g_here = sorted({s["labels"].get("gpu", "") for s in detail if s["labels"].get("host") == h
                         and (codes is None or s["value"] in [float(c) for c in codes])} - {""}, key=_gkey)
        if lab.get("gpu") is not None and lab["gpu"] not in g_here:
            g_here.append(lab["gpu"])
        gpus += [x for x in g_here if x not in gpus]
        ev.append(_ev(ctx, rule.queries[0], {"host": h, "gpu": ",".join(g_here) or None}, v,
                      f"from {fmt_time(t_on)}" + (f" (prior for {ctx.gpu.name}: {above})" if codes is None and
                                                   p.get("above_prior") and ctx.gpu else "")))
    if not hosts:
        return None
    value = ", ".join(sorted({f"{v:g}" for v in vals}))
    return _finding(pb, rule, hosts, gpus, onset, ev, value=value)


def _det_change_point(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    g = ctx.grid(rule.queries[0])
    if g is None:
        return None
    x = g.single()
    tl = ctx.timeline
    valid = tl.valid_training(g.t) & g.mask(*focus)
    p = rule.params
    idx = change_points(x, g.t, valid, window=_dur(rule, "baseline_window", 1200.0), z=float(p.get("z", 8.0)),
                        min_rel=float(p.get("min_rel", 0.3)))
    # an isolated one-step spike is ordinary noise in real training; instability lasts several points
    need, span = int(p.get("min_points", 3)), _dur(rule, "confirm_window", 600.0)
    firsts = [i for i in idx if sum(1 for k in idx if g.t[i] <= g.t[k] <= g.t[i] + span) >= need]
    if not firsts:
        return None
    i = firsts[0]
    prev = x[: i][valid[: i] & ~np.isnan(x[: i])]
    base = nan_median(prev[-30:]) if len(prev) else float("nan")
    peak = float(np.nanmax(x[i:])) if np.isfinite(x[i:]).any() else float(x[i])
    t_on = float(g.t[i]) - g.step / 2
    ev = [_ev(ctx, rule.queries[0], {}, float(x[i]),
              f"jumped from its recent {base:.4g} to {x[i]:.4g} at {fmt_time(t_on)} (peak {peak:.4g}; "
              f"{len(idx)} anomalous points)")]
    return _finding(pb, rule, [], [], t_on, ev)


def _det_level_shift(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    g = ctx.grid(rule.queries[0])
    if g is None:
        return None
    x = g.single()
    tl = ctx.timeline
    valid = tl.valid_training(g.t) & ~np.isnan(x)
    base_m = tl.steady_mask(g.t) & valid
    if base_m.sum() < 5:
        return None
    base = nan_median(x[base_m])
    w = max(1, int(round(_dur(rule, "min_duration", 600.0) / max(g.step, 1e-9))))
    xs = np.where(valid, x, np.nan)
    roll = np.full(len(x), np.nan)
    for i in range(len(x)):
        seg = xs[max(0, i - w + 1): i + 1]
        if np.isfinite(seg).sum() >= max(3, w // 3):
            roll[i] = np.nanmedian(seg)
    shift = roll / base - 1
    hit = shift >= float(rule.params.get("min_rel", 0.08))
    i = first_sustained(hit, w, 0.8)
    if i is None:
        return None
    j = walk_back(np.where(valid, x / base - 1, np.nan), max(0, i - w + 1), float(rule.params.get("min_rel", 0.08)) / 2)
    t_on = float(g.t[j])
    peak = float(np.nanmax(shift[i:]))
    ev = [_ev(ctx, rule.queries[0], {}, float(roll[i]),
              f"steady state {base:.4g}; rolling median {peak:+.0%} at most, from {fmt_time(t_on)}")]
    return _finding(pb, rule, [], [], t_on, ev, value=f"{peak:+.0%}")


def _det_uniform_elevation(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
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
    ev = [_ev(ctx, rule.queries[0], {}, med,
              f"median {med:.0f} runnable per host on {len(high)}/{len(per_host)} hosts (spread "
              f"{min(per_host):.0f}-{max(per_host):.0f}) vs a prior of about {expected:.0f} for {gpus} GPUs per host")]
    return _finding(pb, rule, [], [], tl.train_start, ev, value=f"{med:.0f}")


def _det_series_absent(ctx: Context, pb: Playbook, rule: RuleSpec, focus: tuple[float, float]) -> Finding | None:
    prof = PROFILES.get(getattr(ctx.source, "profile", ""))
    if prof is None:
        return None
    # Two different facts: signals this exporter family never has (Xid on AMD: by design), and signals it
    # has that this TSDB lacks (an exporter plugin that did not run: worth a look). The title names the latter.
    by_design = prof.unavailable()
    absent = [s for s in prof.unavailable(getattr(ctx.source, "metric_names", ())) if s not in by_design]
    if not absent and not by_design:
        return None
    ev = []
    if absent:
        needs = "; ".join(f"{s}: {' or '.join(prof.signal(s).metrics)}" for s in absent)
        ev.append({"query": "/api/v1/label/__name__/values", "labels": {}, "value": ", ".join(absent),
                   "interpretation": f"{rule.meaning} The {prof.name} profile reads them from {needs}."})
    if by_design:
        ev.append({"query": f"profile {prof.name}", "labels": {}, "value": ", ".join(by_design),
                   "interpretation": f"The {prof.name} exporters have no such metrics; they are not guessed."})
    def names(items: list[str]) -> str:
        return ", ".join(items[:6]) + ("…" if len(items) > 6 else "")

    never = f"{names(by_design)} that the {prof.name} exporters never have" if by_design else ""
    value = names(absent) + (f" (and {never})" if never else "") if absent else f"only {never}"
    return _finding(pb, rule, [], [], None, ev, value=value)


_DETECTORS = {
    "step_stall": _det_step_stall, "busy_wait": _det_busy_wait, "host_silent": _det_host_silent,
    "counter_increase": _det_counter_increase, "rate_outlier": _det_rate_outlier,
    "peer_outlier": _det_peer_outlier, "flatline": _det_flatline, "gaps": _det_gaps,
    "threshold_prior": _det_threshold_prior, "change_point": _det_change_point, "level_shift": _det_level_shift,
    "near_limit": _det_near_limit, "accused_alive": _det_accused_alive,
    "uniform_elevation": _det_uniform_elevation, "series_absent": _det_series_absent,
}


# ---------------------------------------------------------------------------------------- decision

def decide_diagnosis(ctx: Context, findings: list[Finding]) -> dict[str, Any]:
    """Return the contract's `diagnosis` object; re-class and demote findings explained by the primary."""
    tl = ctx.timeline
    if ctx.triage is None and not any(f.rule == "busy_wait" for f in findings):
        # Without a log, steps that stop before the data ends may just be the job's end (exporters kept
        # running): only GPUs still spinning make it a hang.
        for f in findings:
            if f.rule == "step_stall":
                f.severity = "info"
                f.title += " (GPUs not busy-waiting: the job may simply have ended)"
    for f in findings:
        # a rule may need another rule's finding on the same host to stand (e.g. dmesg errors alone)
        needs = f.extra.get("needs") or ()
        if needs and not any(o.rule in needs and set(o.hosts) & set(f.hosts) for o in findings):
            f.severity = "info"
    cands = [f for f in findings if f.role == "cause" and SEV_RANK[f.severity] >= 1 and f.klass != "healthy"]
    if not cands:
        return _healthy(ctx, findings)
    top = max(SEV_RANK[f.severity] for f in cands)
    pool = [f for f in cands if SEV_RANK[f.severity] == top]
    inf = float("inf")
    earliest = min((f.onset if f.onset is not None else inf) for f in pool)
    tol = max(90.0, 2 * (tl.step_s or 0.0))
    group = [f for f in pool if (f.onset if f.onset is not None else inf) <= earliest + tol]
    primary = max(group, key=lambda f: (PRIORITY.get(f.klass, 0), -(f.onset or 0)))
    klass = primary.klass
    # a network event shortly before a stall made the hang
    net = [f for f in findings if f.klass in ("rdma-degradation", "network-hang") and f.role == "cause"
           and SEV_RANK[f.severity] >= 1 and f.onset is not None]
    if tl.stalled and tl.last_advance is not None and klass in ("collective-hang", "rdma-degradation"):
        before = [f for f in net if tl.last_advance - 1800 <= f.onset <= tl.last_advance + 60]
        if before:
            klass = "network-hang"
            primary = min(before, key=lambda f: f.onset or inf)
    same = [f for f in findings if f.klass == klass or (klass == "network-hang" and f in net)]
    hosts: list[str] = []
    gpus: list[dict[str, Any]] = []
    if klass in ("rdma-degradation", "network-hang"):
        for f in net if klass == "rdma-degradation" or not tl.stalled else [f for f in net if f.onset <= (tl.last_advance or inf) + 60]:
            hosts += [h for h in f.hosts if h not in hosts]
    elif klass == "collective-hang":
        bw = [f for f in findings if f.rule == "busy_wait"]
        hosts = list(bw[0].hosts) if bw else []
    elif not primary.extra.get("no_culprits"):
        hosts = list(primary.hosts)
    gpu_by_host: dict[str, list[str]] = {}
    for f in same:
        if f.gpus and len(f.hosts) == 1:
            gpu_by_host.setdefault(f.hosts[0], [])
            gpu_by_host[f.hosts[0]] += [g for g in f.gpus if g not in gpu_by_host[f.hosts[0]]]
    if klass in ("thermal-straggler", "gpu-hardware-fault"):
        for f in same:
            if f.gpus and len(f.hosts) == 1 and f.hosts[0] in hosts and f.role == "cause":
                gpu_by_host[f.hosts[0]] = list(f.gpus)
                break
    for h in hosts:
        gl = gpu_by_host.get(h) or []
        gpus += [{"host": h, "gpu": g} for g in gl] if gl else [{"host": h, "gpu": None}]
    onset = primary.onset
    if klass == "collective-hang":
        onset = tl.last_advance
    elif klass == "network-hang":
        onset = min((f.onset for f in same if f.onset is not None and f in net), default=onset)
    # findings explained by the primary: the stall/busy-wait are its effects; data problems on a dead or
    # faulty host after the onset are consequences
    for f in findings:
        if f is primary:
            continue
        if klass in STOPPING and f.klass == "collective-hang":
            f.klass = klass
        elif klass == "network-hang" and f.klass == "rdma-degradation" and set(f.hosts) <= set(hosts) \
                and (f.onset or inf) <= (tl.last_advance or inf) + 60:
            f.klass = klass
        elif (f.klass in ("monitoring-ghost-data", "gpu-driver-fault") and klass in ("node-death", "gpu-hardware-fault",
                                                                                     "host-oom")
              and set(f.hosts) & set(hosts) and (f.onset or inf) >= (onset or 0) - tol):
            f.severity = "info"
            f.title += f" (explained by the {klass.replace('-', ' ')})"
    corroboration = sum(1 for f in same if f is not primary and SEV_RANK[f.severity] >= 1)
    conf = (0.8 if primary.severity == "critical" else 0.65) + 0.05 * min(3, corroboration)
    if klass == "collective-hang" and not any(f.rule == "busy_wait" for f in findings):
        conf = 0.5
    if klass == "restore-resource-leak":
        conf = 0.45
    if klass == "network-hang" and primary.klass != "network-hang":
        conf -= 0.05
    chain = _chain(ctx, klass, primary, findings, onset)
    return {"class": klass, "root_cause_family": FAMILY[klass], "culprits": gpus, "onset": _r(onset),
            "confidence": round(min(0.95, max(0.05, conf)), 2),
            "summary": _summary(ctx, klass, hosts, gpus, onset, primary, findings), "chain": chain}


def _healthy(ctx: Context, findings: list[Finding]) -> dict[str, Any]:
    tl = ctx.timeline
    notes = []
    if tl.restored:
        notes.append("The job restored from a checkpoint; compare it with a fresh-start baseline (`compare`) to "
                     "see a restore leak, which a single job cannot show against itself.")
    infos = [f.title for f in findings if f.severity == "info" and f.role != "context"]
    summary = ("Nothing beyond normal behaviour: training ran at its own steady pace; checkpoint spikes and warm-up "
               "were excluded, counters were judged by their growth within the job, and no host or GPU left its "
               "peers.")
    if infos:
        summary += " Minor observations: " + "; ".join(infos[:3]) + "."
    if notes:
        summary += " " + " ".join(notes)
    return {"class": "healthy", "root_cause_family": "none", "culprits": [], "onset": None,
            "confidence": 0.7 if not infos else 0.6, "summary": summary, "chain": []}


def _chain(ctx: Context, klass: str, primary: Finding, findings: list[Finding], onset: float | None) -> list[str]:
    tl = ctx.timeline
    steps: list[tuple[float, str]] = [(onset or 0.0, f"{fmt_time(onset)}: {primary.title}")]
    seen = {primary.title}
    for f in sorted(findings, key=lambda f: f.onset or 0.0):
        if f is primary or f.title in seen or f.role == "context" or f.onset is None:
            continue
        related = f.klass == klass or f.role == "symptom"
        if related and f.onset >= (onset or 0.0) - 60:
            steps.append((f.onset, f"{fmt_time(f.onset)}: {f.title}"))
            seen.add(f.title)
    if tl.stalled and tl.last_advance and not any("steps stopped" in s.lower() for _, s in steps):
        steps.append((tl.last_advance, f"{fmt_time(tl.last_advance)}: training steps stopped at step "
                                        f"{int(tl.last_step or 0)}"))
    if tl.crash_time:
        steps.append((tl.crash_time, f"{fmt_time(tl.crash_time)}: the job ended (time from the log)"))
    steps.sort(key=lambda s: s[0])
    return [s for _, s in steps[:8]]


_SUMMARY = {
    "collective-hang": "The job hung in a collective: the step counter stopped at {stall} and every GPU then "
                       "spun at high utilisation with power far below its training level (RCCL/NCCL busy-wait), "
                       "with no network, node or hardware event before it.{odd}",
    "network-hang": "A network event on {hosts} triggered the hang: RDMA link trouble (retransmits, ACK timeouts, "
                    "transmit waits or link errors) started at {onset}, the collectives then stalled (steps "
                    "stopped at {stall}) and every GPU busy-waited.",
    "node-death": "Host {hosts} stopped at {onset} (its exporter went silent or its GPUs dropped to 0 W / 0 %); "
                  "the other hosts then waited for it in their collectives until the job was killed.",
    "heartbeat-false-positive": "The coordinator killed the job for missed heartbeats, but at the heartbeat-stop "
                                "time ({onset}) the accused hosts ({accused}) drew their usual training power at "
                                "high utilisation: the tasks were alive; the heartbeat mechanism failed.",
    "host-oom": "Host memory on {hosts} climbed from its usual level to the limit from {onset} (a checkpoint save "
                "on a replica-0 host) and the kernel OOM-killed the trainer; the other hosts then timed out.",
    "thermal-straggler": "GPU {gpu} on {hosts} left its peers from {onset}: it ran hotter and its clock dropped, "
                         "and since every step is synchronous the whole job slowed down with it.",
    "rdma-degradation": "Sustained RDMA link trouble (retransmits, ACK timeouts, transmit waits or link errors) "
                        "on {hosts} from {onset} slowed every collective: step time rose for the whole job "
                        "without a hang.",
    "restore-resource-leak": "This restored job carries uniformly more runnable processes on every host than a "
                             "job of its size should (a prior, not a measured baseline): the signature of the "
                             "restore leak of communicator polling threads. Confirm with `compare` against a "
                             "fresh start with the same config.",
    "monitoring-ghost-data": "The exporter on {hosts} froze at {onset}: its values stopped changing exactly while "
                             "its peers' kept moving and training went on. The data, not the job, is broken: "
                             "ignore {hosts}'s hardware metrics after the onset.",
    "gpu-driver-fault": "GPU driver trouble on {hosts} from {onset}: GPU metric collection times out and leaves "
                        "gaps (and the kernel logs GPU errors where collected), while training is unaffected.",
    "gpu-hardware-fault": "GPU {gpu} on {hosts} reported uncorrectable memory/hardware errors at {onset}; the "
                          "job failed shortly after. Drain the node.",
    "training-instability": "A training-level metric moved first: the {what} jumped at {onset}; utilisation "
                            "spread and step time followed. The system metrics are symptoms, not the cause.",
}


def _summary(ctx: Context, klass: str, hosts: list[str], gpus: list[dict[str, Any]], onset: float | None,
             primary: Finding, findings: list[Finding]) -> str:
    tl = ctx.timeline
    odd = ""
    if klass == "collective-hang" and hosts:
        odd = f" Some GPUs of {', '.join(hosts)} never entered the collective: start there."
    gpu = ", ".join(str(g["gpu"]) if len(hosts) == 1 else f"{g['host']}:{g['gpu']}" for g in gpus
                    if g.get("gpu") is not None) or "?"
    moved = sorted({f.title.removesuffix(" jumps") for f in findings
                    if f.klass == "training-instability" and SEV_RANK[f.severity] >= 1}, key=str.lower)
    moved = [m if sum(c.isupper() for c in m.split()[0]) >= 2 else m[0].lower() + m[1:] for m in moved]
    what = (", ".join(moved[:-1]) + " and " + moved[-1] if len(moved) > 1 else moved[0]) if moved else "the loss"
    text = _SUMMARY[klass].format(hosts=", ".join(hosts) or "the hosts", onset=fmt_time(onset),
                                  stall=fmt_time(tl.last_advance), odd=odd, gpu=gpu, what=what,
                                  accused=", ".join(primary.hosts))
    others = sorted({f.klass for f in findings if SEV_RANK[f.severity] >= 1 and f.klass not in (klass, "healthy")})
    if others:
        text += " Also seen: " + ", ".join(others) + "."
    return text
