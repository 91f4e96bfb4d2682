"""Every page needs a signed-in user: anonymous requests to any URL pattern go to a login page."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.shortcuts import resolve_url
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RegexPattern, RoutePattern

_SAMPLE = {"int": "1", "str": "x", "slug": "x", "path": "x/y", "uuid": str(uuid.UUID(int=1))}
_CONVERTER = re.compile(r"<(?:(?P<conv>\w+):)?(?P<name>\w+)>")
_GROUP = re.compile(r"\(\?P<\w+>([^()]*)\)")

# The only views that must answer anonymous users.
PUBLIC = {"/login/", "/admin/login/"}
#: Public and answered with a redirect to a static file: the icon every browser asks every site for.
PUBLIC_STATIC = {"/favicon.ico"}
# Pages opened by a secret token instead of a session (the report's share link: 404 for an unknown token,
# tests/reports/test_exports.py).
TOKEN_PAGES = {"/share/x/"}
# Public endpoints that are no page: where browsers report CSP violations (POST only, no session, logs only;
# tests/security/test_headers.py).
NOT_PAGES = {"/csp-report/"}


def _route_sample(pattern: RoutePattern) -> str:
    return _CONVERTER.sub(lambda m: _SAMPLE[m.group("conv") or "str"], str(pattern))


def _regex_sample(pattern: RegexPattern) -> str:
    text = pattern.regex.pattern.lstrip("^").rstrip("$").removesuffix(r"\Z")

    def group(m: re.Match[str]) -> str:
        body = m.group(1)
        # (?P<app_label>auth|investigations): take the first alternative; anything else: a digit.
        first = body.split("|")[0]
        return first if re.fullmatch(r"[\w-]+", first) else "1"

    return _GROUP.sub(group, text).replace("\\", "")


def _urls(patterns, prefix: str = "") -> Iterator[str]:
    for entry in patterns:
        pattern = entry.pattern
        part = _route_sample(pattern) if isinstance(pattern, RoutePattern) else _regex_sample(pattern)
        if isinstance(entry, URLResolver):
            yield from _urls(entry.url_patterns, prefix + part)
        elif isinstance(entry, URLPattern):
            yield "/" + prefix + part


ALL_URLS = sorted(set(_urls(get_resolver().url_patterns)))


def test_the_resolver_walk_finds_the_app_pages() -> None:
    """The walk covers the app's own pages, not only the admin."""
    assert {"/", "/runs/1/", "/sources/1/sample-run/", "/sources/add/", "/runs/1/cancel/", "/logout/"} <= set(
        ALL_URLS
    )
    assert len(ALL_URLS) > 20


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post"])
@pytest.mark.parametrize(
    "url", [u for u in ALL_URLS if u not in PUBLIC | PUBLIC_STATIC | TOKEN_PAGES | NOT_PAGES]
)
def test_anonymous_requests_are_sent_to_login(client, url: str, method: str) -> None:
    """Anonymous GET and POST to any non-public URL redirect to a login page."""
    response = getattr(client, method)(url)
    login_pages = (resolve_url(settings.LOGIN_URL), "/admin/login/")
    assert response.status_code == 302, f"{method.upper()} {url} answered {response.status_code}"
    assert response["Location"].startswith(login_pages), f"{url} -> {response['Location']}"


@pytest.mark.django_db
def test_the_login_pages_answer_anonymous_users(client) -> None:
    """The public pages really are public."""
    for url in PUBLIC:
        assert client.get(url).status_code == 200, url


@pytest.mark.django_db
def test_the_favicon_answers_anonymous_users_with_the_app_icon(client) -> None:
    """/favicon.ico is not a 404 (nor a login redirect): it points at the app's icon."""
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"].endswith("/favicon.svg")
    assert finders.find("favicon.svg"), "the icon is a static file of the app"
