"""The investigation page: header, jobs, triage, data source, and the discovery/diagnosis/timeline regions."""

from __future__ import annotations

import pytest
from django.urls import reverse

from .investigation_helpers import HTMX, assert_login_required, make_investigation

pytestmark = pytest.mark.django_db

TRIAGE = {
    "state": "done",
    "job": {"id": "81234", "status": "cancelled", "triage_class": "hang", "first_step": 0, "last_step": 100,
            "crash_time": 1773435780.0},
    "matches": [{"class": "hang", "line": 0, "text": "steps stopped at 100"},
                {"class": "cancelled", "line": 590, "text": "cancelled (exit 143)"}],
    "progress": {"steps_total": 200, "restored_from": None, "step_time_s": 16.87, "last_step_time": 1773434101.0,
                 "lost_steps": 0, "last_checkpoint_step": 100, "tgs_trend_pct": -0.2},
    "config": {"NNODES": "4", "JOB_ID": "81234"},
    "nodes": ["dgx031", "dgx032"],
    "prometheus": {"head": "dgx031", "port": 9192, "tunnel": "ssh -J a@login root@dgx031"},
    "heartbeat_accused": ["dgx032"],
    "unreadable": ["2 line(s) of binary data skipped (first at line 7)"],
    "details": {"training_time_s": 1925.0, "wall_s": 4620.0, "lines": 597},
}  # fmt: skip


def test_it_needs_a_login(client) -> None:
    assert_login_required(client, reverse("investigations:detail", args=[1]))


def test_it_is_404_for_an_unknown_investigation(alice_client) -> None:
    assert alice_client.get(reverse("investigations:detail", args=[999])).status_code == 404


def test_it_shows_the_triage_summary(alice_client) -> None:
    investigation = make_investigation(triage=TRIAGE, team="infra", severity="sev1")
    body = alice_client.get(reverse("investigations:detail", args=[investigation.pk])).content.decode()
    for text in (
        "GPU hang", 'data-testid="triage-status">cancelled<', 'data-testid="triage-class">hang<',
        "2026-03-13 21:03:00 UTC",  # crash time, in UTC
        "Lost steps", "16.87 s", "-0.2 %", "32 min 05 s / 1 h 17 min", "dgx031:9192", "dgx032",
        "binary data skipped", "NNODES", "ssh -J a@login root@dgx031", "L590",
    ):  # fmt: skip
        assert text in body, text
    # The verdict and the diagnosis first; the triage and discovery details below, folded.
    assert body.index('id="verdict"') < body.index('id="diagnosis"') < body.index('id="triage"')
    assert body.index('id="triage"') < body.index('id="discovery-status"')
    assert body.index('id="diagnosis"') < body.index('id="timeline')


def test_a_running_triage_polls_and_a_finished_one_does_not(alice_client) -> None:
    investigation = make_investigation(triage={"state": "running"})
    url = reverse("investigations:detail", args=[investigation.pk])
    body = alice_client.get(url).content.decode()
    assert (
        f'hx-get="{reverse("investigations:triage", args=[investigation.pk])}" hx-trigger="every 1s"' in body
    )
    investigation.jobs.update(triage=TRIAGE, triage_status="done")
    body = alice_client.get(url).content.decode()
    assert 'hx-trigger="every 1s"' not in body.split('id="triage"')[1].split("</section>")[0]


def test_htmx_can_ask_for_the_jobs_region_alone(alice_client) -> None:
    investigation = make_investigation(triage=TRIAGE)
    url = reverse("investigations:detail", args=[investigation.pk])
    body = alice_client.get(url, {"region": "jobs"}, **HTMX).content.decode()
    assert body.lstrip().startswith('<section id="jobs"') and "hang" in body
