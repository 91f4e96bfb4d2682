"""Pages a first-time user reaches from the home page, walked at 1440x900 and on a 390 px phone: a finding's
evidence whose value is a long list of names wraps inside the page instead of widening it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from .conftest import EXPECT_TIMEOUT_MS
from .test_first_screen import LAPTOP, PHONE, _overflowing

_FINDING = """
import json
from investigations.models import Finding, Investigation, InvestigationJob, Job
job = Job.objects.create(job_id="walk-1", cluster="walk", name="walk job")
inv = Investigation.objects.create(title="Walk: a long evidence value")
InvestigationJob.objects.create(investigation=inv, job=job, role="primary")
names = ", ".join(f"some_exporter_signal_{i}" for i in range(24))
f = Finding.objects.create(investigation=inv, job=job, playbook="exporter_health",
    rule="exporter_health.families_missing", incident_class="healthy", severity="info",
    title="Signals not collected",
    evidence=[{"query": "/api/v1/label/__name__/values", "labels": {}, "value": names,
               "interpretation": "the exporters never have these"}])
print(json.dumps({"inv": inv.pk, "finding": f.pk}))
"""


@pytest.fixture(scope="module")
def long_value_finding(stepwise_app) -> dict[str, Any]:
    return json.loads(stepwise_app.shell(_FINDING).strip().splitlines()[-1])


@pytest.fixture
def sized(browser, stepwise_app, _signed_in_state: Path, request) -> Iterator[Page]:
    """Return a signed-in page of the test's viewport (the `viewport` parameter)."""
    context = browser.new_context(
        base_url=stepwise_app.base_url, storage_state=str(_signed_in_state), viewport=request.param
    )
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    yield context.new_page()
    context.close()


def _fits(page: Page) -> None:
    width = page.evaluate("document.scrollingElement.scrollWidth")
    assert width <= page.viewport_size["width"], _overflowing(page)


@pytest.mark.parametrize("sized", [LAPTOP, PHONE], ids=["laptop", "phone"], indirect=True)
def test_a_long_evidence_value_wraps_inside_the_page(sized, long_value_finding) -> None:
    page = sized
    ids = long_value_finding
    page.goto(f"/investigations/{ids['inv']}/diagnosis/findings/{ids['finding']}/")
    table = page.locator(".finding-evidence-table")
    expect(table).to_contain_text("some_exporter_signal_23")
    _fits(page)
    if page.viewport_size == LAPTOP:  # the table itself fits the card: nothing to scroll sideways on a laptop
        box, card = table.bounding_box(), page.locator("section.card").bounding_box()
        assert box["x"] + box["width"] <= card["x"] + card["width"] + 1
        query = page.locator(".finding-query").bounding_box()
        assert query["width"] >= 150  # the query stays readable, not a column of four letters
