"""After the scan: progress figures, status, timing and the classes no single line shows."""

from __future__ import annotations

import math
import re
import statistics
from typing import Any

from playbooks.log_series import loss_points, loss_steps

from ._events import rank_host, resolve_events, resolve_gpu_bus
from ._kubectl import pod_nodes
from ._model import _RANK, CLASS_ORDER, Match, Triage
from ._patterns import NCCL_TIMEOUT, _int, _split_args, _start_time, _year_hint, expand_nodelist
from ._pauses import pause_windows
from ._placing import fit_runs, place_leading
from ._state import _add, _State
from ._torch import HEARTBEAT_TIMEOUT_DEFAULT_S
from ._trainers import settle


def _move_bar(st: _State) -> None:
    """Move a progress bar's states by as much later as the dated lines among them say it began (`_bar`)."""
    shift = st.bar.shift()
    if shift <= 0:
        return
    for s in st.bar.steps & st.steps.keys():
        secs, tgs, loss, ts, line = st.steps[s]
        st.steps[s] = (secs, tgs, loss, None if ts is None else ts + shift, line)
    if st.trainer_done is not None and st.bar.last is not None and abs(st.trainer_done - st.bar.last) < 1e-6:
        st.trainer_done += shift  # HF's `train_runtime` dict: its time is the bar's last state


# The training failures that end a job by themselves (a stall before them is their effect, not a hang):
# the seed table's training classes but the hang itself and NCCL timeouts, which a hang causes.
FATAL_TRAINING = frozenset(CLASS_ORDER[_RANK["heartbeat-timeout"] : _RANK["gpu-hw-error"] + 1]) - {
    "nccl-timeout"
}


def _finish(st: _State, out: Triage, now: float | None, slurm_state: str | None) -> None:
    _finish_config(st, out)
    _move_bar(st)
    fit_runs(st)
    place_leading(st)
    settle(st)
    steps = sorted(st.steps)
    out.first_step = steps[0] if steps else None
    out.last_step = steps[-1] if steps else None
    prog, last_ts = _progress(st, out, steps)
    status = _status(st, out, prog, last_ts, now, slurm_state)
    if st.events.node_failure and status in ("cancelled", "unknown-death"):
        status = "failed"  # Slurm ended it for a lost node (its state NODE_FAIL), nobody cancelled it
    out.status = status
    prog["lost_steps"] = None
    if out.last_step is not None and status not in ("completed", "soft-success", "running"):
        last_ckpt = prog["last_checkpoint_step"]
        base = last_ckpt if last_ckpt is not None else ((out.first_step or 0) - 1)
        prog["lost_steps"] = out.last_step - base
    elif status in ("completed", "soft-success"):
        prog["lost_steps"] = 0
    out.progress = prog
    stall, end_time = _timing(st, out, steps, last_ts, prog["step_time_s"], now)
    _computed_classes(st, out, stall, prog["step_time_s"], prog["tgs_trend_pct"])
    ordered = _ordered(st, _last_step_line(st))
    out.matches = ordered
    out.triage_class = ordered[0].klass if ordered else None
    if st.accused_tasks or st.accused_hosts or st.accused_ranks:
        hosts = list(st.accused_hosts)
        for task in dict.fromkeys(st.accused_tasks):
            node = task // st.procs_per_node
            hosts.append(out.nodes[node] if node < len(out.nodes) else f"task:{task}")
        for label, rank in dict.fromkeys(st.accused_ranks):
            host = rank_host(st.events, out.nodes, label, rank)
            hosts.append(host or f"rank:{rank}")
        out.heartbeat_accused = list(dict.fromkeys(hosts))
    _torch_heartbeat_timeout(st, out)
    crash = _first_failure_time(st)
    if crash is None and status in ("failed", "cancelled", "unknown-death"):
        crash = st.cancel_time or end_time
    out.crash_time = crash
    out.details["host_events"] = resolve_events(st.events, out.nodes)
    if st.events.gpu_bus:
        out.details["gpu_bus"] = resolve_gpu_bus(st.events, out.nodes)
    if any(row[2] is not None for row in st.steps.values()):
        out.details["log_loss"], out.details["log_loss_steps"] = loss_points(st.steps), loss_steps(st.steps)
    if st.clock_inferred or out.details.get("last_step_time_estimated"):
        out.details["step_times_inferred"] = True  # a step gauge in the TSDB dates them better (log_evidence)
    if st.pauses and (windows := pause_windows(st, out.details.get("log_loss") or [])):
        out.details["pauses"] = windows
    if (st.bar_from_job_start or st.step_placed or st.bar.shift() > 0) and steps:
        # the steps' times are the earliest they can have had (a setup may have run between)
        out.details["last_step_time_estimated"] = True
    if st.restarts:
        out.details["restarts"] = [[ts, step] for ts, step in st.restarts]
    _nonfinite_loss(st, out)
    if not steps and out.details.get("lines"):
        out.unreadable.append("no 'completed step:' lines found")


