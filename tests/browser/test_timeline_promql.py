"""A free PromQL panel on the timeline (issue 13), in a real browser: an expression typed in is drawn on the
shared step axis and kept in the URL; a bad one shows Prometheus's message; a label value that looks like
markup is drawn as text."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .timeline_helpers import drawn, open_case, plot, url_query


@pytest.fixture(scope="module")
def case(stepwise_app, job_factory):
    job_dir, truth = job_factory("thermal-straggler", 23)
    return open_case(stepwise_app, job_dir, truth, "free PromQL")


def _draw(page, expr: str) -> None:
    box = page.get_by_label("PromQL expression")
    box.fill(expr)
    box.press("Enter")


def test_an_expression_is_drawn_on_the_shared_axis_and_kept_in_the_link(page, case) -> None:
    page.goto(f"/investigations/{case['inv']}/timeline/?panels=step_time")
    drawn(page, "step_time")
    expect(page.locator("#timeline-panel-promql")).to_be_hidden()
    _draw(page, 'label_replace(max(tb_step or training_step), "host", "<b>bold</b>", "", "")')
    drawn(page, "promql")
    assert url_query(page)["q"].startswith("label_replace(")
    # The same x-axis as the other panels: steps over the same range.
    ranges = page.evaluate(
        "() => ['step_time', 'promql'].map(p => document.querySelector(`#timeline-panel-${p} .timeline-plot`)"
        "._fullLayout.xaxis.range.map(Math.round))"
    )
    assert abs(ranges[0][0] - ranges[1][0]) <= 2 and abs(ranges[0][1] - ranges[1][1]) <= 2, ranges
    # The label value is text: its tags are shown, never rendered (Plotly would draw <b> as bold "bold").
    expect(plot(page, "promql").locator(".legendtext").first).to_contain_text('host="<b>bold</b>"')
    # A link opens the same view.
    page.reload()
    drawn(page, "promql")
    expect(page.get_by_label("PromQL expression")).to_have_value(url_query(page)["q"])


def test_a_bad_expression_shows_prometheus_s_message(page, case) -> None:
    page.goto(f"/investigations/{case['inv']}/timeline/?panels=step_time")
    drawn(page, "step_time")
    _draw(page, "rate(node_load1[5m]")
    expect(plot(page, "promql")).to_have_attribute("data-state", "error")
    expect(plot(page, "promql").get_by_role("paragraph")).to_contain_text(
        "Prometheus refused the expression (bad_data)"
    )
