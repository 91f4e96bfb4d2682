"""Item 9: sign-in is rate limited and locked out per user and address (django-axes), failures are logged,
an idle session is signed out, and a user can change their password."""

from __future__ import annotations

import logging
import time

import pytest
import time_machine
from axes.models import AccessAttempt
from django.urls import reverse

pytestmark = pytest.mark.django_db
PASSWORD = "alice-correct-horse-42"


def _login(client, username: str, password: str, addr: str = "10.0.0.1"):
    return client.post(reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=addr)


def test_repeated_wrong_passwords_lock_that_user_from_that_address(
    client, alice, django_user_model, caplog
) -> None:
    django_user_model.objects.create_user("bob", password="bob-correct-horse-42")
    with caplog.at_level(logging.INFO, logger="axes"):
        answers = [_login(client, "alice", f"wrong-{i}").status_code for i in range(5)]
    assert answers == [200, 200, 200, 200, 429]  # the 5th failure locks
    assert caplog.text.count("User login failed") == 5  # each failure is logged...
    attempt = AccessAttempt.objects.get()  # ...and recorded with the user and the address
    assert (attempt.username, attempt.ip_address, attempt.failures_since_start) == ("alice", "10.0.0.1", 5)
    locked = _login(client, "alice", PASSWORD)
    assert locked.status_code == 429 and "Too many failed sign-ins" in locked.content.decode()
    assert "_auth_user_id" not in client.session
    # Neither another user from that address nor alice from another address is locked.
    assert _login(client, "bob", "bob-correct-horse-42").status_code == 302
    client.logout()
    assert _login(client, "alice", PASSWORD, addr="10.0.0.2").status_code == 302


def test_the_lock_lifts_after_the_cool_off(client, alice) -> None:
    for i in range(5):
        _login(client, "alice", f"wrong-{i}")
    with time_machine.travel(time.time() + 16 * 60, tick=False):
        assert _login(client, "alice", PASSWORD).status_code == 302


def test_an_idle_session_is_signed_out(client, alice, settings) -> None:
    settings.STEPWISE_SESSION_IDLE_SECONDS = 3600
    assert _login(client, "alice", PASSWORD).status_code == 302
    home = reverse("investigations:home")
    with time_machine.travel(time.time() + 1800, tick=False):
        assert client.get(home).status_code == 200  # active within the hour: still signed in
    with time_machine.travel(time.time() + 1800 + 3700, tick=False):
        response = client.get(home)
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert "_auth_user_id" not in client.session


def test_a_user_changes_their_password(client, alice) -> None:
    url = reverse("password_change")
    assert client.get(url).status_code == 302  # login required
    _login(client, "alice", PASSWORD)
    assert client.get(url).status_code == 200
    new = "a-new-long-passphrase-77"
    response = client.post(url, {"old_password": "wrong", "new_password1": new, "new_password2": new})
    assert response.status_code == 200 and "alert-error" in response.content.decode()
    response = client.post(url, {"old_password": PASSWORD, "new_password1": new, "new_password2": new})
    assert response.status_code == 302 and response["Location"] == reverse("password_change_done")
    client.logout()
    assert _login(client, "alice", PASSWORD, addr="10.0.0.9").status_code == 200
    assert _login(client, "alice", new, addr="10.0.0.9").status_code == 302
