"""The admin lists and shows every model of the app, with stored JSON read-only."""

from __future__ import annotations

import html

import pytest
from django.contrib import admin
from django.urls import reverse
from django.utils import timezone

from investigations.models import (
    DataSource,
    DataSourceCredential,
    DiagnosisRun,
    Finding,
    Job,
    PinnedChart,
    PlaybookExecution,
    QueryResult,
    QueryRun,
    RunHeartbeat,
    TimelineNote,
)

from .investigation_helpers import make_investigation

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", password="root-correct-horse-42")
    client.force_login(user)
    return client


def test_every_model_of_the_app_is_registered() -> None:
    from django.apps import apps

    models = set(apps.get_app_config("investigations").get_models())
    assert models <= set(admin.site._registry)


def _one_of_each_model() -> None:
    """Create one row of every model of the app, so that every change page has something to show."""
    investigation = make_investigation(
        triage={"state": "done", "job": {"status": "failed", "triage_class": "oom-host"}},
        source={"kind": DataSource.Kind.URL, "address": "http://127.0.0.1:9090"},
    )
    job = Job.objects.get()
    datasource = DataSource.objects.get()
    DataSourceCredential.objects.create(datasource=datasource, username="reader", password="secret")
    query_run = QueryRun.objects.create(datasource=datasource, investigation=investigation, queries=[])
    QueryResult.objects.create(run=query_run, name="up", promql="up", ok=True, summary={"series": []})
    run = DiagnosisRun.objects.create(investigation=investigation, job=job, datasource=datasource)
    PlaybookExecution.objects.create(run=run, playbook="gpu_health")
    finding = Finding.objects.create(
        investigation=investigation,
        job=job,
        run=run,
        playbook="gpu_health",
        rule="hot",
        incident_class="thermal",
        title="GPU 0 runs hot",
    )
    PinnedChart.objects.create(investigation=investigation, job=job, finding=finding, title="temp", figure={})
    TimelineNote.objects.create(investigation=investigation, job=job, at=1.0, step=1.0, text="a note")
    RunHeartbeat.objects.create(
        kind=RunHeartbeat.Kind.DIAGNOSIS, run_id=run.pk, task_id="t-1", task_name="plan", beat=timezone.now()
    )


def test_every_changelist_and_change_page_renders(admin_client_) -> None:
    _one_of_each_model()
    from django.apps import apps

    for model in apps.get_app_config("investigations").get_models():
        meta = model._meta
        listing = admin_client_.get(
            reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"), {"q": "x"}
        )
        assert listing.status_code == 200, meta.model_name
        obj = model.objects.first()
        assert obj is not None, f"no {meta.model_name} row: add one to _one_of_each_model"
        page = admin_client_.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk]))
        assert page.status_code == 200, meta.model_name
        assert str(obj) in html.unescape(page.content.decode()), meta.model_name


def test_the_triage_is_shown_read_only(admin_client_) -> None:
    make_investigation(triage={"state": "done", "job": {"status": "failed", "triage_class": "oom-host"}})
    job = Job.objects.get()
    body = admin_client_.get(reverse("admin:investigations_job_change", args=[job.pk])).content.decode()
    assert "&quot;triage_class&quot;: &quot;oom-host&quot;" in body
    assert 'name="triage"' not in body
