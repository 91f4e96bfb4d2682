"""The login page is Stepwise's own styled page; logout needs a POST."""

from __future__ import annotations

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_it_renders_the_styled_login_page(client) -> None:
    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert "registration/login.html" in [t.name for t in response.templates]
    body = response.content.decode()
    assert "stepwise.css" in body
    assert 'class="card login-card"' in body
    assert "Sign in" in body


def test_it_signs_in_and_lands_on_the_investigations_list(client, alice) -> None:
    response = client.post(reverse("login"), {"username": "alice", "password": "alice-correct-horse-42"})
    assert response.status_code == 302
    assert response["Location"] == reverse("investigations:home")
    landing = client.get(response["Location"])
    body = landing.content.decode()
    assert landing.status_code == 200
    assert "<h1>Investigations</h1>" in body and 'id="investigation-table"' in body
    assert landing.wsgi_request.user == alice


def test_it_shows_an_error_for_a_wrong_password(client, alice) -> None:
    response = client.post(reverse("login"), {"username": "alice", "password": "wrong"})
    assert response.status_code == 200
    assert 'class="alert alert-error"' in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_logout_needs_a_post(alice_client) -> None:
    assert alice_client.get(reverse("logout")).status_code == 405
    response = alice_client.post(reverse("logout"))
    assert response.status_code == 302
    assert response["Location"] == reverse("login")
    assert alice_client.get(reverse("investigations:home")).status_code == 302
