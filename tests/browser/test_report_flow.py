"""The report in the browser: two people in two browser contexts editing, commenting, judging, exporting."""

from __future__ import annotations

import io
import re

import pytest
from playwright.sync_api import expect
from pypdf import PdfReader

from .report_helpers import make_case, sign_in, thermal_result  # noqa: F401 (fixture)

pytestmark = pytest.mark.browser


@pytest.fixture
def duo(browser, stepwise_app, thermal_result, request):  # noqa: F811
    """Alice and Bob, each signed in in a browser context of their own, and an investigation."""
    tag = re.sub(r"\W", "", request.node.name)[-40:]
    users = {"alice": "alice@example.org", "bob": "bob@example.org"}
    inv = make_case(stepwise_app, thermal_result, tag=tag, users=users)
    alice, bob = sign_in(browser, stepwise_app, "alice"), sign_in(browser, stepwise_app, "bob")
    yield inv, alice, bob
    alice.context.close()
    bob.context.close()


def _edit(page, key: str, text: str) -> None:
    section = page.locator(f"#section-{key}")
    section.get_by_test_id("edit").click()
    section.get_by_test_id("editor").fill(text)


def _save(page, key: str) -> None:
    page.locator(f"#section-{key}").get_by_role("button", name=re.compile("^Save")).click()


def test_concurrent_edits_of_a_section_merge_then_a_conflict_is_resolved(duo) -> None:
    inv, alice, bob = duo
    url = f"/investigations/{inv}/report/"
    alice.goto(url)
    bob.goto(url)
    base = "one\ntwo\nthree\nfour\nfive"
    _edit(alice, "source_trace", base)
    _save(alice, "source_trace")
    # Bob sees Alice's text arrive without reloading.
    expect(bob.locator("#section-source_trace").get_by_test_id("body")).to_contain_text(
        "five", timeout=15_000
    )
    # Both open the editor on that version; Alice changes the first line, Bob the last: merged.
    _edit(alice, "source_trace", base.replace("one", "ONE by alice"))
    _edit(bob, "source_trace", base.replace("five", "FIVE by bob"))
    expect(bob.get_by_test_id("presence").filter(has_text="alice is editing")).to_be_visible(timeout=15_000)
    _save(alice, "source_trace")
    expect(alice.locator("#section-source_trace").get_by_test_id("body")).to_contain_text("ONE by alice")
    _save(bob, "source_trace")
    body = bob.locator("#section-source_trace")
    expect(body).to_contain_text("Merged with alice")
    expect(body.get_by_test_id("body")).to_contain_text("ONE by alice")
    expect(body.get_by_test_id("body")).to_contain_text("FIVE by bob")
    # Now both change the same line: Bob's save is not written; both texts are shown side by side.
    expect(alice.locator("#section-source_trace").get_by_test_id("body")).to_contain_text(
        "FIVE by bob", timeout=15_000
    )
    merged = "ONE by alice\ntwo\nthree\nfour\nFIVE by bob"
    _edit(alice, "source_trace", merged.replace("two", "two (alice)"))
    _edit(bob, "source_trace", merged.replace("two", "two (bob)"))
    _save(alice, "source_trace")
    expect(alice.locator("#section-source_trace").get_by_test_id("body")).to_contain_text("two (alice)")
    _save(bob, "source_trace")
    expect(bob.get_by_test_id("conflict")).to_be_visible()
    expect(bob.get_by_test_id("mine")).to_contain_text("two (bob)")
    expect(bob.get_by_test_id("theirs")).to_contain_text("two (alice)")
    bob.get_by_test_id("resolution").fill(merged.replace("two", "two (alice and bob)"))
    bob.get_by_role("button", name="Save resolution").click()
    expect(bob.locator("#section-source_trace").get_by_test_id("body")).to_contain_text("two (alice and bob)")
    expect(alice.locator("#section-source_trace").get_by_test_id("body")).to_contain_text(
        "two (alice and bob)", timeout=15_000
    )


def _select(page, name: str, value: str) -> None:
    """Choose a value in the investigation header and wait for the server's answer."""
    with page.expect_response(lambda r: "/update/" in r.url):
        page.locator(f"#investigation-header select[name={name}]").select_option(value)


