"""What an investigation keeps as evidence: findings, pinned charts and timeline notes."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from simple_history.models import HistoricalRecords

from .common import HistoryNote
from .jobs import Investigation, Job
from .runs import DiagnosisRun


class Finding(models.Model):
    """Something a playbook rule (or a person) found in a job: class, severity, where, since when, and why.

    `evidence` is a list of {query, labels, value, interpretation} rows, as in the contract. Re-running a
    diagnosis replaces a finding with the same (investigation, job, playbook, rule) instead of adding one.
    """

    # Set by the finding detail view, for its template (declared for the type checker):
    onset_utc: str
    onset_relative: str

    class Severity(models.TextChoices):
        INFO = "info", "Info"
        WARNING = "warning", "Warning"
        CRITICAL = "critical", "Critical"

    investigation = models.ForeignKey(Investigation, on_delete=models.CASCADE, related_name="findings")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, null=True, blank=True, related_name="findings")
    run = models.ForeignKey(
        DiagnosisRun, on_delete=models.SET_NULL, null=True, blank=True, related_name="findings"
    )
    playbook = models.CharField(max_length=64)
    rule = models.CharField(max_length=100)
    incident_class = models.CharField(max_length=40)
    severity = models.CharField(max_length=16, choices=Severity.choices, default=Severity.INFO)
    title = models.CharField(max_length=300)
    hosts = models.JSONField(default=list, blank=True)
    gpus = models.JSONField(default=list, blank=True)
    onset = models.FloatField(null=True, blank=True, help_text="Unix seconds, UTC.")
    evidence = models.JSONField(default=list, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["onset", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["investigation", "job", "playbook", "rule"], name="finding_unique_rule"
            )
        ]

    def __str__(self) -> str:
        return f"{self.severity}: {self.title}"


class PinnedChart(models.Model):
    """A timeline chart frozen into an investigation as evidence: it renders without its data source.

    `view` is the timeline view it came from (panels, range, x-axis mode); `figure` is the Plotly figure
    JSON with its data.
    """

    investigation = models.ForeignKey(Investigation, on_delete=models.CASCADE, related_name="pinned_charts")
    job = models.ForeignKey(Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    finding = models.ForeignKey(
        Finding, on_delete=models.SET_NULL, null=True, blank=True, related_name="charts"
    )
    title = models.CharField(max_length=200)
    note = models.TextField(blank=True)
    view = models.JSONField(default=dict, blank=True)
    figure = models.JSONField(default=dict)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-pk"]

    def __str__(self) -> str:
        return self.title


class TimelineNote(HistoryNote, models.Model):
    """A person's note on an investigation's timeline, at a time (and the step the job was at then).

    Drawn as a mark on every panel of the job's timeline for everyone who can view the investigation;
    editors add and delete them. The history keeps who added or deleted which (the activity stream).
    """

    investigation = models.ForeignKey(Investigation, on_delete=models.CASCADE, related_name="timeline_notes")
    job = models.ForeignKey(Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    at = models.FloatField(help_text="unix seconds")
    step = models.FloatField(null=True, blank=True, help_text="the training step then, when the job has one")
    text = models.CharField(max_length=500)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)
    history = HistoricalRecords()

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return self.text[:60]
