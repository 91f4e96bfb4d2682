"""Database constraints that the services rely on: upserts, job keys, one primary job."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from investigations import services
from investigations.models import Investigation, InvestigationJob, Job, QueryResult, QueryRun

pytestmark = pytest.mark.django_db


def _result(run: QueryRun, name: str, **fields) -> QueryResult:
    return QueryResult(run=run, name=name, promql="up", **fields)


def test_recording_a_result_twice_updates_it_in_place(make_run) -> None:
    run = make_run()
    services.queryresults_record([_result(run, "up", ok=False, error="PrometheusTimeout: slow")])
    first = QueryResult.objects.get()
    services.queryresults_record(
        [_result(run, "up", ok=True, series_count=3, summary={"max": 1.0}), _result(run, "other", ok=True)]
    )
    again = QueryResult.objects.get(name="up")
    assert QueryResult.objects.count() == 2
    assert again.pk == first.pk
    assert (again.ok, again.error, again.series_count, again.summary) == (True, "", 3, {"max": 1.0})


def test_a_duplicate_result_name_in_a_run_is_refused(make_run) -> None:
    run = make_run()
    QueryResult.objects.create(run=run, name="up")
    with pytest.raises(IntegrityError), transaction.atomic():
        QueryResult.objects.create(run=run, name="up")


def test_the_same_name_may_appear_in_two_runs(make_run) -> None:
    services.queryresults_record([_result(make_run(), "up"), _result(make_run(), "up")])
    assert QueryResult.objects.count() == 2


def test_jobs_are_keyed_by_cluster_and_job_id() -> None:
    Job.objects.create(cluster="mi300", job_id="81234", job_dir="/a/81234-JAX-x")
    Job.objects.create(cluster="other", job_id="81234")
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.create(cluster="mi300", job_id="81234", job_dir="/a/81234-JAX-x-8N-TGS_1.000")


def test_an_investigation_has_at_most_one_primary_job() -> None:
    inv = Investigation.objects.create(title="Hang at step 41,200")
    a, b = Job.objects.create(job_id="1"), Job.objects.create(job_id="2")
    InvestigationJob.objects.create(investigation=inv, job=a, role=InvestigationJob.Role.PRIMARY)
    InvestigationJob.objects.create(investigation=inv, job=b, role=InvestigationJob.Role.BASELINE, position=1)
    assert list(inv.jobs.order_by("job_id")) == [a, b]
    with pytest.raises(IntegrityError), transaction.atomic():
        InvestigationJob.objects.filter(job=b).update(role=InvestigationJob.Role.PRIMARY)


def test_progress_cannot_exceed_the_total(make_run) -> None:
    run = make_run()
    with pytest.raises(IntegrityError), transaction.atomic():
        QueryRun.objects.filter(pk=run.pk).update(progress_done=run.progress_total + 1)
