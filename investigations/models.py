"""Investigations, the jobs they look at, where each job's metrics live, and query runs against them.

Times are stored as aware UTC datetimes; query windows inside JSON are unix seconds (float), as in
the diagnosis contract.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from simple_history.models import HistoricalRecords

from .crypto import EncryptedTextField


class TaskStatus(models.TextChoices):
    """The life of any background piece of work whose row a worker claims."""

    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class HistoryNote:
    """What django-simple-history reads from a model instance when it is saved: who changed it (the
    historical row's history_user) and why (history_change_reason). Set before save(); annotations only."""

    _history_user: Any
    _change_reason: str


class _RunProgress:
    """Progress of a run row with `status`, `FINISHED`, `progress_done` and `progress_total`."""

    status: str
    FINISHED: tuple[str, ...]
    progress_done: int
    progress_total: int

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def progress_pct(self) -> int:
        if not self.progress_total:
            return 100 if self.is_finished else 0
        return round(100 * self.progress_done / self.progress_total)


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
        indexes = [models.Index(fields=["status", "-created"], name="investigation_status_idx")]

    def __str__(self) -> str:
        return self.title


class Job(models.Model):
    """A training job, keyed by (cluster, job_id).

    Paths are attributes, never the key: tools rename a job's log and directory after it ends
    (a TGS tag is appended), while JOB_ID stays.
    """

    cluster = models.CharField(max_length=100, blank=True, help_text="Empty for local or demo jobs.")
    job_id = models.CharField(max_length=100, help_text="Slurm id, k8s-… or local_… id.")
    name = models.CharField(max_length=255, blank=True)
    job_dir = models.CharField(max_length=1024, blank=True)
    log_path = models.CharField(max_length=1024, blank=True)
    log_upload = models.FileField(upload_to="logs/%Y/%m/", blank=True)
    triage = models.JSONField(default=dict, blank=True)
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

    def finished_triage(self) -> dict[str, Any] | None:
        """Return the job's last good log triage (the contract's triage JSON), or None if none finished.

        While a re-run is queued, running or failed, Job.triage keeps the last good one under "last_good".
        """
        triage = self.triage or {}
        if not isinstance(triage, dict):
            return None
        if triage.get("state", "done") != "done":
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


class DataSource(models.Model):
    """Where a job's metrics can be queried.

    kind=job_tsdb: `address` is a job directory; Stepwise serves a read-only copy of its
    prometheus/ TSDB and records the URL in `served_url`. kind=url: `address` is the base URL of a
    running Prometheus. kind=ssh_tunnel: `address` is the local end of a tunnel (a URL), `tunnel`
    describes it (user, host, remote port) for display and re-creation.
    """

    also: list[Job]  # set by views.sources.one_per_address: the other jobs on this address

    class Kind(models.TextChoices):
        JOB_TSDB = "job_tsdb", "Job TSDB"
        URL = "url", "Prometheus URL"
        SSH_TUNNEL = "ssh_tunnel", "SSH tunnel"

    class State(models.TextChoices):
        UNKNOWN = "unknown", "Unknown"
        STARTING = "starting", "Starting"
        UP = "up", "Up"
        DOWN = "down", "Down"
        ERROR = "error", "Error"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, null=True, blank=True, related_name="datasources")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    address = models.CharField(max_length=1024)
    tunnel = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.UNKNOWN)
    state_detail = models.TextField(blank=True)
    served_url = models.CharField(max_length=255, blank=True)
    last_checked = models.DateTimeField(null=True, blank=True)
    # Discovery: what the TSDB holds (families, hosts, GPUs, range, targets, profile, identity check).
    discovery_status = models.CharField(max_length=16, choices=TaskStatus.choices, blank=True)
    discovery = models.JSONField(default=dict, blank=True)
    discovery_error = models.TextField(blank=True)
    discovered = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job__job_id", "pk"]

    def __str__(self) -> str:
        if self.job_id is not None:
            return f"{self.job} ({self.get_kind_display()})"
        return f"{self.address} ({self.get_kind_display()})"

    @property
    def shown_address(self) -> str:
        """Return the address as pages show it: a URL source's credentials (kept apart) masked."""
        credential = getattr(self, "credential", None) if self.kind == self.Kind.URL else None
        if credential is None or "://" not in self.address:
            return self.address
        scheme, rest = self.address.split("://", 1)
        return f"{scheme}://{credential.username}:••••••@{rest}"


