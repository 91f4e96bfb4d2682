"""Pages a first-time user reaches from the home page, walked at 1440x900 and on a 390 px phone: a finding's
evidence whose value is a long list of names wraps inside the page instead of widening it; on a phone, a
report whose sections hold wide tables (the timeline of events, metric evidence) fits the screen, the
tables scrolling sideways inside their section."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from playbooks.tsdb_server import ensure_served, reap_leftovers, stop

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


_WIDE_SECTION = """
from investigations.models import Investigation
from reports.models import Section
from reports.services.sections import report_for
inv = Investigation.objects.get(pk={inv})
report = report_for(inv)
rows = "\\n".join(f"| 2026-03-11 02:{{i:02d}}:19 UTC | GPU 3 on tx-hpc-0242 runs hot against its peers, {{i}} | hw_gpu_temperature_celsius:max_by_host_gpu:tx-hpc-0242:gpu3 |"
                 for i in range(5))
body = "| Time (UTC) | Event | Series |\\n|---|---|---|\\n" + rows
Section.objects.filter(report=report, key="timeline").update(body=body)
print(Section.objects.filter(report=report, key="timeline").count())
"""


@pytest.mark.parametrize("sized", [PHONE], ids=["phone"], indirect=True)
def test_a_report_with_wide_tables_fits_a_phone(sized, stepwise_app, long_value_finding) -> None:
    page = sized
    inv = long_value_finding["inv"]
    page.goto(f"/investigations/{inv}/report/")  # the report is made on first view
    assert stepwise_app.shell(_WIDE_SECTION.format(inv=inv)).strip().splitlines()[-1] == "1"
    page.reload()
    table = page.locator("#section-timeline .md table")
    expect(table).to_contain_text("runs hot against its peers, 4")
    _fits(page)
    assert page.evaluate("(t) => t.scrollWidth > t.clientWidth", table.element_handle())  # it scrolls inside


_LONG_QUERY = """
from investigations.models import Investigation
from reports.models import Section
from reports.services.sections import report_for
report = report_for(Investigation.objects.get(pk={inv}))
body = "Query: `sum by (host) (increase(hw_rdma_req_tx_retry_excd_err_total[60s]))`"
print(Section.objects.filter(report=report, key="metric_evidence").update(body=body))
"""


@pytest.mark.parametrize("sized", [PHONE], ids=["phone"], indirect=True)
def test_a_long_query_in_a_report_section_wraps_on_a_phone(sized, stepwise_app, long_value_finding) -> None:
    """A PromQL query quoted inline (one unbreakable word of 40 letters) wraps inside its section."""
    page = sized
    inv = long_value_finding["inv"]
    page.goto(f"/investigations/{inv}/report/")
    assert stepwise_app.shell(_LONG_QUERY.format(inv=inv)).strip().splitlines()[-1] == "1"
    page.reload()
    code = page.locator("#section-metric_evidence .md code")
    expect(code).to_contain_text("retry_excd_err_total[60s]")
    _fits(page)
    box, section = code.bounding_box(), page.locator("#section-metric_evidence").bounding_box()
    assert box["x"] + box["width"] <= section["x"] + section["width"]


_REGISTER = """
import json
from investigations import services
from investigations.models import Investigation, InvestigationJob
job, ds = services.job_register({job_dir!r})
inv = Investigation.objects.create(title="Walk: busy machine")
InvestigationJob.objects.create(investigation=inv, job=job, role="primary")
print(json.dumps({{"inv": inv.pk, "job": job.pk}}))
"""


def test_a_timeline_found_busy_loads_by_itself_once_a_copy_is_free(
    page, stepwise_app, job_factory, tmp_path
) -> None:
    """At the cap of served TSDB copies (all in use) the region says busy, then loads without a reload."""
    job_dir, _truth = job_factory("thermal-straggler", seed=913)
    ids = json.loads(stepwise_app.shell(_REGISTER.format(job_dir=str(job_dir))).strip().splitlines()[-1])
    views = stepwise_app.env["STEPWISE_TSDB_VIEWS"]
    cap = int(stepwise_app.env["STEPWISE_TSDB_MAX_COPIES"])
    others = [
        shutil.copytree(job_dir / "prometheus", tmp_path / f"other-{i}" / "prometheus") for i in range(cap)
    ]
    reap_leftovers(views)  # copies earlier tests left: the app's cap is now held by ours alone
    held = [ensure_served(d, work_root=views, max_copies=cap) for d in others]  # all just used
    try:
        page.goto(f"/investigations/{ids['inv']}/timeline/?job={ids['job']}")
        expect(page.get_by_test_id("busy")).to_contain_text("Trying again in 5 s")
    finally:
        for served in held:
            stop(served)
    expect(page.get_by_test_id("busy")).to_have_count(0)
    page.locator("#timeline-panel-step_time").scroll_into_view_if_needed()  # drawn when on the screen
    expect(page.locator("#timeline-panel-step_time .timeline-plot")).to_have_attribute("data-state", "drawn")


@pytest.mark.parametrize("sized", [LAPTOP], ids=["laptop"], indirect=True)
def test_the_investigation_header_fields_line_up(sized, long_value_finding) -> None:
    """Status, severity, owner and team: four boxes of one height on one line, their labels on one line."""
    page = sized
    page.goto(f"/investigations/{long_value_finding['inv']}/")
    boxes = [
        b.bounding_box() for b in page.locator(".inv-meta .field > select, .inv-meta .field > input").all()
    ]
    labels = [s.bounding_box() for s in page.locator(".inv-meta .field > span").all()]
    assert len(boxes) == 4 and len(labels) == 4
    assert max(b["height"] for b in boxes) - min(b["height"] for b in boxes) <= 1, boxes
    assert max(b["y"] for b in labels) - min(b["y"] for b in labels) <= 1, labels


@pytest.mark.parametrize("sized", [PHONE], ids=["phone"], indirect=True)
def test_on_a_phone_findings_and_their_evidence_read_down_the_screen(sized, long_value_finding) -> None:
    """The findings table and a finding's evidence stack on a phone: the title and the interpretation run
    across the screen, nothing scrolls sideways (the severity and class columns took most of the width and
    the title was cut at the screen's edge, the evidence row 400 px tall behind a sideways scroll)."""
    page = sized
    page.goto(f"/investigations/{long_value_finding['inv']}/")
    title = page.locator("#findings-table a.finding-title").first
    title.click()
    interpretation = page.locator(
        ".finding-evidence-table td.stack-wide", has_text="the exporters never have"
    )
    expect(interpretation).to_be_visible()
    width = page.viewport_size["width"]
    for cell in (page.locator("#findings-table td.stack-wide").first, interpretation):
        box = cell.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, box
        assert box["width"] >= width * 0.6, box  # across the screen, not a narrow column
    table = page.locator("#findings-table")
    assert table.evaluate("t => t.scrollWidth <= t.clientWidth"), table.bounding_box()
    _fits(page)


@pytest.mark.parametrize("sized", [PHONE], ids=["phone"], indirect=True)
def test_on_a_phone_the_new_investigation_button_stays_on_the_screen(sized) -> None:
    page = sized
    page.goto("/")
    button = page.get_by_role("link", name="New investigation").first
    box = button.bounding_box()
    container = page.locator(".page-head").bounding_box()
    assert box["x"] + box["width"] <= container["x"] + container["width"] + 0.5, (box, container)


_NEWCOMER = """
from django.contrib.auth import get_user_model
U = get_user_model()
if not U.objects.filter(username="newcomer").exists():
    U.objects.create_user("newcomer", password="newcomer-correct-horse-7")
print("ok")
"""


def test_with_nothing_unread_the_inbox_shows_no_count(anon_page, stepwise_app) -> None:
    """A user with an empty inbox sees "Inbox" alone (an empty count was drawn as a small blank pill)."""
    stepwise_app.shell(_NEWCOMER)
    page = anon_page
    page.goto("/login/")
    page.get_by_label("Username").fill("newcomer")
    page.get_by_label("Password").fill("newcomer-correct-horse-7")
    with page.expect_response(lambda r: "/inbox/count/" in r.url) as count:
        page.get_by_role("button", name="Sign in").click()
    assert count.value.ok
    badge = page.locator(".topnav .badge")
    expect(badge).to_have_text("")
    expect(badge).to_be_hidden()


@pytest.mark.parametrize("sized", [PHONE], ids=["phone"], indirect=True)
def test_on_a_phone_the_new_action_item_field_is_wide_enough_to_type_in(sized, long_value_finding) -> None:
    page = sized
    page.goto(f"/investigations/{long_value_finding['inv']}/report/")
    field = page.locator("#section-actions input[name=text]")
    field.scroll_into_view_if_needed()
    assert field.bounding_box()["width"] >= 200, field.bounding_box()  # was squeezed to a 24 px box
    _fits(page)


@pytest.mark.parametrize("sized", [PHONE], ids=["phone"], indirect=True)
def test_on_a_phone_the_top_bar_keeps_to_three_short_lines(sized) -> None:
    """The brand and the user's box share the first line, the links wrap below (the bar took 155 px of an
    844 px screen on every page, the brand alone beside a column of links)."""
    page = sized
    page.goto("/")
    bar = page.locator(".topbar").bounding_box()
    assert bar["height"] <= 125, bar
    brand, user = page.locator(".brand").bounding_box(), page.locator(".userbox").bounding_box()
    assert abs(brand["y"] - user["y"]) <= 12, (brand, user)  # one line
    for link in page.locator(".topnav a").all():
        box = link.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
