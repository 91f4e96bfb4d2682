"""A user compares a restored job with its baseline from the investigation page in a real browser: the baseline
is added with the "add job" form, "Compare jobs" runs on the worker, and the result appears side by side
without a reload: the restore-resource-leak class and the highlighted procs_running row."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

DETAIL_URL = re.compile(r"/investigations/(\d+)/$")


def test_a_restored_job_compared_with_its_baseline_shows_the_leak(
    page: Page, job_factory, stepwise_app
) -> None:
    restored_dir, truth = job_factory("restore-resource-leak")
    baseline_dir = Path(truth["compare_with"])

    page.goto("/investigations/new/")
    page.get_by_label("Title").fill("Slower after the restore")
    page.locator(".source-tab", has_text="Job directory").click()
    page.get_by_role("textbox", name="Job directory").fill(str(restored_dir))
    with page.expect_navigation():
        page.get_by_role("button", name="Open investigation").click()
    expect(page).to_have_url(DETAIL_URL)
    inv = int(DETAIL_URL.search(page.url).group(1))

    # One job: nothing to compare yet.
    expect(page.locator("#comparison")).to_be_hidden()

    # Add the baseline with the page's "add job" form.
    jobs = page.locator("#jobs")
    jobs.locator("details.add-job summary").click()
    jobs.locator("input[name=job_dir]").fill(str(baseline_dir))
    jobs.locator("select[name=role]").select_option("baseline")
    with page.expect_navigation():
        jobs.get_by_role("button", name="Add job").click()
    expect(page.locator("#jobs tbody tr")).to_have_count(2)
    # Both triages finish (the jobs table polls them) before comparing: the comparison reads the restore from them.
    expect(page.locator("#jobs tbody .badge-class")).to_have_count(2)

    region = page.locator("#comparison")
    region.get_by_role("button", name="Compare jobs").click()
    expect(region.locator(".diagnosis-class")).to_have_text("restore-resource-leak")
    expect(region.locator("#comparison-status .badge").first).to_have_text("Done")
    expect(region.locator(".comparison-job")).to_have_count(2)
    expect(region.locator(".comparison-baseline")).to_have_count(1)
    leak = region.locator('tr.comparison-metric[data-metric="procs_running"]')
    expect(leak).to_have_class(re.compile(r"comparison-delta"))
    expect(region.locator("tr.finding-warning").first).to_be_visible()
    region.screenshot(path=str(stepwise_app.log_dir / "comparison.png"))

    assert stepwise_app.rows(
        "select incident_class from investigations_investigation where id = ?", (inv,)
    ) == [("restore-resource-leak",)]
