"""The step axis's clock (issue 13): a step-axis figure carries, for each drawn step, when the job reached
the whole step it rounds to, so the hover names the step and its time; after a restore each drawn point
keeps the time of its own piece."""

from __future__ import annotations

import math

import numpy as np

from playbooks import timeline as tl
from playbooks.alignment import StepAxis
from playbooks.profiles import PROFILES
from playbooks.timeline.figure import CLOCK_POINTS

NOW = 1_778_356_800.0


def _figure(axis: StepAxis, t: np.ndarray, xmode: str = "step") -> dict:
    ctx = tl.TimelineContext(PROFILES["amd"], NOW, NOW + 1000, axis, interval=10.0)
    panel = tl.PanelData(tl.PANELS["loss"], "single", step=10.0, start=NOW, end=NOW + 1000)
    panel.traces = [tl.Trace("loss", "line", {}, t, np.ones(len(t)))]
    return tl.figure_build(panel, ctx, xmode=xmode)


def test_each_drawn_step_carries_the_time_its_whole_step_was_reached() -> None:
    # One step every 20 s; samples every 10 s fall on half steps.
    axis = StepAxis.from_samples([NOW + 20 * i for i in range(30)], list(range(30)))
    clock = _figure(axis, np.asarray([NOW + 10 * i for i in range(50)]))["layout"]["meta"]["clock"]
    assert len(clock["x"]) == 50
    for x, t in zip(clock["x"], clock["t"], strict=True):
        assert t == NOW + 20 * math.floor(x + 0.5)  # the whole step's own time, not the sample's


def test_after_a_restore_a_step_keeps_the_time_of_its_own_piece() -> None:
    # Steps 0..4, restored to 2, then 2..6: steps 2, 3 and 4 were reached twice.
    axis = StepAxis.from_samples([NOW + 10 * i for i in range(10)], [0, 1, 2, 3, 4, 2, 3, 4, 5, 6])
    clock = _figure(axis, np.asarray([NOW + 10 * i for i in range(10)]))["layout"]["meta"]["clock"]
    pairs = sorted(zip(clock["x"], clock["t"], strict=True))
    assert [t for x, t in pairs if x == 3.0] == [NOW + 30]  # one x per value: the first drawn point's piece
    assert {(x, t) for x, t in pairs if x == 6.0} == {(6.0, NOW + 90)}


def test_a_time_axis_has_no_clock_and_the_clock_is_bounded() -> None:
    axis = StepAxis.from_samples([NOW + i for i in range(5000)], list(range(5000)))
    t = np.asarray([NOW + i for i in range(5000)], dtype=float)
    assert "clock" not in _figure(axis, t, "time-utc")["layout"]["meta"]
    clock = _figure(axis, t)["layout"]["meta"]["clock"]
    assert 0 < len(clock["x"]) <= CLOCK_POINTS
