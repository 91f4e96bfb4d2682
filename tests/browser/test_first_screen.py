"""A first-time user opens an investigation (issue 13): it is diagnosed on open without pressing anything,
the first screen of a 1440x900 laptop holds the verdict (class, culprits, onset, confidence, summary, next
steps, where it came from) with triage and discovery folded to one line each, the page fits a 390 px
phone, deleting asks for the number, and a wrong link gets the app's own 404 page."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from .conftest import EXPECT_TIMEOUT_MS

DETAIL_URL = re.compile(r"/investigations/(\d+)/$")
LAPTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def sized_page(browser: Any, stepwise_app, _signed_in_state: Path) -> Iterator[Any]:
    """Return open(viewport) -> a signed-in page of that size; every context is closed afterwards."""
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    contexts = []

    def open_page(viewport: dict[str, int]) -> Page:
        context = browser.new_context(
            base_url=stepwise_app.base_url, storage_state=str(_signed_in_state), viewport=viewport
        )
        context.set_default_timeout(EXPECT_TIMEOUT_MS)
        contexts.append(context)
        return context.new_page()

    yield open_page
    for context in contexts:
        context.close()


def _open(page: Page, title: str, job_dir: Path, cluster: str) -> int:
    page.goto("/investigations/new/")
    page.get_by_label("Title").fill(title)
    page.locator(".source-tab", has_text="Job directory").click()
    page.get_by_role("textbox", name="Job directory").fill(str(job_dir))
    page.get_by_text("Job id and cluster").click()
    page.get_by_label("Cluster").fill(cluster)
    with page.expect_navigation():
        page.get_by_role("button", name="Open investigation").click()
    expect(page).to_have_url(DETAIL_URL)
    return int(DETAIL_URL.search(page.url).group(1))


def _in_first_screen(page: Page, selector: str, height: int) -> None:
    box = page.locator(selector).bounding_box()
    assert box is not None, f"{selector} is not rendered"
    assert box["y"] >= 0 and box["y"] + box["height"] <= height, (
        f"{selector} ends at {box['y'] + box['height']}"
    )


def _overflowing(page: Page) -> list[str]:
    """Return the outermost elements that reach past the right edge of the screen (for a failure message)."""
    return page.evaluate(
        """() => [...document.querySelectorAll('body *')].filter(e => {
             const r = e.getBoundingClientRect();
             return r.right > innerWidth + 1 && !(e.parentElement.getBoundingClientRect().right > innerWidth + 1);
           }).slice(0, 8).map(e => `${e.tagName}#${e.id}.${e.className} ${Math.round(e.getBoundingClientRect().right)}`)"""
    )


def test_opened_it_is_diagnosed_and_the_first_screen_holds_the_verdict(sized_page, job_factory, stepwise_app):
    job_dir, truth = job_factory("thermal-straggler", seed=13)
    page = sized_page(LAPTOP)
    inv = _open(page, "Slow steps, first screen", job_dir, cluster="first-screen")
    # Nobody pressed "Run diagnosis": the verdict arrives in the header by itself.
    verdict = page.locator("#verdict")
    expect(verdict.get_by_test_id("verdict-class")).to_have_text("thermal-straggler")
    culprit = truth["culprits"][0]["host"]
    expect(verdict.get_by_test_id("verdict-culprits")).to_contain_text(culprit)
    expect(verdict.get_by_test_id("verdict-confidence")).to_contain_text("% confidence")
    expect(verdict.get_by_test_id("verdict-next-steps")).to_contain_text(
        f"Act on the culprits first: {culprit}"
    )
    expect(verdict.get_by_test_id("verdict-origin")).to_contain_text("From the diagnosis (run #")
    assert stepwise_app.rows(
        "select count(*) from investigations_diagnosisrun where investigation_id = ?", (inv,)
    ) == [(1,)]

    # A fresh load shows it at once, on the first screen of a laptop, without scrolling.
    page.goto(f"/investigations/{inv}/")
    assert page.evaluate("window.scrollY") == 0
    for testid in ("verdict-class", "verdict-culprits", "verdict-onset", "verdict-confidence",
                   "verdict-summary", "verdict-next-steps", "verdict-origin"):  # fmt: skip
        _in_first_screen(page, f"[data-testid={testid}]", LAPTOP["height"])
    page.screenshot(path=str(stepwise_app.log_dir / "first-screen-1440.png"))
    # Triage and discovery are one line each, one click away.
    expect(page.get_by_test_id("triage-line")).to_contain_text(truth["status"])
    expect(page.get_by_test_id("discovery-line")).to_contain_text("the job's Prometheus")
    expect(page.get_by_test_id("triage-status")).to_be_hidden()
    page.get_by_test_id("triage-line").click()
    expect(page.get_by_test_id("triage-status")).to_be_visible()

    # The same page on a phone: nothing wider than the screen, the verdict readable.
    phone = sized_page(PHONE)
    phone.goto(f"/investigations/{inv}/")
    expect(phone.locator("#diagnosis .diagnosis-summary")).to_be_visible()
    expect(phone.get_by_test_id("verdict-summary")).to_be_visible()
    width = phone.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"{width} px wide on a {PHONE['width']} px phone: {_overflowing(phone)}"
    box = phone.get_by_test_id("verdict-summary").bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
    phone.screenshot(path=str(stepwise_app.log_dir / "first-screen-390.png"), full_page=True)


def test_the_owner_deletes_after_typing_the_number(sized_page, job_factory, stepwise_app) -> None:
    job_dir, _ = job_factory("healthy", seed=13)
    page = sized_page(LAPTOP)
    inv = _open(page, "Opened by mistake", job_dir, cluster="delete-me")
    danger = page.get_by_test_id("delete-investigation")
    danger.locator("summary").click()
    button = danger.get_by_role("button", name=f"Delete investigation #{inv}")
    button.click()  # the number is required: the browser refuses the empty field
    assert page.url.endswith(f"/investigations/{inv}/")
    danger.get_by_label(f"Type {inv} to confirm").fill(str(inv))
    with page.expect_navigation():
        button.click()
    expect(page.locator(".msg-success")).to_contain_text(f"Deleted investigation #{inv}")
    assert stepwise_app.rows("select count(*) from investigations_investigation where id = ?", (inv,)) == [
        (0,)
    ]


def test_a_wrong_link_gets_the_apps_404_page_and_the_favicon_is_there(sized_page) -> None:
    page = sized_page(LAPTOP)
    response = page.goto("/investigations/999999/")
    assert response.status == 404
    expect(page.get_by_test_id("error-page")).to_contain_text("Not found")
    # In words a user reads (was Django's "No Investigation matches the given query.")
    expect(page.get_by_test_id("error-page")).to_contain_text("No investigation #999999 that you can see")
    expect(page.locator(".topbar")).to_be_visible()
    icon = page.goto("/favicon.ico")
    assert icon.status == 200 and "svg" in icon.headers["content-type"]
