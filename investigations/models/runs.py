"""Work a worker does on a data source or a job: query runs, diagnosis and comparison runs, their
playbook executions, and the heartbeats that tell a live task from a dead one."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from .common import RunProgress, TaskStatus
from .jobs import Investigation, Job
from .sources import DataSource


class QueryRun(RunProgress, models.Model):
    """A batch of PromQL queries against one data source, executed by a worker.

    `queries` is a list of {name, promql, kind: instant|range|buildinfo, start, end, step}; times are
    unix seconds or null (null: the data source's own time range, as a finished job's data is old).
    """

    Status = TaskStatus  # the same life as every claimed run

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


class DiagnosisRun(RunProgress, models.Model):
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
            # A job's latest finished diagnosis (its stored step series: every report link's step).
            models.Index(
                fields=["job", "kind", "-finished", "-id"],
                condition=Q(status=TaskStatus.DONE),
                name="diagnosisrun_job_done_idx",
            ),
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
