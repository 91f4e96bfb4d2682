"""Dating the step lines a trainer prints undated (NeMo's), between the dated lines around them (#10).

During the scan an undated step line is placed its own duration after the last dated line (`st.clock`, see
`_trainers._megatron`): the earliest it can have ended, never late but early by whatever ran between that
line and the step and was not a step: after the setup's last dated line, the model's build
and the data loaders' warm-up (minutes). A careful reader places such a run of steps between the dated
line before it and the one after it, never outside: `dated` closes a run at the first dated line after
it, `fit_runs` fits each run in once the scan is done, and `place_leading` dates the steps printed before
any dated line at all.
"""

from __future__ import annotations

import math

from ._state import _State


def dated(st: _State, n: int, ts: float) -> None:
    """Read a dated line `n` at `ts`: the clock of the undated step lines after it, the end of the run before it."""
    if st.open_run:
        st.runs.append((st.open_run, ts, n))
        st.open_run = []
    st.clock = ts
    st.bar.dated(ts)  # and a bound on when a progress bar began (`_bar`)


def fit_runs(st: _State) -> None:
    """Fit each run of undated step lines between the dated line it was placed from and the one that closed it.

    The run ended by the closing line's time, or earlier by the pause that line names and times (a
    validation's length), or when the save after its last step began (the save's report's own clock). The
    run's durations, from the line before, leave a gap to that bound, or overrun it:

    - overrun: the durations are scaled to fit (a step line is never after the dated line that follows it);
    - a gap after the log's first run of steps: the setup took it (the model's build, the data loaders'
      warm-up, none of which prints a step), and the run is moved that much later, to end at the bound;
    - a gap between later steps: spread over the run's steps (scaled, as durations that under-count alike);
    - a gap after the log's last step: the failure's own wait (a hung collective waits for its watchdog), and
      the run stays where its durations put it, unless the run is also the first and the trainer reported a
      non-finite loss after it, undated, before the closing line: the job died on that report, at once, and
      the gap was the setup's.
    """
    if not st.runs:
        return  # (a run no dated line closed keeps its times: the earliest, nothing bounds them later)
    lines = [row[4] for row in st.steps.values()]
    first_line, last_line = min(lines), max(lines)
    timed = {after: (ts, length) for after, ts, length in st.pauses if length is not None}
    for run, closed, closing in st.runs:
        # (a restart from a checkpoint may have dropped some, another line may now hold the step)
        steps = [s for s, n in run if s in st.steps and st.steps[s][4] == n]
        if not steps or any(st.steps[s][3] is None or math.isnan(st.steps[s][0]) for s in steps):
            continue
        last = steps[-1]
        end = float(st.steps[last][3] or 0.0)
        began = float(st.steps[steps[0]][3] or 0.0) - st.steps[steps[0]][0]  # the line it was placed from
        bound = _bound(st, last, closed, timed.get(last))
        if bound <= began or end <= began or abs(bound - end) < 1e-3:
            continue
        leading = st.steps[steps[0]][4] == first_line
        if bound < end or (closing < last_line and not leading):
            _move(st, steps, began, (bound - began) / (end - began), 0.0)
        elif closing < last_line or (leading and _died_on_report(st, st.steps[last][4], closing)):
            _move(st, steps, began, 1.0, bound - end)


def _bound(st: _State, last: int, closed: float, pause: tuple[float | None, float] | None) -> float:
    """Return when the step `last` ended at the latest, given the time of the first dated line after it and
    the timed pause (its line's time, its length) the log names after that step, if any."""
    bound = closed
    if last in st.save_began:
        bound = min(bound, st.save_began[last])
    if pause is not None and pause[0] == closed:  # the closing line is the pause's: it ended then
        bound = min(bound, closed - pause[1])
    return bound


def _died_on_report(st: _State, last_line: int, closing: int) -> bool:
    """Return True when an undated report of a non-finite loss came between the step line and the closing line."""
    return st.nonfinite is not None and st.nonfinite_undated and last_line < st.nonfinite[1] < closing


def _move(st: _State, steps: list[int], began: float, factor: float, shift: float) -> None:
    """Move the steps' times: their distance from `began` scaled by `factor`, then `shift` later."""
    for s in steps:
        secs, tgs, loss, ts, n = st.steps[s]
        st.steps[s] = (secs, tgs, loss, began + (float(ts or 0.0) - began) * factor + shift, n)


def place_leading(st: _State) -> None:
    """Date the undated step lines before the log's first timed step by their own durations, back from it.

    A trainer that prints every step undated (NeMo's) with a dated line only now and then (a validation, a
    save's report) leaves the steps before its first dated line with no time: the durations they print
    place them, each the next one's duration (per step between two printed steps) before the next, less
    the pauses the log names and times after it (an evaluation's, a save's length). A pause it names
    without a length leaves the steps before it that much late. A step that would have ended before the
    job's start (its `date` line) ends the placing: the durations do not account for the time before."""
    timed = [s for s in sorted(st.steps) if st.steps[s][3] is not None]
    if not timed:
        return
    nxt = timed[0]
    paused = {after: length for after, _ts, length in st.pauses if length is not None}
    for s, (_end, length) in st.save_lengths.items():  # a save and a validation after the same step: both
        paused[s] = paused.get(s, 0.0) + length
    t = float(st.steps[nxt][3] or 0.0)
    for s in sorted((s for s in st.steps if s < nxt), reverse=True):
        secs = st.steps[nxt][0]
        if math.isnan(secs):
            return
        t -= secs * (nxt - s) + paused.get(s, 0.0)
        if st.job_start is not None and t < st.job_start:
            return
        st.steps[s] = (*st.steps[s][:3], t, st.steps[s][4])
        st.clock_inferred = True  # placed by durations, not read
        nxt = s
