"""A user runs a diagnosis from the investigation page in a real browser: progress updates in place, the
diagnosis and its findings appear without a reload, a finding expands into its evidence, and a re-run does
not duplicate findings."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

DETAIL_URL = re.compile(r"/investigations/(\d+)/$")


def _open(page: Page, title: str, job_dir) -> int:
    page.goto("/investigations/new/")
    page.get_by_label("Title").fill(title)
    page.locator(".source-tab", has_text="Job directory").click()
    page.get_by_role("textbox", name="Job directory").fill(str(job_dir))
    with page.expect_navigation():
        page.get_by_role("button", name="Open investigation").click()
    expect(page).to_have_url(DETAIL_URL)
    return int(DETAIL_URL.search(page.url).group(1))


def _run_and_wait(page: Page, scope: str = "triage") -> None:
    region = page.locator("#diagnosis")
    button = region.get_by_role("button", name=re.compile(r"(Re-run|Run) diagnosis"))
    # An investigation is diagnosed on open: wait for that run before starting another one.
    expect(button).to_be_enabled()
    status = page.locator("#diagnosis-status")
    # A re-run starts with the previous run's region, "Done" included: wait for the new run's number, or
    # the poll that finishes it would replace the region under the next step.
    earlier = re.search(r"run #(\d+)", status.inner_text()) if status.count() else None
    region.locator(f"input[name=scope][value={scope}]").check()
    button.click()
    if earlier:
        expect(status).to_contain_text(re.compile(rf"run #(?!{earlier.group(1)}\b)\d+"))
    # The progress bar appears while the worker runs the playbooks, then the decided region replaces it.
    expect(page.locator(".diagnosis-summary")).to_be_visible()
    expect(page.locator("#diagnosis-status .badge").first).to_have_text("Done")


def test_a_diagnosis_runs_in_place_and_names_the_culprit(page: Page, job_factory, stepwise_app) -> None:
    job_dir, truth = job_factory("thermal-straggler", seed=7)
    inv = _open(page, "Slow steps on the 7B run", job_dir)
    expect(page.get_by_test_id("triage-status")).to_have_text(truth["status"])
    _run_and_wait(page)
    region = page.locator("#diagnosis")
    expect(region.locator(".diagnosis-class")).to_have_text("thermal-straggler")
    culprit = truth["culprits"][0]
    expect(region.locator(".diagnosis-facts")).to_contain_text(culprit["host"])
    rows = region.locator("tr.finding-row")
    expect(rows.first).to_be_visible()
    warn = region.locator("tr.finding-row.finding-warning, tr.finding-row.finding-critical").filter(
        has_text=culprit["host"]
    )
    expect(warn.first).to_be_visible()

    # A finding expands into its evidence: the PromQL it ran and what the value means.
    warn.first.locator("a.finding-title").click()
    evidence = page.locator(".finding-evidence-row td").filter(has=page.locator("table"))
    expect(evidence.first).to_contain_text(culprit["host"])
    expect(evidence.first.locator("code, .mono").first).to_be_visible()

    # The list filter by class now finds it: the diagnosis set the investigation's class.
    count = stepwise_app.rows(
        "select count(*) from investigations_finding where investigation_id = ?", (inv,)
    )[0][0]
    assert count == rows.count()
    page.screenshot(path=str(stepwise_app.log_dir / "diagnosis.png"), full_page=True)

    # Re-running replaces findings instead of adding them.
    page.reload()
    _run_and_wait(page)
    again = stepwise_app.rows(
        "select count(*) from investigations_finding where investigation_id = ?", (inv,)
    )[0][0]
    assert again == count
    assert stepwise_app.rows(
        "select incident_class from investigations_investigation where id = ?", (inv,)
    ) == [("thermal-straggler",)]

    # The finding's evidence opens on the timeline: its panels, its host highlighted, around its onset.
    hot = page.locator("#diagnosis tr.finding-row").filter(has_text="hot").filter(has_text=culprit["host"])
    hot.first.locator("a.finding-title").click()
    link = page.get_by_test_id("finding-timeline-link").first
    expect(link).to_be_visible()
    link.click()
    expect(page).to_have_url(re.compile(r"/timeline/\?.*panels=step_time%2Cgpu_temp"))
    expect(page.locator("#timeline-panel-gpu_temp .timeline-plot")).to_have_attribute("data-state", "drawn")
    expect(page.locator("#timeline-panel-gpu_power")).to_be_hidden()
    expect(page.locator(".timeline-selection")).to_contain_text(culprit["host"])
    expect(page.locator(".timeline-range")).not_to_have_text("whole job")


def test_a_healthy_job_comes_out_healthy_without_warnings(page: Page, job_factory) -> None:
    job_dir, _ = job_factory("healthy", seed=7)
    _open(page, "Is the healthy run healthy", job_dir)
    _run_and_wait(page, scope="all")
    region = page.locator("#diagnosis")
    expect(region.locator(".diagnosis-class")).to_have_text("healthy")
    expect(region.locator("tr.finding-warning, tr.finding-critical")).to_have_count(0)
