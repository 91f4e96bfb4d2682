"""The timeline as a task: compute a discovered data source's default timeline into the shared cache."""

from __future__ import annotations

import logging

from celery import shared_task

from investigations import services
from investigations.models import DataSource
from investigations.services import timeline
from playbooks.prometheus import PrometheusError

logger = logging.getLogger(__name__)


@shared_task(bind=True, name="investigations.tasks.timeline_warm_task", ignore_result=True)
def timeline_warm_task(self, datasource_id: int) -> None:
    """Compute the default timeline of a data source (every default panel over the whole job) into the shared
    cache, so that the first person to open it reads it from there (at 1,024 GPUs a cold view is seconds of
    Prometheus time). Best effort: a source that cannot answer now is logged, and the page computes it then.
    """
    ds = DataSource.objects.filter(pk=datasource_id).first()
    if ds is None:
        return
    try:
        queries = timeline.timeline_warm(ds)
    except (
        timeline.TimelineViewError,
        services.SourceBusy,
        services.DataSourceError,
        PrometheusError,
    ) as exc:
        logger.info("the timeline of data source %s was not computed ahead: %s", datasource_id, exc)
        return
    logger.info("the timeline of data source %s is in the shared cache (%d queries)", datasource_id, queries)
