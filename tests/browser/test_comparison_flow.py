"""A user compares a restored job with its baseline from the investigation page in a real browser: the baseline
is added with the "add job" form, "Compare jobs" runs on the worker, and the result appears side by side
without a reload: the restore-resource-leak class and the highlighted procs_running row, and the same class in
the page header. A comparison whose queries wait at a slow link is cancelled from the page; the worker stops."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.investigations.test_tasks_comparison import SETUP, held_pair, wait_for_log

DETAIL_URL = re.compile(r"/investigations/(\d+)/$")
#: Set on the page's window before an action: still there afterwards, so the page was not reloaded.
NO_RELOAD = "window.stepwiseNoReload"


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

    # The header's verdict: the job was diagnosed on open, so it may already say what the diagnosis alone
    # found; it does not come from a comparison yet.
    header_class = page.locator("#investigation-header #incident-class")
    verdict = page.locator("#investigation-header #verdict")
    expect(verdict).not_to_contain_text("the comparison")
    page.evaluate(f"{NO_RELOAD} = true")

    region = page.locator("#comparison")
    region.get_by_role("button", name="Compare jobs").click()
    expect(region.locator(".diagnosis-class")).to_have_text("restore-resource-leak")
    # The poll that delivered the result also swapped the header's class and verdict, in place: the verdict
    # now takes the comparison into account and says so.
    expect(header_class.locator(".badge-class")).to_have_text("restore-resource-leak")
    expect(verdict.get_by_test_id("verdict-class")).to_have_text("restore-resource-leak")
    expect(verdict.get_by_test_id("verdict-origin")).to_contain_text("comparison")
    expect(verdict.get_by_test_id("verdict-confidence")).to_contain_text("90 %")
    assert page.evaluate(NO_RELOAD) is True
    page.locator("#investigation-header").screenshot(path=str(stepwise_app.log_dir / "comparison-header.png"))
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

    # From the comparison to the curves: the baseline drawn over the restored job by step.
    region.get_by_test_id("comparison-timeline").click()
    expect(page).to_have_url(re.compile(r"/timeline/\?.*compare=\d+"))
    for panel in ("step_time", "procs_running"):
        page.locator(f"#timeline-panel-{panel}").scroll_into_view_if_needed()
        expect(page.locator(f"#timeline-panel-{panel} .timeline-plot")).to_have_attribute(
            "data-state", "drawn"
        )
        expect(page.locator(f"#timeline-panel-{panel} .legendtext", has_text="(baseline)")).to_have_count(1)
    expect(page.get_by_role("radio", name="step")).to_be_checked()


def test_a_running_comparison_is_cancelled_in_place_and_the_worker_stops(
    page: Page, served_job, stepwise_app
) -> None:
    links, jobs = held_pair(served_job)
    try:
        inv = int(stepwise_app.shell(SETUP.format(jobs=jobs) + "print(inv.pk)").split()[-1])
        page.goto(f"/investigations/{inv}/")
        region = page.locator("#comparison")
        region.get_by_role("button", name="Compare jobs").click()
        badge = region.locator("#comparison-status .badge").first
        # Its queries wait at the held links, so the run stays running until the user cancels it.
        expect(badge).to_have_text("Running")
        region.screenshot(path=str(stepwise_app.log_dir / "comparison-running.png"))
        page.evaluate(f"{NO_RELOAD} = true")
        region.get_by_role("button", name="Cancel").click()
        expect(badge).to_have_text("Cancelled")
        expect(region.get_by_text(f"Cancelled by {stepwise_app.username}.")).to_be_visible()
        expect(region.get_by_role("button", name="Cancel")).to_have_count(0)
        expect(region.get_by_role("button", name="Compare jobs again")).to_be_enabled()
        assert page.evaluate(NO_RELOAD) is True
        ((run_id, status, finished),) = stepwise_app.rows(
            "select id, status, finished from investigations_diagnosisrun where investigation_id = ?", (inv,)
        )
        assert status == "cancelled"
        for link in links:
            link.release()
        worker = stepwise_app.procs[0]  # started before the web server
        wait_for_log(
            stepwise_app.log_dir / "worker.log", f"comparison {run_id} was cancelled: stopped", worker
        )
    finally:
        for link in links:
            link.close()
    assert stepwise_app.rows(
        "select status, finished, result from investigations_diagnosisrun where id = ?", (run_id,)
    ) == [("cancelled", finished, "{}")]
    # Reloaded, the page shows the same: the worker did not overwrite the cancel.
    page.reload()
    expect(page.locator("#comparison-status .badge").first).to_have_text("Cancelled")
    expect(page.locator("#investigation-header #incident-class .badge")).to_have_count(0)