class DataSourceCredential(models.Model):
    """Basic-auth credentials of a URL data source, kept apart from its address.

    The address (shown to every user, written into messages and logs) never holds them; the client
    gets them as httpx auth. Pages show the user name and a mask, the admin shows no password, and the
    database holds the password encrypted.
    """

    datasource = models.OneToOneField(DataSource, on_delete=models.CASCADE, related_name="credential")
    username = models.CharField(max_length=255)
    # Encrypted at rest (investigations/crypto.py): the column holds a Fernet token, never the password.
    password = EncryptedTextField(blank=True)

    def __str__(self) -> str:
        return f"credentials of data source {self.datasource_id}"


class QueryRun(_RunProgress, models.Model):
    """A batch of PromQL queries against one data source, executed by a worker.

    `queries` is a list of {name, promql, kind: instant|range|buildinfo, start, end, step}; times are
    unix seconds or null (null: the data source's own time range, as a finished job's data is old).
    """

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    FINISHED = (Status.DONE, Status.FAILED, Status.CANCELLED)

    datasource = models.ForeignKey(DataSource, on_delete=models.CASCADE, related_name="runs")
    investigation = models.ForeignKey(
        Investigation, on_delete=models.SET_NULL, null=True, blank=True, related_name="runs"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    queries = models.JSONField(default=list)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    # 1, then 2 once a worker died under it and it was run again (services/deadruns.py).
    attempt = models.PositiveSmallIntegerField(default=1)
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-pk"]
        indexes = [models.Index(fields=["status"], name="queryrun_status_idx")]
        constraints = [
            models.CheckConstraint(
                condition=Q(progress_done__lte=F("progress_total")), name="queryrun_progress_le_total"
            )
        ]

    def __str__(self) -> str:
        return f"run {self.pk} on {self.datasource} ({self.status})"


class QueryResult(models.Model):
    """The stored outcome of one named query of a run; re-running a run replaces it (upsert).

    `summary` is {"window": {...}, "series": [{labels, min, max, last, points: [[t, v], ...]}],
    "omitted_series": int} for PromQL, or {"build": {...}} for a buildinfo check. Series and points
    are capped (STEPWISE_RESULT_MAX_SERIES/_POINTS); `series_count` is the uncapped count.
    """

    run = models.ForeignKey(QueryRun, on_delete=models.CASCADE, related_name="results")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, default="instant")
    promql = models.TextField(blank=True)
    ok = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    series_count = models.PositiveIntegerField(default=0)
    summary = models.JSONField(default=dict, blank=True)
    duration_s = models.FloatField(default=0.0)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["run", "pk"]
        constraints = [models.UniqueConstraint(fields=["run", "name"], name="queryresult_unique_run_name")]

    def __str__(self) -> str:
        return f"{self.name} ({'ok' if self.ok else 'error'})"


