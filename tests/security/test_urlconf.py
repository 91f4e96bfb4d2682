"""The whole URL conf, walked as an attacker would: anonymous (every URL), a user of another team (every
URL naming a restricted investigation), and a viewer of the team (every state-changing POST of the
investigations app). Built on tests/investigations/views/test_access.py's walk of the resolver."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.shortcuts import resolve_url
from django.urls import URLPattern, URLResolver, get_resolver

from investigations.models import DataSource, Investigation, InvestigationJob, Job
from reports.models import Membership, Restriction, Role, Team
from tests.investigations.views.test_access import ALL_URLS, NOT_PAGES, PUBLIC, PUBLIC_STATIC, TOKEN_PAGES

#: Answer anonymous users by design (each tested where it is defined): login pages, the favicon redirect,
#: the report's share link (a secret token), the CSP report endpoint.
ANONYMOUS_OK = PUBLIC | PUBLIC_STATIC | TOKEN_PAGES | NOT_PAGES

pytestmark = pytest.mark.django_db


def _patterns(patterns, prefix: str = ""):
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _patterns(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry


def _investigation_urls(inv_id: int, app: str | None = None) -> list[str]:
    """Return every URL naming an investigation, with its id filled in (other ids: 1)."""
    urls = set()
    for route, entry in _patterns(get_resolver().url_patterns):
        if "<int:investigation_id>" not in route or route.startswith("^") or "admin/" in route:
            continue
        if app and not (entry.lookup_str or "").startswith(app):
            continue
        url = route.replace("<int:investigation_id>", str(inv_id))
        url = re.sub(r"<(?:int:)?\w+>", "1", url)
        urls.add("/" + url)
    return sorted(urls)


@pytest.mark.parametrize("method", ["get", "post"])
@pytest.mark.parametrize("url", [u for u in ALL_URLS if u not in ANONYMOUS_OK])
def test_anonymous_is_sent_to_login_everywhere(client, url: str, method: str) -> None:
    response = getattr(client, method)(url)
    assert response.status_code == 302, f"{method.upper()} {url} answered {response.status_code}"
    assert response["Location"].startswith((resolve_url(settings.LOGIN_URL), "/admin/login/"))


@pytest.fixture
def red(django_user_model) -> dict:
    """A restricted investigation of team red, with a job and a data source; alice owns it."""
    alice = django_user_model.objects.create_user("alice-red", password="x")
    team = Team.objects.create(name="red")
    Membership.objects.create(team=team, user=alice, role=Role.OWNER)
    inv = Investigation.objects.create(title="red secret", team="red", owner=alice)
    Restriction.objects.create(investigation=inv)
    job = Job.objects.create(job_id="81234", name="red-job")
    DataSource.objects.create(job=job, kind="url", address="http://127.0.0.1:9090")
    InvestigationJob.objects.create(investigation=inv, job=job, role="primary")
    return {"inv": inv, "team": team}


def test_the_walk_finds_the_investigation_pages(red) -> None:
    urls = _investigation_urls(red["inv"].pk)
    assert f"/investigations/{red['inv'].pk}/" in urls and len(urls) > 15


@pytest.mark.parametrize("method", ["get", "post"])
def test_another_team_never_sees_or_changes_a_restricted_investigation(
    client, django_user_model, red, method: str
) -> None:
    client.force_login(django_user_model.objects.create_user("mallory", password="x"))
    leaks = []
    for url in _investigation_urls(red["inv"].pk):
        response = getattr(client, method)(url)
        if response.status_code not in (403, 404, 405):
            leaks.append(f"{method.upper()} {url} -> {response.status_code}")
        elif b"red secret" in response.content or b"red-job" in response.content:
            leaks.append(f"{method.upper()} {url} shows the investigation")
    assert leaks == []
    red["inv"].refresh_from_db()
    assert red["inv"].title == "red secret" and red["inv"].status == "open"


def test_a_viewer_changes_nothing(client, django_user_model, red) -> None:
    viewer = django_user_model.objects.create_user("victor", password="x")
    Membership.objects.create(team=red["team"], user=viewer, role=Role.VIEWER)
    client.force_login(viewer)
    assert client.get(f"/investigations/{red['inv'].pk}/").status_code == 200
    allowed = []
    for url in _investigation_urls(red["inv"].pk, app="investigations"):
        response = client.post(url, {"title": "hacked", "status": "resolved", "severity": "sev1"})
        if response.status_code not in (403, 404, 405):
            allowed.append(f"POST {url} -> {response.status_code}")
    red["inv"].refresh_from_db()
    assert (red["inv"].title, red["inv"].status) == ("red secret", "open")
    assert allowed == []
