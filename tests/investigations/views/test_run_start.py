"""Starting the sample queries creates a queued run and enqueues it only after commit."""

from __future__ import annotations

from unittest import mock

import pytest
from django.urls import reverse
from kombu.exceptions import OperationalError

from investigations import services
from investigations.models import QueryRun
from investigations.tasks import queryrun_execute_task

pytestmark = pytest.mark.django_db


def test_it_creates_a_queued_run_and_enqueues_it_on_commit(
    alice_client, alice, url_source, django_capture_on_commit_callbacks
) -> None:
    with mock.patch.object(queryrun_execute_task, "delay") as delay:
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            response = alice_client.post(reverse("investigations:run_start", args=[url_source.pk]))
        run = QueryRun.objects.get()
        assert delay.call_count == 0  # nothing leaves before the commit
        assert len(callbacks) == 1
        callbacks[0]()
    delay.assert_called_once_with(run.pk)
    assert response.status_code == 302
    assert response["Location"] == reverse("investigations:run_detail", args=[run.pk])
    assert run.status == QueryRun.Status.QUEUED
    assert run.created_by == alice
    assert [q["name"] for q in run.queries] == [q["name"] for q in services.SAMPLE_QUERIES]
    assert run.progress_total == len(services.SAMPLE_QUERIES)


@pytest.mark.django_db(transaction=True)  # the enqueue happens on a real commit
def test_it_fails_the_run_when_the_broker_is_unreachable(alice_client, url_source) -> None:
    with mock.patch.object(
        queryrun_execute_task, "delay", side_effect=OperationalError("Connection refused")
    ):
        response = alice_client.post(reverse("investigations:run_start", args=[url_source.pk]))
    run = QueryRun.objects.get()
    assert response.status_code == 302
    assert run.status == QueryRun.Status.FAILED
    assert run.error == "Could not reach the task broker: Connection refused"


def test_it_answers_404_for_an_unknown_source(alice_client) -> None:
    assert alice_client.post(reverse("investigations:run_start", args=[999])).status_code == 404


def test_it_needs_a_post(alice_client, url_source) -> None:
    assert alice_client.get(reverse("investigations:run_start", args=[url_source.pk])).status_code == 405
