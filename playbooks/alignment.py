"""Wall time <-> training step, from the step gauge's samples.

Users compare runs by training step, not by clock, so every timeline panel can put the step on its
x-axis. The step gauge (`tb_step`, `training_step`; staleness fills already filtered out by the
profile's expression) is read once with a range query and turned into a `StepAxis`:

- *pieces*: maximal runs where the step never goes back. Inside a piece the mapping is piecewise
  linear between the first sample of each step value (a step is "reached" when it first appears), and
  flat while the step holds (a stall, a hang, or Prometheus' lookback repeating the last value).
- *gaps*: holes in the samples inside a piece (monitoring missed data while training went on); the
  mapping interpolates across them and lists them so a chart can say so.
- *restores*: the step goes back (a restart from a checkpoint, a restore). The time between the last
  sample before and the first after belongs to no piece: `step_at` gives NaN there. A step reached
  twice maps, by default, to its latest occurrence.

Outside the data `step_at` and `time_at` give NaN. Both accept scalars or arrays (numpy).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import PlaybooksError

__all__ = ["AlignmentError", "Gap", "Piece", "Restore", "StepAxis", "step_axis_from_series"]

#: A hole between two samples longer than this many median sample spacings is a gap.
GAP_FACTOR = 4.0


class AlignmentError(PlaybooksError):
    """The step samples cannot be aligned (mismatched arrays, unknown occurrence rule)."""


@dataclass(frozen=True)
class Piece:
    """One monotonic run of the step.

    Attributes:
        start, end: unix seconds of its first and last sample.
        first_step, last_step: the step at those samples.
        knot_t, knot_s: the knots of the mapping (first and last sample of each step value), ascending.
    """

    start: float
    end: float
    first_step: float
    last_step: float
    knot_t: np.ndarray = field(repr=False, compare=False)
    knot_s: np.ndarray = field(repr=False, compare=False)


@dataclass(frozen=True)
class Gap:
    """A hole in the step samples inside one piece.

    Attributes:
        start, end: unix seconds of the samples around the hole.
        step_before, step_after: the step at those samples.
    """

    start: float
    end: float
    step_before: float
    step_after: float


@dataclass(frozen=True)
class Restore:
    """The step went back: a restart or a restore from a checkpoint.

    Attributes:
        time: unix seconds of the first sample after it.
        from_step: the last step before.
        to_step: the first step after.
        last_time_before: unix seconds of the last sample before.
    """

    time: float
    from_step: float
    to_step: float
    last_time_before: float


def _knots(t: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return knots: the first and (when it holds) the last sample of each run of one step value."""
    change = np.ones(len(s), dtype=bool)
    change[1:] = s[1:] != s[:-1]
    last = np.ones(len(s), dtype=bool)
    last[:-1] = s[:-1] != s[1:]
    keep = change | last
    return t[keep], s[keep]


