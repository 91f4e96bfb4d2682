"""The shared timeline cache: a finished job's panels are computed once for everyone (a later view sends
no query and serves nothing), and a source whose data changes (its files, or a live server's head) is
queried again. Real jobs, real Prometheus servers, the database cache of the settings."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from django.core.cache import cache

from investigations import services
from investigations.models import DataSource, Investigation, InvestigationJob
from investigations.services import panel_cache
from investigations.services import timeline as svc
from playbooks import tsdb_server
from playbooks.fingerprint import tsdb_fingerprint
from playbooks.prometheus import PrometheusClient
from tests.support.prometheus import make_wal_tsdb, running_prometheus

pytestmark = pytest.mark.django_db

KEYS = ["loss", "gpu_temp", "procs_running"]


@pytest.fixture
def own_job(job_factory, tmp_path: Path, settings):
    """Return (investigation, job, data source, job dir) on a private copy of a generated job."""
    src, _truth = job_factory("thermal-straggler")
    root = tmp_path / "jobs"
    job_dir = root / src.name
    shutil.copytree(src, job_dir, symlinks=False)
    settings.STEPWISE_JOB_ROOTS = [root]
    cache.clear()
    job, ds = services.job_register(job_dir)
    investigation = Investigation.objects.create(title="cache case")
    InvestigationJob.objects.create(investigation=investigation, job=job, role=InvestigationJob.Role.PRIMARY)
    yield investigation, job, ds, job_dir
    tsdb_server.reap_leftovers(settings.STEPWISE_TSDB_VIEWS)
    cache.clear()


def _view(investigation, job, ds) -> dict:
    ds.refresh_from_db()
    return svc.timeline_figures(investigation, job, ds, svc.TimelineView(), panels=KEYS)


def test_a_second_view_of_a_finished_job_sends_no_query_and_serves_nothing(own_job, settings) -> None:
    """Once anyone drew the panels, the next viewer gets the same figures from the shared cache: no
    Prometheus query, and the job's TSDB is not even served (the first view's server is gone)."""
    investigation, job, ds, _job_dir = own_job
    first = _view(investigation, job, ds)
    assert first["queries"] > 0
    tsdb_server.reap_leftovers(settings.STEPWISE_TSDB_VIEWS)
    assert tsdb_server.list_served(settings.STEPWISE_TSDB_VIEWS) == []

    again = _view(investigation, job, ds)
    assert again["queries"] == 0
    assert tsdb_server.list_served(settings.STEPWISE_TSDB_VIEWS) == []
    for key in KEYS:
        assert again["figures"][key]["data"] == first["figures"][key]["data"]
        assert (
            again["figures"][key]["layout"]["meta"]["outliers"]
            == first["figures"][key]["layout"]["meta"]["outliers"]
        )


def test_the_cache_lives_in_the_shared_database_table(own_job) -> None:
    """Entries are rows of the cache table (what every web process and worker reads), not process memory."""
    from django.db import connection

    investigation, job, ds, _job_dir = own_job
    _view(investigation, job, ds)
    with connection.cursor() as cur:
        cur.execute("SELECT cache_key FROM stepwise_cache")
        keys = [row[0] for row in cur.fetchall()]
    assert sum(":timeline-panel:" in k for k in keys) == len(KEYS)
    assert sum(":timeline-ctx:" in k for k in keys) == 1


def test_a_change_to_the_job_tsdb_invalidates_its_panels(own_job, settings) -> None:
    """New samples written to the job's TSDB (its WAL grows) change its fingerprint: the panels are
    queried again instead of being served stale."""
    investigation, job, ds, job_dir = own_job
    before = tsdb_fingerprint(job_dir / "prometheus")
    assert _view(investigation, job, ds)["queries"] > 0
    assert _view(investigation, job, ds)["queries"] == 0

    tsdb_server.reap_leftovers(settings.STEPWISE_TSDB_VIEWS)  # the next view serves the new data
    make_wal_tsdb(job_dir / "prometheus", samples=2, crash=False)
    assert tsdb_fingerprint(job_dir / "prometheus") != before
    assert _view(investigation, job, ds)["queries"] > 0
    assert _view(investigation, job, ds)["queries"] == 0


def test_a_job_tsdb_a_running_prometheus_still_writes_expires_soon(own_job, settings) -> None:
    """A job folder whose TSDB a live Prometheus holds (the job still runs): its identity is live, so its
    entries get the short expiry (a copy served while the files grow may lag them); once that server is
    gone it is cached like a finished job."""
    _investigation, _job, ds, job_dir = own_job
    assert not panel_cache.files_identity(ds).live
    with running_prometheus(job_dir / "prometheus"):
        identity = panel_cache.files_identity(ds)
        assert identity.live and identity.ttl == settings.STEPWISE_TIMELINE_LIVE_TTL
    identity = panel_cache.files_identity(ds)
    assert not identity.live and identity.ttl == panel_cache.FINISHED_TTL_S


def _head_max(url: str) -> int:
    with PrometheusClient(url, timeout=5.0) as client:
        return int(client.tsdb_status()["headStats"]["maxTime"])


def test_a_live_source_is_queried_again_once_it_ingests_and_expires_soon(own_job, tmp_path) -> None:
    """A Prometheus URL whose head grows (a live job recording a sample a second): a view after a new
    sample sends queries again; its entries carry the short live expiry."""
    investigation, job, _ds, job_dir = own_job
    live_dir = tmp_path / "live-tsdb"
    shutil.copytree(job_dir / "prometheus", live_dir)
    with running_prometheus(live_dir, rule_interval="1s") as live:
        ds = DataSource.objects.create(kind=DataSource.Kind.URL, address=live.url)
        seen = _head_max(live.url)
        assert _view(investigation, job, ds)["queries"] > 0
        deadline = time.monotonic() + 30
        while _head_max(live.url) == seen and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _head_max(live.url) != seen
        assert _view(investigation, job, ds)["queries"] > 0
        with PrometheusClient(live.url) as client:
            identity = panel_cache.live_identity(ds, client)
        assert identity.live and identity.ttl == 60


def test_a_url_source_that_holds_still_is_cached_like_a_finished_job(own_job, tmp_path) -> None:
    """A Prometheus URL serving a finished job (nothing ingested): the second view is a cache hit."""
    investigation, job, _ds, job_dir = own_job
    live_dir = tmp_path / "static-tsdb"
    shutil.copytree(job_dir / "prometheus", live_dir)
    with running_prometheus(live_dir) as server:
        ds = DataSource.objects.create(kind=DataSource.Kind.URL, address=server.url)
        assert _view(investigation, job, ds)["queries"] > 0
        assert _view(investigation, job, ds)["queries"] == 0


def test_a_timeline_computed_ahead_by_the_worker_makes_the_first_view_a_cache_hit(own_job, settings) -> None:
    """After discovery the worker computes the default timeline (every default panel, the whole job) into
    the shared cache: the first person to open it sends no query and serves nothing."""
    from investigations.tasks.timeline import timeline_warm_task

    investigation, job, ds, _job_dir = own_job
    timeline_warm_task(ds.pk)  # the task's body, as the worker runs it
    tsdb_server.reap_leftovers(settings.STEPWISE_TSDB_VIEWS)
    first = svc.timeline_figures(investigation, job, ds, svc.TimelineView())
    assert first["queries"] == 0 and len(first["figures"]) == len(first["panels"]) > len(KEYS)
    assert tsdb_server.list_served(settings.STEPWISE_TSDB_VIEWS) == []
    assert svc.timeline_warm(ds) == 0  # computed once


def test_a_narrower_view_is_served_by_the_panels_cached_at_the_default_width(own_job, settings) -> None:
    """A panel narrower than the default would be queried at a coarser step; the one the worker computed at
    the default width serves it instead (its finer points are drawn alike): no query, nothing served."""
    investigation, job, ds, _job_dir = own_job
    default = _view(investigation, job, ds)
    tsdb_server.reap_leftovers(settings.STEPWISE_TSDB_VIEWS)
    ds.refresh_from_db()
    narrow = svc.timeline_figures(investigation, job, ds, svc.TimelineView(width=400), panels=KEYS)
    assert narrow["queries"] == 0 and tsdb_server.list_served(settings.STEPWISE_TSDB_VIEWS) == []
    assert all(narrow["figures"][k]["data"] == default["figures"][k]["data"] for k in KEYS)


def test_a_source_that_cannot_be_served_is_not_computed_ahead_and_raises_nothing(own_job) -> None:
    """Best effort: the worker logs that the source did not answer; the page computes the timeline then."""
    from investigations.tasks.timeline import timeline_warm_task

    _investigation, _job, ds, job_dir = own_job
    shutil.rmtree(job_dir / "prometheus")
    timeline_warm_task(ds.pk)
    timeline_warm_task(999_999)  # a data source deleted meanwhile
