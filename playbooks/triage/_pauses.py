"""Evaluation phases a trainer's log names: pauses in training, not slow steps (#10).

A trainer that evaluates every few dozen steps stops training for the evaluation's length: the time
between the two step lines around it holds the pause. Each project prints its evaluation its own way:

- Hugging Face Trainer: ``***** Running Evaluation *****`` as it begins, ``{'eval_loss': 2.31,
  'eval_runtime': 63.2, ...}`` when it ends (undated, its length in seconds);
- Megatron-LM: ``validation loss at iteration 300 | lm loss value: ...``;
- PyTorch Lightning: the validation loop's own bar, ``Validation DataLoader 0: 100%|...| 50/50 [00:12<00:00]``;
- others: a line that begins with eval / evaluation / validation (``eval at step 300: loss=2.31``, ``eval
  metrics after step: 300, ...``, ``Evaluation took 63.2 s``), with or without a step and a length.

Each is kept as (the step it followed, the line's time, its length): the step named on the line, else the
last step line read before it. `pause_windows` turns them into the time windows the step-time rules leave
out, as they leave out checkpoint saves.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

from ._state import _State

_NUM = r"[0-9]+(?:\.[0-9]+)?"
_HF_RUNTIME = re.compile(r"'eval_runtime': (" + _NUM + r")")
_MEGATRON = re.compile(r"\bvalidation loss at iteration\s+(\d+)")
_LIGHTNING = re.compile(r"^Validation(?: DataLoader \d+)?:.*\[(?:(\d+):)?(\d+):(\d\d)<")
_GENERIC = re.compile(
    r"^(?:\*+ *)?(?:running |starting |start(?:ed)? |begin(?:ning)? |end(?:ed)? |finished |done )?"
    r"(?:eval|evaluation|validation|validating|evaluating)\b",
    re.IGNORECASE,
)
_STEP = re.compile(r"\b(?:step|iteration|iter)\b\W{0,3}(\d+)", re.IGNORECASE)
_LENGTH = re.compile(
    r"\b(?:runtime|time|took|duration|elapsed)\b\W{0,4}(" + _NUM + r")\s*(ms|s|sec|secs|seconds)?\b",
    re.IGNORECASE,
)
#: NeMo's validation line ends with its length: ``validation at step 150: val_loss=5.4490 (34.5s)``
_PAREN = re.compile(r"\((" + _NUM + r")\s*(ms|s)\)\s*$")
#: the host pdsh puts before each line it relays ("gpu-031: eval step 116: eval_loss=2.2204")
_HOST_LABEL = re.compile(r"^[A-Za-z][\w.-]{0,62}: ")
#: substrings one of which a line must hold to be an evaluation's (TRIGGERS of the scan)
TRIGGERS = ("eval", "Eval", "EVAL", "alidat", "ALIDAT")
#: at most this many evaluations kept (a log of a long run evaluates every few minutes for weeks)
MAX_PAUSES = 5000


def pause_line(st: _State, ts: float | None, msg: str) -> bool:
    """Read an evaluation's line (see the module's formats); return True when the line was one."""
    text = msg.strip()
    label = _HOST_LABEL.match(text)
    if label and not _GENERIC.match(text) and not text.startswith("{'eval_"):
        text = text[label.end() :]  # pdsh's "host: " before the trainer's own line (DeepSpeed's launcher)
    length: float | None = None
    step: int | None = None
    if text.startswith("{'eval_"):
        r = _HF_RUNTIME.search(text)
        length = float(r.group(1)) if r else None
    elif "*****" in text and "Running Evaluation" in text:
        pass
    elif (m := _MEGATRON.search(text)) is not None:
        step = int(m.group(1))
    elif (b := _LIGHTNING.match(text)) is not None:
        length = int(b.group(1) or 0) * 3600 + int(b.group(2)) * 60 + int(b.group(3))
    elif _GENERIC.match(text):
        s, t = _STEP.search(text), _LENGTH.search(text) or _PAREN.search(text)
        step = int(s.group(1)) if s else None
        if t:
            length = float(t.group(1)) / (1000.0 if (t.group(2) or "").lower() == "ms" else 1.0)
    else:
        return False
    after = step if step is not None else st.last_logged
    if after is None or len(st.pauses) >= MAX_PAUSES:
        return True  # an evaluation before any step (or a config line's mention) pauses no training seen
    if st.pauses and st.pauses[-1][0] == after:
        # one evaluation however many of its lines (its start and its result) and ranks print it
        _, seen_ts, seen_length = st.pauses[-1]
        st.pauses[-1] = (
            after,
            ts if length is not None else seen_ts,
            length if length is not None else seen_length,
        )
        return True
    st.pauses.append((after, ts, length))
    return True


def pause_windows(st: _State, points: Sequence[Sequence[float | None]]) -> list[list[float | None]]:
    """Return [start, end, length] of each pause the log names, its evaluations' and its checkpoint saves':
    from the step line before it (or its own start, when dated and timed) to the first timed point after
    it, whose time since the point before holds the pause (`log_series.with_log_step_time` takes it out),
    and how long the pause lasted when the log says (None when it does not, or for a save)."""
    timed = sorted((s, row[3]) for s, row in st.steps.items() if row[3] is not None)
    steps = [s for s, _ in timed]
    times = sorted(float(p[0]) for p in points if p and p[0] is not None)
    out: dict[int, list[float | None]] = {}
    saves = [(s, *st.save_lengths[s]) if s in st.save_lengths else (s, None, None) for s in st.saved]
    for after, ts, length in [*st.pauses, *saves]:
        k = bisect.bisect_right(steps, after) - 1
        start = step_t = float(timed[k][1]) if k >= 0 else None
        if ts is not None and length is not None:
            start = min(start, ts - length) if start is not None else ts - length
        if start is None:
            continue
        # the first point after the step before it (a stamp to the second may put its start a little before
        # that step's own time); the points are rounded to the millisecond
        j = bisect.bisect_right(times, (step_t if step_t is not None else start) + 0.01)
        end = times[j] if j < len(times) else start + (length or 0.0)
        if after not in out:
            out[after] = [start, end, length]
            continue
        # an evaluation and a save after the same step: both in one pause, its length unknown (the save's)
        seen = out[after]
        seen[0], seen[1], seen[2] = min(float(seen[0] or start), start), max(float(seen[1] or end), end), None
    return [
        [round(a or 0.0, 3), round(b or 0.0, 3), c]
        for a, b, c in sorted(out.values(), key=lambda w: (w[0] or 0.0, w[1] or 0.0))
    ]
