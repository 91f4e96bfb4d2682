"""Discovery's identity check (seeds): is this the Prometheus of the job whose log was triaged? The TSDB's
training step (and loss) at the log's last completed step must match the log. Also reads the log's side:
the steps and losses a log printed (`log_step_losses`) and the facts of a triage dict.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ._discovery_sources import Parts, window
from .profiles import Profile
from .prometheus import PrometheusClient, choose_step

#: How long the exporters may lag behind training: the TensorBoard bridge sees events only when
#: TensorBoard flushes (every 120 s) and Prometheus scrapes every 10-15 s. A job that died within this
#: time may have its last steps in the log but not in the TSDB.
EXPORTER_LAG_S = 150.0
#: Steps of slack when the step time is unknown.
DEFAULT_STEP_SLACK = 5
#: The log prints loss with 3 decimals ("loss: 2.417"); the TSDB holds the float itself.
LOSS_TOLERANCE = 0.0015
_STEP_LINE = re.compile(r"completed step: (\d+),.*?\bloss: ([-+0-9.eEnaif]+)")


@dataclass(frozen=True)
class Identity:
    """Whether this Prometheus belongs to the job whose log was triaged.

    Attributes:
        status: "match", "mismatch" or "unknown".
        message: one or two sentences for people.
        step_metric: the TSDB's step metric ("tb_step", "training_step"), "" when there is none.
        log_last_step: the log's last completed step.
        tsdb_last_step: the largest step in the TSDB over its whole range.
        compared_step: the step whose loss was compared (None: no loss compared).
        log_loss, tsdb_loss: the loss at compared_step in the log and in the TSDB.
        tsdb_step_time: unix seconds when the TSDB first recorded tsdb_last_step (or compared_step).
        log_step_time: the log's time of its last step.
        slack: how many steps the TSDB may trail the log (exporter lag).
        notes: further remarks (lag allowed, loss not compared, hosts that do not match the log's nodes).
    """

    status: str = "unknown"
    message: str = ""
    step_metric: str = ""
    log_last_step: int | None = None
    tsdb_last_step: int | None = None
    compared_step: int | None = None
    log_loss: float | None = None
    tsdb_loss: float | None = None
    tsdb_step_time: float | None = None
    log_step_time: float | None = None
    slack: int | None = None
    notes: tuple[str, ...] = ()


def log_step_losses(path: str | Path, *, tail_bytes: int = 8 << 20, keep: int = 500) -> dict[int, float]:
    """Return step -> loss from the `completed step:` lines in the last `tail_bytes` of a log.

    Reads only the tail (bounded memory on a 1 GB log); the first line of the tail may be cut and is
    skipped. Keeps the last `keep` steps. Returns {} when the log cannot be read or has no such lines.
    """
    found: dict[int, float] = {}
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            start = max(0, size - tail_bytes)
            fh.seek(start)
            if start:
                fh.readline()
            for raw in fh:
                if b"completed step:" not in raw:
                    continue
                m = _STEP_LINE.search(raw.decode("utf-8", "replace"))
                if not m:
                    continue
                try:
                    loss = float(m.group(2))
                except ValueError:
                    continue
                if math.isfinite(loss):
                    # one line per node per step: the first one wins, they carry the same loss
                    found.setdefault(int(m.group(1)), loss)
    except OSError:
        return {}
    return {s: found[s] for s in sorted(found)[-keep:]}


def triage_facts(triage: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return last_step, step_time, last_step_time, status, nodes and losses from a triage dict."""

    def part(parent: Any, key: str) -> Mapping[str, Any]:
        value = parent.get(key) if isinstance(parent, Mapping) else None
        return value if isinstance(value, Mapping) else {}

    triage = triage if isinstance(triage, Mapping) else {}
    job, progress, details = part(triage, "job"), part(triage, "progress"), part(triage, "details")
    losses: dict[int, float] = {}
    raw = details.get("step_losses") or details.get("losses")
    if isinstance(raw, Mapping):
        for k, v in raw.items():
            try:
                losses[int(k)] = float(v)
            except (TypeError, ValueError):
                continue
    last = int_or_none(job.get("last_step"))
    for key in ("last_loss", "last_step_loss", "loss"):
        value = details.get(key)
        if last is not None and isinstance(value, (int, float)) and math.isfinite(value):
            losses.setdefault(last, float(value))
    return {
        "last_step": last,
        "status": job.get("status"),
        "step_time": _float_or_none(progress.get("step_time_s")),
        "last_step_time": _float_or_none(progress.get("last_step_time")),
        "nodes": [str(n) for n in triage.get("nodes") or () if n]
        if isinstance(triage.get("nodes"), list)
        else [],
        "losses": losses,
    }


def int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _float_or_none(value: Any) -> float | None:
    try:
        out = float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
    return out if out is not None and math.isfinite(out) else None


# --- identity ----------------------------------------------------------------------------------


def step_summary(client: PrometheusClient, profile: Profile, rng: tuple[float, float]) -> dict[str, Any]:
    """Return {metric, max, points}: the step signal's largest value and its curve over the range."""
    sig = profile.signal("step")
    metric = sig.metrics[0]
    res = choose_step(rng[0], rng[1], max_points=2000)
    series = client.query_range(f"max({metric})", rng[0], rng[1], res)
    points = [(t, v) for s in series for t, v in zip(s.timestamps, s.values, strict=True) if math.isfinite(v)]
    if not points:
        return {"metric": metric, "max": None, "points": [], "res": res}
    top = max(v for _, v in points)
    # A range query sees one sample per step; a step that lived shorter than the resolution may be missed,
    # so also ask for the exact maximum over the raw samples.
    exact = client.query(f"max(max_over_time({metric}[{window(rng)}]))", at=rng[1])
    if exact and math.isfinite(exact[0].value):
        top = max(top, exact[0].value)
    return {"metric": metric, "max": top, "points": points, "res": res}


def _step_point(
    client: PrometheusClient, profile: Profile, info: Mapping[str, Any], step: int, rng: tuple[float, float]
) -> tuple[float | None, float | None]:
    """Return (time, loss) of the TSDB's first sample of `step`, from the raw samples."""
    metric = info["metric"]
    res = float(info["res"])
    after = [t for t, v in info["points"] if v >= step]
    if not after:
        after = [rng[1]]
    t1 = after[0]
    ts: float | None = None
    for width in (res + 1.0, res + 1800.0):
        raw = client.query(f"{metric}[{int(math.ceil(width))}s]", at=t1)
        hits = [s.timestamp for s in raw if abs(s.value - step) < 0.5]
        if hits:
            ts = min(hits)
            break
    if ts is None:
        # the sample is after t1 (maximum found only by max_over_time): look in the range's tail
        raw = client.query(f"{metric}[{int(math.ceil(res + 1.0))}s]", at=rng[1])
        hits = [s.timestamp for s in raw if abs(s.value - step) < 0.5]
        ts = min(hits) if hits else None
    if ts is None or not profile.has("loss"):
        return ts, None
    loss_metric = profile.signal("loss").metrics[0]
    raw = client.query(f"{loss_metric}[120s]", at=ts + 0.001)
    if not raw:
        return ts, None
    exact = [s for s in raw if abs(s.timestamp - ts) < 0.002]
    pick = (
        exact[0] if exact else max((s for s in raw if s.timestamp <= ts + 0.001), key=lambda s: s.timestamp)
    )
    return ts, pick.value if math.isfinite(pick.value) else None


def _fmt(n: int | None) -> str:
    return f"{n:,}" if n is not None else "?"


def check_identity(
    client: PrometheusClient,
    profile: Profile | None,
    rng: tuple[float, float] | None,
    step_info: Mapping[str, Any],
    facts: Mapping[str, Any],
    log_losses: Mapping[int, float] | None,
    hosts: list[str],
    parts: Parts,
) -> Identity:
    """Return the identity check (never raises: a failed lookup leaves status unknown or loss uncompared).

    The TSDB's largest step must equal the log's last completed step, within the exporter lag (the TSDB
    may miss the last steps of a job that died within one TensorBoard flush); a live job's TSDB may be
    ahead of a log read earlier. Where both sides have the loss of the compared step, it must agree
    within the log's rounding.
    """
    log_last = facts.get("last_step")
    metric = str(step_info.get("metric") or "")
    tsdb_max = step_info.get("max")
    tsdb_last = int(round(tsdb_max)) if tsdb_max is not None else None
    notes = _node_notes(facts.get("nodes") or [], hosts)
    step_time = facts.get("step_time")
    slack = DEFAULT_STEP_SLACK if not step_time else max(2, min(1000, math.ceil(EXPORTER_LAG_S / step_time)))
    base = Identity(
        step_metric=metric,
        log_last_step=log_last,
        tsdb_last_step=tsdb_last,
        log_step_time=facts.get("last_step_time"),
        slack=slack,
    )
    unknown = _unknown_reason(facts, profile, metric, tsdb_last, parts.errors.get("step"))
    if unknown is not None:
        return replace(base, status="unknown", message=unknown, notes=tuple(notes))
    assert log_last is not None and tsdb_last is not None and profile is not None

    running = facts.get("status") == "running"
    diff = tsdb_last - log_last
    if (diff > slack and not running) or diff < -slack:
        return replace(
            base,
            status="mismatch",
            message=(
                f"The log's last step is {_fmt(log_last)} but this Prometheus's {metric} ends at "
                f"{_fmt(tsdb_last)}: this is probably the wrong Prometheus."
            ),
            notes=tuple(notes),
        )
    compared = min(log_last, tsdb_last)
    notes += _lag_notes(diff, running, slack, metric)
    step_ts: float | None = None
    tsdb_loss: float | None = None
    try:
        assert rng is not None
        step_ts, tsdb_loss = _step_point(client, profile, step_info, compared, rng)
    except Exception as exc:  # noqa: BLE001 - the loss is a refinement: without it the step still decides
        parts.record("identity", exc)
        notes.append(f"Could not read the loss at step {compared}: {exc}")
    losses = dict(facts.get("losses") or {})
    losses.update({int(k): float(v) for k, v in (log_losses or {}).items()})
    log_loss = losses.get(compared)
    fields = replace(
        base, compared_step=compared, tsdb_step_time=step_ts, log_loss=log_loss, tsdb_loss=tsdb_loss
    )
    log_time = facts.get("last_step_time")
    if (
        step_ts is not None
        and log_time is not None
        and compared == log_last
        and abs(step_ts - log_time) > 15 * 3600
    ):
        notes.append(
            f"The TSDB recorded step {compared} {abs(step_ts - log_time) / 86400:.1f} days away from the "
            "log's time for it: check the log's year and the clock."
        )
    return _loss_verdict(compared, log_last, tsdb_last, metric, log_loss, tsdb_loss, notes, fields)


def _lag_notes(diff: int, running: bool, slack: int, metric: str) -> list[str]:
    """Return the note on a TSDB that ends before the log (exporter lag) or after it (running, or a log cut)."""
    if diff < 0:
        return [
            f"The TSDB's {metric} ends {-diff} step(s) before the log's last step: within the exporter "
            f"lag (up to {slack} steps, about {EXPORTER_LAG_S:.0f} s), so the job probably died before "
            "its last steps were exported."
        ]
    if diff > 0 and running:
        return [f"The job is running: this Prometheus is {diff} step(s) ahead of the log as read."]
    if diff > 0:
        return [
            f"The TSDB has {diff} step(s) past the log's last step: the log may have stopped early "
            "(Ray's log forwarding loses its buffer at exit)."
        ]
    return []


def _node_notes(nodes: list[str], hosts: list[str]) -> list[str]:
    """Return a note when the log's nodes are missing from this TSDB's hosts (all of them, or some)."""
    if not nodes or not hosts:
        return []
    short = {n.split(".")[0] for n in nodes}
    missing = sorted(short - set(hosts))
    if not short & set(hosts):
        return [
            f"None of the log's {len(short)} nodes ({', '.join(sorted(short)[:4])}…) appear among "
            f"this TSDB's hosts ({', '.join(hosts[:4])}…)."
        ]
    if missing:
        return [f"{len(missing)} of the log's nodes have no series here: {', '.join(missing[:8])}."]
    return []


def _unknown_reason(
    facts: Mapping[str, Any],
    profile: Profile | None,
    metric: str,
    tsdb_last: int | None,
    step_error: str | None,
) -> str | None:
    """Return why the check cannot be made (no log step, no profile or step signal, no TSDB step), else None."""
    if facts.get("last_step") is None:
        why = "no triage of the job's log" if not facts.get("status") else "the log has no completed step"
        return f"Cannot check which job this Prometheus belongs to: {why}."
    if profile is None or not metric:
        what = "no metric profile was recognised" if profile is None else "the profile has no step signal"
        return f"Cannot check which job this is: {what}."
    if tsdb_last is None:
        why = (
            f"querying {metric} failed ({step_error})" if step_error else f"this TSDB has no {metric} samples"
        )
        return f"Cannot check which job this is: {why}."
    return None


def _loss_verdict(
    compared: int,
    log_last: int,
    tsdb_last: int,
    metric: str,
    log_loss: float | None,
    tsdb_loss: float | None,
    notes: list[str],
    fields: Identity,
) -> Identity:
    """Return the identity once the steps agree: a mismatch if both losses exist and differ, else a match."""
    if log_loss is not None and tsdb_loss is not None:
        if abs(log_loss - tsdb_loss) > LOSS_TOLERANCE + 1e-6 * abs(log_loss):
            return replace(
                fields,
                status="mismatch",
                message=(
                    f"Step {_fmt(compared)} is in both, but the log's loss there is {log_loss:.3f} and this "
                    f"Prometheus's is {tsdb_loss:.4f}: this is probably the wrong Prometheus."
                ),
                notes=tuple(notes),
            )
        message = (
            f"The log's last step {_fmt(log_last)} and its loss {log_loss:.3f} match this Prometheus's "
            f"{metric} and loss."
        )
    else:
        side = "the log" if log_loss is None else "the TSDB"
        notes.append(f"Loss not compared: {side} has no loss for step {compared}.")
        message = (
            f"The log's last step {_fmt(log_last)} matches this Prometheus's {metric} ({_fmt(tsdb_last)})."
        )
    return replace(fields, status="match", message=message, notes=tuple(notes))