#: the one config key of the heartbeat timeout that killed the job, however the program stated it (the seed's)
HB_KEY = "jax_distributed_heartbeat_timeout_seconds"


def _torch_heartbeat_timeout(st: _State, out: Triage) -> None:
    """Record the timeout of PyTorch's NCCL heartbeat monitor when it killed ranks, under the seed's heartbeat
    key: its exit message's, else the job's TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC, else PyTorch's default (noted in
    `details.heartbeat_timeout_assumed`)."""
    if not st.accused_ranks:
        return
    stated = st.torch_hb_timeout or _int(out.config.get("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"))
    if stated is None and HB_KEY not in out.config:
        out.details["heartbeat_timeout_assumed"] = True
    out.config.setdefault(HB_KEY, str(stated or HEARTBEAT_TIMEOUT_DEFAULT_S))


def _nonfinite_loss(st: _State, out: Triage) -> None:
    """Record the first non-finite loss the log shows: a step line's loss, or a trainer's own report of it."""
    bad = [
        (row[3], row[4], f"completed step: {s}, loss: {row[2]}")
        for s, row in st.steps.items()
        if row[3] is not None and row[2] is not None and not math.isfinite(row[2])
    ]
    steps = {row[4]: s for s, row in st.steps.items()}  # a step line's line -> its step
    if st.nonfinite is not None:
        report = st.nonfinite
        if st.nonfinite_undated:
            report = (_after_steps_before(st, report[0], report[1]), *report[1:])
        bound = report[0]
        if not (st.nonfinite_undated and any(t >= bound for t, _n, _text in bad)):
            bad.append(report)
        # else an undated report's time is only a bound (the last dated line's): a step placed after it with
        # that non-finite loss dates the same event
    if bad:
        first = min(bad)
        t, n, text = first
        out.details["nonfinite_loss"] = {"time": round(float(t), 3), "line": n, "text": text}
        named = steps.get(n) if n in steps else _AT_STEP.search(text)
        if named is not None:  # the step that computed it (a report's `... at step N`)
            out.details["nonfinite_loss"]["step"] = named if isinstance(named, int) else int(named.group(1))
        if st.nonfinite is not None and first[1] == st.nonfinite[1] and st.nonfinite_undated:
            out.details["nonfinite_loss"]["undated"] = (
                True  # after that time (the last dated line's), no earlier
            )


_AT_STEP = re.compile(r"\bat (?:step|iteration):? ?(\d+)\b", re.IGNORECASE)


def _after_steps_before(st: _State, t: float, line: int) -> float:
    """Return the earliest time of an undated line `line` whose last dated line was at `t`: no earlier than
    any step line the log printed before it (undated step lines are timed after the scan, from their own
    durations: the report came after them, whatever their clock)."""
    return max([t, *(row[3] for row in st.steps.values() if row[3] is not None and row[4] < line)])


