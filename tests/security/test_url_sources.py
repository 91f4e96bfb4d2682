"""Items 3, 4 and 7: every new URL source is probed and must be a Prometheus; what a server sent is never
echoed; credentials in a URL are stored apart and shown masked; a URL source is keyed by its whole URL."""

from __future__ import annotations

import base64
from urllib.parse import urlsplit

import pytest
from django.urls import reverse

from investigations import services
from investigations.models import DataSource, DataSourceCredential, Investigation, Job
from investigations.services.investigations import SourceRequest, investigation_create
from tests.security.fakes import http_server, prometheus_like, raw_server

pytestmark = pytest.mark.django_db
SECRET = "TOP-SECRET-BODY-4242"


def _allow(settings, url_or_port) -> str:
    port = url_or_port if isinstance(url_or_port, int) else urlsplit(url_or_port).port
    settings.STEPWISE_ALLOWED_PROMETHEUS = [f"127.0.0.1:{port}"]
    return f"http://127.0.0.1:{port}"


def _add(client, address: str):
    return client.post(reverse("investigations:source_add"), {"address": address})


def _new(client, address: str):
    form = {"title": "t", "severity": "sev2", "team": "", "source": "url", "prometheus_url": address}
    return client.post(reverse("investigations:create"), form)


NOT_PROMETHEUS = [
    (lambda m, p, h: (200, "text/html", f"<html>{SECRET}</html>".encode()), "is not a Prometheus (HTTP 200)"),
    (lambda m, p, h: (500, "text/plain", SECRET.encode()), "is not a Prometheus (HTTP 500)"),
    (
        lambda m, p, h: (
            200,
            "application/json",
            b'{"status": "success", "data": {"k": "' + SECRET.encode() + b'"}}',
        ),
        "its build info has no version",
    ),
    (
        lambda m, p, h: (
            400,
            "application/json",
            b'{"status": "error", "errorType": "bad_data", "error": "' + SECRET.encode() + b'"}',
        ),
        "is not a Prometheus",
    ),
]


@pytest.mark.parametrize("handler, message", NOT_PROMETHEUS)
def test_the_sources_page_probes_and_refuses_a_non_prometheus_without_echoing_it(
    alice_client, settings, handler, message
) -> None:
    with http_server(handler) as (url, _seen):
        _allow(settings, url)
        response = _add(alice_client, url)
    body = response.content.decode()
    assert response.status_code == 400 and message in body
    assert SECRET not in body
    assert not DataSource.objects.exists()


@pytest.mark.parametrize("handler, message", NOT_PROMETHEUS[:2])
def test_the_new_investigation_form_refuses_it_the_same_way(alice_client, settings, handler, message) -> None:
    with http_server(handler) as (url, _seen):
        _allow(settings, url)
        response = _new(alice_client, url)
    body = response.content.decode()
    assert response.status_code == 400 and message in body and SECRET not in body
    assert not Investigation.objects.exists() and not DataSource.objects.exists()


def test_a_service_that_does_not_speak_http_is_refused(alice_client, settings) -> None:
    """A Redis answering on an allowed port: refused, its reply never shown."""
    with raw_server(f"-ERR {SECRET}\r\n".encode()) as port:
        response = _add(alice_client, _allow(settings, port))
    body = response.content.decode()
    assert response.status_code == 400 and "No Prometheus answers at" in body and SECRET not in body
    assert not DataSource.objects.exists()


def test_the_default_allow_list_refuses_redis_and_postgres_ports(alice_client, settings) -> None:
    import stepwise.settings as defaults

    settings.STEPWISE_ALLOWED_PROMETHEUS = defaults.STEPWISE_ALLOWED_PROMETHEUS
    for port in (6379, 5432, 22, 80, 8000):
        response = _add(alice_client, f"http://127.0.0.1:{port}")
        assert response.status_code == 400 and "is not allowed" in response.content.decode()
    assert not DataSource.objects.exists()


def _auth_required(method: str, path: str, headers: dict[str, str]):
    expected = "Basic " + base64.b64encode(b"alice:s3cr3t-pw").decode()
    if headers.get("Authorization") != expected:
        return 401, "text/plain", b"Unauthorized"
    return prometheus_like(method, path, headers)


def test_credentials_are_stored_apart_sent_as_auth_and_shown_masked(alice_client, settings) -> None:
    with http_server(_auth_required) as (url, seen):
        base = _allow(settings, url)
        with_creds = base.replace("http://", "http://alice:s3cr3t-pw@")
        response = _add(alice_client, with_creds)
        assert response.status_code == 302
        ds = DataSource.objects.get()
        assert ds.address == base and "s3cr3t" not in ds.address
        cred = DataSourceCredential.objects.get(datasource=ds)
        assert (cred.username, cred.password) == ("alice", "s3cr3t-pw")
        column = _password_column(cred.pk)
        assert "s3cr3t" not in column and column.startswith("gAAAAA")  # a Fernet token, never the password
        services.datasource_check(ds)  # later queries send them as basic auth
        ds.refresh_from_db()
        assert ds.state == DataSource.State.UP, ds.state_detail
        assert all(h.get("authorization", "").startswith("Basic ") for h in seen)
        page = alice_client.get(reverse("investigations:sources")).content.decode()
    assert "s3cr3t" not in page and "alice:••••••@127.0.0.1" in page
    assert "s3cr3t" not in ds.state_detail


def _password_column(pk: int) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT password FROM investigations_datasourcecredential WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def test_wrong_credentials_are_named_not_echoed(alice_client, settings) -> None:
    with http_server(_auth_required) as (url, _seen):
        base = _allow(settings, url)
        response = _add(alice_client, base.replace("http://", "http://alice:wrong@"))
    body = response.content.decode()
    assert response.status_code == 400 and "refused the credentials (HTTP 401)" in body
    assert body.count("wrong") == 1  # only the user's own input, given back in the field
    assert not DataSource.objects.exists()


def test_two_tenants_behind_one_host_and_port_are_two_jobs(settings, alice) -> None:
    """Item 7: /a and /b of one host:port were merged into one job (prom-<host>-<port>)."""
    with http_server(prometheus_like) as (url, _seen):
        base = _allow(settings, url)
        created = [
            investigation_create(
                title=t, source=SourceRequest(kind="url", prometheus_url=f"{base}/{t}"), owner=alice
            )
            for t in ("a", "b")
        ]
    jobs = [inv.jobs.get() if hasattr(inv, "jobs") else None for inv in created]
    assert Job.objects.count() == 2
    addresses = sorted(DataSource.objects.values_list("address", flat=True))
    assert addresses == [f"{base}/a", f"{base}/b"]
    assert len({j.job_id for j in Job.objects.all()}) == 2 and jobs