@dataclass(frozen=True)
class StepAxis:
    """The mapping between wall time and training step of one job.

    Attributes:
        pieces: monotonic runs, in time order.
        gaps: holes inside pieces.
        restores: where the step went back, in time order.
    """

    pieces: tuple[Piece, ...]
    gaps: tuple[Gap, ...] = ()
    restores: tuple[Restore, ...] = ()

    @classmethod
    def from_samples(
        cls,
        times: Sequence[float] | np.ndarray,
        steps: Sequence[float] | np.ndarray,
        *,
        gap: float | None = None,
    ) -> StepAxis:
        """Return the axis of step samples (any order; NaN samples are dropped).

        1. Sort by time, drop NaN and duplicate timestamps.
        2. Split where the step goes back (a restore or restart).
        3. Inside each piece, list holes longer than `gap` seconds (default GAP_FACTOR x the median
           sample spacing) as gaps.
        4. Keep the first and last sample of each step value as the knots of the mapping.
        """
        t = np.asarray(times, dtype=float)
        s = np.asarray(steps, dtype=float)
        if t.shape != s.shape or t.ndim != 1:
            raise AlignmentError(
                f"times and steps must be 1-D arrays of one length, got {t.shape} and {s.shape}"
            )
        ok = np.isfinite(t) & np.isfinite(s)
        t, s = t[ok], s[ok]
        order = np.argsort(t, kind="stable")
        t, s = t[order], s[order]
        if len(t) > 1:
            uniq = np.ones(len(t), dtype=bool)
            uniq[1:] = t[1:] != t[:-1]
            t, s = t[uniq], s[uniq]
        if len(t) == 0:
            return cls(pieces=())
        dt = np.diff(t)
        if gap is None:
            gap = GAP_FACTOR * float(np.median(dt)) if len(dt) else float("inf")
        back = np.flatnonzero(s[1:] < s[:-1]) + 1
        bounds = [0, *back.tolist(), len(t)]
        pieces, gaps, restores = [], [], []
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            pt, ps = t[a:b], s[a:b]
            kt, ks = _knots(pt, ps)
            pieces.append(Piece(float(pt[0]), float(pt[-1]), float(ps[0]), float(ps[-1]), kt, ks))
            for i in np.flatnonzero(np.diff(pt) > gap):
                gaps.append(Gap(float(pt[i]), float(pt[i + 1]), float(ps[i]), float(ps[i + 1])))
            if a > 0:
                restores.append(Restore(float(t[a]), float(s[a - 1]), float(s[a]), float(t[a - 1])))
        return cls(pieces=tuple(pieces), gaps=tuple(gaps), restores=tuple(restores))

    # -- queries ----------------------------------------------------------------------------------

    @property
    def empty(self) -> bool:
        return not self.pieces

    @property
    def start(self) -> float:
        """Return the time of the first sample (NaN when empty)."""
        return self.pieces[0].start if self.pieces else float("nan")

    @property
    def end(self) -> float:
        """Return the time of the last sample (NaN when empty)."""
        return self.pieces[-1].end if self.pieces else float("nan")

    @property
    def first_step(self) -> float:
        return self.pieces[0].first_step if self.pieces else float("nan")

    @property
    def last_step(self) -> float:
        return self.pieces[-1].last_step if self.pieces else float("nan")

    def step_at(self, t: float | Sequence[float] | np.ndarray) -> float | np.ndarray:
        """Return the (fractional) step at unix time(s) `t`; NaN outside the data and between pieces."""
        scalar = np.ndim(t) == 0
        ts = np.atleast_1d(np.asarray(t, dtype=float))
        out = np.full(ts.shape, np.nan)
        for p in self.pieces:
            inside = (ts >= p.start) & (ts <= p.end)
            if inside.any():
                out[inside] = np.interp(ts[inside], p.knot_t, p.knot_s)
        return float(out[0]) if scalar else out

    def time_at(
        self, step: float | Sequence[float] | np.ndarray, *, occurrence: str = "latest"
    ) -> float | np.ndarray:
        """Return the unix time(s) when `step` was first reached; NaN for a step outside the data.

        A step reached in several pieces (after a restore) maps to its `occurrence`: "latest" (default)
        or "earliest". Fractional steps interpolate between the knots.
        """
        if occurrence not in ("latest", "earliest"):
            raise AlignmentError(f"occurrence must be 'latest' or 'earliest', not {occurrence!r}")
        scalar = np.ndim(step) == 0
        ss = np.atleast_1d(np.asarray(step, dtype=float))
        out = np.full(ss.shape, np.nan)
        pieces = self.pieces if occurrence == "earliest" else tuple(reversed(self.pieces))
        for p in pieces:
            # First occurrence of each value: strictly increasing steps, so np.interp inverts the piece.
            first = np.ones(len(p.knot_s), dtype=bool)
            first[1:] = p.knot_s[1:] != p.knot_s[:-1]
            fs, ft = p.knot_s[first], p.knot_t[first]
            todo = np.isnan(out) & (ss >= fs[0]) & (ss <= fs[-1])
            if todo.any():
                out[todo] = np.interp(ss[todo], fs, ft)
        return float(out[0]) if scalar else out

    def occurrences(self, step: float) -> list[float]:
        """Return every time `step` was first reached, one per piece that holds it, in time order."""
        found = []
        for p in self.pieces:
            one = StepAxis(pieces=(p,)).time_at(step)
            if not np.isnan(one):
                found.append(float(one))
        return found

    def last_advance(self) -> float:
        """Return when the last step value was first reached (the start of a final stall); NaN when empty."""
        if not self.pieces:
            return float("nan")
        p = self.pieces[-1]
        idx = int(np.searchsorted(p.knot_s, p.last_step, side="left"))
        return float(p.knot_t[idx])

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready summary: range, steps, gaps and restores."""
        return {
            "start": self.start if self.pieces else None,
            "end": self.end if self.pieces else None,
            "first_step": self.first_step if self.pieces else None,
            "last_step": self.last_step if self.pieces else None,
            "pieces": [
                {"start": p.start, "end": p.end, "first_step": p.first_step, "last_step": p.last_step}
                for p in self.pieces
            ],
            "gaps": [vars(g) for g in self.gaps],
            "restores": [vars(r) for r in self.restores],
        }


def step_axis_from_series(series: Iterable[object], *, gap: float | None = None) -> StepAxis:
    """Return the axis of a range query's result (objects with .timestamps and .values; several are merged)."""
    ts: list[float] = []
    vs: list[float] = []
    for s in series:
        ts.extend(s.timestamps)  # type: ignore[attr-defined]
        vs.extend(s.values)  # type: ignore[attr-defined]
    return StepAxis.from_samples(ts, vs, gap=gap)
