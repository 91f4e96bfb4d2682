"""Admin pages for every model: searchable lists, filters, and stored JSON shown read-only and indented."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.utils.html import format_html
from simple_history.admin import SimpleHistoryAdmin

from .models import (
    DataSource,
    DataSourceCredential,
    DiagnosisRun,
    Finding,
    Investigation,
    InvestigationJob,
    Job,
    PinnedChart,
    PlaybookExecution,
    QueryResult,
    QueryRun,
    RunHeartbeat,
    TimelineNote,
)


def _pretty(value: Any) -> str:
    """Return stored JSON as an indented <pre> block (large results stay readable, and cannot be mis-edited)."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    if len(text) > 200_000:
        text = text[:200_000] + "\n… (cut at 200,000 characters)"
    return format_html('<pre style="white-space: pre-wrap; max-height: 40rem; overflow: auto">{}</pre>', text)


def _json_display(field: str) -> Any:
    """Return an admin method showing the JSON field read-only.

    Results written by workers (triage, discovery, diagnosis output, query summaries) are records,
    not settings: editing them by hand would make the pages disagree with what was found.
    """

    @admin.display(description=field.replace("_", " "))
    def show(self: admin.ModelAdmin, obj: Any) -> str:
        return _pretty(getattr(obj, field)) if obj is not None and obj.pk else "—"

    return show


# --- Investigations and jobs ---------------------------------------------------------------------


class InvestigationJobInline(admin.TabularInline):
    model = InvestigationJob
    extra = 0
    autocomplete_fields = ["job"]


_FINDING_INLINE_FIELDS = ("severity", "incident_class", "title", "playbook", "rule", "job")


class FindingInline(admin.TabularInline):
    model = Finding
    extra = 0
    fields = _FINDING_INLINE_FIELDS
    readonly_fields = _FINDING_INLINE_FIELDS
    can_delete = False
    show_change_link = True


