"""Small multiples of a comparison (issue 13), in a real browser: one column per job, the same panels, each
job on its own step axis, every row with one step range and one y-range; a phone stacks the columns."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import expect

from .conftest import EXPECT_TIMEOUT_MS
from .timeline_helpers import open_pair

PANELS = ("step_time", "procs_running")
PHONE = {"width": 390, "height": 844}

_CELLS = """p => [...document.querySelectorAll(`[data-testid=sm-row-${p}] .sm-cell`)].map(c => {
  const el = c.querySelector('.sm-plot'), r = c.getBoundingClientRect();
  const xs = (el.data || []).filter(t => (t.meta || {}).role !== 'clock').flatMap(t => t.x.filter(Number.isFinite));
  return {job: c.dataset.job, x: el._fullLayout.xaxis.range, y: el._fullLayout.yaxis.range,
          first: Math.min(...xs), left: r.left, top: r.top};
})"""


def _pair(stepwise_app, job_factory) -> tuple[dict, dict]:
    # As test_timeline_compare: a run restored past step 0 and its fresh-start baseline.
    restored_dir, truth = job_factory("restore-resource-leak", 4, hours=3.0, gpus=2)
    baseline_dir = Path(truth["compare_with"])
    return open_pair(stepwise_app, restored_dir, baseline_dir, "side by side"), truth


def _aligned(page, ids: dict) -> dict[str, list[dict]]:
    page.goto(f"/investigations/{ids['inv']}/comparison/side-by-side/?panels={','.join(PANELS)}")
    cells = {}
    for panel in PANELS:
        row = page.get_by_test_id(f"sm-row-{panel}")
        row.scroll_into_view_if_needed()
        expect(row).to_have_attribute("data-aligned", "1")
        expect(row.locator(".sm-plot[data-state='drawn']")).to_have_count(2)
        cells[panel] = page.evaluate(_CELLS, panel)
    return cells


def test_one_column_per_job_with_one_step_and_y_range_per_row(page, job_factory, stepwise_app) -> None:
    ids, truth = _pair(stepwise_app, job_factory)
    cells = _aligned(page, ids)
    expect(page.get_by_test_id("sm-column")).to_have_count(2)  # the primary and its baseline
    for panel, (restored, baseline) in cells.items():
        assert (restored["job"], baseline["job"]) == (str(ids["job"]), str(ids["baseline"]))
        assert restored["y"] == baseline["y"] and restored["x"] == baseline["x"], panel  # one range per row
        # Each job on its own step axis: the restored run starts at its restore point, the baseline at 0.
        assert restored["first"] >= truth["restored_from"] - 1 and baseline["first"] < truth["restored_from"]
        assert restored["top"] == baseline["top"] and restored["left"] < baseline["left"]  # side by side


def test_a_phone_stacks_the_columns(browser, stepwise_app, job_factory, _signed_in_state) -> None:
    ids, _ = _pair(stepwise_app, job_factory)
    context = browser.new_context(
        base_url=stepwise_app.base_url, storage_state=str(_signed_in_state), viewport=PHONE
    )
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    try:
        page = context.new_page()
        cells = _aligned(page, ids)
        for panel, (first, second) in cells.items():
            assert first["left"] == second["left"] and first["top"] < second["top"], panel
            assert first["y"] == second["y"], panel
        assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    finally:
        context.close()
