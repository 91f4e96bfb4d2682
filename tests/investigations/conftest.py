"""Fixtures for the investigations app: users, allowed job roots, data sources and runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import Client

from investigations.models import DataSource, QueryResult, QueryRun
from playbooks import tsdb_server


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings) -> None:
    # PBKDF2 at production strength costs about half a second per user on this machine.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _private_tsdb_views(settings, tmp_path: Path) -> Iterator[None]:
    # Tasks prune idle TSDB servers: never in the developer's own data/tsdb-views. A copy a test's
    # service call served is stopped when the test ends (none is left running after the suite).
    settings.STEPWISE_TSDB_VIEWS = tmp_path / "tsdb-views"
    yield
    tsdb_server.reap_leftovers(tmp_path / "tsdb-views")


@pytest.fixture(autouse=True)
def _tunnels_allowed_anywhere(settings, tmp_path: Path) -> None:
    # These tests are about tunnels' life cycle, not the allow-list (tests/security/test_tunnel_allow_list.py):
    # any host, port and key folder, as the throwaway sshd, generated logs and pasted commands need.
    settings.STEPWISE_TUNNEL_HOSTS = ["*", "0.0.0.0/0", "::/0"]
    settings.STEPWISE_TUNNEL_SSH_PORTS = "1-65535"
    settings.STEPWISE_TUNNEL_PROMETHEUS_PORTS = "1-65535"
    settings.STEPWISE_TUNNEL_KEYS_DIR = "/"


@pytest.fixture(autouse=True)
def _loopback_prometheus_on_any_port(settings) -> None:
    # Fakes and closed ports here are ephemeral loopback ports, outside the default's port ranges (whose
    # refusals tests/security/test_url_sources.py and test_prometheus_url_check.py test).
    settings.STEPWISE_ALLOWED_PROMETHEUS = ["127.0.0.1", "localhost", "::1"]


@pytest.fixture
def alice(django_user_model):
    """Alice, a signed-up engineer."""
    return django_user_model.objects.create_user("alice", password="alice-correct-horse-42")


@pytest.fixture
def alice_client(client: Client, alice) -> Client:
    client.force_login(alice)
    return client


@pytest.fixture
def job_root(tmp_path: Path, settings) -> Path:
    """An empty folder that is the only allowed job root."""
    root = tmp_path / "jobs"
    root.mkdir()
    settings.STEPWISE_JOB_ROOTS = [root]
    return root


@pytest.fixture
def url_source(db) -> DataSource:
    """A URL data source on a loopback port where nothing listens."""
    return DataSource.objects.create(kind=DataSource.Kind.URL, address="http://127.0.0.1:9")


@pytest.fixture
def make_run(url_source):
    """Return make(status="queued", results=[(name, ok, last)]) -> QueryRun on url_source."""

    def make(status: str = QueryRun.Status.QUEUED, results: tuple = ()) -> QueryRun:
        queries = [
            {"name": n, "promql": "up", "kind": "instant", "start": None, "end": None, "step": None}
            for n, *_ in results
        ]
        run = QueryRun.objects.create(
            datasource=url_source,
            status=status,
            queries=queries
            or [{"name": "up", "promql": "up", "kind": "instant", "start": None, "end": None, "step": None}],
            progress_total=max(len(results), 1),
            progress_done=len(results),
        )
        for name, ok, last in results:
            QueryResult.objects.create(
                run=run,
                name=name,
                promql="up",
                ok=ok,
                error="" if ok else "PrometheusQueryError: bad query",
                series_count=1 if ok else 0,
                summary={"min": last, "max": last, "last": last, "series": []} if ok else {},
            )
        return run

    return make
