"""Concurrent edits of one section: a save over a newer version merges or shows a conflict, never overwrites."""

from __future__ import annotations

import pytest

from reports.services import sections

pytestmark = pytest.mark.django_db

BASE = "Line one.\nLine two.\nLine three.\nLine four.\nLine five."


@pytest.fixture
def section(case, alice):
    report = sections.report_for(case)
    s = report.sections.get(key="source_trace")
    sections.section_save(s.pk, base_version=s.version, text=BASE, user=alice)
    s.refresh_from_db()
    return s


def test_a_save_on_the_current_version_is_saved_as_sent(section, bob) -> None:
    result = sections.section_save(section.pk, base_version=section.version, text=BASE + "\nSix.", user=bob)
    assert result.outcome == "saved" and result.section.body == BASE + "\nSix."
    assert result.section.version == section.version + 1 and result.section.updated_by == bob


def test_non_overlapping_edits_from_the_same_version_merge(section, alice, bob) -> None:
    v = section.version
    sections.section_save(
        section.pk, base_version=v, text=BASE.replace("Line one.", "Line ONE (alice)."), user=alice
    )
    result = sections.section_save(
        section.pk, base_version=v, text=BASE.replace("Line five.", "Line FIVE (bob)."), user=bob
    )
    assert result.outcome == "merged"
    assert result.section.body == BASE.replace("Line one.", "Line ONE (alice).").replace(
        "Line five.", "Line FIVE (bob)."
    )
    assert result.section.version == v + 2


def test_overlapping_edits_are_not_saved_and_give_both_texts(section, alice, bob) -> None:
    v = section.version
    sections.section_save(
        section.pk, base_version=v, text=BASE.replace("Line three.", "Alice's three."), user=alice
    )
    mine = BASE.replace("Line three.", "Bob's three.")
    result = sections.section_save(section.pk, base_version=v, text=mine, user=bob)
    assert result.outcome == "conflict"
    assert result.mine == mine and "Alice's three." in result.theirs
    assert (
        "<<<<<<< yours" in result.merged
        and "Bob's three." in result.merged
        and "Alice's three." in result.merged
    )
    section.refresh_from_db()
    assert section.version == v + 1 and "Alice's three." in section.body  # nothing of Bob's was written
    resolved = sections.section_save(
        section.pk, base_version=section.version, text=BASE.replace("Line three.", "Both threes."), user=bob
    )
    assert resolved.outcome == "saved" and "Both threes." in resolved.section.body


def test_restore_brings_an_old_body_back_as_a_new_version(section, alice) -> None:
    v = section.version
    sections.section_save(section.pk, base_version=v, text="Gone wrong.", user=alice)
    old = section.history.get(version=v)
    restored = sections.section_restore(section.pk, history_id=old.history_id, base_version=v + 1, user=alice)
    assert restored.body == BASE and restored.version == v + 2
    assert restored.history.first().history_change_reason == f"restored version {v}"
    assert restored.history.count() >= 3  # every change kept, the restore too


def test_a_restore_over_a_newer_version_is_refused(section, alice) -> None:
    old = section.history.get(version=section.version)
    sections.section_save(section.pk, base_version=section.version, text="Newer.", user=alice)
    with pytest.raises(sections.ReportError, match="changed this section meanwhile"):
        sections.section_restore(
            section.pk, history_id=old.history_id, base_version=section.version, user=alice
        )


def test_a_version_from_the_future_is_refused(section, alice) -> None:
    with pytest.raises(sections.ReportError):
        sections.section_save(section.pk, base_version=section.version + 5, text="x", user=alice)
