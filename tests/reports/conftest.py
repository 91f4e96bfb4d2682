"""Fixtures for the report: a real diagnosis (the engine on a generated job served by a real Prometheus),
stored as the worker stores it, and users of two teams."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from investigations.models import DataSource, DiagnosisRun, Investigation, InvestigationJob, Job, TaskStatus
from investigations.services.decision import findings_record
from playbooks.diagnose import run_diagnosis
from playbooks.triage import triage_job

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _job_roots(settings, synth_root, tmp_path) -> Iterator[None]:
    """The generated jobs are the only job root; served copies go to a private work root, stopped after."""
    from playbooks import tsdb_server

    settings.STEPWISE_JOB_ROOTS = [synth_root]
    settings.STEPWISE_TSDB_VIEWS = tmp_path / "tsdb-views"
    yield
    tsdb_server.reap_leftovers(settings.STEPWISE_TSDB_VIEWS)


@pytest.fixture(scope="session")
def thermal(served_job) -> dict[str, Any]:
    """The thermal-straggler job diagnosed once per session: {"result", "triage", "job_dir"}."""
    client, _truth, job_dir = served_job("thermal-straggler")
    triage = triage_job(job_dir).to_dict()
    return {"result": run_diagnosis(client, triage=triage), "triage": triage, "job_dir": job_dir}


def make_case(
    thermal: dict[str, Any],
    *,
    title: str = "Slow job: thermal",
    team: str = "",
    owner=None,
    diagnosed: bool = True,
) -> Investigation:
    """Return an investigation of the thermal job with its triage done and (by default) its diagnosis stored."""
    investigation = Investigation.objects.create(title=title, team=team, owner=owner)
    triage = thermal["triage"] | {"state": "done", "finished": timezone.now().isoformat()}
    job, _ = Job.objects.get_or_create(
        job_id=str(thermal["triage"]["job"]["id"] or "thermal"),
        defaults={"job_dir": str(thermal["job_dir"]), "triage": triage},
    )
    InvestigationJob.objects.create(investigation=investigation, job=job, role="primary")
    if not job.datasources.exists():
        DataSource.objects.create(job=job, kind=DataSource.Kind.JOB_TSDB, address=str(thermal["job_dir"]))
    if diagnosed:
        store_diagnosis(investigation, job, thermal["result"])
    return investigation


def store_diagnosis(investigation: Investigation, job: Job, result: dict[str, Any]) -> DiagnosisRun:
    """Store a finished diagnosis run and its findings as the worker does."""
    run = DiagnosisRun.objects.create(
        investigation=investigation,
        job=job,
        status=TaskStatus.DONE,
        result=result,
        finished=timezone.now(),
        playbooks=["thermal"],
    )
    findings_record(run, result["findings"])
    Investigation.objects.filter(pk=investigation.pk).update(incident_class=result["diagnosis"]["class"])
    return run


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user(
        "alice", email="alice@example.org", password="pw-alice-12345"
    )


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob", email="bob@example.org", password="pw-bob-12345")


@pytest.fixture
def alice_client(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def bob_client(bob) -> Client:
    client = Client()
    client.force_login(bob)
    return client


@pytest.fixture
def case(db, thermal) -> Investigation:
    return make_case(thermal)
