from __future__ import annotations

from django.contrib import admin

from .models import DataSource, Investigation, InvestigationJob, Job, QueryResult, QueryRun


class InvestigationJobInline(admin.TabularInline):
    model = InvestigationJob
    extra = 0
    autocomplete_fields = ["job"]


@admin.register(Investigation)
class InvestigationAdmin(admin.ModelAdmin):
    list_display = ["title", "status", "severity", "owner", "team", "created", "updated"]
    list_filter = ["status", "severity", "team"]
    search_fields = ["title", "summary", "team"]
    inlines = [InvestigationJobInline]
    raw_id_fields = ["owner"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["job_id", "cluster", "name", "job_dir", "created"]
    list_filter = ["cluster"]
    search_fields = ["job_id", "name", "job_dir"]


@admin.register(DataSource)
class DataSourceAdmin(admin.ModelAdmin):
    list_display = ["__str__", "kind", "state", "served_url", "last_checked"]
    list_filter = ["kind", "state"]
    search_fields = ["address", "job__job_id", "job__name"]
    raw_id_fields = ["job"]


class QueryResultInline(admin.TabularInline):
    model = QueryResult
    extra = 0
    fields = ["name", "kind", "ok", "series_count", "duration_s", "error"]
    readonly_fields = fields
    can_delete = False
    show_change_link = True


@admin.register(QueryRun)
class QueryRunAdmin(admin.ModelAdmin):
    list_display = ["pk", "datasource", "status", "progress_done", "progress_total", "created", "finished"]
    list_filter = ["status"]
    raw_id_fields = ["datasource", "investigation", "created_by"]
    inlines = [QueryResultInline]


@admin.register(QueryResult)
class QueryResultAdmin(admin.ModelAdmin):
    list_display = ["name", "run", "ok", "series_count", "duration_s"]
    list_filter = ["ok", "kind"]
    search_fields = ["name", "promql"]
    raw_id_fields = ["run"]
