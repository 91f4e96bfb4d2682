"""The line-by-line scan: header, steps, progress lines, stages, the summary and failure signatures."""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from collections.abc import Iterable

from ._events import event_line, srun_task_exit
from ._finish import _finish
from ._gpus_env import gpus_env_line, gpus_env_result
from ._kubectl import pod_line
from ._model import Triage
from ._patterns import (
    _CANCELLED_AT,
    _CONFIG,
    _FWD,
    _HEADER,
    _NODE_EXIT,
    _NONFINITE,
    _PROCS,
    _RESTORE,
    _SAVED,
    _STAGE,
    _STEP,
    _SUMMARY_STATUS,
    _TASK,
    _TUNNEL,
    _WALL,
    HARMLESS,
    HB_TIMEOUT,
    SIGNATURES,
    _classify,
    _clean,
    _dated,
    _float,
    _parse_stamp,
    _year_hint,
)
from ._placing import dated
from ._state import _add, _State
from ._torch import heartbeat_line, setting_line, torchrun_rank
from ._trainers import TRIGGERS, header_date, trainer_line

_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun", "Job", "Sta")  # also `Job start:`, `Start:`


#: an ISO 8601 stamp at a line's start with a numeric offset from UTC
_ZONE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?([+-])(\d\d):?(\d\d)\b")


def _scan(
    lines: Iterable[tuple[int, str]],
    out: Triage,
    now: float | None,
    slurm_state: str | None,
    data_year: tuple[int, int] | None = None,
) -> None:
    st = _State()
    for n, raw in lines:
        if "completed step: " in raw and _step_seen(st, raw):
            continue  # most lines of a big log: another rank's copy of a step already read
        pod = pod_line(st.pods, raw) if raw[:5] == "[pod/" else None
        if pod is not None and pod[3]:
            continue  # a pod's NODE_NAME/NODE_RANK line: read by pod_line
        rank, msg = _clean(raw if pod is None else pod[2])
        rank = rank if pod is None else pod[0]
        if st.job_start is None and msg[:3] in _WEEKDAYS and _scan_date(st, msg):
            continue
        grank = torchrun_rank(msg)
        if not st.tz and st.job_start is None and msg[:1] == "2" and (z := _ZONE.match(msg)):
            # no `date` header told the hosts' zone: a stamp that carries its own offset does (dmesg -T and
            # Slurm print the same local time without one)
            st.tz = (1 if z.group(1) == "+" else -1) * (int(z.group(2)) * 3600 + int(z.group(3)) * 60)
        ts, msg = _dated(msg, st.year or data_year, st.tz)
        ts = ts if pod is None or pod[1] is None else pod[1]  # kubectl's UTC stamp before the pod's local one
        if ts is not None:
            dated(st, n, ts)
        if ("_GPUS" in msg or "_DEVICE" in msg) and ("=" in msg or ":" in msg):
            gpus_env_line(st.gpus_env, msg)
        if rank is None and not st.header_done and _scan_header(st, out, msg):
            continue
        if "completed step:" in msg and _scan_step(st, n, rank, ts, msg):
            continue
        if (
            st.nonfinite is None
            and st.clock is not None
            and ("oss" in msg or "NaN" in msg)
            and _NONFINITE.search(msg)
        ):
            # an undated line (a traceback's `RuntimeError: ... found NaN ...`) came after the last dated one
            st.nonfinite = (st.clock, n, msg.strip()[:300])
            st.nonfinite_undated = ts is None
        if any(k in msg for k in TRIGGERS) and trainer_line(st, n, rank, ts, msg):
            continue
        hint = event_line(st.events, n, rank, ts, msg, st.year or data_year, st.tz, grank)
        if _scan_progress(st, out, n, ts, msg):
            continue
        _scan_failure(st, n, ts, msg, hint, (rank, grank))
    _finish(st, out, now, slurm_state)
    gpus = gpus_env_result(st.gpus_env, out.nodes)
    if gpus is not None:
        out.details["job_gpus"] = gpus


_HW_SIGNS = dict(SIGNATURES)["gpu-hw-error"]
_RAY_DEAD = re.compile(r"\bnode name: (\S+) has been marked dead")
_RAY_HEALTH = re.compile(r"RAY_health_check_period_ms=(\d+)\s+RAY_health_check_failure_threshold=(\d+)")
_SECONDS_START = frozenset("0123456789.")


