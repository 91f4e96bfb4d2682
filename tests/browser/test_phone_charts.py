"""Charts on a 390 px phone, in a real browser: the chart toolbar (Plotly's mode bar) never covers a panel's
title or its marks' labels; the x-axis's tick labels (the day written under the first tick of a time axis)
stay whole, inside the chart and clear of the legend; the plot area keeps a readable height; and a
comparison of two jobs stays compact: a metric row with its likely cause is a few lines tall and the table
reads down the screen (it scrolled sideways, the jobs' values off the screen), and a row of
small multiples (two jobs stacked) fits about half the screen. On a touch screen a finger drawn over a
chart scrolls the page instead of zooming the chart."""

from __future__ import annotations

import time

from playwright.sync_api import expect

from .conftest import EXPECT_TIMEOUT_MS
from .test_comparison_grid import _aligned, _pair
from .timeline_helpers import PHONE, drawn, open_case, phone_page, plot

_GEOMETRY = """p => {
  const el = document.querySelector(`#timeline-panel-${p} .timeline-plot`);
  const box = e => { const r = e.getBoundingClientRect(); return {l: r.left, r: r.right, t: r.top, b: r.bottom}; };
  return {svg: box(el.querySelector('.main-svg')), bar: box(el.querySelector('.modebar')),
          title: box(el.querySelector('.gtitle')), legend: box(el.querySelector('.legend')),
          labels: [...el.querySelectorAll('.annotation')].map(box).filter(b => b.r > b.l),
          ticks: [...el.querySelectorAll('.xaxislayer-above .xtick text')].map(t => ({...box(t), text: t.textContent})),
          plotH: el._fullLayout._size.h};
}"""


def _meet(a: dict, b: dict) -> bool:
    return a["l"] < b["r"] and b["l"] < a["r"] and a["t"] < b["b"] and b["t"] < a["b"]


def test_on_a_phone_the_toolbar_title_ticks_and_legend_never_cover_each_other(
    browser, stepwise_app, job_factory, _signed_in_state
) -> None:
    job_dir, truth = job_factory("thermal-straggler", 21)
    ids = open_case(stepwise_app, job_dir, truth, "a phone's charts")
    with phone_page(browser, stepwise_app, _signed_in_state) as page:
        for x in ("step", "time-utc"):
            page.goto(f"/investigations/{ids['inv']}/timeline/?panels=gpu_temp&x={x}")
            drawn(page, "gpu_temp")
            g = page.evaluate(_GEOMETRY, "gpu_temp")
            assert g["bar"]["r"] > g["bar"]["l"], g["bar"]  # the toolbar is there
            assert not _meet(g["bar"], g["title"]), (x, g["bar"], g["title"])
            assert not [b for b in g["labels"] if _meet(g["bar"], b)], (x, g["bar"], g["labels"])
            assert g["ticks"], x
            for tick in g["ticks"]:  # whole, inside the chart, not under the legend
                assert g["svg"]["l"] <= tick["l"] and tick["r"] <= g["svg"]["r"], (x, tick, g["svg"])
                assert not _meet(tick, g["legend"]), (x, tick, g["legend"])
            assert g["plotH"] >= 150, (x, g["plotH"])  # the legend's rows no longer squeeze it to 100 px
            if x == "time-utc":  # the day under the first tick, as Plotly writes it
                assert any("2026" in t["text"] for t in g["ticks"]), g["ticks"]
        expect(plot(page, "gpu_temp")).to_have_attribute("data-state", "drawn")
        # The x-axis choices wrap whole ("time (UTC)" was broken over two lines, "x-axis" into "x-" "axis").
        heights = page.evaluate(
            "[...document.querySelectorAll('.timeline-xmode > *')].map(e => e.offsetHeight)"
        )
        assert heights and max(heights) <= 26, heights


_TRIAGE = """
from investigations.services.investigations import job_triage
job_triage({job}); job_triage({baseline})
"""


