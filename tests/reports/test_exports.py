"""Exports of the whole report: Markdown, JSON, self-contained HTML (the PDF: test_pdf.py), the
ticket block, ticket links, the revocable share link, the export zone."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from investigations.models import PinnedChart
from reports.models import Report
from reports.services import sections

from .conftest import HTMX

pytestmark = pytest.mark.django_db

FIGURE = {
    "data": [
        {
            "type": "scatter",
            "mode": "lines",
            "name": "tx-hpc-0003 GPU 3",
            "x": [1, 2, 3, 4],
            "y": [71.0, 84.5, 92.0, 95.5],
        }
    ],
    "layout": {"title": {"text": "GPU temperature"}, "yaxis": {"title": {"text": "°C"}}},
}


def url(name, case, *args):
    return reverse(f"reports:{name}", args=[case.pk, *args])


def test_markdown_export_holds_every_section_and_names_the_zone(case, alice_client) -> None:
    response = alice_client.get(url("export", case, "md"))
    text = response.content.decode()
    assert response["Content-Disposition"].startswith("attachment;") and text.startswith(f"# {case.title}")
    assert "## Summary" in text and "## Recommended next steps" in text and "## Findings and verdicts" in text
    assert "**Times:** UTC" in text


def test_json_export_has_the_whole_investigation(case, alice_client) -> None:
    alice_client.post(url("comment", case), {"body": "first"}, **HTMX)
    data = json.loads(alice_client.get(url("export", case, "json")).content)
    assert data["schema"] == "stepwise.report/1" and data["investigation"]["id"] == case.pk
    assert [s["key"] for s in data["report"]["sections"]][:2] == ["summary", "impact"]
    assert data["findings"] and {"key", "evidence", "verdict", "onset"} <= set(data["findings"][0])
    assert data["comments"][0]["body"] == "first" and data["history"]
    assert data["diagnosis"]["class"] == "thermal-straggler"


def test_times_follow_the_reports_export_zone(case, alice_client) -> None:
    sections.report_for(case)
    bad = alice_client.post(url("export_zone", case), {"export_tz": "Mars/Olympus"}, **HTMX)
    assert bad.status_code == 400
    alice_client.post(url("export_zone", case), {"export_tz": "Asia/Tokyo"}, **HTMX)
    data = json.loads(alice_client.get(url("export", case, "json")).content)
    assert data["time_zone"] == "Asia/Tokyo" and data["exported_at"].endswith("+09:00")
    assert "(Asia/Tokyo)" in alice_client.get(url("export", case, "md")).content.decode()


def test_html_export_is_self_contained(case, alice_client, alice) -> None:
    PinnedChart.objects.create(investigation=case, title="GPU temperature", figure=FIGURE, created_by=alice)
    html = alice_client.get(url("export", case, "html")).content.decode()
    assert "data:image/png;base64," in html and "<link" not in html and "<script" not in html


def test_copy_for_ticket_names_class_culprits_onset_and_permalink(case, alice_client) -> None:
    text = alice_client.get(url("ticket", case)).content.decode()
    assert "Class: `thermal-straggler`" in text and "Culprits: " in text and " UTC" in text
    assert f"http://testserver/investigations/{case.pk}/report/" in text


def test_ticket_links_are_validated_http_urls(case, alice_client) -> None:
    sections.report_for(case)
    assert (
        alice_client.post(url("ticket_add", case), {"url": "javascript:alert(1)"}, **HTMX).status_code == 400
    )
    assert (
        alice_client.post(
            url("ticket_add", case), {"url": "https://jira.example.org/browse/OPS-7"}, **HTMX
        ).status_code
        == 200
    )
    assert "OPS-7" in alice_client.get(url("page", case)).content.decode()


def test_the_share_link_shows_the_report_without_queries_until_revoked(case, alice_client, client) -> None:
    case.owner = alice_client.get(url("page", case)).wsgi_request.user
    case.save()
    alice_client.post(url("share", case), {"action": "create"}, **HTMX)
    token = Report.objects.get(investigation=case).share_token
    shared = client.get(reverse("reports:shared", args=[token]))  # no account
    html = shared.content.decode()
    assert shared.status_code == 200 and "Recommended next steps" in html
    assert "Query: `" not in html and "hw_gpu" not in html
    alice_client.post(url("share", case), {"action": "revoke"}, **HTMX)
    assert client.get(reverse("reports:shared", args=[token])).status_code == 404
    assert client.get(reverse("reports:shared", args=["x"])).status_code == 404
    assert client.get(reverse("reports:shared", args=["x" * 43])).status_code == 404
