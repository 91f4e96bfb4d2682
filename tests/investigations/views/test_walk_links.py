"""Links a first-time user follows from the demo's pages carry only what is known."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from investigations.models import Finding

from .investigation_helpers import make_investigation

pytestmark = pytest.mark.django_db


def test_a_finding_without_an_onset_links_to_itself_without_a_dash_for_a_time(alice_client) -> None:
    investigation = make_investigation()
    job = investigation.jobs.first()
    kw = {
        "investigation": investigation,
        "job": job,
        "playbook": "exporter_health",
        "incident_class": "healthy",
    }
    no_onset = Finding.objects.create(rule="families_missing", title="Signals not collected", **kw)
    timed = Finding.objects.create(rule="hot", title="Hot GPU", onset=1772359200.0, **kw)
    body = alice_client.get(reverse("reports:page", args=[investigation.pk])).content.decode()
    pattern = r'<a class="permalink strong" href="([^"]+)"[^>]*>([^<]+)</a>'
    links = {title: href for href, title in re.findall(pattern, body)}
    assert links[no_onset.title].startswith(reverse("reports:page", args=[investigation.pk]) + "#finding-")
    assert "?at=2026-03-01%2010%3A00%3A00%20UTC" in links[timed.title]
