"""Prometheus URL sources: credentials kept apart from the address, and a probe before anything is stored.

A URL a user types may carry `user:password@`. The password must never be shown to other users, written
into a message or a log line, so it is split off before the address is stored: the address keeps the
scheme, host, port and path only, and a `DataSourceCredential` row holds the rest (pages show the user
name and a mask). The client gets them as httpx basic auth, never inside its base URL.

Every new URL source is probed first (`prometheus_identify`), outside any transaction: the allow-list
(host and port) admits it, and `/api/v1/status/buildinfo` answers as a Prometheus does (JSON with a
version and a Go version). Anything else is refused with what was wrong (not a Prometheus, HTTP status,
unreachable), never with the body the server sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

from django.conf import settings

from investigations.models import DataSource, DataSourceCredential, Job
from playbooks.prometheus import (
    PrometheusBadResponse,
    PrometheusClient,
    PrometheusError,
    PrometheusForbidden,
    PrometheusQueryError,
    PrometheusTimeout,
    PrometheusUnreachable,
)

from . import DataSourceError, prometheus_url_check

PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class SourceURL:
    """A Prometheus URL split for storage: `url` without credentials, `auth` = (user, password) or None."""

    url: str
    auth: tuple[str, str] | None = None


def url_split(text: str) -> SourceURL:
    """Return the URL checked against the allow-list, without its credentials (kept in `auth`)."""
    parts = urlsplit(text.strip())
    auth = None
    if parts.username is not None or parts.password is not None:
        auth = (unquote(parts.username or ""), unquote(parts.password or ""))
        host = parts.netloc.rpartition("@")[2]
        parts = parts._replace(netloc=host)
    return SourceURL(prometheus_url_check(urlunsplit(parts)), auth)


def _not_prometheus(url: str, exc: PrometheusError) -> str:
    if isinstance(exc, PrometheusTimeout):
        return f"No Prometheus answers at {url}: it did not answer within {probe_timeout():g} s."
    if isinstance(exc, PrometheusUnreachable):
        return f"No Prometheus answers at {url}: nothing accepts connections there."
    status = getattr(exc, "status", None)
    if status in (401, 403):
        return f"The server at {url} refused the credentials (HTTP {status})."
    if isinstance(exc, (PrometheusBadResponse, PrometheusQueryError, PrometheusForbidden)):
        shown = f" (HTTP {status})" if status else ""
        return f"The server at {url} is not a Prometheus{shown}: it does not answer the Prometheus API."
    return f"No Prometheus answers at {url}."


def prometheus_identify(source: SourceURL) -> str:
    """Return the Prometheus version answering at `source`; DataSourceError saying what was wrong if none.

    Never quotes what the server sent: a loopback Redis or PostgreSQL must not be read through the form.
    """
    try:
        with PrometheusClient(source.url, timeout=probe_timeout(), retries=1, auth=source.auth) as client:
            build = client.buildinfo()
    except PrometheusError as exc:
        raise DataSourceError(_not_prometheus(source.url, exc)) from None
    version, go = build.get("version"), build.get("goVersion")
    if not (isinstance(version, str) and version and isinstance(go, str) and go.startswith("go")):
        raise DataSourceError(
            f"The server at {source.url} is not a Prometheus: its build info has no version."
        )
    return version[:40]


def url_source_probe(text: str) -> SourceURL:
    """Return the split URL once the allow-list admits it and a Prometheus answers there (no database)."""
    source = url_split(text)
    prometheus_identify(source)
    return source


def url_source_store(source: SourceURL, *, job: Job | None = None) -> DataSource:
    """Return the URL data source for a probed `source` (its address and credentials), created or reused.

    The caller probed it first (url_source_probe) and runs this inside its transaction.
    """
    ds = None
    if job is not None:
        ds = job.datasources.filter(kind=DataSource.Kind.URL, address=source.url).first()
    if ds is None:
        ds = DataSource.objects.create(kind=DataSource.Kind.URL, address=source.url, job=job)
    if source.auth is not None:
        DataSourceCredential.objects.update_or_create(
            datasource=ds, defaults={"username": source.auth[0], "password": source.auth[1]}
        )
    return ds


def datasource_auth(ds: DataSource) -> tuple[str, str] | None:
    """Return the basic-auth credentials of a URL data source, or None."""
    if ds.kind != DataSource.Kind.URL:
        return None
    cred = DataSourceCredential.objects.filter(datasource=ds).first()
    return (cred.username, cred.password) if cred is not None else None


def probe_timeout() -> float:
    """Seconds the probe of a new source waits (at most the Prometheus timeout of the settings)."""
    return min(PROBE_TIMEOUT_S, float(settings.STEPWISE_PROMETHEUS_TIMEOUT))