@admin.register(Investigation)
class InvestigationAdmin(admin.ModelAdmin):
    list_display = ["title", "status", "severity", "incident_class", "owner", "team", "created", "updated"]
    list_filter = ["status", "severity", "incident_class", "team"]
    search_fields = ["title", "summary", "team", "jobs__job_id", "jobs__name"]
    date_hierarchy = "created"
    inlines = [InvestigationJobInline, FindingInline]
    raw_id_fields = ["owner"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["job_id", "cluster", "name", "triage_state", "triage_class", "job_dir", "created"]
    list_filter = ["cluster"]
    search_fields = ["job_id", "name", "job_dir", "log_path"]
    exclude = ["triage", "config"]
    readonly_fields = ["triage_json", "config_json"]
    triage_json = _json_display("triage")
    config_json = _json_display("config")

    @admin.display(description="triage")
    def triage_state(self, obj: Job) -> str:
        return obj.triage_status or "—"

    @admin.display(description="class")
    def triage_class(self, obj: Job) -> str:
        return ((obj.triage or {}).get("job") or {}).get("triage_class") or "—"


@admin.register(InvestigationJob)
class InvestigationJobAdmin(admin.ModelAdmin):
    list_display = ["investigation", "job", "role", "position"]
    list_filter = ["role"]
    search_fields = ["investigation__title", "job__job_id", "job__name"]
    raw_id_fields = ["investigation", "job"]


@admin.register(DataSource)
class DataSourceAdmin(admin.ModelAdmin):
    list_display = ["__str__", "kind", "state", "discovery_status", "served_url", "last_checked"]
    list_filter = ["kind", "state", "discovery_status"]
    search_fields = ["address", "served_url", "job__job_id", "job__name"]
    raw_id_fields = ["job"]
    exclude = ["discovery"]
    readonly_fields = ["discovery_json"]
    discovery_json = _json_display("discovery")


@admin.register(DataSourceCredential)
class DataSourceCredentialAdmin(admin.ModelAdmin):
    """The user name of a URL source's credentials; the password is never shown (not even to staff)."""

    list_display = ["__str__", "username"]
    raw_id_fields = ["datasource"]
    exclude = ["password"]


@admin.register(RunHeartbeat)
class RunHeartbeatAdmin(admin.ModelAdmin):
    """Tasks in flight and when each last said it was alive (a stale one is reaped with its run)."""

    list_display = ["__str__", "kind", "run_id", "worker", "pid", "beat"]
    list_filter = ["kind"]
    readonly_fields = ["kind", "run_id", "task_id", "task_name", "worker", "pid", "beat"]


# --- Query runs ----------------------------------------------------------------------------------


_QUERY_RESULT_INLINE_FIELDS = ("name", "kind", "ok", "series_count", "duration_s", "error")


class QueryResultInline(admin.TabularInline):
    model = QueryResult
    extra = 0
    fields = _QUERY_RESULT_INLINE_FIELDS
    readonly_fields = _QUERY_RESULT_INLINE_FIELDS
    can_delete = False
    show_change_link = True


@admin.register(QueryRun)
class QueryRunAdmin(admin.ModelAdmin):
    list_display = [
        "pk",
        "datasource",
        "investigation",
        "status",
        "progress_done",
        "progress_total",
        "created",
        "finished",
    ]
    list_filter = ["status"]
    search_fields = ["datasource__address", "datasource__job__job_id", "error"]
    raw_id_fields = ["datasource", "investigation", "created_by"]
    inlines = [QueryResultInline]
    exclude = ["queries"]
    readonly_fields = ["queries_json"]
    queries_json = _json_display("queries")


@admin.register(QueryResult)
class QueryResultAdmin(admin.ModelAdmin):
    list_display = ["name", "run", "ok", "series_count", "duration_s"]
    list_filter = ["ok", "kind"]
    search_fields = ["name", "promql"]
    raw_id_fields = ["run"]
    exclude = ["summary"]
    readonly_fields = ["summary_json"]
    summary_json = _json_display("summary")


# --- Diagnosis -----------------------------------------------------------------------------------


_PLAYBOOK_EXECUTION_INLINE_FIELDS = ("playbook", "status", "duration_s", "error")


class PlaybookExecutionInline(admin.TabularInline):
    model = PlaybookExecution
    extra = 0
    fields = _PLAYBOOK_EXECUTION_INLINE_FIELDS
    readonly_fields = _PLAYBOOK_EXECUTION_INLINE_FIELDS
    can_delete = False
    show_change_link = True


@admin.register(DiagnosisRun)
class DiagnosisRunAdmin(admin.ModelAdmin):
    list_display = [
        "pk",
        "investigation",
        "job",
        "kind",
        "status",
        "stage",
        "progress_done",
        "progress_total",
        "created",
        "finished",
    ]
    list_filter = ["kind", "status"]
    search_fields = ["investigation__title", "job__job_id", "error"]
    raw_id_fields = ["investigation", "job", "datasource", "created_by"]
    inlines = [PlaybookExecutionInline]
    exclude = ["request", "playbooks", "window", "planned", "result"]
    readonly_fields = ["request_json", "playbooks_json", "window_json", "planned_json", "result_json"]
    request_json = _json_display("request")
    playbooks_json = _json_display("playbooks")
    window_json = _json_display("window")
    planned_json = _json_display("planned")
    result_json = _json_display("result")


@admin.register(PlaybookExecution)
class PlaybookExecutionAdmin(admin.ModelAdmin):
    list_display = ["playbook", "run", "status", "duration_s", "updated"]
    list_filter = ["status", "playbook"]
    search_fields = ["playbook", "error"]
    raw_id_fields = ["run"]
    exclude = ["queries", "output"]
    readonly_fields = ["queries_json", "output_json"]
    queries_json = _json_display("queries")
    output_json = _json_display("output")


@admin.register(Finding)
class FindingAdmin(admin.ModelAdmin):
    list_display = [
        "title",
        "severity",
        "incident_class",
        "playbook",
        "rule",
        "investigation",
        "job",
        "created",
    ]
    list_filter = ["severity", "incident_class", "playbook"]
    search_fields = ["title", "rule", "playbook", "investigation__title", "job__job_id"]
    raw_id_fields = ["investigation", "job", "run"]
    exclude = ["hosts", "gpus", "evidence"]
    readonly_fields = ["hosts_json", "gpus_json", "evidence_json"]
    hosts_json = _json_display("hosts")
    gpus_json = _json_display("gpus")
    evidence_json = _json_display("evidence")


@admin.register(PinnedChart)
class PinnedChartAdmin(admin.ModelAdmin):
    list_display = ["title", "investigation", "job", "created_by", "created"]
    search_fields = ["title", "note", "investigation__title"]
    raw_id_fields = ["investigation", "job", "finding", "created_by"]
    exclude = ["view", "figure"]
    readonly_fields = ["view_json", "figure_json"]
    view_json = _json_display("view")
    figure_json = _json_display("figure")


@admin.register(TimelineNote)
class TimelineNoteAdmin(SimpleHistoryAdmin):
    """People's notes on timelines; the history says who added and deleted which."""

    list_display = ["text", "investigation", "step", "at", "created_by", "created"]
    search_fields = ["text", "investigation__title"]
    raw_id_fields = ["investigation", "job", "created_by"]


@admin.register(TimelineNote.history.model)
class TimelineNoteHistoryAdmin(admin.ModelAdmin):
    """Every note added, changed or deleted (read-only: a record)."""

    list_display = ["text", "investigation", "history_type", "history_user", "history_date"]

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False
