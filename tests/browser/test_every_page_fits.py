"""Every page a signed-in user reaches, on a 390 px touch phone and a 1366 px laptop, in a real browser: nothing
is wider than the screen or spills out of its card (a box, or the text inside a box: a long button's
label ran 68 px past the report's side card on a laptop), on a phone no table of the app scrolls sideways (each row reads down the screen,
as the lists of investigations and findings do), and on a touch screen every button, field, menu link and
fold is at least 40 px tall. Folded parts (triage, discovery, matches, config, history) are opened first, so
what they hold is measured too. People's own Markdown tables in a report scroll inside their section
(test_walk_pages.py) and are left out. The share link's page and the page of a form refused for its missing
token fit a phone too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from .conftest import EXPECT_TIMEOUT_MS
from .report_helpers import make_case, thermal_result  # noqa: F401 (a fixture)

PHONE = {"viewport": {"width": 390, "height": 844}, "has_touch": True, "is_mobile": True}
LAPTOP = {"viewport": {"width": 1366, "height": 768}}
#: Smallest height of a thing a finger taps (a finger's width is about 40-45 CSS px).
TAP_PX = 40

_WRITE = """
import json, secrets
from django.contrib.auth import get_user_model
from investigations.models import Finding, Investigation
from reports.demo import write_demo_report
from reports.models import Report, Team, TicketLink
inv = Investigation.objects.get(pk={inv})
user = get_user_model().objects.get(username="browser")
report = write_demo_report(inv, user)
TicketLink.objects.get_or_create(investigation=inv, url="https://tracker.example.org/browse/OPS-1234")
token = secrets.token_urlsafe(32)
Report.objects.filter(pk=report.pk).update(share_token=token)
print(json.dumps({{"finding": Finding.objects.filter(investigation=inv).first().pk,
                  "team": Team.objects.get(name="walk-team").pk, "token": token}}))
"""

_MEASURE = """tap => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + [...el.classList].map(c => '.' + c).join('');
  const scrolling = [...document.querySelectorAll('table.table')]
    .filter(t => t.clientWidth > 0 && t.scrollWidth > t.clientWidth + 1)
    .map(t => `${name(t)} ${t.scrollWidth}/${t.clientWidth}`);
  const taps = 'button, .btn, select, summary, .topnav a, .section-meta a, input:not([type=hidden], [type=checkbox], [type=radio], [type=file])';
  const small = [...document.querySelectorAll(taps)].filter(el => {
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && r.height < tap && !el.closest('.modebar');
  }).map(el => `${name(el)} "${(el.innerText || el.value || '').trim().slice(0, 30)}" ${Math.round(el.getBoundingClientRect().height)} px`);
  const clipped = (el, card) => {
    for (let p = el.parentElement; p && p !== card; p = p.parentElement)
      if (/(auto|scroll|hidden|clip)/.test(getComputedStyle(p).overflowX)) return true;
    return false;
  };
  const spilling = [];
  for (const card of document.querySelectorAll('.card')) {
    const edge = card.getBoundingClientRect().right;
    for (const el of card.querySelectorAll('*')) {
      const r = el.getBoundingClientRect();
      if (r.width > 0 && r.right > edge + 1 && !clipped(el, card)) spilling.push(`${name(el)} ${Math.round(r.right - edge)} px`);
      else if (!el.closest('svg') && el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX === 'visible')
        spilling.push(`${name(el)}: its text ${el.scrollWidth - el.clientWidth} px beyond it`);
    }
  }
  return {width: document.scrollingElement.scrollWidth, scrolling, small, spilling: spilling.slice(0, 8),
          coarse: matchMedia('(pointer: coarse)').matches};
}"""


#: Every page, {inv}, {finding} and {team} filled in by the `case` fixture.
PATHS = [
    "/",
    "/?q=thermal",
    "/investigations/new/",
    "/investigations/browse/",
    "/investigations/{inv}/",
    "/investigations/{inv}/diagnosis/findings/{finding}/",
    "/investigations/{inv}/timeline/",
    "/investigations/{inv}/report/",
    "/investigations/{inv}/report/sections/source_trace/history/",
    "/inbox/",
    "/teams/",
    "/teams/{team}/",
    "/sources/",
    "/password/",
    "/investigations/999999/",  # the app's 404 page
    "/share/{token}/",  # the report for people without an account
]


@pytest.fixture(scope="module")
def case(stepwise_app, thermal_result) -> dict[str, Any]:  # noqa: F811
    """Return the ids of a diagnosed investigation of a team whose report was worked on (edits, a finding,
    a mention of the user, an action item, a ticket, a share link), of one of its findings, of its team, and
    the share link's token."""
    inv = make_case(
        stepwise_app, thermal_result, tag="every-page", team="walk-team", memberships={"browser": "owner"}
    )
    return {"inv": inv, **json.loads(stepwise_app.shell(_WRITE.format(inv=inv)).strip().splitlines()[-1])}


@pytest.fixture(scope="module", params=["phone", "laptop"])
def device(request, browser, stepwise_app, _signed_in_state: Path) -> Iterator[tuple[str, Any]]:
    """Return (name, a signed-in browser context of that device), shared by the module's pages."""
    options = PHONE if request.param == "phone" else LAPTOP
    context = browser.new_context(
        base_url=stepwise_app.base_url, storage_state=str(_signed_in_state), **options
    )
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    yield request.param, context
    context.close()


def _measure(page: Page) -> dict[str, Any]:
    """Return the page's width, its tables that scroll sideways and its things too small for a finger, and
    the screen's width: the device's, not the page's layout width (a page without a viewport tag is laid
    out 980 px wide on a phone, and shown shrunk)."""
    return page.evaluate(_MEASURE, TAP_PX) | {"screen": page.viewport_size["width"]}


@pytest.mark.parametrize("template", PATHS)
def test_every_page_fits_the_screen_and_a_finger(device, case, template) -> None:
    name, context = device
    path = template.format(**case)
    page = context.new_page()
    try:
        page.goto(path)
        page.wait_for_load_state("load")
        page.wait_for_timeout(300)  # regions that load themselves (htmx) swap in right after the load
        seen = _measure(page)
    finally:
        page.close()
    assert seen["width"] <= seen["screen"], f"{path} on a {name}: {seen['width']} px wide"
    assert not seen["spilling"], f"{path} on a {name}: out of their card: {seen['spilling']}"
    if name == "phone":
        assert seen["coarse"], "the phone's context must be a touch screen"
        assert not seen["scrolling"], f"{path}: tables scroll sideways on a phone: {seen['scrolling']}"
        assert not seen["small"], f"{path}: under {TAP_PX} px on a touch screen: {seen['small'][:8]}"


def test_a_form_sent_without_its_token_gets_the_app_s_403_page(device, case) -> None:
    """A form posted without its page's CSRF token (or a stale one) is refused with the app's own page, which
    says nothing was changed and fits a phone (it was Django's bare page, laid out 980 px wide)."""
    name, context = device
    page = context.new_page()
    try:
        page.goto(f"/investigations/{case['inv']}/")
        with page.expect_navigation():
            page.evaluate(
                """inv => { const f = document.createElement('form'); f.method = 'post';
                    f.action = `/investigations/${inv}/update/`; document.body.append(f); f.submit(); }""",
                case["inv"],
            )
        seen = _measure(page)
        error = page.get_by_test_id("error-page")
        assert "Nothing was changed" in error.inner_text()
        assert page.locator(".topbar").count() == 1  # the app's layout
    finally:
        page.close()
    assert seen["width"] <= seen["screen"], f"the 403 page on a {name}: {seen['width']} px wide"
