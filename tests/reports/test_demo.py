"""The demo opens with one report written: auto-filled, human edits, a finding, a comment, an action item."""

from __future__ import annotations

import pytest

from reports import demo
from reports.models import InboxItem, Report

pytestmark = pytest.mark.django_db


def test_the_demo_report_is_written_once_with_peoples_work_in_it(case, alice) -> None:
    report = demo.write_demo_report(case, alice)
    assert report.status == Report.Status.IN_REVIEW
    trace = report.sections.get(key="source_trace")
    assert trace.edited and trace.updated_by == alice and "the whole job" in trace.body
    assert report.sections.get(key="summary").body.startswith("**thermal-straggler**")  # filled by the machine
    assert report.human_findings.count() == 1 and report.action_items.get().owner == alice
    comment = report.comments.get()
    assert comment.author.username == "sre-oncall" and "@alice" in comment.body
    assert set(InboxItem.objects.filter(user=alice).values_list("kind", flat=True)) == {"mention", "assignment"}
    again = demo.write_demo_report(case, alice)
    assert again.pk == report.pk and again.comments.count() == 1