def test_status_and_severity_changed_by_two_people_are_both_kept(duo) -> None:
    inv, alice, bob = duo
    alice.goto(f"/investigations/{inv}/")
    bob.goto(f"/investigations/{inv}/")
    _select(alice, "status", "monitoring")
    expect(alice.locator("#investigation-header select[name=status]")).to_have_value("monitoring")
    # Bob has not reloaded: his page still shows Open when he sets SEV1.
    _select(bob, "severity", "sev1")
    expect(bob.locator("#investigation-header select[name=status]")).to_have_value("monitoring")
    alice.reload()
    expect(alice.locator("#investigation-header select[name=status]")).to_have_value("monitoring")
    expect(alice.locator("#investigation-header select[name=severity]")).to_have_value("sev1")
    # Bob, on a page now stale, changes the status Alice just changed: refused, saying what changed.
    _select(alice, "status", "resolved")
    expect(alice.locator("#investigation-header select[name=status]")).to_have_value("resolved")
    _select(bob, "status", "open")
    expect(bob.locator("#investigation-header")).to_contain_text("Not saved")
    expect(bob.locator("#investigation-header select[name=status]")).to_have_value("resolved")


def test_a_comment_appears_live_and_a_mention_reaches_the_inbox(duo) -> None:
    inv, alice, bob = duo
    alice.goto(f"/investigations/{inv}/report/")
    bob.goto(f"/investigations/{inv}/report/")
    alice.get_by_test_id("comment-box").fill("@bob is GPU 3 of tx-hpc the hot one?")
    alice.get_by_role("button", name="Comment", exact=True).click()
    expect(bob.get_by_test_id("comment").filter(has_text="is GPU 3 of tx-hpc the hot one?")).to_be_visible(
        timeout=15_000
    )
    bob.goto("/inbox/")
    expect(bob.get_by_test_id("inbox-item").first).to_contain_text("alice mentioned you")
    bob.get_by_test_id("inbox-item").first.get_by_role("link").click()
    expect(bob.locator(":target")).to_contain_text("is GPU 3 of tx-hpc the hot one?")


def test_a_finding_rejected_with_a_reason_shows_for_everyone(duo) -> None:
    inv, alice, bob = duo
    alice.goto(f"/investigations/{inv}/report/")
    bob.goto(f"/investigations/{inv}/report/")
    finding = alice.get_by_test_id("finding").first
    finding.get_by_text("Judge or annotate").click()
    finding.get_by_label("Reason (to reject)").fill("A checkpoint spike, not the GPU")
    finding.get_by_role("button", name="Reject").click()
    first = alice.get_by_test_id("finding").first
    expect(first.get_by_test_id("verdict")).to_have_text("Rejected")
    expect(first.get_by_test_id("reason")).to_have_text("A checkpoint spike, not the GPU")
    expect(bob.get_by_test_id("finding").first.get_by_test_id("reason")).to_have_text(
        "A checkpoint spike, not the GPU", timeout=15_000
    )


def test_history_restores_an_older_version(duo) -> None:
    inv, alice, _ = duo
    alice.goto(f"/investigations/{inv}/report/")
    original = alice.locator("#section-summary").get_by_test_id("body").inner_text()
    _edit(alice, "summary", "A wrong summary.")
    _save(alice, "summary")
    expect(alice.locator("#section-summary").get_by_test_id("body")).to_have_text("A wrong summary.")
    alice.locator("#section-summary").get_by_role("link", name="History").click()
    expect(alice.get_by_test_id("history")).to_contain_text("A wrong summary.")
    alice.get_by_test_id("restore-1").click()
    expect(alice.locator("#section-summary")).to_contain_text("Restored")
    expect(alice.locator("#section-summary").get_by_test_id("body")).to_have_text(original)
    expect(alice.locator("#section-summary").get_by_test_id("version")).to_have_text("3")


