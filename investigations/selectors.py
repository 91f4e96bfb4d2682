"""Read-only queries for the pages."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import JSONField, OuterRef, Q, QuerySet, Subquery

from .models import (
    DataSource,
    DiagnosisRun,
    Investigation,
    InvestigationJob,
    Job,
    QueryResult,
    QueryRun,
    TaskStatus,
)


def datasource_list() -> QuerySet[DataSource]:
    """Return every data source with its job and the id and status of its latest run."""
    latest = QueryRun.objects.filter(datasource=OuterRef("pk")).order_by("-created", "-pk")
    return DataSource.objects.select_related("job").annotate(
        latest_run_id=Subquery(latest.values("pk")[:1]),
        latest_run_status=Subquery(latest.values("status")[:1]),
    )


def queryrun_recent(limit: int | None = 10) -> QuerySet[QueryRun]:
    """Return the newest runs, newest first (all of them when `limit` is None, to filter further)."""
    runs = QueryRun.objects.select_related("datasource__job").order_by("-created", "-pk")
    return runs if limit is None else runs[:limit]


def queryresult_list(run: QueryRun) -> QuerySet[QueryResult]:
    """Return the run's results in the order its queries were stored."""
    return run.results.order_by("pk")


def investigation_list(
    *, status: str = "", cluster: str = "", klass: str = "", search: str = ""
) -> QuerySet[Investigation]:
    """Return investigations newest first, filtered, with their primary job's id, name, cluster and triage.

    `search` matches the title, the job id or name of any job held, or a host: of its triage's node
    list or head node, or of what discovery found in its data sources.
    """
    primary = InvestigationJob.objects.filter(
        investigation=OuterRef("pk"), role=InvestigationJob.Role.PRIMARY
    ).select_related(None)
    # The latest finished diagnosis of the primary job in this investigation: its culprits, for the list.
    verdict = DiagnosisRun.objects.filter(
        investigation=OuterRef("pk"),
        job__investigation_links__investigation=OuterRef("pk"),
        job__investigation_links__role=InvestigationJob.Role.PRIMARY,
        status=TaskStatus.DONE,
        kind=DiagnosisRun.Kind.DIAGNOSIS,
    ).order_by("-finished", "-pk")
    rows = Investigation.objects.select_related("owner").annotate(
        verdict_culprits=Subquery(
            verdict.values("result__diagnosis__culprits")[:1], output_field=JSONField()
        ),
        primary_job_pk=Subquery(primary.values("job__pk")[:1]),
        primary_job_id=Subquery(primary.values("job__job_id")[:1]),
        primary_job_name=Subquery(primary.values("job__name")[:1]),
        primary_cluster=Subquery(primary.values("job__cluster")[:1]),
        primary_triage_state=Subquery(primary.values("job__triage_status")[:1]),
        primary_status=Subquery(primary.values("job__triage__job__status")[:1]),
    )
    if status:
        rows = rows.filter(status=status)
    if cluster:
        rows = rows.filter(job_links__role=InvestigationJob.Role.PRIMARY, job_links__job__cluster=cluster)
    if klass:
        rows = rows.filter(incident_class=klass)
    search = search.strip()
    if search:
        # The jobs first, each matched once (not once per investigation holding it: a job's node list is
        # long, and a baseline job sits in many investigations), then the investigations holding them.
        jobs = Job.objects.filter(
            Q(job_id__icontains=search)
            | Q(name__icontains=search)
            | Q(triage__nodes__icontains=search)
            | Q(triage__prometheus__head__icontains=search)
            | Q(datasources__discovery__hosts__icontains=search)
        )
        held = InvestigationJob.objects.filter(job__in=jobs.values("pk")).values("investigation_id")
        rows = rows.filter(Q(title__icontains=search) | Q(pk__in=held))
    return rows.order_by("-created", "-pk")


def investigation_filter_choices() -> dict[str, list[str]]:
    """Return the clusters and incident classes that occur, for the list's filter menus."""
    clusters = (
        InvestigationJob.objects.filter(role=InvestigationJob.Role.PRIMARY)
        .exclude(job__cluster="")
        .values_list("job__cluster", flat=True)
        .distinct()
        .order_by("job__cluster")
    )
    classes = (
        Investigation.objects.exclude(incident_class="")
        .values_list("incident_class", flat=True)
        .distinct()
        .order_by("incident_class")
    )
    return {"clusters": list(clusters), "classes": list(classes)}


def investigation_jobs(investigation: Investigation) -> QuerySet[InvestigationJob]:
    """Return the investigation's job links, primary first, with their jobs."""
    return investigation.job_links.select_related("job").order_by("position", "pk")


def user_choices() -> QuerySet:
    """Return the active users an investigation can be given to, by name."""
    return get_user_model().objects.filter(is_active=True).order_by("username")
