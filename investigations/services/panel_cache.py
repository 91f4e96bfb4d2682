"""The shared cache of timeline results, keyed by what the data source holds.

A finished job's TSDB never changes, so a panel computed from it is valid for as long as the data is the
same: its results (contexts, panel data, compared jobs' traces) are kept in Django's cache (the
database cache table, or Redis when REDIS_URL is set; shared by every web process and worker), under a
key made of the source's identity and the exact queries, range and step.

The identity of a source (`SourceIdentity`):

- a job TSDB: the fingerprint of its `prometheus/` folder (block ULIDs + WAL state,
  `playbooks.fingerprint`), read from the files without serving it, so a cached view starts no
  Prometheus at all; a job TSDB that a running Prometheus still writes (it holds the TSDB's lock or
  serves the folder) is live, and its entries get the live expiry below;
- a Prometheus URL or an SSH tunnel: its address and what its head holds now (series, first and last
  sample time, from /api/v1/status/tsdb: a status read, no query evaluated). A source that ingested a
  sample in the last LIVE_WINDOW_S is live: its entries expire after STEPWISE_TIMELINE_LIVE_TTL
  seconds (a server that reports no head is treated as live too); a new sample or series gives a new
  identity, so a changed source is never served stale results.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache

from investigations.models import DataSource
from playbooks.fingerprint import tsdb_fingerprint
from playbooks.prometheus import PrometheusClient, PrometheusError
from playbooks.tsdb_lock import tsdb_lock_holder

from . import DataSourceError, _inside_job_roots, job_dir_validate

logger = logging.getLogger(__name__)

#: Bumped when what is cached changes shape, so older entries are never read back.
CACHE_VERSION = 3
#: How long a finished source's entries are kept (they are evicted earlier when the cache is full).
FINISHED_TTL_S = 14 * 24 * 3600
#: A source whose newest sample is younger than this is still being written: it is live.
LIVE_WINDOW_S = 600


@dataclass(frozen=True)
class SourceIdentity:
    """What a data source holds, as a cache key part.

    Attributes:
        digest: changes whenever the data the source serves may change.
        live: the source is still being written: short expiry.
    """

    digest: str
    live: bool

    @property
    def ttl(self) -> int:
        return int(settings.STEPWISE_TIMELINE_LIVE_TTL) if self.live else FINISHED_TTL_S


def _digest(*parts: Any) -> str:
    text = json.dumps([CACHE_VERSION, *parts], sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def files_identity(ds: DataSource) -> SourceIdentity | None:
    """Return the identity of a job TSDB from its files (None for other kinds, or when unreadable)."""
    if ds.kind != DataSource.Kind.JOB_TSDB:
        return None
    try:
        job_dir = job_dir_validate(ds.address)
        tsdb = _inside_job_roots(job_dir / "prometheus", job_dir / "prometheus")
        fingerprint = tsdb_fingerprint(tsdb)
    except (DataSourceError, OSError):
        return None  # the caller connects, which reports the problem to the user
    live = tsdb_lock_holder(tsdb) is not None  # a served copy of it may lag the files: expire soon
    return SourceIdentity(_digest("tsdb", str(tsdb), fingerprint), live=live)


def live_identity(ds: DataSource, client: PrometheusClient) -> SourceIdentity:
    """Return the identity of a running Prometheus: its address and its head's series and time span."""
    try:
        head = (client.tsdb_status() or {}).get("headStats") or {}
    except PrometheusError:
        head = {}
    newest = head.get("maxTime")
    try:
        live = not newest or float(newest) / 1000.0 > time.time() - LIVE_WINDOW_S
    except (TypeError, ValueError):
        live = True
    parts = (head.get("numSeries"), head.get("minTime"), newest)
    return SourceIdentity(_digest("server", ds.kind, ds.address, *parts), live=live)


def context_key(identity: SourceIdentity, profile_hint: str) -> str:
    """Return the cache key of a source's timeline context (its profile as discovered, if any)."""
    return f"timeline-ctx:{_digest(identity.digest, profile_hint)}"


def result_key(kind: str, identity: SourceIdentity, *parts: Any) -> str:
    """Return the cache key of one result: its kind ("panel", "compare"), the source and the exact
    queries, range and step that produced it."""
    return f"timeline-{kind}:{_digest(identity.digest, *parts)}"


def get_many(keys: list[str]) -> dict[str, Any]:
    """Return the cached values of `keys` that exist; a cache that cannot be read counts as empty."""
    try:
        return cache.get_many(keys)
    except Exception:  # noqa: BLE001 - a broken cache must not break the page, only slow it down
        logger.warning("timeline cache unreadable", exc_info=True)
        return {}


def set_many(values: dict[str, Any], identity: SourceIdentity) -> None:
    """Store `values` for the source's lifetime in the cache; a failure to store is logged, not raised."""
    if not values:
        return
    try:
        cache.set_many(values, identity.ttl)
    except Exception:  # noqa: BLE001 - as above
        logger.warning("timeline cache not written", exc_info=True)
