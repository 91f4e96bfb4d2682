"""A user of another team gets 404 on every URL pattern that names a restricted investigation or anything
in it, for GET and POST, and never sees it in a list, a search, the inbox or an export."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RoutePattern

from investigations.models import PinnedChart, QueryRun
from reports.models import ActionItem, Membership, Restriction, Team, TicketLink
from reports.services import conversation, sections

pytestmark = pytest.mark.django_db

_CONVERTER = re.compile(r"<(?:(?P<conv>\w+):)?(?P<name>\w+)>")


def _routes(patterns, prefix: str = "") -> Iterator[str]:
    for entry in patterns:
        if not isinstance(entry.pattern, RoutePattern):
            continue  # the admin's regex URLs: staff only, tested by the admin's own checks
        part = str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _routes(entry.url_patterns, prefix + part)
        elif isinstance(entry, URLPattern):
            yield "/" + prefix + part


ROUTES = sorted(set(_routes(get_resolver().url_patterns)))


@pytest.fixture
def secret(case, alice, django_user_model):
    """The thermal investigation, restricted to team red (alice); carol of team blue is signed in."""
    carol = django_user_model.objects.create_user("carol", password="pw-carol-12345")
    red, blue = Team.objects.create(name="red"), Team.objects.create(name="blue")
    Membership.objects.create(team=red, user=alice, role="owner")
    Membership.objects.create(team=blue, user=carol, role="owner")
    case.team, case.title = "red", "Secret thermal incident"
    case.save()
    Restriction.objects.create(investigation=case)
    report = sections.report_for(case)
    job = case.job_links.get().job
    chart = PinnedChart.objects.create(investigation=case, title="secret chart", figure={"data": []})
    comment = conversation.comment_add(report, body="secret words", user=alice)
    item = ActionItem.objects.create(report=report, text="secret action")
    link = TicketLink.objects.create(investigation=case, url="https://jira.example.org/browse/SECRET-1")
    run = QueryRun.objects.create(datasource=job.datasources.get(), investigation=case, queries=[])
    ids = {
        "investigation_id": case.pk,
        "finding_id": case.findings.first().pk,
        "chart_id": chart.pk,
        "run_id": run.pk,
        "source_id": job.datasources.get().pk,
        "item_id": item.pk,
        "link_id": link.pk,
        "history_id": report.sections.get(key="summary").history.first().history_id,
        "job_id": job.pk,
        "comment_id": comment.pk,
    }
    client = Client()
    client.force_login(carol)
    return {"client": client, "ids": ids, "investigation": case, "job": job}


def _fill(route: str, ids: dict[str, int]) -> str | None:
    """Return the route with this investigation's ids, or None when it names nothing of it."""
    names = [m.group("name") for m in _CONVERTER.finditer(route)]
    if not any(n in ids for n in names):
        return None
    values = ids | {"key": "summary", "fmt": "json", "panel": "training", "token": "x" * 43, "path": "x"}
    return _CONVERTER.sub(lambda m: str(values.get(m.group("name"), "1")), route)


def test_the_walk_covers_the_report_and_the_investigation_pages() -> None:
    assert {
        "/investigations/<int:investigation_id>/report/",
        "/investigations/<int:investigation_id>/",
        "/runs/<int:run_id>/",
        "/sources/<int:source_id>/sample-run/",
    } <= set(ROUTES)


@pytest.mark.parametrize("route", [r for r in ROUTES if "<" in r and "token" not in r])
def test_every_url_of_a_restricted_investigation_is_404_for_another_team(secret, route) -> None:
    url = _fill(route, secret["ids"])
    if url is None:
        pytest.skip("names nothing of an investigation")
    client = secret["client"]
    for method in ("get", "post"):
        response = getattr(client, method)(url)
        assert response.status_code in (404, 405), f"{method.upper()} {url} answered {response.status_code}"
        assert b"Secret thermal" not in response.content and b"secret" not in response.content.lower()


@pytest.mark.parametrize(
    "path", ["/", "/?q=Secret", "/?q=thermal", "/sources/", "/inbox/", "/investigations/new/"]
)
def test_lists_and_searches_never_show_it(secret, path) -> None:
    response = secret["client"].get(path)
    assert response.status_code == 200
    body = response.content.decode()
    assert "Secret thermal" not in body and f"/investigations/{secret['investigation'].pk}/" not in body
