"""The run page polls its run-status partial while the run is in flight and stops when it finishes."""

from __future__ import annotations

import pytest
from django.urls import reverse

from investigations.models import QueryRun

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def test_the_full_page_polls_while_queued(alice_client, make_run) -> None:
    run = make_run(QueryRun.Status.QUEUED)
    response = alice_client.get(reverse("investigations:run_detail", args=[run.pk]))
    body = response.content.decode()
    assert response.status_code == 200
    assert "<html" in body
    assert 'id="run-status"' in body
    assert 'hx-trigger="every 1s"' in body
    assert response["Vary"].count("HX-Request") == 1


def test_the_partial_keeps_polling_while_running(alice_client, make_run) -> None:
    run = make_run(QueryRun.Status.RUNNING)
    body = alice_client.get(reverse("investigations:run_detail", args=[run.pk]), **HTMX).content.decode()
    assert "<html" not in body
    assert body.strip().startswith('<section id="run-status"')
    assert 'hx-trigger="every 1s"' in body
    assert f'hx-get="{reverse("investigations:run_detail", args=[run.pk])}"' in body


def test_the_partial_stops_polling_when_done(alice_client, make_run) -> None:
    run = make_run(QueryRun.Status.DONE, results=[("up", True, 1.0), ("broken", False, None)])
    response = alice_client.get(reverse("investigations:run_detail", args=[run.pk]), **HTMX)
    body = response.content.decode()
    assert response.status_code == 200
    assert 'id="run-status"' in body
    assert "hx-trigger" not in body
    assert "PrometheusQueryError: bad query" in body
    assert "<strong>up</strong>" in body


def test_a_failed_run_shows_its_error_and_stops_polling(alice_client, make_run) -> None:
    run = make_run(QueryRun.Status.FAILED)
    QueryRun.objects.filter(pk=run.pk).update(error="Cannot serve the TSDB: locked")
    body = alice_client.get(reverse("investigations:run_detail", args=[run.pk]), **HTMX).content.decode()
    assert "Cannot serve the TSDB: locked" in body
    assert "hx-trigger" not in body


def test_it_answers_404_for_an_unknown_run(alice_client) -> None:
    assert alice_client.get(reverse("investigations:run_detail", args=[999]), **HTMX).status_code == 404