def _step_seen(st: _State, raw: str) -> bool:
    """Return True for a labelled step line whose step a lower (or the same) rank already gave.

    Cheap string checks only; anything unusual (no srun label, ANSI codes, a malformed step line) is
    left to the full parse, so the outcome is exactly what `_scan_step` would decide.
    """
    k = raw.find(": ")
    label = raw[:k].lstrip()  # the srun label: `^\s*(\d+): `
    if k < 0 or not label.isdecimal() or "\x1b" in raw:
        return False
    i = raw.find("completed step: ") + 16
    j = raw.find(", seconds: ", i)
    num = raw[i:j]
    if j < 0 or not num.isdecimal() or raw[j + 11 : j + 12] not in _SECONDS_START:
        return False
    prev = st.step_rank.get(int(num))
    return prev is not None and int(label) > prev  # the same rank again: a restart re-runs the step


def _scan_date(st: _State, msg: str) -> bool:
    """Read the job script's `date` line: the job's start, its zone (the log's local stamps) and year."""
    d = header_date(msg)
    if d is None:
        return False
    st.job_start, st.tz = d[0], d[1]
    st.year = st.year or (d[2], d[3])
    st.start_time = st.start_time if st.start_time is not None else d[0]
    return True


def _scan_header(st: _State, out: Triage, msg: str) -> bool:
    """Read a header line (JOB_ID=..., the artifact stamp); return True when it was a KEY=value line."""
    h = _HEADER.match(msg)
    if h:
        key, val = h.group(1), h.group(2).strip()
        key = {
            "SLURM_JOB_ID": "JOB_ID",
            "SLURM_JOB_NAME": "JOB_NAME",
            "SLURM_JOB_NUM_NODES": "NNODES",
            "SLURM_JOB_NODELIST": "JOB_NODELIST",
        }.get(key, key)
        out.config.setdefault(key, val.strip('"'))
        if key == "JOB_ID":
            st.year = st.year or _year_hint(val)
        return True
    if "artifact_" in msg:
        st.year = _year_hint(msg) or st.year
        am = re.search(r"artifact_(\d{8})_(\d{6})", msg)
        if am:
            st.start_time = _parse_stamp(am.group(1), am.group(2))
    return False


def _scan_step(st: _State, n: int, rank: int | None, ts: float | None, msg: str) -> bool:
    """Record a `completed step:` line (one rank's values per step, rank 0 / unlabelled preferred)."""
    m = _STEP.search(msg)
    if not m:
        return False
    step = int(m.group(1))
    st.training_started = True
    prev_rank = st.step_rank.get(step)
    if prev_rank is not None and (rank or 0) == prev_rank:
        _rerun(st, step, ts)
    if prev_rank is None or (rank or 0) <= prev_rank:
        loss = _float(m.group(4))
        st.steps[step] = (float(m.group(2)), _float(m.group(3)), loss, ts, n)
        st.step_rank[step] = rank or 0
    st.last_logged = step if (rank or 0) == st.step_rank.get(step) else st.last_logged
    return True


def _rerun(st: _State, step: int, ts: float | None) -> None:
    """A rank logs a step it logged before: the workers restarted (an elastic restart) and run the steps again
    from a checkpoint. When the steps went back, the old run's steps from here on are forgotten: the job's
    progress, its step times and its losses are the new run's."""
    if st.last_logged is None or step > st.last_logged:
        return
    st.restarts.append((ts, step))
    for s in [s for s in st.steps if s >= step]:
        del st.steps[s], st.step_rank[s]