def test_on_a_phone_a_comparison_stays_compact(browser, stepwise_app, job_factory, _signed_in_state) -> None:
    expect.set_options(
        timeout=EXPECT_TIMEOUT_MS
    )  # the comparison runs on the worker; the grid draws after it
    ids, _ = _pair(stepwise_app, job_factory)
    stepwise_app.shell(_TRIAGE.format(**ids))  # the comparison reads each job's restore from its triage
    with phone_page(browser, stepwise_app, _signed_in_state) as page:
        page.goto(f"/investigations/{ids['inv']}/")
        page.locator("#comparison").get_by_role("button", name="Compare jobs").click()
        leak = page.locator('#comparison tr.comparison-metric[data-metric="procs_running"]')
        expect(leak).to_have_class("comparison-metric comparison-delta", timeout=EXPECT_TIMEOUT_MS)
        heights = page.evaluate(
            "() => [...document.querySelectorAll('#comparison tr.comparison-metric')].map(r => r.offsetHeight)"
        )
        assert max(heights) <= 150, heights  # its likely cause was a column of single words (400 px)
        metrics = page.locator("#comparison table.comparison-metrics")
        assert metrics.evaluate("t => t.scrollWidth <= t.clientWidth + 1"), "it scrolls sideways"
        assert page.evaluate("document.scrollingElement.scrollWidth") <= PHONE["width"]
        _aligned(page, ids)
        row = page.get_by_test_id("sm-row-step_time").bounding_box()
        assert row["height"] <= PHONE["height"] / 2, row  # two jobs stacked: was 520 px


def _swipe_up(page, x: float, y: float) -> None:
    """A finger put down at (x, y) and drawn 300 px up, as the touch screen reports it (CDP touch events)."""
    cdp = page.context.new_cdp_session(page)
    moves = [("touchMove", y - 20 * i) for i in range(1, 16)]
    for kind, at in (("touchStart", y), *moves, ("touchEnd", None)):
        cdp.send(
            "Input.dispatchTouchEvent",
            {"type": kind, "touchPoints": [] if at is None else [{"x": x, "y": at}]},
        )
        page.wait_for_timeout(16)
    cdp.detach()


def test_on_a_touch_screen_a_swipe_over_a_chart_scrolls_the_page(
    browser, stepwise_app, job_factory, _signed_in_state
) -> None:
    job_dir, truth = job_factory("thermal-straggler", 21)
    ids = open_case(stepwise_app, job_dir, truth, "a swipe over a chart")
    url = f"/investigations/{ids['inv']}/timeline/?panels=gpu_temp,gpu_power,gpu_util&x=time-utc"
    with phone_page(browser, stepwise_app, _signed_in_state, touch=True) as page:
        page.goto(url)
        drawn(page, "gpu_temp")
        assert page.evaluate("matchMedia('(pointer: coarse)').matches")
        before = page.evaluate(f"({_PLOT}._fullLayout.xaxis.range.join(' '))")
        box = plot(page, "gpu_temp").bounding_box()
        assert box is not None
        y0 = page.evaluate("window.scrollY")
        _swipe_up(page, box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        deadline = time.monotonic() + 10
        while page.evaluate("window.scrollY") < y0 + 100 and time.monotonic() < deadline:
            page.wait_for_timeout(100)
        assert page.evaluate("window.scrollY") >= y0 + 100, (y0, page.evaluate("window.scrollY"))
        assert page.evaluate(f"({_PLOT}._fullLayout.xaxis.range.join(' '))") == before  # not zoomed
        assert page.evaluate(f"{_PLOT}._fullLayout.dragmode") is False  # a redraw keeps the page scrolling
    with phone_page(browser, stepwise_app, _signed_in_state) as page:  # a mouse still drags a zoom box
        page.goto(url)
        drawn(page, "gpu_temp")
        assert page.evaluate(f"{_PLOT}._fullLayout.dragmode") == "zoom"


_PLOT = "document.querySelector('#timeline-panel-gpu_temp .timeline-plot')"
