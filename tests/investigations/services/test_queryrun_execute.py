"""Query runs against a real Prometheus serving a generated job's TSDB store results that match the data."""

from __future__ import annotations

from pathlib import Path

import pytest

from investigations import services
from investigations.models import DataSource, QueryResult, QueryRun
from playbooks.prometheus import PrometheusUnreachable

pytestmark = pytest.mark.django_db


@pytest.fixture
def healthy(job_factory, synth_root: Path, view_root: Path, settings) -> tuple[DataSource, dict]:
    """The lead's small healthy job, registered, with the session's TSDB work root."""
    job_dir, truth = job_factory("healthy")
    settings.STEPWISE_JOB_ROOTS = [synth_root]
    settings.STEPWISE_TSDB_VIEWS = view_root
    _, source = services.job_register(job_dir)
    return source, truth


def _claimed(source: DataSource, queries) -> QueryRun:
    run = services.queryrun_create(source, queries)
    QueryRun.objects.filter(pk=run.pk).update(status=QueryRun.Status.RUNNING)
    return run


def test_sample_queries_match_the_generated_job(healthy, settings) -> None:
    source, truth = healthy
    settings.STEPWISE_RESULT_MAX_SERIES = 10_000  # every metric family is kept, none omitted
    run = services.queryrun_execute(_claimed(source, services.SAMPLE_QUERIES).pk)
    results = {r.name: r for r in run.results.all()}

    assert (run.progress_done, run.progress_total, run.error) == (4, 4, "")
    assert all(r.ok for r in results.values()), {n: r.error for n, r in results.items()}
    assert results["buildinfo"].summary["build"]["version"].startswith("2.")

    step = results["training-step"].summary
    assert (step["min"], step["max"], step["last"]) == (
        truth["first_step"],
        truth["last_step"],
        truth["last_step"],
    )
    assert step["window"]["start"] <= truth["data_range"][0] + 60
    assert step["window"]["end"] >= truth["data_range"][1] - 60

    up_hosts = {s["labels"]["instance"].split(":")[0] for s in results["up"].summary["series"]}
    assert set(truth["hosts"]) <= up_hosts

    families = results["metric-families"]
    names = {s["labels"]["__name__"] for s in families.summary["series"]}
    assert families.series_count == len(families.summary["series"]) + families.summary["omitted_series"]
    assert families.summary["omitted_series"] == 0, "the test raises the series cap over the family count"
    assert {"up", "tb_step"} <= names

    source.refresh_from_db()
    assert source.state == DataSource.State.UP
    assert source.served_url.startswith("http://127.0.0.1:")


def test_it_keeps_partial_results_with_explicit_errors(healthy) -> None:
    source, _ = healthy
    queries = [{"name": "good", "promql": "up"}, {"name": "bad", "promql": "sum(("}]
    run = services.queryrun_execute(_claimed(source, queries).pk)
    good, bad = QueryResult.objects.get(name="good"), QueryResult.objects.get(name="bad")
    assert good.ok and good.series_count > 0
    assert not bad.ok and bad.error.startswith("PrometheusQueryError:")
    assert run.error == "1 of 2 queries failed"
    assert run.progress_done == 2


def test_running_again_replaces_the_results(healthy) -> None:
    source, _ = healthy
    run = _claimed(source, services.SAMPLE_QUERIES)
    services.queryrun_execute(run.pk)
    before = dict(QueryResult.objects.values_list("name", "pk"))
    services.queryrun_execute(run.pk)
    assert dict(QueryResult.objects.values_list("name", "pk")) == before


def test_it_stops_at_the_next_batch_when_cancelled(healthy, settings) -> None:
    source, _ = healthy
    settings.STEPWISE_QUERY_CONCURRENCY = 1
    run = _claimed(source, services.SAMPLE_QUERIES)
    QueryRun.objects.filter(pk=run.pk).update(status=QueryRun.Status.CANCELLED)
    services.queryrun_execute(run.pk)
    assert not QueryResult.objects.exists()


def test_it_raises_a_transient_error_when_every_query_failed_on_one(url_source) -> None:
    """Nothing listens on the port: the errors are recorded and the first is raised for a retry."""
    queries = [{"name": "up", "promql": "up", "end": 1e9}, {"name": "one", "promql": "1", "end": 1e9}]
    run = _claimed(url_source, queries)
    with pytest.raises(PrometheusUnreachable):
        services.queryrun_execute(run.pk)
    assert set(QueryResult.objects.values_list("name", "ok")) == {("up", False), ("one", False)}
    url_source.refresh_from_db()
    assert url_source.state == DataSource.State.DOWN


def test_it_refuses_a_job_source_outside_the_roots(job_root: Path, tmp_path: Path) -> None:
    source = DataSource.objects.create(kind=DataSource.Kind.JOB_TSDB, address=str(tmp_path))
    run = _claimed(source, services.SAMPLE_QUERIES)
    with pytest.raises(services.DataSourceError, match="outside the allowed job roots"):
        services.queryrun_execute(run.pk)


@pytest.mark.parametrize(
    ("queries", "message"),
    [
        ([], "at least one query"),
        ([{"name": "a", "promql": "up"}, {"name": "a", "promql": "up"}], "empty or repeated"),
        ([{"name": "a", "promql": "up", "kind": "table"}], "kind 'table'"),
        ([{"name": "a", "promql": ""}], "has no PromQL"),
        ([{"name": "a", "promql": "up", "kind": "range", "start": 10, "end": 5}], "before start"),
    ],
)
def test_it_refuses_malformed_query_specs(url_source, queries, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        services.queryrun_create(url_source, queries)
