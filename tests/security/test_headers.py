"""Item 5 (second half): every page carries a Content-Security-Policy (Django's own middleware) that runs
scripts from the app's static files only, and a Permissions-Policy; violations have somewhere to go.
The Chromium side (a violation is blocked and reported) is tests/browser/test_csp.py."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

pytestmark = pytest.mark.django_db
TEMPLATES = Path(settings.BASE_DIR) / "templates"


def _directives(header: str) -> dict[str, list[str]]:
    out = {}
    for part in header.split(";"):
        words = part.split()
        if words:
            out[words[0]] = words[1:]
    return out


@pytest.mark.parametrize("url", ["/login/", "/", "/sources/", "/investigations/new/"])
def test_pages_carry_the_policies(client, django_user_model, url) -> None:
    client.force_login(django_user_model.objects.create_user("alice", password="x"))
    response = client.get(url)
    csp = _directives(response.headers["Content-Security-Policy"])
    assert csp["script-src"] == ["'self'"]
    assert "'unsafe-inline'" not in csp["script-src"] and "'unsafe-eval'" not in csp["script-src"]
    assert csp["default-src"] == ["'self'"] and csp["object-src"] == ["'none'"]
    assert csp["frame-ancestors"] == ["'none'"] and csp["base-uri"] == ["'none'"]
    assert csp["report-uri"] == ["/csp-report/"]
    policy = response.headers["Permissions-Policy"]
    for feature in ("camera=()", "microphone=()", "geolocation=()", "payment=()", "usb=()"):
        assert feature in policy


def test_no_template_has_an_inline_script_or_handler() -> None:
    """The policy blocks them: any left would silently stop working."""
    offenders = []
    for path in TEMPLATES.rglob("*.html"):
        text = path.read_text()
        for match in re.finditer(r"<script\b[^>]*>", text):
            if "src=" not in match.group(0) and "application/json" not in match.group(0):
                offenders.append(f"{path.name}: {match.group(0)}")
        offenders += [f"{path.name}: {m}" for m in re.findall(r"\s(on[a-z]+|hx-on[:-][\w:-]*)=", text)]
        offenders += [f"{path.name}: javascript: URL" for _ in re.findall(r"href=\"javascript:", text)]
    assert offenders == []


def test_the_report_endpoint_logs_a_violation_without_a_session(client, caplog) -> None:
    report = {
        "csp-report": {
            "document-uri": "http://127.0.0.1/x",
            "violated-directive": "script-src-elem",
            "blocked-uri": "inline",
            "disposition": "enforce",
        }
    }
    with caplog.at_level(logging.WARNING, logger="stepwise.csp"):
        response = client.post(
            reverse("csp_report"), json.dumps(report), content_type="application/csp-report"
        )
    assert response.status_code == 204
    assert "CSP violation" in caplog.text and "script-src-elem" in caplog.text


def test_the_report_endpoint_refuses_garbage_and_gets(client) -> None:
    assert (
        client.post(reverse("csp_report"), "{not json", content_type="application/csp-report").status_code
        == 400
    )
    assert client.get(reverse("csp_report")).status_code == 405
