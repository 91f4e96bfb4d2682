"""The demo's written report: one investigation opens with a postmortem under way, so a newcomer sees what
a finished one looks like. The machine fills it (its untouched sections follow the diagnosis when the worker
finishes it); people have edited a section, added a finding, a comment with a mention and an action item."""

from __future__ import annotations

import datetime as dt

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from investigations.models import Investigation

from .models import Membership, Report, Role, Team
from .services import conversation, findings, sections

#: The scenario whose investigation opens with a written report.
SCENARIO = "thermal-straggler"
#: The team every demo investigation belongs to.
TEAM = "demo"

SOURCE_TRACE = """No code path: the slowdown is physical, not in the training code.

1. One GPU's inlet runs hot (fan or airflow) → it throttles its clock to stay under its limit.
2. Every step waits for the slowest rank in the all-reduce → **the whole job** runs at that GPU's pace.
3. Throughput (TGS) drops across all hosts although only one GPU is unhealthy."""


def demo_team(owner) -> Team:
    """Return the demo's team, `owner` its owner: the investigations say "team demo", and the Teams page
    lists it with its members instead of "You belong to no team yet"."""
    team, _ = Team.objects.get_or_create(name=TEAM)
    Membership.objects.get_or_create(team=team, user=owner, defaults={"role": Role.OWNER})
    return team


def write_demo_report(investigation: Investigation, author) -> Report:
    """Write the demo report of `investigation` once (again only if it has none): human edits, a finding,
    a comment from a colleague mentioning the author, an action item, status "in review"."""
    existing = Report.objects.filter(investigation=investigation).first()
    if existing is not None and existing.sections.filter(edited=True).exists():
        return existing
    colleague, created = get_user_model().objects.get_or_create(username="sre-oncall", defaults={"email": ""})
    if created:
        colleague.set_unusable_password()
        colleague.save()
    with transaction.atomic():
        report = sections.report_for(investigation)
        trace = report.sections.get(key="source_trace")
        sections.section_save(trace.pk, base_version=trace.version, text=SOURCE_TRACE, user=author)
        findings.human_finding_add(
            report,
            title="Same host ran hot last week",
            severity="warning",
            user=colleague,
            body="The facilities log shows a fan replaced on this rack on Monday; the hot GPU is in its slot.",
        )
        conversation.comment_add(
            report,
            user=colleague,
            anchor="section:next_steps",
            body=f"@{author.get_username()} can we drain the hot host before the restart?",
        )
        conversation.action_item_add(
            report,
            text="Drain the hot GPU's host and open a facilities ticket",
            owner=author,
            due=(timezone.now() + dt.timedelta(days=2)).date(),
            user=colleague,
        )
        report = sections.report_set_status(
            report.pk, status=Report.Status.IN_REVIEW, base_version=report.version, user=author
        )
    return report
