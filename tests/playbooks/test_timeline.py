"""Timeline panels: downsampling, fallbacks, marks, figures (queries and outliers: test_timeline_bands)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from playbooks import timeline as tl
from playbooks.alignment import StepAxis
from playbooks.profiles import PROFILES
from playbooks.timeline import figure as tl_figure

from .timeline_support import END, NOW, START, TIMES, CannedClient, make_ctx

# --- downsampling ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "budget"), [(10_000, 200), (999, 100), (50, 100), (12_345, 801)])
def test_downsampling_keeps_spikes_and_the_budget(n, budget) -> None:
    """Min/max per bucket keeps a one-sample spike up and down and the ends, within the budget."""
    t = np.arange(n, dtype=float)
    v = np.sin(t / 50.0)
    v[n // 3] = 50.0
    v[2 * n // 3] = -50.0
    dt, dv = tl.minmax_downsample(t, v, budget)
    assert len(dt) <= max(budget, n)
    assert 50.0 in dv and -50.0 in dv
    assert dt[0] == 0 and dt[-1] == n - 1
    assert np.all(np.diff(dt) > 0)


def test_downsampling_survives_nan() -> None:
    """Buckets that are all NaN do not break the selection."""
    v = np.full(1000, np.nan)
    v[500] = 3.0
    _, dv = tl.minmax_downsample(np.arange(1000.0), v, 50)
    assert 3.0 in dv


def _rounded_one_by_one(values, digits: int) -> list:
    """The statement of the figures' rounding: Python's round() to `digits` significant digits, None for NaN/inf."""
    out = []
    for x in values:
        if not np.isfinite(x):
            out.append(None)
        else:
            out.append(0.0 if x == 0 else round(x, max(0, digits - 1 - int(np.floor(np.log10(abs(x)))))))
    return out


@pytest.mark.parametrize("digits", [5, 7])
def test_figure_values_round_as_round_does_ties_included(digits) -> None:
    """The vectorised rounding gives the very doubles round() gives: ties, exact halves, huge and tiny values."""
    rng = np.random.default_rng(7)
    values = np.concatenate(
        [
            60 + rng.normal(0, 3, 5000),  # temperatures
            rng.uniform(0, 5000, 5000).round(3),  # steps with three decimals: many exact ties at 5 digits
            rng.integers(0, 100_000, 2000) / 2.0,  # halves
            1.773e12 + rng.uniform(0, 1.4e7, 2000),  # milliseconds
            rng.exponential(1e-25, 200),  # 10**d inexact
            [np.nan, np.inf, -np.inf, 0.0, -0.0, -5.5, 1e-300, 1e300, 0.285, 2.675],
        ]
    )
    got = tl_figure._round_list(values, digits)
    assert [repr(x) for x in got] == [repr(x) for x in _rounded_one_by_one(values.tolist(), digits)]


# --- annotations and figures -----------------------------------------------------------------------


def test_annotations_come_from_triage_axis_and_findings() -> None:
    """Checkpoints, warm-up end, restore point, crash, hang start, heartbeat stop and finding onsets."""
    triage = {
        "job": {"status": "failed", "crash_time": NOW + 3500, "triage_class": "heartbeat-timeout"},
        "matches": [{"class": "heartbeat-timeout"}, {"class": "hang"}],
        "progress": {"restored_from": 0, "step_time_s": 30},
        "config": {"checkpoint_period": "50", "jax_distributed_heartbeat_timeout_seconds": "100"},
        "details": {},
    }
    findings = [{"id": 7, "title": "GPU hot", "onset": NOW + 600, "hosts": ["n12"]}, {"id": 8, "onset": None}]
    marks = tl.annotations_build(make_ctx(warmup_end=NOW + 300), triage, findings)
    kinds = [m.kind for m in marks]
    assert kinds.count("checkpoint") == 3  # steps 0, 50, 100
    assert {"warmup-end", "restore", "crash", "hang-start", "heartbeat-stop", "finding"} <= set(kinds)
    heartbeat = next(m for m in marks if m.kind == "heartbeat-stop")
    assert heartbeat.time == NOW + 3400
    finding = next(m for m in marks if m.kind == "finding")
    assert (finding.finding_id, finding.step, finding.hosts) == (7, 20.0, ("n12",))
    long = [{"id": 9, "title": "High TCP retransmits on tx-hpc-0238, tx-hpc-0239", "onset": NOW + 600}]
    label = next(m.label for m in tl.annotations_build(make_ctx(), triage, long) if m.kind == "finding")
    assert (
        label == "High TCP retransmits on tx-hpc-0238, tx…" and len(label) == 40
    )  # a cut label says it was cut


@pytest.mark.parametrize(
    ("xmode", "axis_type", "first_x", "hover"),
    [
        ("step", "linear", 0.0, ".1f"),
        # Plotly shows numbers on a date axis in the browser's zone, strings as written: times are strings
        ("time-utc", "date", "2026-03-08T20:00:00", "%Y-%m-%d %H:%M:%S UTC"),
        ("time-local", "date", "2026-03-08T21:00:00", "%Y-%m-%d %H:%M:%S UTC+01:00"),
    ],
)
def test_figure_x_axis_follows_the_mode(xmode, axis_type, first_x, hover) -> None:
    """The same panel is drawn against the step or the time (UTC or shifted to the viewer's zone, named)."""
    panel = tl.PanelData(tl.PANELS["loss"], "single", step=15.0, start=START, end=END)
    panel.traces = [tl.Trace("loss", "line", {}, np.asarray(TIMES), np.linspace(3, 2, len(TIMES)))]
    marks = [tl.Annotation("finding", "hot", NOW + 600, 20.0, finding_id=3)]
    fig = tl.figure_build(panel, make_ctx(), xmode=xmode, annotations=marks, tz_offset_s=3600)
    assert fig["layout"]["xaxis"]["type"] == axis_type
    assert fig["layout"]["xaxis"]["hoverformat"] == hover
    assert fig["data"][0]["x"][0] == first_x
    if xmode != "step":  # the finding's mark, 600 s after the first point, is a string too
        assert fig["layout"]["annotations"][0]["x"][11:] == (
            "20:10:00" if xmode == "time-utc" else "21:10:00"
        )
        assert fig["layout"]["shapes"][0]["x0"] == fig["layout"]["annotations"][0]["x"]
    assert fig["data"][0]["type"] == "scatter"  # few points: SVG starts faster than WebGL
    assert fig["layout"]["meta"]["marks"][0]["finding_id"] == 3
    assert fig["layout"]["annotations"][0]["captureevents"] is True
    json.dumps(fig, allow_nan=False)


def test_figure_breaks_lines_at_gaps_and_restores() -> None:
    """A hole in the samples, or the step going back, leaves a break (None) instead of a joining line."""
    axis = StepAxis.from_samples([NOW + 10 * i for i in range(10)], [0, 1, 2, 3, 4, 2, 3, 4, 5, 6])
    ctx = tl.TimelineContext(PROFILES["amd"], START, END, axis, interval=10.0)
    t = np.asarray([NOW + 10 * i for i in range(10) if i != 2] + [NOW + 200.0])
    panel = tl.PanelData(tl.PANELS["loss"], "single", step=10.0, start=START, end=END)
    panel.traces = [tl.Trace("loss", "line", {}, t, np.ones(len(t)))]
    assert tl.figure_build(panel, ctx, xmode="step")["data"][0]["x"].count(None) == 1  # the restore
    assert tl.figure_build(panel, ctx, xmode="time-utc")["data"][0]["x"].count(None) == 1  # the hole


def test_figure_keeps_to_its_payload_budget() -> None:
    """Many long traces are thinned so that the figure keeps to its point budget."""
    long_t = np.arange(20_000.0) + NOW
    panel = tl.PanelData(tl.PANELS["gpu_temp"], "lines", step=1.0, start=START, end=END)
    panel.traces = [
        tl.Trace(f"g{i}", "line", {"host": f"h{i}"}, long_t, np.random.default_rng(i).random(20_000))
        for i in range(16)
    ]
    fig = tl.figure_build(panel, make_ctx(), xmode="time-utc", points_per_figure=8000)
    assert sum(len(d["y"]) for d in fig["data"]) <= 8000 + 16 * 2


def test_unknown_x_mode_is_refused() -> None:
    """Only step, time-utc and time-local are x-axis modes."""
    with pytest.raises(tl.TimelineError):
        tl.figure_build(tl.PanelData(tl.PANELS["loss"], "single"), make_ctx(), xmode="wall")


@pytest.mark.parametrize(
    ("span", "expected"), [(86400.0, 300.0), (4 * 3600.0, 30.0), (3600.0, 15.0), (600.0, 15.0)]
)
def test_zooming_in_lowers_the_query_step_down_to_the_scrape_interval(span, expected) -> None:
    """A narrower range is queried at a finer step, never finer than the scrape interval."""
    assert tl.query_step(make_ctx(), START, START + span) == expected


def test_the_samples_budget_coarsens_a_wide_panel_and_the_panel_says_so() -> None:
    """1,024 GPUs over an hour with a budget of 100,000 samples a query: at most ~97 points, not 241; the
    panel's notes say why; a job-scope panel (one series) keeps its step."""
    ctx = dataclasses.replace(make_ctx(gpus=1024), max_samples=100_000)
    plan = tl.panel_queries(tl.PANELS["gpu_temp"], ctx, START, END)
    assert plan.step == 60.0 and (END - START) / plan.step * 1024 <= 100_000
    assert tl.panel_queries(tl.PANELS["loss"], ctx, START, END).step == 15.0
    client = CannedClient(lambda q: [])
    client.instant = []
    (panel,) = tl.panels_fetch(client, ctx, ["gpu_temp"], START, END)
    assert "60 s step instead of 15 s" in panel.notes[0] and "100,000 samples" in panel.notes[0]
    assert panel.notes[0] in tl.figure_build(panel, ctx)["layout"]["meta"]["notes"]


def test_many_checkpoints_get_lines_but_few_labels() -> None:
    """Every checkpoint is a line; only about ten carry a label, and labels map to marks one to one."""
    marks = tl.annotations_build(make_ctx(), {"config": {"checkpoint_period": "5"}})
    assert len(marks) == 25  # steps 0, 5, ..., 120
    panel = tl.PanelData(tl.PANELS["loss"], "single", step=15.0, start=START, end=END)
    panel.traces = [tl.Trace("loss", "line", {}, np.asarray(TIMES), np.ones(len(TIMES)))]
    layout = tl.figure_build(panel, make_ctx(), annotations=marks)["layout"]
    assert len(layout["shapes"]) == 25
    assert 1 < len(layout["annotations"]) <= tl.MAX_CHECKPOINT_LABELS
    assert [a["text"] for a in layout["annotations"]] == [m["label"] for m in layout["meta"]["marks"]]


def test_only_far_more_points_than_a_panels_budget_are_drawn_with_webgl() -> None:
    """Lines mode at its point budget (16 series) and a band are SVG (no WebGL context per panel); a figure
    asked for with far more points is WebGL."""
    t = np.arange(2000.0) * 1.8 + NOW  # within the step axis
    panel = tl.PanelData(tl.PANELS["gpu_temp"], "lines", step=15.0, start=START, end=END)
    panel.traces = [
        tl.Trace(f"h GPU {g}", "line", {"host": "h", "gpu": str(g)}, t, np.sin(t + g)) for g in range(16)
    ]
    data = tl.figure_build(panel, make_ctx())["data"]
    assert {d["type"] for d in data} == {"scatter"} and sum(len(d["x"]) for d in data) > 10_000
    many = tl.figure_build(panel, make_ctx(), points_per_trace=2000, points_per_figure=32_000)["data"]
    assert {d["type"] for d in many} == {"scattergl"}
    panel.traces = [tl.Trace(r, r, {}, t[:480], np.ones(480)) for r in ("min", "median", "max")]
    assert {d["type"] for d in tl.figure_build(panel, make_ctx())["data"]} == {"scatter"}


@pytest.mark.parametrize(
    ("xmode", "offset", "name"),
    [
        ("time-utc", 32400, "UTC"),
        ("time-local", 0, "UTC"),
        ("time-local", 32400, "UTC+09:00"),
        ("time-local", -16200, "UTC-04:30"),
        ("time-local", 20700, "UTC+05:45"),
    ],
)
def test_a_time_axis_names_its_zone(xmode, offset, name) -> None:
    assert tl.zone_name(xmode, offset) == name


@pytest.mark.parametrize(
    ("playbook", "rule", "panels"),
    [
        ("gpu_health", "gpu_health.gpu_hot", ["step_time", "gpu_temp"]),
        ("network", "network.rdma_retransmits_sustained", ["step_time", "rdma_retransmits"]),
        ("hang", "busy_wait", ["step_time", "gpu_power", "gpu_util"]),  # a bare rule id works too
        ("host_oom", "host_oom.oom_kill", ["step_time", "mem_used", "oom_kills"]),
        ("training", "training.loss_jump", ["loss", "step_time"]),  # in stacking order
        ("comparison", "restore-resource-leak:job # carries", ["step_time"]),  # not a playbook: context only
    ],
)
def test_a_findings_panels_are_the_signals_its_rule_reads(playbook, rule, panels) -> None:
    """Read from the declarations: step time for context, then what the rule's queries read."""
    assert tl.finding_panels(playbook, rule) == panels


def test_an_unknown_rule_shows_its_whole_playbook() -> None:
    every = tl.finding_panels("gpu_health", "gpu_health.no_such_rule")
    assert {"step_time", "gpu_temp", "gpu_clock"} <= set(every)


def test_dates_are_text_whole_seconds_when_they_can_be_and_gaps_stay_gaps() -> None:
    assert tl_figure._iso_dates([NOW * 1000, None, NOW * 1000 + 15_000.0]) == [
        "2026-03-08T20:00:00",
        None,
        "2026-03-08T20:00:15",
    ]
    assert tl_figure._iso_dates([NOW * 1000 + 250.0]) == ["2026-03-08T20:00:00.250"]
    assert tl_figure._iso_dates([]) == []
