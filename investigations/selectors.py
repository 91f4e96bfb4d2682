"""Read-only queries for the pages."""

from __future__ import annotations

from django.db.models import OuterRef, QuerySet, Subquery

from .models import DataSource, QueryResult, QueryRun


def datasource_list() -> QuerySet[DataSource]:
    """Return every data source with its job and the id and status of its latest run."""
    latest = QueryRun.objects.filter(datasource=OuterRef("pk")).order_by("-created", "-pk")
    return DataSource.objects.select_related("job").annotate(
        latest_run_id=Subquery(latest.values("pk")[:1]),
        latest_run_status=Subquery(latest.values("status")[:1]),
    )


def queryrun_recent(limit: int = 10) -> QuerySet[QueryRun]:
    """Return the newest runs, newest first."""
    return QueryRun.objects.select_related("datasource__job").order_by("-created", "-pk")[:limit]


def queryresult_list(run: QueryRun) -> QuerySet[QueryResult]:
    """Return the run's results in the order its queries were stored."""
    return run.results.order_by("pk")
