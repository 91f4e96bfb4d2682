"""The timeline's compared jobs: another run drawn over the panels, by step."""

from __future__ import annotations

import numpy as np
import pytest

from playbooks import timeline as tl
from playbooks.alignment import StepAxis
from playbooks.profiles import PROFILES
from playbooks.prometheus import PrometheusError, Series

from .timeline_support import NOW, CannedClient

#: A fresh-start baseline a day earlier: step s at OTHER + 30 s, steps 0..320.
OTHER = NOW - 86_400.0


def _restored_ctx() -> tl.TimelineContext:
    """The panel's job: restored from step 200, steps 201..320 at NOW + 30 s each."""
    axis = StepAxis.from_samples([NOW + 30.0 * i for i in range(120)], [201.0 + i for i in range(120)])
    return tl.TimelineContext(
        profile=PROFILES["amd"], start=NOW, end=NOW + 30.0 * 119, axis=axis, gpu_series=16, host_series=4
    )


def _baseline_job(profile: str = "amd") -> tl.CompareJob:
    axis = StepAxis.from_samples([OTHER + 30.0 * i for i in range(321)], [float(i) for i in range(321)])
    ctx = tl.TimelineContext(
        profile=PROFILES[profile],
        start=OTHER,
        end=OTHER + 30.0 * 320,
        axis=axis,
        gpu_series=16,
        host_series=4,
    )
    return tl.CompareJob("4711", "baseline", ctx)


class RangeClient(CannedClient):
    """Answers range queries with the baseline's step as the value, on a 15 s grid over the asked range."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__(None)
        self.fail = fail
        self.ranges: list[tuple[float, float]] = []

    def query_range(self, promql, start, end, step=None):
        self.asked.append(promql)
        self.ranges.append((start, end))
        if self.fail:
            raise PrometheusError("connection refused")
        times = tuple(np.arange(start, end + 1e-6, 15.0).tolist())
        return [Series({}, times, tuple((t - OTHER) / 30.0 for t in times))]


def test_the_steps_a_zoomed_panel_shows_map_to_the_compared_runs_own_times() -> None:
    """The restored run's visible steps (step_window) select the baseline's times holding the same steps."""
    ctx, base = _restored_ctx(), _baseline_job()
    assert tl.step_window(ctx.axis, ctx.start, ctx.end) == (201.0, 320.0)
    lo, hi = tl.step_window(ctx.axis, NOW + 30.0 * 49, NOW + 30.0 * 99)
    assert (lo, hi) == pytest.approx((250.0, 300.0))
    t0, t1 = tl.compare_range(base.ctx, (lo, hi))
    assert (t0, t1) == pytest.approx((OTHER + 30.0 * 250, OTHER + 30.0 * 300), abs=1.0)
    assert tl.compare_range(base.ctx, None) == (base.ctx.start, base.ctx.end)  # not zoomed: its whole run
    assert tl.compare_range(base.ctx, (-50.0, 10.0)) == pytest.approx((OTHER, OTHER + 300.0), abs=1.0)
    assert tl.compare_range(base.ctx, (400.0, 500.0)) is None
    assert tl.step_window(ctx.axis, NOW - 900.0, NOW - 10.0) is None  # before training: no step


def test_a_compared_job_is_one_trace_its_median_computed_by_prometheus() -> None:
    """Training signals are the series itself; host and GPU signals the median across them, one query each."""
    base = _baseline_job()
    loss, _ = tl.compare_query(tl.PANELS["loss"], base.ctx, OTHER, OTHER + 3600.0)
    assert (
        "quantile" not in loss
        and loss == tl.panel_queries(tl.PANELS["loss"], base.ctx, OTHER, OTHER + 3600.0).queries["line"]
    )
    temp, step = tl.compare_query(tl.PANELS["gpu_temp"], base.ctx, OTHER, OTHER + 3600.0)
    assert temp.startswith("quantile(0.5, ") and "by (host, gpu)" in temp and step == 15.0
    rate, _ = tl.compare_query(tl.PANELS["rdma_retransmits"], base.ctx, OTHER, OTHER + 3600.0)
    assert rate.startswith("quantile(0.5, ") and "rate(" in rate
    node_only = _baseline_job("node")
    assert tl.compare_query(tl.PANELS["gpu_temp"], node_only.ctx, OTHER, OTHER + 3600.0) is None


def test_a_compared_trace_sits_on_its_own_steps_dashed_and_only_on_a_step_axis() -> None:
    """The baseline's step 250 is drawn at x = 250 over the restored run's panel (its value is its step here),
    dashed and named; on a time axis it is left out and the panel says the overlay needs the step axis."""
    ctx, base = _restored_ctx(), _baseline_job()
    client = RangeClient()
    found, sent = tl.compare_fetch(client, base, ["loss", "gpu_temp"], (250.0, 300.0))
    assert sent == 2 and all(
        r == pytest.approx((OTHER + 7500.0, OTHER + 9000.0), abs=1.0) for r in client.ranges
    )
    assert found["loss"].name == "4711 (baseline)" and found["gpu_temp"].name == "4711 (baseline) median"
    own = tl.Trace("Loss", "line", {}, np.array([NOW + 30.0 * i for i in range(120)]), np.ones(120))
    panel = tl.PanelData(tl.PANELS["gpu_temp"], "single", traces=[own], step=15.0)
    fig = tl.figure_build(panel, ctx, xmode="step", overlays=[found["gpu_temp"]])
    line, overlay = fig["data"]
    assert line["x"][0] == 201.0
    assert overlay["meta"] == {"role": "compare", "job": "4711", "job_role": "baseline"}
    assert overlay["line"]["dash"] == "dash" and overlay["name"] == "4711 (baseline) median"
    xs = [x for x in overlay["x"] if x is not None]
    assert xs[0] == pytest.approx(250.0) and xs[-1] == pytest.approx(300.0)
    assert overlay["y"] == pytest.approx(overlay["x"])

    timed = tl.figure_build(panel, ctx, xmode="time-utc", overlays=[found["gpu_temp"]])
    assert [d["meta"]["role"] for d in timed["data"]] == ["line"]
    assert "4711 (baseline) needs the step axis" in timed["layout"]["meta"]["notes"][0].replace(
        "overlay of ", ""
    )


def test_a_compared_job_that_cannot_answer_gives_notes_not_errors() -> None:
    """A Prometheus error, a signal its profile lacks or no step in range: a note per panel, no exception."""
    base = _baseline_job("node")
    found, sent = tl.compare_fetch(RangeClient(fail=True), base, ["loss", "gpu_power"], None)
    assert sent == 1
    assert "4711 (baseline): its Prometheus did not answer" in found["loss"]
    assert found["gpu_power"].startswith("4711 (baseline): Not available")
    client = RangeClient()
    found, sent = tl.compare_fetch(client, base, ["loss"], (900.0, 1000.0))
    assert sent == 0 and not client.asked and found["loss"] == "4711 (baseline) has no steps in this range."
