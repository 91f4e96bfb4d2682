"""The demo opens with one report written: auto-filled, human edits, a finding, a comment, an action item."""

from __future__ import annotations

import pytest

from reports import demo
from reports.models import InboxItem, Membership, Report

pytestmark = pytest.mark.django_db


def test_the_demo_report_is_written_once_with_peoples_work_in_it(case, alice) -> None:
    report = demo.write_demo_report(case, alice)
    assert report.status == Report.Status.IN_REVIEW
    trace = report.sections.get(key="source_trace")
    assert trace.edited and trace.updated_by == alice and "the whole job" in trace.body
    assert report.sections.get(key="summary").body.startswith(
        "**thermal-straggler**"
    )  # filled by the machine
    assert report.human_findings.count() == 1 and report.action_items.get().owner == alice
    comment = report.comments.get()
    assert comment.author.username == "sre-oncall" and "@alice" in comment.body
    assert set(InboxItem.objects.filter(user=alice).values_list("kind", flat=True)) == {
        "mention",
        "assignment",
    }
    again = demo.write_demo_report(case, alice)
    assert again.pk == report.pk and again.comments.count() == 1


def test_rundemo_writes_the_report_of_its_thermal_investigation(thermal, django_user_model) -> None:
    from investigations.management.commands.rundemo import Command

    django_user_model.objects.create_user("demo", password="pw-demo-12345")
    Command()._demo_investigations([thermal["job_dir"]])
    report = Report.objects.get(investigation__title__startswith="Thermal straggler")
    assert report.status == Report.Status.IN_REVIEW and report.comments.count() == 1
    assert report.action_items.get().owner.username == "demo"
    # The team the investigations name exists, the demo user its owner (the Teams page lists it).
    assert report.investigation.team == demo.TEAM
    assert Membership.objects.get(team__name=demo.TEAM).user.username == "demo"
    Command()._demo_investigations([thermal["job_dir"]])  # a second start changes nothing
    assert Membership.objects.filter(team__name=demo.TEAM).count() == 1
