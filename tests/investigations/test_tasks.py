"""The query-run task claims its row, marks the outcome, and retries only transient errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings as django_settings

from investigations import services
from investigations.models import DataSource, QueryResult, QueryRun
from investigations.tasks import queryrun_execute_task
from investigations.tasks.shell import retry_delay
from playbooks.prometheus import PrometheusUnreachable

pytestmark = pytest.mark.django_db


def test_it_runs_a_queued_run_to_done(job_factory, synth_root: Path, view_root: Path, settings) -> None:
    settings.STEPWISE_JOB_ROOTS = [synth_root]
    settings.STEPWISE_TSDB_VIEWS = view_root
    _, source = services.job_register(job_factory("healthy")[0])
    run = services.queryrun_create(source, services.SAMPLE_QUERIES)
    queryrun_execute_task(run.pk)
    run.refresh_from_db()
    assert run.status == QueryRun.Status.DONE
    assert run.started is not None and run.finished is not None
    assert run.results.filter(ok=True).count() == 4


@pytest.mark.parametrize("status", [QueryRun.Status.RUNNING, QueryRun.Status.DONE, QueryRun.Status.CANCELLED])
def test_it_leaves_a_run_that_is_not_queued(make_run, status: str) -> None:
    """A second delivery (acks_late) or a cancelled run does nothing."""
    run = make_run(status)
    queryrun_execute_task(run.pk)
    run.refresh_from_db()
    assert run.status == status
    assert not QueryResult.objects.exists()


def test_it_requeues_the_run_and_retries_when_prometheus_is_unreachable(make_run) -> None:
    run = make_run()  # its source is a loopback port where nothing listens
    # Called directly, Task.retry() re-raises the error instead of scheduling the retry.
    with pytest.raises(PrometheusUnreachable):
        queryrun_execute_task(run.pk)
    run.refresh_from_db()
    assert run.status == QueryRun.Status.QUEUED
    assert run.error.endswith("(retrying in 2 s)")


def test_it_fails_the_run_when_retries_are_exhausted(make_run) -> None:
    run = make_run()
    queryrun_execute_task.apply(args=[run.pk], retries=django_settings.STEPWISE_TASK_MAX_RETRIES)
    run.refresh_from_db()
    assert run.status == QueryRun.Status.FAILED
    assert run.error.startswith(f"Gave up after {django_settings.STEPWISE_TASK_MAX_RETRIES + 1} attempts:")
    assert run.finished is not None


def test_it_records_a_permanent_error_without_retrying(job_root: Path, tmp_path: Path) -> None:
    source = DataSource.objects.create(kind=DataSource.Kind.JOB_TSDB, address=str(tmp_path / "elsewhere"))
    run = services.queryrun_create(source, services.SAMPLE_QUERIES)
    queryrun_execute_task(run.pk)
    run.refresh_from_db()
    assert run.status == QueryRun.Status.FAILED
    assert "outside the allowed job roots" in run.error


def test_the_retry_backoff_grows_and_is_capped() -> None:
    assert [retry_delay(n) for n in range(7)] == [2, 4, 8, 16, 32, 60, 60]
