"""Adding a baseline or comparison job to an investigation from its page."""

from __future__ import annotations

import pytest
from django.urls import reverse

from investigations.models import InvestigationJob

from .investigation_helpers import (
    assert_login_required,
    job_alone_in,
    make_investigation,
    roots,  # noqa: F401 (a fixture, used through usefixtures)
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("roots")]


def test_it_needs_a_login(client) -> None:
    assert_login_required(client, reverse("investigations:job_add", args=[1]), "post")


def test_it_adds_a_baseline_and_enqueues_its_triage(
    alice_client,
    job_factory,
    django_capture_on_commit_callbacks,
) -> None:
    job_dir, truth = job_factory("healthy")
    investigation = make_investigation()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = alice_client.post(
            reverse("investigations:job_add", args=[investigation.pk]),
            {"job_dir": str(job_dir), "role": "baseline"},
        )
    assert response.status_code == 302
    link = InvestigationJob.objects.get(role="baseline")
    assert link.job.job_id == truth["job_id"] and link.job.triage["state"] == "queued"
    assert len(callbacks) == 1


def test_a_baseline_is_added_by_its_job_id(alice_client, job_factory, job_root, settings) -> None:
    """The baseline's job id is enough: its folder is found under the roots."""
    generated, truth = job_factory("healthy")
    job_dir = job_alone_in(job_root, generated)
    settings.STEPWISE_JOB_ROOTS = [job_root]
    investigation = make_investigation()
    response = alice_client.post(
        reverse("investigations:job_add", args=[investigation.pk]),
        {"job_dir": truth["job_id"], "role": "baseline"},
    )
    assert response.status_code == 302
    link = InvestigationJob.objects.get(role="baseline")
    assert link.job.job_id == truth["job_id"] and link.job.job_dir == str(job_dir.resolve())


def test_a_path_outside_the_roots_is_refused_on_the_page(alice_client) -> None:
    investigation = make_investigation()
    response = alice_client.post(
        reverse("investigations:job_add", args=[investigation.pk]), {"job_dir": "/etc", "role": "compare"}
    )
    assert response.status_code == 400
    assert "outside the allowed job roots" in response.content.decode()
    assert InvestigationJob.objects.count() == 1
