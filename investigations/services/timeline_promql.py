"""A free PromQL panel on the timeline (issue 13): what Grafana users reach for first.

A person types a PromQL expression; it runs against the job's own source through the same read-only,
budgeted client as every panel (`TimelineSession.client`: the source's allow-list, the client's time
limit and its read-only endpoints, the per-source budget of `playbooks/budget.py`), as the `query`
parameter of one `query_range` and nothing else, over the view's range at the panels' step (the
samples budget included), and is drawn as a panel of its own on the shared step/time axis with the
same downsampling and marks. Prometheus's own refusal (a bad expression) is a message for the user. A
result is cached like any panel, keyed by the source's identity, the expression, range and step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from playbooks import timeline as tl
from playbooks.prometheus import PrometheusError, PrometheusQueryError, Series
from playbooks.textclean import printable

from . import panel_cache
from .timeline_session import TimelineSession
from .timeline_view import TimelineViewError

MAX_EXPR_CHARS = 2_000
#: Series drawn at most: more make an unreadable chart (and a heavy page); the panel says how many.
MAX_SERIES = 30
SPEC = tl.PanelSpec(key="promql", signal="", domain="custom", title="PromQL", unit="", core=False)


class PromqlError(TimelineViewError):
    """The expression is refused (empty, too long, control characters) or Prometheus rejected it."""


def promql_check(expr: str) -> str:
    """Return the expression as it is sent (stripped); raise PromqlError when it cannot be."""
    expr = (expr or "").strip()
    if not expr:
        raise PromqlError("Type a PromQL expression, e.g. rate(node_network_receive_bytes_total[5m]).")
    if len(expr) > MAX_EXPR_CHARS:
        raise PromqlError(f"A PromQL expression here holds at most {MAX_EXPR_CHARS:,} characters.")
    spaced = expr.replace("\n", " ").replace("\t", " ")  # lines and tabs are fine in PromQL
    if printable(spaced) != spaced:
        raise PromqlError("The expression holds control characters.")
    return expr


def _series_text(labels: dict[str, str], expr: str) -> str:
    name = labels.get("__name__", "")
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{inner}}}" if name or inner else expr


def _panel_of(expr: str, found: Sequence[Series], step: float, start: float, end: float) -> tl.PanelData:
    spec = replace(SPEC, title=f"PromQL: {expr if len(expr) <= 100 else expr[:99] + '…'}")
    named = sorted(((_series_text(dict(s.labels), expr), s) for s in found), key=lambda p: p[0])
    traces = [
        # "role" is the page's own meta key: a label of that name stays in the trace's name only.
        tl.Trace(name, "line", {k: v for k, v in s.labels.items() if k != "role"}, np.asarray(s.timestamps, float),
                 np.asarray(s.values, float))
        for name, s in named[:MAX_SERIES]
    ]  # fmt: skip
    panel = tl.PanelData(spec, "lines", traces=traces, queries=[expr], step=step, start=start, end=end)
    if not found:
        panel.message = "The expression returned no series in this range."
    elif len(found) > MAX_SERIES:
        panel.notes = [
            f"Showing {MAX_SERIES} of {len(found):,} series (by name): narrow the expression "
            "(a label matcher, sum by (host), topk(10, …))."
        ]
    return panel


def promql_panel(session: TimelineSession, expr: str) -> tl.PanelData:
    """Return the expression's panel over the session's range, from the shared cache or one query_range."""
    expr = promql_check(expr)
    ctx = session.ctx
    step = tl.query_step(ctx, session.start, session.end, series=MAX_SERIES)
    key = panel_cache.result_key("promql", session.identity, expr, step, session.start, session.end)
    cached = panel_cache.get_many([key]).get(key)
    if cached is not None:
        return cached
    try:
        found = session.client.query_range(expr, session.start, session.end, step)
    except PrometheusQueryError as exc:
        raise PromqlError(
            f"Prometheus refused the expression ({exc.error_type}): {' '.join(exc.message.split())}"
        ) from exc
    except PrometheusError as exc:
        raise TimelineViewError(f"The job's Prometheus did not answer: {exc}") from exc
    session.queries += 1
    panel = _panel_of(expr, found, step, session.start, session.end)
    panel_cache.set_many({key: panel}, session.identity)
    return panel
