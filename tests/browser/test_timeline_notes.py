"""People's notes on the timeline (issue 13), in a real browser: a click on a chart picks the step, the
note is drawn on every panel at once and stays there for the next visit, on the time axis too; deleting
it takes it off."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from .timeline_helpers import drawn, open_case, phone_page


@pytest.fixture(scope="module")
def case(stepwise_app, job_factory):
    job_dir, truth = job_factory("thermal-straggler", 23)
    return open_case(stepwise_app, job_dir, truth, "notes on the timeline")


def _mark(page, panel: str, text: str):
    return page.locator(f"#timeline-panel-{panel} .annotation-text", has_text=text)


def test_a_note_picked_on_a_chart_is_drawn_on_every_panel_and_kept(page, stepwise_app, case) -> None:
    page.goto(f"/investigations/{case['inv']}/timeline/?panels=step_time,gpu_temp")
    drawn(page, "step_time")
    box = page.locator("#timeline-panel-step_time .nsewdrag").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.4, box["y"] + box["height"] / 2)
    page.mouse.click(box["x"] + box["width"] * 0.4, box["y"] + box["height"] / 2)
    where = page.locator(".timeline-note-where")
    expect(where).to_have_value(re.compile(r"^step \d+$"))
    step = int(where.input_value().split()[1])
    page.get_by_label("Note").fill("NCCL watchdog restarted <i>by hand</i>")
    page.get_by_role("button", name="Add note").click()
    expect(page.locator("#timeline-notes .timeline-note")).to_contain_text(
        "NCCL watchdog restarted <i>by hand</i>"
    )
    expect(page.locator("#timeline-notes .timeline-note")).to_contain_text(f"step {step:,}")
    # The panels redraw with the note's mark, on every panel, its text shown as typed (never markup).
    for panel in ("step_time", "gpu_temp"):
        expect(_mark(page, panel, "✎ NCCL watchdog restarted <i>by")).to_be_visible()
    assert stepwise_app.rows("SELECT step, text FROM investigations_timelinenote") == [
        (step, "NCCL watchdog restarted <i>by hand</i>")
    ]
    # The next visit, on the UTC time axis: the note is where the job was at that step.
    page.goto(f"/investigations/{case['inv']}/timeline/?panels=gpu_temp&x=time-utc")
    drawn(page, "gpu_temp")
    expect(_mark(page, "gpu_temp", "✎ NCCL watchdog restarted")).to_be_visible()
    expect(page.locator("#timeline-notes")).to_have_attribute("open", "")  # a timeline with notes lists them
    page.locator("#timeline-notes .timeline-note").get_by_role("button", name="Delete").click()
    expect(page.locator("#timeline-notes")).to_contain_text("No notes yet")
    expect(_mark(page, "gpu_temp", "✎ NCCL watchdog restarted")).to_have_count(0)


def test_the_notes_and_promql_forms_fit_a_phone(browser, stepwise_app, case, _signed_in_state) -> None:
    with phone_page(browser, stepwise_app, _signed_in_state) as page:
        page.goto(f"/investigations/{case['inv']}/timeline/?panels=step_time")
        drawn(page, "step_time")
        page.locator("#timeline-notes summary").click()
        expect(page.get_by_role("button", name="Add note")).to_be_visible()
        expect(page.get_by_label("PromQL expression")).to_be_visible()
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
