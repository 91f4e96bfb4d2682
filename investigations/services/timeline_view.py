"""What a timeline link holds (panels, range, x-axis, zone, hosts, compared jobs), parsed from its query
string, and the errors a timeline page shows."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from playbooks import timeline as tl
from playbooks.textclean import printable

#: Other jobs of the investigation one timeline can draw over its panels.
MAX_COMPARE = 4
#: Widest panel a page may say it draws, in px.
MAX_WIDTH = 10_000


class TimelineViewError(Exception):
    """The timeline cannot be shown: no data source, no data, or a bad view. The message is for the user."""


class TimelineCompareError(TimelineViewError):
    """A job asked for in `compare=` is not another job of this investigation (`status`: 404, or 400 for itself)."""

    def __init__(self, message: str, status: int = 404) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class TimelineView:
    """What a timeline link holds.

    Attributes:
        panels: panel keys, or None for the profile's defaults.
        start, end: the range in unix seconds, None for the job's whole data range.
        xmode: "step", "time-utc" or "time-local".
        tz_offset_min: the viewer's offset east of UTC in minutes (for time-local).
        hosts: hosts to draw even in band mode (a selected finding's).
        step_from, step_to: a range given in steps (a zoom on the step axis), converted with the step axis.
        compare: pks of other jobs of the investigation drawn over the panels, aligned by step.
        width: the page's panel width in px (`w`), 0 when not given: a narrower panel is queried at a
            coarser step (`tl.points_for_width`), never a finer one.
    """

    panels: tuple[str, ...] | None = None
    start: float | None = None
    end: float | None = None
    xmode: str = "step"
    tz_offset_min: int = 0
    hosts: tuple[str, ...] = ()
    step_from: float | None = None
    step_to: float | None = None
    compare: tuple[int, ...] = ()
    width: int = 0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["panels"] = list(self.panels) if self.panels is not None else None
        out["hosts"] = list(self.hosts)
        out["compare"] = list(self.compare)
        return out


def _float(params: Mapping[str, Any], name: str) -> float | None:
    raw = params.get(name)
    if raw in (None, ""):
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise TimelineViewError(f"{name} must be a number, got {raw!r}.") from None
    if not math.isfinite(value):
        raise TimelineViewError(f"{name} must be a finite number, got {raw!r}.")
    return value


def _compare_ids(raw: Any) -> tuple[int, ...]:
    items = [c.strip() for c in str(raw or "").split(",") if c.strip()]
    if not all(c.isdigit() for c in items):
        raise TimelineViewError(
            f"compare lists job ids of this investigation (e.g. compare=12,14), not {raw!r}."
        )
    ids = tuple(dict.fromkeys(int(c) for c in items))
    if len(ids) > MAX_COMPARE:
        raise TimelineViewError(f"At most {MAX_COMPARE} jobs can be compared on one timeline.")
    return ids


def timeline_view_parse(params: Mapping[str, Any]) -> TimelineView:
    """Return the view of a query string: panels, start, end, x, tz, hosts, sfrom, sto, compare (all optional)."""
    xmode = str(params.get("x") or "step")
    if xmode not in tl.XMODES:
        raise TimelineViewError(f"x must be one of {', '.join(tl.XMODES)}, not {xmode!r}.")
    panels_raw = params.get("panels")
    panels = None
    if panels_raw:
        panels = tuple(p.strip() for p in str(panels_raw).split(",") if p.strip())
        unknown = [p for p in panels if p not in tl.PANELS]
        if unknown:
            raise TimelineViewError(f"Unknown panel(s): {', '.join(unknown)}.")
    hosts = tuple(h.strip() for h in str(params.get("hosts") or "").split(",") if h.strip())
    # Any label value a TSDB can hold is a host (it is escaped where PromQL and Plotly use it): only control
    # characters and absurd lengths are refused (a comma separates hosts in the link).
    bad = [h for h in hosts if printable(h) != h or len(h) > 253]
    if bad:
        raise TimelineViewError(f"Not a host name: {bad[0]!r}.")
    start, end = _float(params, "start"), _float(params, "end")
    if start is not None and end is not None and not end > start:
        raise TimelineViewError("end must be after start.")
    width = _float(params, "w") or 0.0
    if not 0 <= width <= MAX_WIDTH:
        raise TimelineViewError(f"w is a panel's width in pixels, at most {MAX_WIDTH:,}.")
    tz = _float(params, "tz") or 0.0
    if abs(tz) > 24 * 60:
        raise TimelineViewError("tz is the offset from UTC in minutes, within a day.")
    return TimelineView(
        panels=panels,
        start=start,
        end=end,
        xmode=xmode,
        tz_offset_min=int(tz),
        hosts=hosts[:20],
        step_from=_float(params, "sfrom"),
        step_to=_float(params, "sto"),
        compare=_compare_ids(params.get("compare")),
        width=int(width),
    )