def _last_step_line(st: _State) -> int:
    """Return the line of the last completed step but one (0 when fewer than two were logged): a line before it
    was followed by at least two completed steps, so the training went on after it (one step may still complete
    after a rank's failure: the one in flight)."""
    lines = sorted(s[4] for s in st.steps.values())
    return lines[-2] if len(lines) >= 2 else 0


def _first_failure_time(st: _State) -> float | None:
    """Return the time of the first dated failure line after which the training did not go on (fewer than two
    steps completed after it): a warning or an error the training went on after (an NCCL advisory, a traceback
    a rank survived, a failure an elastic restart recovered from) did not end the job. None when there is none."""
    last = _last_step_line(st)
    return min((ts for line, ts in st.fatal_times if line > last), default=None)


def _ordered(st: _State, last_step_line: int = 0) -> list[Match]:
    """Return the matches, primary first: the seed table's priority, then the line. An NCCL warning that only
    the catch-all rule read as a timeout (no timeout signature) is dropped when the training went on after it
    (two or more steps completed later in the log): an advisory, not the failure. After a Slurm node failure
    the training failures logged later (survivors killed, their collectives timing out) are its effects and
    rank with it, after it; what came before it (a heartbeat timeout naming the lost node) keeps its rank."""
    lost = min((r.line for r in st.events.raw if r.kind == "node-failure"), default=None)

    def key(m: Match) -> tuple[int, int]:
        if lost is not None and m.line > lost and _RANK["hang"] <= _RANK[m.klass] < _RANK["tgs-degradation"]:
            return _RANK["node-fail"], m.line
        return _RANK[m.klass], m.line

    def advisory(m: Match) -> bool:
        return m.klass == "nccl-timeout" and 0 < m.line < last_step_line and not NCCL_TIMEOUT.search(m.text)

    return sorted((m for lst in st.matches.values() for m in lst if not advisory(m)), key=key)


def _finish_config(st: _State, out: Triage) -> None:
    """Fill the job id, PASSTHROUGH_ARGS items and the node list from what the scan read."""
    cfg = out.config
    out.job_id = cfg.get("JOB_ID")
    if st.year is None and out.job_id:
        st.year = _year_hint(out.job_id)
    for item in _split_args(cfg.get("PASSTHROUGH_ARGS", "")):
        k, _, v = item.partition("=")
        if k and v:
            cfg.setdefault(k, v)
    if cfg.get("JOB_NODELIST"):
        out.nodes = expand_nodelist(cfg["JOB_NODELIST"])
    if not out.nodes and st.pods.host:
        out.nodes = pod_nodes(st.pods)
    if not out.nodes and st.node_exits:
        out.nodes = list(dict.fromkeys(h.split(".")[0] for h, *_ in st.node_exits))