def _scan_progress(st: _State, out: Triage, n: int, ts: float | None, msg: str) -> bool:
    """Read config, tunnel, stage, summary, node exit, cancel, checkpoint and restore lines; return True
    when the line is fully read (it cannot also be a failure signature)."""
    if msg.startswith("Config param "):
        c = _CONFIG.match(msg)
        if c:
            out.config.setdefault(c.group(1), c.group(2).strip())
        return True
    if "RAY_health_check_failure_threshold=" in msg:
        ray = _RAY_HEALTH.search(msg)
        if ray:  # Ray's GCS marks a node dead after period x threshold without a health check answered
            hb_s = int(ray.group(1)) * int(ray.group(2)) // 1000
            out.config.setdefault("jax_distributed_heartbeat_timeout_seconds", str(hb_s))
    setting = setting_line(msg)
    if setting is not None:  # PyTorch's NCCL heartbeat monitor: its timeout, or off
        out.config.setdefault(*setting)
    if "heartbeat_timeout_seconds" in msg:
        hb = HB_TIMEOUT.search(msg)
        if hb:  # under the seed's config key: the one setting, however the program printed it
            out.config.setdefault("jax_distributed_heartbeat_timeout_seconds", hb.group(1))
    if "ssh " in msg and "-L " in msg and out.tunnel is None:
        t = _TUNNEL.search(msg.strip())
        if t:
            fwd = [(int(x), int(y)) for x, y in _FWD.findall(t.group(1))]
            ports = [x for x, y in fwd if x not in (8265, 6006)]
            out.tunnel = msg.strip()
            out.head = t.group(3)
            out.port = ports[0] if ports else None
        return True
    if msg.startswith("== ") and _scan_stage(st, n, msg):
        return True
    if "JOB SUMMARY" in msg:
        st.summary_seen = True
        return True
    if st.summary_seen and _scan_summary(st, msg):
        return True
    if "NODE_EXIT" in msg:
        e = _NODE_EXIT.search(msg)
        if e:
            st.node_exits.append(
                (e.group(1), int(e.group(2)), n, f"NODE_EXIT host={e.group(1)} exit={e.group(2)}")
            )
        return True
    ended = srun_task_exit(msg)
    if ended is not None:
        # srun's own report of the tasks of a host that ended: Slurm's NODE_EXIT (a `Killed` is no OOM by itself)
        if ended[0]:
            st.node_exits.append((ended[0], ended[1], n, msg.strip()[:300]))
        return True
    if "CANCELLED AT" in msg:
        c2 = _CANCELLED_AT.search(msg)
        if c2:
            st.cancel_line = st.cancel_line or n
            with contextlib.suppress(ValueError):
                st.cancel_time = (
                    dt.datetime.fromisoformat(c2.group(1)).replace(tzinfo=dt.UTC).timestamp() - st.tz
                )  # Slurm's local time
    if "Saved a checkpoint at step" in msg:
        s3 = _SAVED.search(msg)
        if s3:
            st.saved.append(int(s3.group(1)))
        return True
    if "restoring from this run's directory step" in msg:
        r = _RESTORE.search(msg)
        if r:
            st.restored = int(r.group(1))
        return True
    if "processes per node" in msg:
        p = _PROCS.search(msg)
        if p:
            st.procs_per_node = max(1, int(p.group(1)))
    if "BARRIER PASSED" in msg:
        st.training_started = True
        st.barrier_time = ts if ts is not None else st.barrier_time
    return False


def _scan_stage(st: _State, n: int, msg: str) -> bool:
    s = _STAGE.match(msg.strip())
    if not s:
        return False
    st.header_done = True
    if s.group(2) == "TIMEOUT":
        stage = s.group(1).lower()
        klass = {
            "preflight": "preflight-timeout",
            "docker pull": "pull-timeout",
            "ecc check": "ecc-timeout",
            "training": "train-timeout",
        }.get(stage, "train-timeout")
        _add(st, klass, n, msg)
    elif s.group(2) == "FAILED":
        _add(st, "stage-fail", n, msg)
    return True


def _scan_summary(st: _State, msg: str) -> bool:
    s2 = _SUMMARY_STATUS.search(msg)
    if s2:
        st.summary_status = (s2.group(1), int(s2.group(2)), (s2.group(3) or "").strip() or None)
        return True
    w = _WALL.match(msg)
    if w:
        st.wall_s = sum(int(x or 0) * k for x, k in zip(w.groups(), (3600, 60, 1), strict=True))
        return True
    return False


def _scan_failure(
    st: _State,
    n: int,
    ts: float | None,
    msg: str,
    hint: str | None = None,
    ranks: tuple[int | None, int | None] = (None, None),
) -> None:
    """Read heartbeat-accused tasks and failure signatures (harmless lines filtered first); `hint` is the
    class the line's host event stands for (a Slurm node failure, a kernel OOM kill, ...); `ranks` are the
    line's srun label and torchrun's global rank label."""
    if st.in_heartbeat:
        tk = _TASK.search(msg)
        if tk:
            st.accused_tasks.append(int(tk.group(1)))
            return
        st.in_heartbeat = False
    if any(h in msg for h in HARMLESS) and not any(p in msg for p in _HW_SIGNS):
        return  # a known-harmless line, unless it also reports a failing GPU (an XLA "INTERNAL: CUDA error: ...
        # CUDA_ERROR_ECC_UNCORRECTABLE: uncorrectable ECC error encountered")
    klass = hint or _classify(msg, st.training_started)
    if klass:
        _add(st, klass, n, msg)
        if klass == "heartbeat-timeout" and "stopped sending heartbeats" in msg:
            st.in_heartbeat = True
        dead = _RAY_DEAD.search(msg) if klass == "heartbeat-timeout" else None
        if dead:
            st.accused_hosts.append(dead.group(1))
        hb = heartbeat_line(msg, ranks[1]) if klass == "heartbeat-timeout" and not dead else None
        if hb is not None:
            st.accused_ranks.append((ranks[0], hb[0]))
            st.torch_hb_timeout = st.torch_hb_timeout or hb[1]
        if ts is not None:
            st.fatal_times.append((n, ts))
