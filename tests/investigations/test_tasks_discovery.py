"""The discovery task claims the data source's discovery, stores it, retries only transient errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings as django_settings

from investigations import services
from investigations.models import DataSource, TaskStatus
from investigations.services import discovery as disc
from investigations.tasks.discovery import datasource_discover_task
from playbooks.prometheus import PrometheusUnreachable

pytestmark = pytest.mark.django_db


@pytest.fixture
def job_source(job_factory, synth_root: Path, view_root: Path, settings) -> DataSource:
    settings.STEPWISE_JOB_ROOTS = [synth_root]
    settings.STEPWISE_TSDB_VIEWS = view_root
    _, source = services.job_register(job_factory("healthy")[0])
    return source


def test_it_runs_a_queued_discovery_to_done(job_source: DataSource) -> None:
    disc.discovery_request(job_source)
    datasource_discover_task(job_source.pk)
    job_source.refresh_from_db()
    assert job_source.discovery_status == TaskStatus.DONE
    assert job_source.discovery["profile"] == "amd"
    assert job_source.discovered is not None
    assert job_source.state == DataSource.State.UP


def test_a_rerun_replaces_the_discovery(job_source: DataSource) -> None:
    """Run twice: one stored discovery, newer, the same content."""
    disc.discovery_request(job_source)
    datasource_discover_task(job_source.pk)
    job_source.refresh_from_db()
    first, first_at = job_source.discovery, job_source.discovered
    assert disc.discovery_request(job_source) is True
    datasource_discover_task(job_source.pk)
    job_source.refresh_from_db()
    assert job_source.discovery_status == TaskStatus.DONE
    assert job_source.discovered > first_at
    strip = ("discovered_at", "requests", "seconds")
    assert {k: v for k, v in job_source.discovery.items() if k not in strip} == {
        k: v for k, v in first.items() if k not in strip
    }
    assert DataSource.objects.count() == 1


@pytest.mark.parametrize("status", ["", TaskStatus.RUNNING, TaskStatus.DONE, TaskStatus.FAILED])
def test_it_leaves_a_discovery_that_is_not_queued(url_source: DataSource, status: str) -> None:
    """A second delivery (acks_late) or a source nobody asked to discover does nothing."""
    DataSource.objects.filter(pk=url_source.pk).update(discovery_status=status)
    datasource_discover_task(url_source.pk)
    url_source.refresh_from_db()
    assert url_source.discovery_status == status
    assert url_source.discovery == {} and url_source.discovered is None


def test_it_requeues_and_retries_when_prometheus_is_unreachable(url_source: DataSource) -> None:
    disc.discovery_request(url_source)  # nothing listens on its port
    # Called directly, Task.retry() re-raises the error instead of scheduling the retry.
    with pytest.raises(PrometheusUnreachable):
        datasource_discover_task(url_source.pk)
    url_source.refresh_from_db()
    assert url_source.discovery_status == TaskStatus.QUEUED
    assert url_source.discovery_error.endswith("(retrying in 2 s)")
    assert url_source.state == DataSource.State.DOWN


def test_it_fails_when_retries_are_exhausted(url_source: DataSource) -> None:
    disc.discovery_request(url_source)
    datasource_discover_task.apply(args=[url_source.pk], retries=django_settings.STEPWISE_TASK_MAX_RETRIES)
    url_source.refresh_from_db()
    assert url_source.discovery_status == TaskStatus.FAILED
    assert url_source.discovery_error.startswith(
        f"Gave up after {django_settings.STEPWISE_TASK_MAX_RETRIES + 1} attempts:"
    )


def test_it_records_a_permanent_error_without_retrying(job_root: Path, tmp_path: Path) -> None:
    source = DataSource.objects.create(kind=DataSource.Kind.JOB_TSDB, address=str(tmp_path / "elsewhere"))
    disc.discovery_request(source)
    datasource_discover_task(source.pk)
    source.refresh_from_db()
    assert source.discovery_status == TaskStatus.FAILED
    assert "outside the allowed job roots" in source.discovery_error


def test_a_discovered_source_has_its_timeline_computed_ahead(
    job_source: DataSource, url_source: DataSource, django_capture_on_commit_callbacks, monkeypatch
) -> None:
    """Once discovered, the source's default timeline is queued for the worker (after commit); a discovery
    that did not finish queues nothing."""
    from investigations.tasks import timeline as timeline_tasks

    sent: list[int] = []
    monkeypatch.setattr(timeline_tasks.timeline_warm_task, "delay", lambda pk: sent.append(pk))
    disc.discovery_request(job_source)
    with django_capture_on_commit_callbacks(execute=True):
        datasource_discover_task(job_source.pk)
    assert sent == [job_source.pk]
    disc.discovery_request(url_source)  # nothing listens on its port
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(PrometheusUnreachable):
        datasource_discover_task(url_source.pk)
    assert sent == [job_source.pk]


def test_a_live_source_is_not_computed_ahead(url_source: DataSource) -> None:
    """A Prometheus URL (a live head node, which serves the training job) is left alone: nothing is sent."""
    from investigations.services import timeline

    assert timeline.timeline_warm(url_source) == 0  # nothing listens on its port: no query was tried