class DiagnosisRun(_RunProgress, models.Model):
    """One automated run on an investigation's jobs: a diagnosis of one job, or a comparison of several.

    What was asked, how far it got and what came out are kept apart:

    - `kind`: diagnosis (playbooks, then the decision) or comparison (the investigation's jobs side by side).
    - request: `request` is what the user asked for — a diagnosis {"playbooks": names or None for what
      the triage calls for, "profile", "gpu_model"} with `window` {"start": s, "end": s} (unix seconds;
      empty for the job's whole range); a comparison {"jobs": [job pks, baseline first]}.
    - progress: `status`, `stage` (a diagnosis: "executing" its playbooks, then "deciding"), `planned`
      (a diagnosis: the discovered source and the triage its plan read, which the decision reads
      again), `playbooks` (the names planned), `progress_done` / `progress_total`, `error`.
    - output: `result`, the contract's output object once done (a diagnosis: job, source, diagnosis,
      findings, timings; a comparison: the `compare` object), and nothing before.
    """

    class Kind(models.TextChoices):
        DIAGNOSIS = "diagnosis", "Diagnosis"
        COMPARISON = "comparison", "Comparison"

    class Stage(models.TextChoices):
        NONE = "", "Not planned"
        EXECUTING = "executing", "Executing playbooks"
        DECIDING = "deciding", "Deciding"

    investigation = models.ForeignKey(Investigation, on_delete=models.CASCADE, related_name="diagnosis_runs")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="diagnosis_runs")
    datasource = models.ForeignKey(DataSource, on_delete=models.SET_NULL, null=True, related_name="+")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.DIAGNOSIS)
    request = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=TaskStatus.choices, default=TaskStatus.QUEUED)
    stage = models.CharField(max_length=16, choices=Stage.choices, default=Stage.NONE, blank=True)
    playbooks = models.JSONField(default=list, blank=True)
    window = models.JSONField(default=dict, blank=True)
    planned = models.JSONField(default=dict, blank=True)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    result = models.JSONField(default=dict, blank=True)
    # 1, then 2 once a worker died under it and it was run again (services/deadruns.py).
    attempt = models.PositiveSmallIntegerField(default=1)
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)

    FINISHED = (TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.CANCELLED)

    class Meta:
        ordering = ["-created", "-pk"]
        indexes = [
            models.Index(fields=["status"], name="diagnosisrun_status_idx"),
            models.Index(fields=["investigation", "kind", "-created"], name="diagnosisrun_kind_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.pk} of {self.job} ({self.status})"

    @property
    def is_comparison(self) -> bool:
        return self.kind == self.Kind.COMPARISON


class PlaybookExecution(models.Model):
    """One playbook of a diagnosis run: its queries and their stored outcomes, kept after the source is gone.

    `queries` is a list of {name, promql, ok, error, duration_s, summary}; `output` is the playbook's
    JSON-serialisable result that the decision step reads.
    """

    run = models.ForeignKey(DiagnosisRun, on_delete=models.CASCADE, related_name="executions")
    playbook = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=TaskStatus.choices, default=TaskStatus.QUEUED)
    queries = models.JSONField(default=list, blank=True)
    output = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    duration_s = models.FloatField(default=0.0)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["run", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["run", "playbook"], name="playbookexecution_unique_run_playbook")
        ]

    def __str__(self) -> str:
        return f"{self.playbook} of run {self.run_id} ({self.status})"


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


class RunHeartbeat(models.Model):
    """A task working on a run says it is alive (investigations.services.deadruns).

    One row per task in flight, written when the task starts and every STEPWISE_RUN_HEARTBEAT_SECONDS
    after, deleted when it ends however it ends. A row left behind and gone stale means the process died
    mid-task (SIGKILL, OOM kill, a lost machine): its run is failed with that reason.
    """

    class Kind(models.TextChoices):
        DIAGNOSIS = "diagnosis", "Diagnosis or comparison run"
        QUERY = "query", "Query run"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    run_id = models.BigIntegerField()
    task_id = models.CharField(max_length=255, unique=True)
    task_name = models.CharField(max_length=255)
    worker = models.CharField(max_length=255, blank=True)
    pid = models.IntegerField(default=0)
    beat = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["beat"], name="runheartbeat_beat_idx")]

    def __str__(self) -> str:
        return f"{self.task_name} on {self.kind} run {self.run_id} (pid {self.pid})"


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
