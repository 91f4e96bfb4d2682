"""Step-aligned, cross-domain timeline panels that stay small at 1,024 GPUs.

A timeline is a stack of panels, one semantic signal each (see `PANELS`), grouped by domain (training,
GPU, network, host) and sharing one x-axis: the training step, or the time in UTC or the viewer's zone.

Each panel aggregates in Prometheus, never in Python:

- job-scope signals (training gauges) are one line;
- with few hosts or GPUs (<= `max_lines` series) every series is one line, and the ones that deviate
  most from the median of the others are named as outliers;
- with many, the panel draws a cluster band (min / median / max across hosts or GPUs) and only the
  top-k outlier series, ranked by their largest deviation from the median over the whole window (every
  device's raw series on a coarser grid, one selector pass; the median, each device's score, the top-k
  and the typical score are taken on the server, as `max_over_time(abs(x - scalar(quantile(0.5, x)))
  [window:step])` would, without a quantile per grid point in Prometheus), so one hot GPU among 1,024 is
  drawn and named. The band's min and max are one range query; its median is taken from the score's
  grid (every device's series there, already fetched), not by a quantile at each step. A band whose per-device
  expression is rated or aggregated (a counter's per-host sum of rates) and small enough is instead one
  range query of every device, split on the server into the band, the scores and the top-k
  (`queries.SPLIT_MAX_SAMPLES`): PromQL would evaluate it once per band line and twice per score step.

Other jobs of an investigation (a baseline, a run to compare) are drawn over a panel by training step:
one trace per job computed by its own Prometheus (the series for job-scope signals, else
`quantile(0.5, ...)` across hosts/GPUs), placed through its own step axis (`compare_fetch`,
`figure_build(overlays=...)`); on a time axis they are left out and the panel says so.

Points are downsampled on the server to a budget per trace with min/max per bucket (spikes survive),
and the budget shrinks so that a figure stays under its payload budget. Figures are Plotly JSON as
plain dicts (SVG `scatter`; `scattergl` only above GL_MIN_POINTS points, more than a panel sends),
with vertical annotations: checkpoints, warm-up end, restores, crash, hang start, heartbeat stop and
each finding's onset.

Usage::

    ctx = context_build(client, profile, start, end, triage=triage_dict)
    panels = panels_fetch(client, ctx, ["gpu_temp", "loss"], start, end)
    fig = figure_build(panels[0], ctx, xmode="step", annotations=annotations_build(ctx, triage, findings))
"""

from .annotations import MAX_CHECKPOINT_LABELS, MAX_CHECKPOINT_MARKS, Annotation, annotations_build
from .compare import (
    CompareJob,
    compare_fetch,
    compare_query,
    compare_range,
    compare_step_note,
    compare_trace,
    step_window,
)
from .context import TimelineContext, context_build
from .fetch import panels_fetch
from .figure import (
    GL_MIN_POINTS,
    POINTS_PER_FIGURE,
    POINTS_PER_TRACE,
    axis_range,
    figure_build,
    minmax_downsample,
    points_for_width,
    zone_name,
)
from .panels import (
    FINDING_CONTEXT_PANELS,
    PANELS,
    XMODES,
    PanelSpec,
    TimelineError,
    default_panels,
    domains_of,
    finding_panels,
    parse_panels,
)
from .queries import (
    DEFAULT_MAX_LINES,
    DEFAULT_TOPK,
    QUERY_POINTS,
    SCORE_POINTS,
    PanelPlan,
    panel_queries,
    query_step,
)
from .traces import OUTLIER_FACTOR, PanelData, Trace

__all__ = [
    "DEFAULT_MAX_LINES",
    "DEFAULT_TOPK",
    "FINDING_CONTEXT_PANELS",
    "GL_MIN_POINTS",
    "MAX_CHECKPOINT_LABELS",
    "MAX_CHECKPOINT_MARKS",
    "OUTLIER_FACTOR",
    "PANELS",
    "POINTS_PER_FIGURE",
    "POINTS_PER_TRACE",
    "QUERY_POINTS",
    "SCORE_POINTS",
    "XMODES",
    "Annotation",
    "CompareJob",
    "PanelData",
    "PanelPlan",
    "PanelSpec",
    "TimelineContext",
    "TimelineError",
    "Trace",
    "annotations_build",
    "axis_range",
    "compare_fetch",
    "compare_query",
    "compare_range",
    "compare_step_note",
    "compare_trace",
    "context_build",
    "default_panels",
    "domains_of",
    "figure_build",
    "finding_panels",
    "minmax_downsample",
    "panel_queries",
    "panels_fetch",
    "parse_panels",
    "points_for_width",
    "query_step",
    "step_window",
    "zone_name",
]
