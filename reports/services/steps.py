"""The training step at a moment of a job, for permalinks: a finding's or a pinned chart's link carries the
step as well as the absolute time, and opens the timeline there.

The step comes from what the job's latest diagnosis already fetched: the training playbook's `step` range
query, stored on its execution. A page never queries Prometheus for it; without that series (no diagnosis
yet, a job without a step metric) a link carries the time only.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse

from investigations.models import DiagnosisRun, PlaybookExecution, TaskStatus
from playbooks.alignment import StepAxis

#: The timeline a finding's link opens spans this much on either side of the onset.
AROUND_S = 600.0
#: The query (of the training playbook) whose stored result is the job's step series.
STEP_QUERY = "step"


def step_axis(job_id: int | None) -> StepAxis | None:
    """Return the job's step axis from its latest diagnosis' stored step series, or None without one."""
    if job_id is None:
        return None
    runs = DiagnosisRun.objects.filter(
        job_id=job_id, kind=DiagnosisRun.Kind.DIAGNOSIS, status=TaskStatus.DONE
    )
    run = runs.order_by("-finished", "-pk").values_list("pk", "finished").first()
    return None if run is None else _run_axis(*run)


@functools.lru_cache(maxsize=256)
def _run_axis(run_id: int, finished: Any) -> StepAxis | None:
    """Return the step axis a finished run stored (it never changes: read once per process).

    Keyed by the run's end time as well as its id: a database that reuses ids (tests rolled back) is
    never served another run's axis. Only the step query's result is read from the database, not every
    playbook's whole output."""
    path = f"output__result__results__{STEP_QUERY}"
    stored = PlaybookExecution.objects.filter(run_id=run_id, **{f"{path}__kind": "range"})
    for result in stored.order_by("pk").values_list(path, flat=True):
        axis = _axis(result) if isinstance(result, dict) else None
        if axis is not None:
            return axis
    return None


def _axis(result: dict[str, Any]) -> StepAxis | None:
    """Return the axis of a stored range result: at each point, the highest step any series reports."""
    try:
        start, every = float(result["start"]), float(result["step"])
    except (KeyError, TypeError, ValueError):
        return None
    best: dict[int, float] = {}
    for series in result.get("series") or []:
        for i, value in enumerate(series.get("values") or []):
            if isinstance(value, int | float) and math.isfinite(value):
                best[i] = max(best.get(i, value), float(value))
    if not best:
        return None
    points = sorted(best)
    axis = StepAxis.from_samples([start + i * every for i in points], [best[i] for i in points])
    return None if axis.empty else axis


def step_at(axis: StepAxis | None, when: float | None) -> int | None:
    """Return the training step the job was at (the last step reached) at unix time `when`, or None."""
    if axis is None or when is None:
        return None
    step = axis.step_at(float(when))
    return None if math.isnan(step) else int(math.floor(step + 1e-9))


class StepLookup:
    """Step axes of an investigation's jobs, each read once per page."""

    def __init__(self) -> None:
        self._axes: dict[int | None, StepAxis | None] = {}

    def at(self, job_id: int | None, when: float | None) -> int | None:
        if job_id not in self._axes:
            self._axes[job_id] = step_axis(job_id)
        return step_at(self._axes[job_id], when)


@dataclass(frozen=True)
class Moment:
    """Where a permalink points: a time (unix seconds) and the step then, and the timeline's link there.

    Attributes:
        when: unix seconds (None: no time known).
        step: the training step at `when` (None: unknown).
        timeline: the timeline's URL at that time and step ("" without a time).
    """

    when: float | None
    step: int | None
    timeline: str


def finding_moment(investigation_id: int, finding: Any, lookup: StepLookup) -> Moment:
    """Return the moment of a machine finding: its onset, the step then, the timeline around it (its hosts)."""
    onset = finding.onset
    step = lookup.at(finding.job_id, onset)
    if onset is None:
        return Moment(None, None, "")
    query = {"job": finding.job_id or "", "x": "step", "start": f"{onset - AROUND_S:.0f}"}
    query |= {"end": f"{onset + AROUND_S:.0f}", "at": f"{onset:.0f}"}
    if step is not None:
        query["step"] = step
    if finding.hosts:
        query["hosts"] = ",".join(finding.hosts[:20])
    url = reverse("investigations:timeline", args=[investigation_id]) + "?" + urlencode(query)
    return Moment(float(onset), step, url)


def chart_moments(investigation_id: int, chart: Any, lookup: StepLookup) -> tuple[Moment, Moment]:
    """Return the moments of a pinned chart's range (start, end), the timeline link on the first."""
    view = chart.view or {}
    start, end = view.get("start"), view.get("end")
    first, last = lookup.at(chart.job_id, start), lookup.at(chart.job_id, end)
    query: dict[str, Any] = {"job": chart.job_id or "", "x": view.get("xmode") or "step"}
    if start is not None and end is not None:
        query |= {"start": f"{float(start):.0f}", "end": f"{float(end):.0f}"}
    if view.get("panels"):
        query["panels"] = ",".join(view["panels"])
    if first is not None and last is not None:
        query["step"] = f"{first}-{last}"
    url = reverse("investigations:timeline", args=[investigation_id]) + "?" + urlencode(query)
    url += f"#pinned-chart-{chart.pk}"
    return Moment(start, first, url), Moment(end, last, url)
