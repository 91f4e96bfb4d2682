"""The report page's caches never go stale: rendered Markdown is shared by every process under its text's
hash, and the ticket block's verdict under the report's machine fingerprint; a new version of a section,
a comment or a diagnosis shows at once, to every reader."""

from __future__ import annotations

import copy

import pytest
from django.core.cache import cache
from django.urls import reverse

from investigations.models import Investigation
from reports import markdown
from reports.models import Membership, Section, Team
from reports.services import sections

from .conftest import HTMX, store_diagnosis

pytestmark = pytest.mark.django_db


def url(name, case, *args):
    return reverse(f"reports:{name}", args=[case.pk, *args])


@pytest.fixture
def fresh_process(monkeypatch) -> None:
    """This process's rendered Markdown starts empty, as in a web process that just started."""
    monkeypatch.setattr(markdown, "_LOCAL", {})
    monkeypatch.setattr(markdown, "_LOCAL_SIZE", [0])


def _shared(text: str) -> str | None:
    return cache.get(f"markdown:{markdown._key(text)}")


def test_a_page_stores_its_rendered_markdown_in_the_shared_cache_for_the_other_processes(
    case, alice_client, bob_client, fresh_process, monkeypatch
) -> None:
    alice_client.post(url("comment", case), {"body": "**Ours**"}, **HTMX)
    alice_client.get(url("page", case))
    assert _shared("**Ours**") == "<p><strong>Ours</strong></p>\n"
    # Another process (its memory empty) takes the HTML from the shared cache instead of rendering it.
    monkeypatch.setattr(markdown, "_LOCAL", {})
    cache.set(f"markdown:{markdown._key('**Ours**')}", "<p>from the shared cache</p>")
    assert "<p>from the shared cache</p>" in bob_client.get(url("page", case)).content.decode()


def test_a_new_section_version_and_a_new_comment_show_at_once_to_the_other_reader(
    case, alice_client, bob_client, fresh_process
) -> None:
    report = sections.report_for(case)
    s = report.sections.get(key="summary")
    alice_client.post(
        url("section_save", case, "summary"), {"base_version": s.version, "body": "*First*"}, **HTMX
    )
    assert "<em>First</em>" in bob_client.get(url("page", case)).content.decode()  # cached now
    alice_client.post(
        url("section_save", case, "summary"), {"base_version": s.version + 1, "body": "*Second*"}, **HTMX
    )
    alice_client.post(url("comment", case), {"body": "See **GPU 3**"}, **HTMX)
    page = bob_client.get(url("page", case)).content.decode()
    assert "<em>Second</em>" in page and "<em>First</em>" not in page
    assert "See <strong>GPU 3</strong>" in page
    # The open page's poll brings the new version and the comment too, rendered.
    live = bob_client.get(
        url("live", case), {"v_summary": s.version + 1, "t_comments": "old"}
    ).content.decode()
    assert "<em>Second</em>" in live and "See <strong>GPU 3</strong>" in live


def test_the_process_keeps_a_bounded_amount_of_rendered_markdown(fresh_process, monkeypatch) -> None:
    monkeypatch.setattr(markdown, "LOCAL_CHARS", 100)
    for i in range(20):
        markdown.render(f"text number {i}")
    assert 0 < markdown._LOCAL_SIZE[0] <= 100
    assert markdown._key("text number 19") in markdown._LOCAL
    assert markdown._key("text number 0") not in markdown._LOCAL  # the oldest went first


def test_the_ticket_block_follows_a_new_diagnosis_at_once(case, alice_client, thermal) -> None:
    page = alice_client.get(url("page", case)).content.decode()
    assert f"Class: `{thermal['result']['diagnosis']['class']}`" in page
    result = copy.deepcopy(thermal["result"])
    result["diagnosis"]["class"] = "rdma-degradation"
    store_diagnosis(case, case.job_links.get().job, result)
    page = alice_client.get(url("page", case)).content.decode()
    assert "Class: `rdma-degradation`" in page


def test_a_shown_section_cached_for_an_editor_is_never_shown_to_a_viewer(
    case, alice, bob, alice_client, bob_client
) -> None:
    team = Team.objects.create(name="red")
    Membership.objects.create(team=team, user=alice, role="editor")
    Membership.objects.create(team=team, user=bob, role="viewer")
    Investigation.objects.filter(pk=case.pk).update(team="red")
    assert 'data-testid="edit"' in alice_client.get(url("page", case)).content.decode()  # cached now
    page = bob_client.get(url("page", case)).content.decode()
    assert 'data-testid="role">viewer' in page and 'data-testid="edit"' not in page


def test_a_machine_offer_left_by_one_reader_leaves_the_other_readers_page_at_once(
    case, alice_client, bob_client
) -> None:
    report = sections.report_for(case)
    s = report.sections.get(key="summary")
    alice_client.post(
        url("section_save", case, "summary"), {"base_version": s.version, "body": "Ours."}, **HTMX
    )
    # A new diagnosis offers its text (kept aside: the section was edited; no new version).
    Section.objects.filter(pk=s.pk).update(machine_pending="The machine's newer words.")
    assert 'data-testid="offer"' in alice_client.get(url("page", case)).content.decode()  # cached with it
    bob_client.post(
        url("section_machine", case, "summary"), {"action": "leave", "base_version": s.version + 1}, **HTMX
    )
    page = alice_client.get(url("page", case)).content.decode()
    assert 'data-testid="offer"' not in page and "Ours." in page
