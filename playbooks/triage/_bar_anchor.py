"""Pin a progress bar's steps to the log's clock with the dated checkpoint saves between them.

A Hugging Face Trainer's tqdm bar gives each step only the time since the bar began (``240/20000 [25:50<...]``).
Its steps are placed at the "Running training" line (or the job's start) plus that elapsed time, but the bar may
begin minutes after that line (a dataset mapped, a model compiled, the first collective set up), and every
step, a non-finite loss, the last step before a stall, would then be dated minutes early. A dated save of
checkpoint N (``[INFO|trainer.py:3478] 2026-06-14 07:21:07,220 >> Saving model checkpoint to .../checkpoint-241``)
is printed just after step N ended: the gap between it and step N's placed time is how late the bar began.
Both are read on the log's own clock, so a wrong time zone moves them together and cancels out.
"""

from __future__ import annotations

import bisect
import math

from ._state import _State

#: A gap between a save and its step's placed time up to this many steps' time (or seconds, at least) is the
#: time a save takes to be logged, not a late bar.
SLACK_STEPS = 2.0
SLACK_S = 30.0


def anchor_bar(st: _State) -> float:
    """Shift the bar's steps by how late the bar began, as the dated saves show; return the shift (s).

    The shift is the smallest gap over the saves (each save follows its step, so the least delayed one is
    the nearest to the truth), applied only forward (the bar cannot have begun before the line it follows)
    and only beyond the slack a save takes to be printed.
    """
    bar = sorted(s for s in st.bar_steps if s in st.steps and st.steps[s][3] is not None)
    gaps = []
    for step, ts in st.saved_at:
        i = bisect.bisect_right(bar, step) - 1
        if i < 0:
            continue
        k = bar[i]
        secs, _tgs, _loss, t_k, _n = st.steps[k]
        if t_k is None:
            continue
        per = secs if secs is not None and math.isfinite(secs) and secs > 0 else 0.0
        gaps.append((ts - (t_k + (step - k) * per), per))
    if not gaps:
        return 0.0
    shift, per = min(gaps)
    if shift <= max(SLACK_S, SLACK_STEPS * per):
        return 0.0
    placed = {st.steps[s][3] for s in bar}
    for s in bar:
        row = st.steps[s]
        st.steps[s] = (*row[:3], None if row[3] is None else row[3] + shift, row[4])
    # times taken from the bar's steps while reading: a restart's, the completion's (the last step's)
    st.restarts = [(t + shift if t is not None and t in placed else t, step) for t, step in st.restarts]
    if st.trainer_done in placed:
        st.trainer_done = (st.trainer_done or 0.0) + shift
    st.bar_from_job_start = False  # its steps are now on the log's clock, not the earliest they could be
    return shift
