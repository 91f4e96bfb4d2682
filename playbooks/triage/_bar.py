"""A progress bar's start, from the dated lines printed among its states (#10).

tqdm's bar counts its elapsed time from its own creation, which no line dates: the bar is placed from the
last dated line before it (HF's `***** Running training *****`) or the job's start, the earliest it can have
begun. A trainer that resumes from a checkpoint first skips the batches it already saw, a data loader warms
up, a compilation runs: the bar may begin minutes later. Each dated line printed among the bar's states
bounds its true start: the state printed before the line was reached no later than the line's time, the
state printed after it no earlier. When those bounds say the bar began later than it was placed, its states
are moved by the middle of what the bounds allow (the least error whatever the truth within them), and its
times are marked as estimates (the GPUs' activity then tells when the job trained)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["BarAnchor"]


@dataclass
class BarAnchor:
    """The bounds the dated lines set on how much later than placed a progress bar began.

    Attributes:
        lo, hi: the least and the most the bar's placed times may be moved by.
        steps: the steps whose times the bar placed.
        last: the placed time of the bar's last state; pending: the latest dated line since that state.
    """

    lo: float = 0.0
    hi: float = math.inf
    steps: set[int] = field(default_factory=set)
    last: float | None = None
    pending: float | None = None

    def state(self, step: int, placed: float) -> None:
        """A bar state placed at `placed`: a dated line before it was printed no later than it was reached."""
        if self.pending is not None:
            self.lo = max(self.lo, self.pending - placed)
            self.pending = None
        self.steps.add(step)
        self.last = placed

    def dated(self, ts: float) -> None:
        """A dated line: the bar's last state was reached no later than this line's time."""
        if self.last is None:
            return
        self.hi = min(self.hi, ts - self.last)
        self.pending = ts if self.pending is None else max(self.pending, ts)

    def shift(self) -> float:
        """Return how much later than placed the bar began: 0 when its placing fits every dated line."""
        if self.lo <= 0.0:
            return 0.0
        if self.hi < self.lo:  # lines written out of order (stderr's bar against stdout's log): the least
            return self.lo
        return 0.5 * (self.lo + self.hi) if math.isfinite(self.hi) else self.lo
