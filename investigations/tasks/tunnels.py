"""Celery tasks for SSH-tunnel data sources: open one in the background, check one, prune them all.

Each is safe to run twice: opening reuses a healthy tunnel, checking only reads, pruning closes only
what is idle or unneeded.
"""

from __future__ import annotations

import logging

from celery import shared_task

from investigations.models import DataSource
from investigations.services import DataSourceError
from investigations.services import tunnels as tunnel_services

logger = logging.getLogger(__name__)


def _tunnel_source(datasource_id: int) -> DataSource | None:
    ds = DataSource.objects.filter(pk=datasource_id, kind=DataSource.Kind.SSH_TUNNEL).first()
    if ds is None:
        logger.info("data source %s is gone or not an SSH tunnel: nothing to do", datasource_id)
    return ds


@shared_task(name="investigations.tasks.tunnel_open_task")
def tunnel_open_task(datasource_id: int) -> None:
    """Open (or reuse) the data source's SSH tunnel; the outcome is its state (up, or error with why)."""
    ds = _tunnel_source(datasource_id)
    if ds is None:
        return
    try:
        tunnel_services.tunnel_open(ds)
    except DataSourceError as exc:
        # Already recorded on the row (state error + reason); a retry would fail the same way.
        logger.info("SSH tunnel of data source %s did not open: %s", datasource_id, exc)


@shared_task(name="investigations.tasks.tunnel_check_task")
def tunnel_check_task(datasource_id: int) -> None:
    """Refresh the data source's state (up or down with the reason) without opening anything."""
    ds = _tunnel_source(datasource_id)
    if ds is not None:
        tunnel_services.tunnel_check(ds)


@shared_task(name="investigations.tasks.tunnels_prune_task")
def tunnels_prune_task() -> list[int]:
    """Close idle or unneeded SSH tunnels and health-check the rest; return the pids closed.

    Meant for celery beat (e.g. every 5 minutes) or to be called by the query and diagnosis tasks.
    """
    return tunnel_services.tunnels_prune()
