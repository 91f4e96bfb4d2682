"""POSTs need a CSRF token, including the login form and htmx requests."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from investigations.models import QueryRun

pytestmark = pytest.mark.django_db


@pytest.fixture
def csrf_client(alice) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    return client


def test_a_post_without_a_token_is_refused(csrf_client, url_source) -> None:
    response = csrf_client.post(reverse("investigations:run_start", args=[url_source.pk]))
    assert response.status_code == 403
    assert not QueryRun.objects.exists()


def test_the_login_form_needs_a_token(alice) -> None:
    client = Client(enforce_csrf_checks=True)
    response = client.post(reverse("login"), {"username": "alice", "password": "alice-correct-horse-42"})
    assert response.status_code == 403


def test_a_post_with_the_page_token_is_accepted(
    csrf_client, url_source, django_capture_on_commit_callbacks
) -> None:
    """The token rendered in the page (form field and hx-headers) passes the check."""
    page = csrf_client.get(reverse("investigations:home"))
    token = page.context["csrf_token"]
    assert f'"X-CSRFToken": "{token}"' in page.content.decode()
    with django_capture_on_commit_callbacks(execute=False):
        response = csrf_client.post(
            reverse("investigations:run_start", args=[url_source.pk]), HTTP_X_CSRFTOKEN=str(token)
        )
    assert response.status_code == 302
    assert QueryRun.objects.count() == 1