def _progress(st: _State, out: Triage, steps: list[int]) -> tuple[dict[str, Any], float | None]:
    """Return (the progress figures but lost steps, the last step's time)."""
    cfg = out.config
    total = _int(cfg.get("steps")) or st.total_steps
    prog: dict[str, Any] = {"steps_total": total}
    restored = (
        st.restored
        if st.restored is not None
        else (out.first_step - 1 if out.first_step and out.first_step > 0 else None)
    )
    prog["restored_from"] = restored
    period = _int(cfg.get("checkpoint_period"))
    ckpt_on = cfg.get("enable_checkpointing", "").lower() in ("true", "1", "yes")
    if ckpt_on and period is None:
        period = 200  # the seed skill's assumption (MaxText's own default is 10000)
    ckpt_steps = set(st.saved) | ({s for s in steps if period and s % period == 0} if ckpt_on else set())
    steady = [st.steps[s][0] for s in steps[5:] if not ({s - 1, s - 2} & ckpt_steps)]
    step_time = None
    if steady:
        med = statistics.median(steady)
        kept = [x for x in steady if x <= 3 * med]
        step_time = round(sum(kept) / len(kept), 3)
    prog["step_time_s"] = step_time
    last_ts = st.steps[steps[-1]][3] if steps else None
    if (
        last_ts is None
        and steps
        and st.barrier_time is not None
        and all(st.steps[s][3] is None for s in steps)
    ):
        # print-style step lines carry no time: each step at the training's start + the steps' own seconds (a
        # trainer that prints every Nth step ran the N steps since its last print, each about as long)
        t, prev = st.barrier_time, steps[0] - 1
        for s in steps:
            t += st.steps[s][0] * (s - prev)
            st.steps[s], prev = (*st.steps[s][:3], t, st.steps[s][4]), s
        last_ts = t
        out.details["last_step_time_estimated"] = True
    prog["last_step_time"] = round(last_ts, 3) if last_ts is not None else None
    first_ts = st.steps[steps[0]][3] if steps else None
    if first_ts is not None:
        out.details["first_step_time"] = round(first_ts, 3)
    last_ckpt = None
    if (ckpt_on or st.saved) and out.last_step is not None:
        if st.saved:
            last_ckpt = (
                max(s for s in st.saved if s <= out.last_step)
                if any(s <= out.last_step for s in st.saved)
                else None
            )
        elif period:
            c = (out.last_step // period) * period
            last_ckpt = c if c >= (out.first_step or 0) or restored is not None else None
    prog["last_checkpoint_step"] = last_ckpt
    prog["tgs_trend_pct"] = _tgs_trend(st, out, steps)
    return prog, last_ts


def _tgs_trend(st: _State, out: Triage, steps: list[int]) -> float | None:
    """Return the TGS change (%) from steps first+5..first+15 to the last ten, with 20 or more TGS figures."""
    tgs = [(s, v) for s in steps if (v := st.steps[s][1]) is not None]
    if len(tgs) < 20 or out.first_step is None:
        return None
    early = [v for s, v in tgs if out.first_step + 5 <= s <= out.first_step + 15]
    late = [v for _, v in tgs[-10:]]
    if not (early and late):
        return None
    e, lt = sum(early) / len(early), sum(late) / len(late)
    out.details.update(tgs_early=round(e, 3), tgs_late=round(lt, 3))
    return round((lt - e) / e * 100.0, 2)


def _status(
    st: _State,
    out: Triage,
    prog: dict[str, Any],
    last_ts: float | None,
    now: float | None,
    slurm_state: str | None,
) -> str:
    """Return the job's status from its summary, else from its progress and the clock."""
    total = prog["steps_total"]
    summ = st.summary_status
    complete = total is not None and out.last_step is not None and out.last_step >= total - 1
    if summ is not None:
        word, rc, reason = summ
        out.details.update(exit_code=rc, summary_reason=reason)
        if word == "SUCCESS" and rc == 0:
            return "completed"
        if complete:
            return "soft-success"
        return "cancelled" if rc in (130, 143) else "failed"
    ended = _slurm_ending(st)
    if ended and not st.summary_seen and st.trainer_done is None:
        # no summary, but Slurm said how the tasks ended: a failing exit, else a cancel (scancel, time limit)
        return "soft-success" if complete else ended
    if st.summary_seen or complete or st.trainer_done is not None:
        return "completed"
    step_time = prog["step_time_s"]
    if now is not None and last_ts is not None and step_time and now - last_ts <= max(5 * step_time, 900.0):
        return "running"
    if (slurm_state or "").upper() == "RUNNING":
        return "hanging"
    return "unknown-death"


#: Exit statuses of a cancel: SIGINT (130) and SIGTERM (143), what scancel and a time limit send every task.
_CANCEL_EXITS = frozenset({130, 143})


def _suspect_exits(st: _State) -> list[tuple[str, int, int, str]]:
    """Return the failing task exits (NODE_EXIT, srun's `task N: Exited with exit code 1` / `Killed`) that are
    no cancel's: not 0, 130 or 143, nor a SIGKILL after the step was cancelled (Slurm kills the tasks that
    outlive the cancel's SIGTERM)."""
    return [
        e
        for e in st.node_exits
        if e[1] != 0
        and e[1] not in _CANCEL_EXITS
        and not (e[1] == 137 and st.cancel_line and e[2] > st.cancel_line)
    ]


def _slurm_ending(st: _State) -> str | None:
    """Return "failed" when a task exited failing, "cancelled" when the step was cancelled or every task got a
    cancel's signal, None when the log says neither."""
    if _suspect_exits(st):
        return "failed"
    if st.cancel_line or (st.node_exits and all(e[1] in _CANCEL_EXITS for e in st.node_exits)):
        return "cancelled"
    return None


def _timing(
    st: _State,
    out: Triage,
    steps: list[int],
    last_ts: float | None,
    step_time: float | None,
    now: float | None,
) -> tuple[float | None, float | None]:
    """Record training time vs wall time and the stall after the last step; return (stall, end time)."""
    secs = [st.steps[s][0] for s in steps]
    train_s = sum(secs) if secs else 0.0
    out.details.update(
        training_time_s=round(train_s, 1),
        wall_s=st.wall_s,
        steps_logged=len(steps),
        checkpoints_saved=sorted(st.saved),
    )
    start_hint = st.start_time if st.start_time is not None else _start_time(out.config)
    end_time = st.cancel_time or (start_hint + st.wall_s if start_hint is not None and st.wall_s else None)
    if end_time is not None and st.clock is not None and end_time < st.clock:
        # the job cannot have ended before its last dated line: the start it was counted from (a job id's
        # stamp) was when the job was submitted, not when it started (it waited in the queue)
        end_time = st.clock
    stall = None
    if last_ts is not None and end_time is not None:
        stall = end_time - last_ts
    elif st.wall_s is not None and secs:
        stall = st.wall_s - train_s - 1800.0  # minus a generous setup + compile allowance
    if stall is not None:
        # the job cannot have ended before its last step: an estimate below zero (a wall time shorter than
        # the steps plus the setup allowance) means no stall, not a window that ends before the last step
        stall = max(0.0, stall)
        out.details["stall_after_last_step_s"] = round(stall, 1)
    if last_ts is not None and step_time and now is not None and out.status == "running" and steps:
        out.details["expected_step_now"] = int(steps[-1] + (now - last_ts) / step_time)
    return stall, end_time


def _computed_classes(
    st: _State, out: Triage, stall: float | None, step_time: float | None, trend: float | None
) -> None:
    """Add the classes no single line shows: hang, TGS degradation, cancelled, node failure, unknown death."""
    status = out.status
    summ = st.summary_status
    stalled = stall is not None and step_time is not None and stall > max(5 * step_time, 600.0)
    if status == "hanging" or (
        status in ("cancelled", "unknown-death") and stalled and not (FATAL_TRAINING & set(st.matches))
    ):
        _add(
            st,
            "hang",
            0,
            f"steps stopped at {out.last_step}"
            + (f"; no progress for {stall / 60:.0f} min before the end" if stall else ""),
        )
    if trend is not None and trend < -10.0 and out.first_step is not None:
        _add(
            st,
            "tgs-degradation",
            0,
            f"TGS {out.details['tgs_early']:.0f} -> {out.details['tgs_late']:.0f} "
            f"({trend:+.1f} %) between steps {out.first_step + 5}-{out.first_step + 15} and the last 10",
        )
    if status == "cancelled":
        _add(st, "cancelled", 0, f"cancelled (exit {summ[1] if summ else '?'})")
    suspects = _suspect_exits(st)
    if suspects:
        _add(st, "node-fail", suspects[0][2], suspects[0][3])
        bad = {(h.split(".")[0], rc): h for h, rc, *_ in st.node_exits if rc != 0}
        out.details["node_exits"] = [{"host": h, "exit": rc} for (_, rc), h in bad.items()]
    if status == "unknown-death":
        _add(st, "unknown-death", 0, "no JOB SUMMARY and no step progress")
    if status == "soft-success":
        _add(st, "soft-success", 0, f"last step {out.last_step} = steps-1 although the job exited non-zero")
