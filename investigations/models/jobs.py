"""Investigations and the training jobs they look at (a job's triage and data source are questions on it)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

if TYPE_CHECKING:
    from .sources import DataSource


class Investigation(models.Model):
    """An incident being investigated: one or more training jobs, who owns it, how bad it is."""

    # Set outside the model, declared here for the type checker:
    history: Any  # the historical records manager, registered by reports.models (simple_history.register)
    culprits_text: str  # set by the list view, for its template

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        MONITORING = "monitoring", "Monitoring"
        RESOLVED = "resolved", "Resolved"

    class Severity(models.TextChoices):
        SEV1 = "sev1", "SEV1 (critical)"
        SEV2 = "sev2", "SEV2 (major)"
        SEV3 = "sev3", "SEV3 (minor)"
        SEV4 = "sev4", "SEV4 (info)"

    title = models.CharField(max_length=200)
    summary = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    severity = models.CharField(max_length=8, choices=Severity.choices, default=Severity.SEV3)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="owned_investigations",
    )
    team = models.CharField(max_length=100, blank=True)
    # The primary job's incident class, for the list filter: the diagnosis class once a diagnosis ran,
    # else the triage class; empty while unknown.
    incident_class = models.CharField(max_length=40, blank=True, db_index=True)
    jobs: models.ManyToManyField[Job, InvestigationJob] = models.ManyToManyField(
        "Job", through="InvestigationJob", related_name="investigations"
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created"]
        indexes = [
            models.Index(fields=["status", "-created"], name="investigation_status_idx"),
            # The list, newest first (25 a page): read from the index instead of sorting every row.
            models.Index(fields=["-created", "-id"], name="investigation_newest_idx"),
        ]

    def __str__(self) -> str:
        return self.title


class TriageStatus(models.TextChoices):
    """Where a job's log triage stands (the "state" of Job.triage, kept as a column to filter and read)."""

    NOT_RUN = "", "Not triaged"
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    NO_LOG = "none", "No log"


TRIAGE_PENDING = (TriageStatus.QUEUED, TriageStatus.RUNNING)
TRIAGE_FINISHED = (TriageStatus.DONE, TriageStatus.FAILED, TriageStatus.NO_LOG)


def triage_status_of(triage: Any) -> str:
    """Return the status a Job.triage value says: its "state"; a contract stored without one is done."""
    if not isinstance(triage, dict):
        return TriageStatus.NOT_RUN
    state = triage.get("state")
    if state in TriageStatus.values:
        return str(state)
    return TriageStatus.DONE if isinstance(triage.get("job"), dict) else TriageStatus.NOT_RUN


class Job(models.Model):
    """A training job, keyed by (cluster, job_id).

    Paths are attributes, never the key: tools rename a job's log and directory after it ends
    (a TGS tag is appended), while JOB_ID stays.

    `triage` is the log triage's JSON (the contract's object, or a queued / running / failed state that
    keeps the last good one under "last_good"); `triage_status` is its state as a column. save() sets the
    column from the JSON, so every writer that saves the row keeps them together; a queryset update()
    must set both.
    """

    TriageStatus = TriageStatus

    cluster = models.CharField(max_length=100, blank=True, help_text="Empty for local or demo jobs.")
    job_id = models.CharField(max_length=100, help_text="Slurm id, k8s-… or local_… id.")
    name = models.CharField(max_length=255, blank=True)
    job_dir = models.CharField(max_length=1024, blank=True)
    log_path = models.CharField(max_length=1024, blank=True)
    log_upload = models.FileField(upload_to="logs/%Y/%m/", blank=True)
    triage = models.JSONField(default=dict, blank=True)
    triage_status = models.CharField(
        max_length=16, choices=TriageStatus.choices, default=TriageStatus.NOT_RUN, blank=True, db_index=True
    )
    config = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "job_id"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "job_id"], name="job_unique_cluster_job_id")
        ]

    def __str__(self) -> str:
        prefix = f"{self.cluster}/" if self.cluster else ""
        return f"{prefix}{self.job_id} {self.name}".strip()

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.triage_status = triage_status_of(self.triage)
        fields = kwargs.get("update_fields")
        if fields is not None and "triage" in fields and "triage_status" not in fields:
            kwargs["update_fields"] = [*fields, "triage_status"]
        super().save(*args, **kwargs)

    def triage_stalled(self) -> bool:
        """Return True if a queued or running triage is older than the task's hard time limit (plus a minute).

        Its worker died or its message was lost: the page stops waiting and offers to run it again.
        """
        if self.triage_status not in TRIAGE_PENDING:
            return False
        triage = self.triage if isinstance(self.triage, dict) else {}
        stamp = triage.get("started") or triage.get("queued")
        try:
            since = datetime.fromisoformat(str(stamp))
        except (TypeError, ValueError):
            return False
        return (timezone.now() - since).total_seconds() > settings.CELERY_TASK_TIME_LIMIT + 60

    def triage_in_progress(self) -> bool:
        """Return True while the job's triage is queued or running and not stalled (worth waiting for)."""
        return self.triage_status in TRIAGE_PENDING and not self.triage_stalled()

    def finished_triage(self) -> dict[str, Any] | None:
        """Return the job's last good log triage (the contract's triage JSON), or None if none finished.

        While a re-run is queued, running or failed, Job.triage keeps the last good one under "last_good".
        """
        triage = self.triage or {}
        if not isinstance(triage, dict):
            return None
        if self.triage_status != TriageStatus.DONE:
            triage = triage.get("last_good") or {}
        return triage if isinstance(triage, dict) and isinstance(triage.get("job"), dict) else None

    def current_datasource(self) -> DataSource | None:
        """Return the job's current data source: the newest one (the one its page shows), or None."""
        return self.datasources.order_by("-created", "-pk").first()


class InvestigationJob(models.Model):
    """A job's place in an investigation: the primary job, a healthy baseline, or another to compare."""

    class Role(models.TextChoices):
        PRIMARY = "primary", "Primary"
        BASELINE = "baseline", "Baseline"
        COMPARE = "compare", "Compare"

    investigation = models.ForeignKey(Investigation, on_delete=models.CASCADE, related_name="job_links")
    # PROTECT: a job that an investigation cites cannot vanish from under its findings.
    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="investigation_links")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.PRIMARY)
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["investigation", "position", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["investigation", "job"], name="investigationjob_unique_job"),
            models.UniqueConstraint(
                fields=["investigation"],
                condition=Q(role="primary"),
                name="investigationjob_one_primary",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.investigation_id}:{self.job_id} ({self.role})"
