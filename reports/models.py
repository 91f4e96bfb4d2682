"""The written half of an investigation: its report (sections, verdicts, human findings, action items),
the conversation around it (comments, mentions, inbox, presence), tickets, teams and roles.

Every change a person makes to a section, a verdict, a human finding, an action item, the report's
status or the investigation's own fields is kept by django-simple-history (`history` managers); the
activity stream (`services.activity`) merges those with comments and the machine's events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from simple_history import register
from simple_history.models import HistoricalRecords

from investigations.models import Finding, HistoryNote, Investigation, PinnedChart

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# The investigation's status, severity, owner and team keep a history too; the historical model lives in
# this app so the investigations app's tables stay as they are.
register(Investigation, app="reports", table_name="reports_historicalinvestigation")

USER = settings.AUTH_USER_MODEL


class Team(models.Model):
    """People who investigate together; an investigation belongs to the team whose name it carries."""

    name = models.CharField(max_length=100, unique=True)
    members: models.ManyToManyField[User, Membership] = models.ManyToManyField(
        USER, through="Membership", related_name="teams"
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    EDITOR = "editor", "Editor"
    VIEWER = "viewer", "Viewer"


class Membership(HistoryNote, models.Model):
    """A user's role in a team: owners manage members and delete, editors edit, viewers read and comment."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(USER, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.EDITOR)
    # Who added, changed or removed a member, and when: the team's investigations' activity streams show it.
    history = HistoricalRecords()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="membership_unique_user")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class Restriction(models.Model):
    """An investigation visible to the members of its team only (absent: every signed-in user sees it)."""

    investigation = models.OneToOneField(Investigation, on_delete=models.CASCADE, related_name="restriction")
    created = models.DateTimeField(auto_now_add=True)


class Report(models.Model):
    """The postmortem of one investigation."""

    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        IN_REVIEW = "in_review", "In review"
        FINAL = "final", "Final"

    investigation = models.OneToOneField(Investigation, on_delete=models.CASCADE, related_name="report")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DRAFT)
    version = models.PositiveIntegerField(default=1)
    export_tz = models.CharField(max_length=64, default="UTC", help_text="IANA zone of the exports' times.")
    # What the machine text was built from (latest diagnosis/comparison run, triage state, pins).
    fingerprint = models.CharField(max_length=200, blank=True)
    share_token = models.CharField(max_length=64, blank=True, db_index=True)
    updated_by = models.ForeignKey(USER, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)
    history = HistoricalRecords(excluded_fields=["fingerprint", "share_token", "updated"])

    def __str__(self) -> str:
        return f"report of {self.investigation}"