def test_the_pdf_holds_the_text_and_a_chart_image(duo, stepwise_app, tmp_path) -> None:
    inv, alice, _ = duo
    stepwise_app.shell(f"""
from investigations.models import PinnedChart
PinnedChart.objects.create(investigation_id={inv}, title="GPU temperature, hottest GPUs", figure={{
    "data": [{{"type": "scatter", "mode": "lines", "name": "GPU 3", "x": [1, 2, 3, 4], "y": [70, 82, 91, 96]}}],
    "layout": {{"title": {{"text": "GPU temperature"}}}}}})
""")
    alice.goto(f"/investigations/{inv}/report/")
    alice.get_by_test_id("export-pdf").click()  # the worker builds it; the region polls until it is ready
    expect(alice.get_by_test_id("pdf-building")).to_be_visible()  # the request only queued it
    (export_id,) = stepwise_app.rows(
        "SELECT e.id FROM reports_pdfexport e JOIN reports_report r ON r.id = e.report_id"
        " WHERE r.investigation_id = ?",
        (inv,),
    )[0]
    with alice.expect_download(timeout=120_000) as download:
        alice.get_by_test_id("pdf-download").click()
    path = tmp_path / "report.pdf"
    download.value.save_as(path)
    built = stepwise_app.rows("SELECT status, size FROM reports_pdfexport WHERE id = ?", (export_id,))
    assert built == [("done", path.stat().st_size)]  # the worker's PDF, stored on its export row
    pdf = PdfReader(io.BytesIO(path.read_bytes()))
    text = "".join(p.extract_text() for p in pdf.pages)
    assert "Thermal straggler" in text and "Recommended next steps" in text
    assert "GPU temperature, hottest GPUs" in text
    images = {image.name: image for p in pdf.pages for image in p.images}
    assert len(images) == 1 and len(set(next(iter(images.values())).image.convert("L").getdata())) > 10


def test_a_permalink_lands_on_the_finding_highlighted(duo) -> None:
    inv, alice, bob = duo
    alice.goto(f"/investigations/{inv}/report/")
    link = alice.get_by_test_id("finding").nth(1).locator("a.permalink")
    href = link.get_attribute("href")
    assert "#finding-" in href and "at=" in href  # absolute time in the link
    bob.goto(href)
    target = bob.locator(":target")
    expect(target).to_have_attribute("data-testid", "finding")
    expect(target).to_be_in_viewport()
    assert bob.evaluate("getComputedStyle(document.querySelector(':target')).outlineStyle") == "solid"


def test_a_viewer_reads_and_comments_but_cannot_edit(browser, stepwise_app, thermal_result) -> None:  # noqa: F811
    users = {"vera": "", "otto": ""}
    inv = make_case(
        stepwise_app,
        thermal_result,
        tag="viewer",
        users=users,
        team="viewers-team",
        memberships={"vera": "viewer", "otto": "owner"},
    )
    vera = sign_in(browser, stepwise_app, "vera")
    try:
        vera.goto(f"/investigations/{inv}/report/")
        expect(vera.get_by_test_id("role")).to_have_text("viewer")
        expect(vera.locator("#section-summary").get_by_test_id("body")).to_contain_text("thermal-straggler")
        expect(vera.get_by_test_id("edit")).to_have_count(0)
        expect(vera.get_by_test_id("report-status")).to_be_disabled()
        expect(vera.get_by_text("Judge or annotate")).to_have_count(0)
        vera.get_by_test_id("comment-box").fill("A viewer may still ask: which rack?")
        vera.get_by_role("button", name="Comment", exact=True).click()
        expect(vera.get_by_test_id("comment").filter(has_text="which rack?")).to_be_visible()
    finally:
        vera.context.close()


def test_a_user_of_another_team_gets_404_everywhere(browser, stepwise_app, thermal_result) -> None:  # noqa: F811
    inv = make_case(
        stepwise_app,
        thermal_result,
        tag="restricted",
        users={"rita": "", "sam": ""},
        team="red-team",
        restricted=True,
        memberships={"rita": "editor"},
    )
    stepwise_app.shell(
        "from reports.models import Team, Membership\nfrom django.contrib.auth import get_user_model\n"
        "t, _ = Team.objects.get_or_create(name='blue-team')\n"
        "Membership.objects.get_or_create(team=t, user=get_user_model().objects.get(username='sam'))\n"
    )
    sam, rita = sign_in(browser, stepwise_app, "sam"), sign_in(browser, stepwise_app, "rita")
    try:
        for path in (
            f"/investigations/{inv}/",
            f"/investigations/{inv}/report/",
            f"/investigations/{inv}/timeline/",
            f"/investigations/{inv}/report/export.json",
            f"/investigations/{inv}/diagnosis/",
        ):
            response = sam.request.get(path)
            assert response.status == 404, path
            assert "Thermal straggler restricted" not in response.text()
        sam.goto("/?q=Thermal+straggler+restricted")
        expect(sam.get_by_text("Thermal straggler restricted")).to_have_count(0)
        rita.goto(f"/investigations/{inv}/report/")  # her team's: she sees it
        expect(rita.get_by_test_id("role")).to_have_text("editor")
    finally:
        sam.context.close()
        rita.context.close()
