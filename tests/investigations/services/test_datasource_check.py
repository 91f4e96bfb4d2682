"""Checking a data source records whether its Prometheus is up; idle served copies are stopped."""

from __future__ import annotations

from pathlib import Path

import pytest

from investigations import services
from investigations.models import DataSource
from playbooks import tsdb_server

pytestmark = pytest.mark.django_db


@pytest.fixture
def served_source(job_factory, synth_root: Path, tmp_path: Path, settings):
    """A registered healthy job whose TSDB copies live in this test's own work root."""
    settings.STEPWISE_JOB_ROOTS = [synth_root]
    settings.STEPWISE_TSDB_VIEWS = tmp_path / "views"
    _, source = services.job_register(job_factory("healthy")[0])
    yield source
    tsdb_server.reap_leftovers(tmp_path / "views")


def test_it_marks_a_served_job_up_with_its_version(served_source) -> None:
    source = services.datasource_check(served_source)
    source.refresh_from_db()
    assert source.state == DataSource.State.UP
    assert source.state_detail.startswith("Prometheus 2.")
    assert source.served_url.startswith("http://127.0.0.1:")
    assert source.last_checked is not None


def test_it_marks_an_unreachable_url_down(url_source) -> None:
    services.datasource_check(url_source)
    url_source.refresh_from_db()
    assert url_source.state == DataSource.State.DOWN
    assert "127.0.0.1:9" in url_source.state_detail
    assert url_source.last_checked is not None


def test_it_marks_a_refused_source_as_an_error(url_source, settings) -> None:
    settings.STEPWISE_ALLOWED_PROMETHEUS = ["prometheus"]
    services.datasource_check(url_source)
    url_source.refresh_from_db()
    assert url_source.state == DataSource.State.ERROR
    assert "is not allowed" in url_source.state_detail


def test_it_stops_served_copies_that_sat_idle(served_source, settings) -> None:
    services.datasource_check(served_source)
    views = settings.STEPWISE_TSDB_VIEWS
    assert len(tsdb_server.list_served(views)) == 1
    assert services.tsdb_views_prune() == []  # just used: kept
    settings.STEPWISE_TSDB_IDLE_SECONDS = 0
    assert len(services.tsdb_views_prune()) == 1
    assert tsdb_server.list_served(views) == []
