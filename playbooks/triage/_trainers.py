"""Step, checkpoint and completion lines of common LLM trainers, and the log's `date` header (its zone).

Each format as its project prints it:

- Megatron-LM `training_log`: ``[2026-04-17 17:53:27] iteration   290/  500000 | consumed samples: ... |
  elapsed time per iteration (ms): 13996.8 | ... | lm loss: 4.183077E+00 | ...`` (local time, log interval
  steps apart), ``saving checkpoint at iteration N``, and at the end ``[after training is done] datetime: ...``;
- Hugging Face Trainer: ``***** Running training *****``, ``Total optimization steps = N``, the logged dicts
  ``{'loss': 10.77, 'grad_norm': ..., 'epoch': 0.0}`` (no step, no time), tqdm's bar
  ``10/20000 [01:36<53:44:17, 9.68s/it]`` (the step and the time since the bar began), ``Saving model
  checkpoint to .../checkpoint-N`` and the final ``{'train_runtime': ...}`` (the training completed);
- DeepSpeed: the engine's ``[Rank 0] step=N, skipped=K, lr=[...]`` (dated by its logger), the pipeline
  engine's ``steps: N loss: X iter time (s): T samples/sec: S`` and the launcher's ``Process P exits
  successfully.`` / ``exits with return code = C``;
- absl/JAX trainers: a dated ``step N: loss=X ... step_time=Ts`` (key=value, the keys as printed);
- NeMo / Megatron-core through Lightning: ``Training epoch 0, iteration 12/9999 | ... | reduced_train_loss: 9.5 |
  train_step_timing in s: 12.7 | ...``, ``Global Checkpoint Save : Rank: 0 : Iteration: 200 : ...``;
- PyTorch Lightning: ``Epoch 0, global step 200: 'train_loss' reached a new best, saving model to ...`` (a save),
  ``Restoring states from the checkpoint path at .../step=500-last.ckpt`` and ```Trainer.fit` stopped:
  `max_steps=N` reached.`` (the training completed);
- Ray Train: the end line ``Training errored after N iterations at <local time>. Total running time: ...``
  (``completed`` when it did not fail);
- torchtitan: ``step:  12  loss:  9.6370  grad_norm: ...`` (read as key: value), ``Training starts at step N``
  (N > 1: resumed from step N - 1), ``Finished saving the checkpoint`` and ``Training completed`` (absl/JAX trainers: ``Training finished.``);
- the job script's ``date`` line (``Fri Jul 17 19:57:04 PST 2026``, also after ``Job start:``): the zone the
  log's local stamps are in and the year absl dates lack.
"""

from __future__ import annotations

import datetime as dt
import math
import re

from ._kvstep import read_kv_step
from ._pauses import TRIGGERS as _PAUSE_TRIGGERS
from ._pauses import pause_line
from ._placing import dated
from ._state import _State

_NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"
# `date`'s default format: %a %b %e %H:%M:%S %Z %Y
_DATE = re.compile(
    r"^(?:[A-Za-z][\w ]{0,30}:\s*)?(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) "
    r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) (\d\d:\d\d:\d\d) ([A-Z]{1,5}|[+-]\d{4}) (\d{4})\s*$"
)
#: hours east of UTC of the zone abbreviations `date` prints (IST read as India's)
_ZONES = {
    "UTC": 0, "GMT": 0, "Z": 0, "WET": 0, "WEST": 1, "BST": 1, "CET": 1, "CEST": 2, "MET": 1, "MEST": 2,
    "EET": 2, "EEST": 3, "MSK": 3, "IST": 5.5, "SGT": 8, "HKT": 8, "CST": -6, "CDT": -5, "EST": -5,
    "EDT": -4, "MST": -7, "MDT": -6, "PST": -8, "PDT": -7, "AKST": -9, "AKDT": -8, "HST": -10,
    "JST": 9, "KST": 9, "AEST": 10, "AEDT": 11, "ACST": 9.5, "AWST": 8, "NZST": 12, "NZDT": 13,
}  # fmt: skip
_MEG_ITER = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_MEG_MS = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9.]+)")
_NEMO_S = re.compile(r"train_step_timing in s:\s*([0-9.]+)")
# Megatron-core's save report under NeMo: when the save began (unix seconds) and how long it took
_NEMO_SAVE = re.compile(
    r"Global Checkpoint Save : Rank: \d+ : Iteration: (\d+)(?: : Start time: ([0-9.]+)s : Save duration: ([0-9.]+)s)?"
)
_PL_SAVE = re.compile(r"\bglobal step (\d+): .*\bsaving model to ")
_PL_RESTORE = re.compile(r"Restoring states from the checkpoint path at \S*?step=(\d+)")
_TITAN_START = re.compile(r"^Training starts at step (\d+)")
# the whole message of a trainer's own end of training: torchtitan's "Training completed", absl/JAX trainers'
# "Training finished." (a line that merely starts so, "Training finished with errors", is not one)
# the trainer's own "done" (Lightning's, a script's `Training complete: 425 steps; saving final state`)
_DONE = re.compile(
    r"^(?:.{0,80}?(?:\] |: |- ))?Training (?:complete|completed|finished)\b(?!\s+(?:in|with) error)"
)
_MEG_LOSS = re.compile(r"\|\s*([\w .-]{0,40}?loss):\s*(" + _NUM + r")", re.IGNORECASE)
_MEG_NAN = re.compile(r"number of nan iterations:\s*(\d+)")
_MEG_SAVE = re.compile(r"saving checkpoint at iteration\s+(\d+)")
# Ray Train's (Tune's) last line: "Training errored after 147 iterations at 2026-06-08 20:02:41. Total running
# time: 24min 5s" (the local time it ended), "completed" or "finished" when it did not fail
_RAY_END = re.compile(
    r"^(?:Training|Tune) (errored|completed|finished) after \d+ iterations at (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)"
)
_MEG_DONE = re.compile(r"\[after training is done\] datetime: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
_TQDM = re.compile(r"(\d+)/(\d+) \[(?:(\d+):)?(\d+):(\d\d)<[^,\]]*(?:, *(" + r"[0-9.]+)(s/it|it/s))?")
_HF_LOSS = re.compile(r"^\{'loss': (" + _NUM + r")")
_HF_TOTAL = re.compile(r"Total optimization steps = ([\d,]+)")
_HF_SAVE = re.compile(r"Saving model checkpoint to \S*?checkpoint-(\d+)")
# flax's and orbax's checkpoint managers, MaxText's own: "Saving checkpoint for step 161", "... at step: 10"
_JAX_SAVE = re.compile(r"\b[Ss]av(?:ing|ed) (?:a )?checkpoint (?:for|at) step:? ?(\d+)")
_DS_STEP = re.compile(r"\[Rank \d+\] step=(\d+), skipped=\d+")
_DS_PIPE = re.compile(r"\bsteps: (\d+) loss: (" + _NUM + r") iter time \(s\): ([0-9.]+)")
_DS_EXIT = re.compile(r"Process \d+ exits successfully|exits with return code = (-?\d+)")
_KV_STEP = re.compile(r"^\s*(?:global[_ ])?step[ =:]\s*(\d+)\b")
_KV_LOSS = re.compile(r"\bloss\s*[=:]\s*(" + _NUM + r")", re.IGNORECASE)
_KV_TIME = re.compile(r"\b(?:step_time|step time|time)\s*[=:]\s*([0-9.]+)\s*(ms|s)?\b")
#: substrings one of which a line must hold to be any of the above (most lines hold none)
TRIGGERS = (
    "iteration",
    "training is done",
    "/",
    "loss",
    "step",
    "Running training",
    "exits ",
    "Saving model",
    "checkpoint",
    "Checkpoint Save",
    "Training completed",
    "Training finished",
    "Restoring states",
    *_PAUSE_TRIGGERS,
)


def header_date(msg: str) -> tuple[float, float, int, int] | None:
    """Return (unix time, the zone's seconds east of UTC, year, month) of a `date` line, or None."""
    m = _DATE.match(msg.strip())
    if not m:
        return None
    zone = m.group(4)
    hours = _ZONES.get(zone)
    if hours is None and zone[0] in "+-":
        hours = int(zone[0] + "1") * (int(zone[1:3]) + int(zone[3:5]) / 60)
    if hours is None:
        return None
    try:
        d = dt.datetime.strptime(f"{m.group(5)} {m.group(1)} {m.group(2)} {m.group(3)}", "%Y %b %d %H:%M:%S")
    except ValueError:
        return None
    tz = hours * 3600.0
    return d.replace(tzinfo=dt.UTC).timestamp() - tz, tz, d.year, d.month


def _local(text: str, tz: float) -> float | None:
    try:
        return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp() - tz
    except ValueError:
        return None


def _f(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def record(
    st: _State, rank: int | None, step: int, secs: float | None, loss: float | None, ts: float | None, n: int
) -> None:
    """Record one step (fields a line lacks are filled by another line of the same step). A step below the
    last one of the same rank is a restart from a checkpoint: the old run's steps from there on are dropped."""
    rank = rank or 0
    st.training_started = True
    prev = st.steps.get(step)
    if prev is not None and st.step_rank.get(step, rank) != rank:
        return  # another rank's copy of a step already read
    if prev is None and st.last_logged is not None and step < st.last_logged and st.trainer_rank == rank:
        st.restarts.append((ts, step))
        for s in [s for s in st.steps if s >= step]:
            del st.steps[s], st.step_rank[s]
    if prev is None:
        st.steps[step] = (secs if secs is not None else math.nan, None, loss, ts, n)
    else:
        old_secs, tgs, old_loss, old_ts, line = prev
        st.steps[step] = (
            old_secs if not math.isnan(old_secs) or secs is None else secs,
            tgs,
            old_loss if old_loss is not None else loss,
            old_ts if old_ts is not None else ts,
            line,
        )
    st.step_rank[step] = rank
    st.trainer_rank = rank if st.trainer_rank is None else st.trainer_rank
    st.last_logged = step


def trainer_line(st: _State, n: int, rank: int | None, ts: float | None, msg: str) -> bool:
    """Read a trainer's step, checkpoint or completion line; return True when the line was one."""
    if "iterations at " in msg and _ray_end(st, n, ts, msg):
        return True
    if any(k in msg for k in _PAUSE_TRIGGERS) and pause_line(st, ts, msg):
        return True  # an evaluation: a pause in training
    if "iteration" in msg or "training is done" in msg:
        return _megatron(st, n, rank, ts, msg)
    if "/" in msg and "<" in msg and "[" in msg:
        bars = _TQDM.findall(msg)
        if bars:
            _tqdm(st, n, rank, bars[-1])  # a file holds a bar's every state, split by \r: the last counts
            return True
    if (msg.startswith("{'") or "{'loss'" in msg[:40]) and "'step'" not in msg:
        return _hf_dict(st, msg)
    if "step" in msg:
        return _step_kv(st, n, rank, ts, msg)
    return _other(st, n, ts, msg)


def _megatron(st: _State, n: int, rank: int | None, ts: float | None, msg: str) -> bool:
    m = _MEG_ITER.search(msg)
    if m:
        ms = _MEG_MS.search(msg)
        nemo = _NEMO_S.search(msg) if ms is None else None
        losses = {k.strip().lower(): v for k, v in _MEG_LOSS.findall(msg)}
        loss = losses.get("lm loss") or next(iter(losses.values()), None)
        st.total_steps = st.total_steps or int(m.group(2))
        nan = _MEG_NAN.search(msg)
        if nan and int(nan.group(1)) > 0 and st.nonfinite is None and ts is not None:
            st.nonfinite = (ts, n, msg.strip()[:300])  # iterations whose loss or gradients were NaN
        secs = float(ms.group(1)) / 1000.0 if ms else _f(nemo.group(1)) if nemo else None
        # an undated step line (NeMo's) ended at the earliest its own duration after the last dated line
        st.step_placed = ts is None and secs is not None and st.clock is not None
        st.clock_inferred = st.clock_inferred or st.step_placed
        if ts is None and secs is not None and st.clock is not None:
            ts = st.clock + secs
        record(st, rank, int(m.group(1)), secs, _f(loss), ts, n)
        if st.step_placed:
            st.open_run.append((int(m.group(1)), n))  # fitted between the dated lines around it (`_placing`)
        st.clock = ts if ts is not None else st.clock
        return True
    s = _MEG_SAVE.search(msg)
    if s:
        st.saved.append(int(s.group(1)))
        return True
    d = _MEG_DONE.search(msg)
    if d:
        st.trainer_done = _local(d.group(1), st.tz) or ts or 0.0
        return True
    return False


def _ray_end(st: _State, n: int, ts: float | None, msg: str) -> bool:
    """Read Ray Train's end line: a failure dated by the time it names (the raylet's and the actor's lines
    before it carry none), or the training's completion. A stamp before the line (kubectl's, in UTC) wins:
    the time Ray names is the head's local time, whose zone such a log need not state."""
    m = _RAY_END.match(msg)
    when = (ts if ts is not None else _local(m.group(2), st.tz)) if m else None
    if m is None or when is None:
        return False
    if m.group(1) == "errored":
        st.fatal_times.append((n, when))
    else:
        st.trainer_done = when
    return True


def _tqdm(st: _State, n: int, rank: int | None, bar: tuple[str, ...]) -> None:
    step, total, hh, mm, ss, rate, unit = bar
    start = st.train_start if st.train_start is not None else st.job_start
    if start is None or (st.total_steps is not None and int(total) != st.total_steps):
        return  # a bar with no start to place it, or another loop's (evaluation, data loading)
    st.total_steps = int(total)
    st.bar_from_job_start = st.train_start is None
    elapsed = int(hh or 0) * 3600 + int(mm) * 60 + int(ss)
    secs = _f(rate)
    if secs is not None and unit == "it/s":
        secs = 1.0 / secs if secs > 0 else None
    loss, st.pending_loss = st.pending_loss, None
    st.clock_inferred = True  # the bar's own clock, from when it began: no line's time
    if int(step) not in st.steps:
        st.bar.state(int(step), start + elapsed)
    record(st, rank, int(step), secs, loss, start + elapsed, n)


def _hf_dict(st: _State, msg: str) -> bool:
    if "'train_runtime'" in msg:
        st.trainer_done = max((row[3] or 0.0 for row in st.steps.values()), default=0.0)
        return True
    m = _HF_LOSS.search(msg)
    if m:
        st.pending_loss = _f(m.group(1))
        return True
    return msg.startswith("{'eval_")


def _step_kv(st: _State, n: int, rank: int | None, ts: float | None, msg: str) -> bool:
    d = _DS_STEP.search(msg)
    if d:
        record(st, rank, int(d.group(1)), None, None, ts, n)
        return True
    p = _DS_PIPE.search(msg)
    if p:
        record(st, rank, int(p.group(1)), float(p.group(3)), _f(p.group(2)), ts, n)
        return True
    k = _KV_STEP.match(msg) if ts is not None else None
    loss = _KV_LOSS.search(msg) if k else None
    if k and loss:
        t = _KV_TIME.search(msg)
        secs = float(t.group(1)) / (1000.0 if t.group(2) == "ms" else 1.0) if t else None
        record(st, rank, int(k.group(1)), secs, _f(loss.group(1)), ts, n)
        return True
    if _other(st, n, ts, msg):
        return True
    kv = read_kv_step(msg)
    if kv is None:
        return False
    step, total, secs, value, epoch = kv
    when = ts if ts is not None else epoch
    if when is None:
        return False  # an undated step line of a trainer the log dates nowhere: no time to give it
    st.total_steps = st.total_steps or total
    record(st, rank, step, secs, value, when, n)
    return True


def _other(st: _State, n: int, ts: float | None, msg: str) -> bool:
    if _lightning_titan(st, n, ts, msg):
        return True
    if "Running training" in msg and "*****" in msg:
        st.train_start = ts if ts is not None else st.job_start
        return True
    if "Total optimization steps" in msg:
        t = _HF_TOTAL.search(msg)
        st.total_steps = int(t.group(1).replace(",", "")) if t else st.total_steps
        return True
    if "checkpoint" in msg and "step" in msg:
        j = _JAX_SAVE.search(msg)
        if j:
            st.saved.append(int(j.group(1)))
            return True
    if "Saving model checkpoint" in msg:
        s = _HF_SAVE.search(msg)
        if s:
            st.saved.append(int(s.group(1)))
        return bool(s)
    if "exits " in msg:
        e = _DS_EXIT.search(msg)
        if e and e.group(1) is None:
            st.launcher_ok += 1
            st.trainer_done = st.trainer_done or ts or 0.0
        elif e:
            st.launcher_failed.append(int(e.group(1)))
        return False  # a failing exit is also read as a failure line
    return False


def _lightning_titan(st: _State, n: int, ts: float | None, msg: str) -> bool:
    """Read NeMo's, Lightning's and torchtitan's checkpoint, restore, start and completion lines."""
    last = st.last_logged
    if "Trainer.fit` stopped" in msg or ("raining" in msg and _DONE.match(msg)):
        st.trainer_done = ts or max((row[3] or 0.0 for row in st.steps.values()), default=0.0)
        return True
    saved = _NEMO_SAVE.search(msg) or _PL_SAVE.search(msg) if "ave" in msg or "aving" in msg else None
    if saved:
        st.saved.append(int(saved.group(1)))
        began, took = (
            (float(saved.group(2)), float(saved.group(3)))
            if saved.re is _NEMO_SAVE and saved.group(2)
            else (0.0, 0.0)
        )
        if began > 1e9:
            st.save_began[int(saved.group(1))] = began  # when its step ended, by the save's own clock
        if began > 1e9 and ts is None:
            # the save's own clock dates the line: it ended (training went on) its duration after it began
            st.save_lengths[int(saved.group(1))] = (began + took, took)
            dated(st, n, began + took)
        return True
    if msg.startswith("Finished saving the checkpoint") and last is not None:
        st.saved.append(last)
        return True
    start = _PL_RESTORE.search(msg) if "Restoring states" in msg else _TITAN_START.match(msg)
    if start:
        restored = int(start.group(1)) - (0 if "Restoring" in msg else 1)
        st.restored = restored if restored > 0 else st.restored
        return True
    return False


def settle(st: _State) -> None:
    """Give the steps whose lines told no duration one from their times (time since the previous logged step,
    per step between them); a launcher's failing exit cancels the successful exits as a completion."""
    if st.launcher_failed:
        st.trainer_done = None
    prev: tuple[int, float] | None = None
    fixes = {}
    for s in sorted(st.steps):
        secs, _tgs, _loss, ts, _n = st.steps[s]
        if math.isnan(secs) and prev is not None and ts is not None and s > prev[0]:
            fixes[s] = max(0.0, (ts - prev[1]) / (s - prev[0]))
        if ts is not None:
            prev = (s, ts)
    for s, row in st.steps.items():
        secs = fixes.get(s, row[0])
        st.steps[s] = (0.0 if math.isnan(secs) else secs, *row[1:])
