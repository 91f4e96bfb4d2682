from __future__ import annotations

from django.urls import path

from .views import comparison as comparison_views
from .views import comparison_grid, investigations, lifecycle, sources, timeline_notes
from .views import diagnosis as diagnosis_views
from .views import discovery as discovery_views
from .views import timeline as timeline_views

app_name = "investigations"

urlpatterns = [
    # Investigations: the home page lists them.
    path("", investigations.home, name="home"),
    path("investigations/new/", investigations.new, name="new"),
    path("investigations/create/", investigations.create, name="create"),
    path("investigations/browse/", investigations.browse, name="browse"),
    path("investigations/<int:investigation_id>/", investigations.detail, name="detail"),
    path("investigations/<int:investigation_id>/update/", investigations.update, name="update"),
    path("investigations/<int:investigation_id>/delete/", lifecycle.delete, name="delete"),
    path("investigations/<int:investigation_id>/triage/", investigations.triage, name="triage"),
    path(
        "investigations/<int:investigation_id>/triage/rerun/",
        investigations.triage_rerun,
        name="triage_rerun",
    ),
    path(
        "investigations/<int:investigation_id>/source-state/",
        investigations.source_state,
        name="source_state",
    ),
    path(
        "investigations/<int:investigation_id>/source-check/",
        investigations.source_check,
        name="source_check",
    ),
    path("investigations/<int:investigation_id>/jobs/add/", investigations.job_add, name="job_add"),
    path("investigations/<int:investigation_id>/log/", investigations.log_attach, name="log_attach"),
    path(
        "investigations/<int:investigation_id>/discovery/",
        discovery_views.discovery_status,
        name="discovery_status",
    ),
    path(
        "investigations/<int:investigation_id>/discovery/start/",
        discovery_views.discovery_start,
        name="discovery_start",
    ),
    # Timeline: the page, its lazily loaded region, one JSON figure per panel, pinned charts.
    path("investigations/<int:investigation_id>/timeline/", timeline_views.page, name="timeline"),
    path(
        "investigations/<int:investigation_id>/timeline/region/",
        timeline_views.region,
        name="timeline_region",
    ),
    path(
        "investigations/<int:investigation_id>/timeline/panels/<slug:panel>/",
        timeline_views.panel,
        name="timeline_panel",
    ),
    path(
        "investigations/<int:investigation_id>/timeline/promql/",
        timeline_views.promql,
        name="timeline_promql",
    ),
    path("investigations/<int:investigation_id>/timeline/pin/", timeline_views.pin, name="timeline_pin"),
    path(
        "investigations/<int:investigation_id>/timeline/pinned/<int:chart_id>/delete/",
        timeline_views.unpin,
        name="timeline_unpin",
    ),
    # People's notes on the timeline.
    path(
        "investigations/<int:investigation_id>/timeline/notes/", timeline_notes.notes, name="timeline_notes"
    ),
    path(
        "investigations/<int:investigation_id>/timeline/notes/add/",
        timeline_notes.note_add,
        name="timeline_note_add",
    ),
    path(
        "investigations/<int:investigation_id>/timeline/notes/<int:note_id>/delete/",
        timeline_notes.note_delete,
        name="timeline_note_delete",
    ),
    # Diagnosis of one job of an investigation (?job=<pk>, default the primary job).
    path("investigations/<int:investigation_id>/diagnosis/", diagnosis_views.region, name="diagnosis"),
    path(
        "investigations/<int:investigation_id>/diagnosis/start/",
        diagnosis_views.start,
        name="diagnosis_start",
    ),
    path(
        "investigations/<int:investigation_id>/diagnosis/status/",
        diagnosis_views.status,
        name="diagnosis_status",
    ),
    path(
        "investigations/<int:investigation_id>/diagnosis/<int:run_id>/cancel/",
        diagnosis_views.cancel,
        name="diagnosis_cancel",
    ),
    path(
        "investigations/<int:investigation_id>/diagnosis/findings/<int:finding_id>/",
        diagnosis_views.finding_detail,
        name="finding_detail",
    ),
    path(
        "investigations/<int:investigation_id>/runs/<int:run_id>/report.md",
        diagnosis_views.run_report,
        name="run_report",
    ),
    # Multi-job comparison of an investigation's jobs.
    path("investigations/<int:investigation_id>/comparison/", comparison_views.region, name="comparison"),
    path(
        "investigations/<int:investigation_id>/comparison/side-by-side/",
        comparison_grid.grid,
        name="comparison_grid",
    ),
    path(
        "investigations/<int:investigation_id>/comparison/start/",
        comparison_views.start,
        name="comparison_start",
    ),
    path(
        "investigations/<int:investigation_id>/comparison/status/",
        comparison_views.status,
        name="comparison_status",
    ),
    path(
        "investigations/<int:investigation_id>/comparison/<int:run_id>/cancel/",
        comparison_views.cancel,
        name="comparison_cancel",
    ),
    # Data sources and query runs.
    path("sources/", sources.index, name="sources"),
    path("sources/add/", sources.source_add, name="source_add"),
    path("sources/<int:source_id>/sample-run/", sources.run_start, name="run_start"),
    path("runs/<int:run_id>/", sources.run_detail, name="run_detail"),
    path("runs/<int:run_id>/cancel/", sources.run_cancel, name="run_cancel"),
]