class Section(HistoryNote, models.Model):
    """One section of a report, in Markdown; `version` grows with every saved change."""

    report = models.ForeignKey(Report, on_delete=models.CASCADE, related_name="sections")
    key = models.CharField(max_length=32)
    title = models.CharField(max_length=100)
    position = models.PositiveSmallIntegerField(default=0)
    body = models.TextField(blank=True)
    # The machine's text the body was last filled from, and a newer one offered while the body is edited.
    machine_body = models.TextField(blank=True)
    machine_pending = models.TextField(blank=True)
    edited = models.BooleanField(
        default=False, help_text="A person changed the body since the machine filled it."
    )
    version = models.PositiveIntegerField(default=1)
    updated_by = models.ForeignKey(USER, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    updated = models.DateTimeField(auto_now=True)
    history = HistoricalRecords(excluded_fields=["machine_body", "machine_pending", "updated"])

    class Meta:
        ordering = ["report", "position"]
        constraints = [models.UniqueConstraint(fields=["report", "key"], name="section_unique_key")]

    def __str__(self) -> str:
        return f"{self.title} (v{self.version})"


class Verdict(HistoryNote, models.Model):
    """A person's judgement of a machine finding, keyed by the finding's stable key so re-runs keep it."""

    class Value(models.TextChoices):
        OPEN = "open", "Not judged"
        CONFIRMED = "confirmed", "Confirmed"
        REJECTED = "rejected", "Rejected"

    report = models.ForeignKey(Report, on_delete=models.CASCADE, related_name="verdicts")
    finding_key = models.CharField(max_length=200)
    finding = models.ForeignKey(Finding, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    finding_title = models.CharField(max_length=300, blank=True)
    value = models.CharField(max_length=16, choices=Value.choices, default=Value.OPEN)
    reason = models.TextField(blank=True)
    note = models.TextField(blank=True)
    updated_by = models.ForeignKey(USER, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    updated = models.DateTimeField(auto_now=True)
    history = HistoricalRecords(excluded_fields=["updated"])

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["report", "finding_key"], name="verdict_unique_finding")
        ]


class HumanFinding(models.Model):
    """A finding a person adds, bound to its evidence: a pinned chart, log lines, or a frozen PromQL result.

    `evidence` is frozen when the finding is made, so it renders after its source is gone:
    chart: {"chart_id", "title", "figure", "view"}; log: {"job", "lines": [{"line", "text"}]};
    query: {"promql", "source", "window": {"start", "end", "step"}, "result": {...}, "live_url"}.
    """

    class Kind(models.TextChoices):
        NOTE = "note", "Note only"
        CHART = "chart", "Pinned chart"
        LOG = "log", "Log lines"
        QUERY = "query", "PromQL query"

    report = models.ForeignKey(Report, on_delete=models.CASCADE, related_name="human_findings")
    title = models.CharField(max_length=300)
    body = models.TextField(blank=True)
    severity = models.CharField(
        max_length=16, choices=Finding.Severity.choices, default=Finding.Severity.WARNING
    )
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.NOTE)
    chart = models.ForeignKey(PinnedChart, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    evidence = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(USER, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    history = HistoricalRecords()

    class Meta:
        ordering = ["created", "pk"]


class ActionItem(HistoryNote, models.Model):
    report = models.ForeignKey(Report, on_delete=models.CASCADE, related_name="action_items")
    text = models.CharField(max_length=500)
    owner = models.ForeignKey(
        USER, on_delete=models.SET_NULL, null=True, blank=True, related_name="action_items"
    )
    due = models.DateField(null=True, blank=True)
    done = models.BooleanField(default=False)
    created_by = models.ForeignKey(USER, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    history = HistoricalRecords()

    class Meta:
        ordering = ["done", "due", "pk"]


class Comment(models.Model):
    """A comment on the report, a section (`section:<key>`) or a finding (`finding:<key>`, `human:<id>`)."""

    thread: list[Comment]  # set by services.conversation: the replies, oldest first

    report = models.ForeignKey(Report, on_delete=models.CASCADE, related_name="comments")
    anchor = models.CharField(max_length=220, default="report")
    parent = models.ForeignKey(
        "self", on_delete=models.CASCADE, null=True, blank=True, related_name="replies"
    )
    author = models.ForeignKey(USER, on_delete=models.SET_NULL, null=True, related_name="+")
    body = models.TextField()
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created", "pk"]


class InboxItem(models.Model):
    """Something for one user: a mention in a comment, an action item assigned."""

    class Kind(models.TextChoices):
        MENTION = "mention", "Mention"
        ASSIGNMENT = "assignment", "Assignment"

    user = models.ForeignKey(USER, on_delete=models.CASCADE, related_name="inbox")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    investigation = models.ForeignKey(Investigation, on_delete=models.CASCADE, related_name="+")
    comment = models.ForeignKey(Comment, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    action_item = models.ForeignKey(
        ActionItem, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    actor = models.ForeignKey(USER, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    text = models.CharField(max_length=500)
    read = models.BooleanField(default=False)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-pk"]


class Presence(models.Model):
    """Who has a report open, and which section they are editing (blank: reading); fresh for a few seconds."""

    report = models.ForeignKey(Report, on_delete=models.CASCADE, related_name="presence")
    user = models.ForeignKey(USER, on_delete=models.CASCADE, related_name="+")
    section = models.CharField(max_length=32, blank=True)
    seen = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["report", "user"], name="presence_unique_user")]


class TicketLink(models.Model):
    """A ticket (Jira, GitHub, any tracker) that tracks this investigation."""

    investigation = models.ForeignKey(Investigation, on_delete=models.CASCADE, related_name="ticket_links")
    url = models.URLField(max_length=500)
    added_by = models.ForeignKey(USER, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created", "pk"]
        constraints = [models.UniqueConstraint(fields=["investigation", "url"], name="ticketlink_unique_url")]


class PdfExport(models.Model):
    """A PDF of one revision of a report, built by the worker (`reports.tasks.report_pdf_task`).

    One row per (report, revision): asking again for an unchanged report reuses the row (and its PDF)."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        BUILDING = "building", "Building"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    report = models.ForeignKey(Report, on_delete=models.CASCADE, related_name="pdf_exports")
    revision = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    error = models.TextField(blank=True)
    base_url = models.CharField(max_length=300, blank=True)
    pdf = models.BinaryField(null=True, blank=True, editable=False)
    size = models.PositiveIntegerField(default=0)
    requested_by = models.ForeignKey(USER, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["report", "revision"], name="pdfexport_unique_revision")
        ]

    @property
    def active(self) -> bool:
        return self.status in (self.Status.QUEUED, self.Status.BUILDING)
