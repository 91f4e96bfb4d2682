"""Helpers for the investigation page in a browser: its folded regions (triage and discovery)."""

from __future__ import annotations

from playwright.sync_api import Page, expect


def unfold(page: Page, region: str) -> None:
    """Open a folded region (`#triage`, `#discovery-status`) by clicking its one-line summary, as a user does.

    Call it once the region has finished (its poll stopped): a poll replaces the region, folded again.
    """
    fold = page.locator(f"{region} > details.region-fold")
    if fold.get_attribute("open") is None:
        fold.locator("> summary").click()
    expect(fold).to_have_attribute("open", "")
