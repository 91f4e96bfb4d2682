"""`investigations.access`: the one access check every view that takes an investigation id goes through."""

from __future__ import annotations

import re
from unittest import mock

import pytest
from django.contrib.auth.models import AnonymousUser
from django.http import Http404
from django.urls import URLPattern, get_resolver, reverse

from investigations import access
from investigations.models import Investigation

from .views.investigation_helpers import make_investigation

pytestmark = pytest.mark.django_db


def _investigation_routes() -> list[URLPattern]:
    resolver = get_resolver()
    app = next(r for r in resolver.url_patterns if getattr(r, "app_name", None) == "investigations")
    return [p for p in app.url_patterns if "<int:investigation_id>" in str(p.pattern)]


def _url(pattern: URLPattern, investigation_id: int) -> str:
    kwargs = {"investigation_id": investigation_id}
    for name in re.findall(r"<(?:\w+:)?(\w+)>", str(pattern.pattern)):
        kwargs.setdefault(name, "x" if name == "panel" else 1)
    if "panel" in kwargs:
        kwargs["panel"] = "step_time"
    return reverse(f"investigations:{pattern.name}", kwargs=kwargs)


def test_every_investigation_url_is_refused_when_the_check_says_no(alice_client) -> None:
    """Each view that takes an investigation id asks `investigation_allowed`; a refusal is a 404 on all of them,
    reads with action "view", changes with "edit" or "manage"."""
    investigation = make_investigation()
    routes = _investigation_routes()
    assert len(routes) > 20, "the URL list was not found"
    for pattern in routes:
        url = _url(pattern, investigation.pk)
        with mock.patch.object(access, "investigation_allowed", return_value=False) as allowed:
            response = alice_client.get(url)
            method = "get"
            if response.status_code == 405:
                response = alice_client.post(url, {"status": "open"})
                method = "post"
        assert response.status_code == 404, (pattern.name, response.status_code)
        assert allowed.call_count == 1, pattern.name
        action = (
            allowed.call_args.args[2]
            if len(allowed.call_args.args) > 2
            else allowed.call_args.kwargs["action"]
        )
        assert action == ("view" if method == "get" else "edit"), (pattern.name, action)


def test_the_same_urls_answer_when_the_check_says_yes(alice_client) -> None:
    investigation = make_investigation()
    response = alice_client.get(reverse("investigations:detail", args=[investigation.pk]))
    assert response.status_code == 200
    assert "GPU hang" in response.content.decode()


def test_changing_owner_or_team_needs_manage(alice_client) -> None:
    investigation = make_investigation()
    url = reverse("investigations:update", args=[investigation.pk])
    with mock.patch.object(access, "investigation_allowed", return_value=False) as allowed:
        assert alice_client.post(url, {"team": "infra"}).status_code == 404
    assert allowed.call_args.args[2] == "manage"
    assert Investigation.objects.get(pk=investigation.pk).team == ""


def test_it_refuses_anonymous_users_and_unknown_actions(alice) -> None:
    investigation = make_investigation()
    assert access.get_investigation_or_404(alice, investigation.pk) == investigation
    with pytest.raises(Http404) as refused:
        access.get_investigation_or_404(AnonymousUser(), investigation.pk)
    with pytest.raises(Http404) as missing:
        access.get_investigation_or_404(alice, investigation.pk + 1000)
    # The 404 page says it in words, the same for a refusal and a missing one (it does not tell which).
    assert (
        str(refused.value)
        == f"No investigation #{investigation.pk} that you can see: it was deleted, or its team has not shared it with you."
    )
    assert str(missing.value).replace(str(investigation.pk + 1000), "N") == str(refused.value).replace(
        str(investigation.pk), "N"
    )
    with pytest.raises(ValueError, match="unknown action 'delete'"):
        access.get_investigation_or_404(alice, investigation.pk, action="delete")  # type: ignore[arg-type]
