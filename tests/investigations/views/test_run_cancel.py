"""Cancelling stops a queued or running run; a finished run stays as it was."""

from __future__ import annotations

import pytest
from django.urls import reverse

from investigations.models import QueryRun

pytestmark = pytest.mark.django_db


def test_it_cancels_a_queued_run(alice_client, make_run) -> None:
    run = make_run(QueryRun.Status.QUEUED)
    response = alice_client.post(reverse("investigations:run_cancel", args=[run.pk]))
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == QueryRun.Status.CANCELLED
    assert run.finished is not None


def test_it_leaves_a_finished_run_alone(alice_client, make_run) -> None:
    run = make_run(QueryRun.Status.DONE)
    alice_client.post(reverse("investigations:run_cancel", args=[run.pk]))
    run.refresh_from_db()
    assert run.status == QueryRun.Status.DONE
