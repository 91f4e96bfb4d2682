"""People's notes on the timeline (issue 13): editors add them at a step or a time, everyone who can view
sees them on every panel and in the list, editors delete them, and the activity stream says who did."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.cache import cache
from django.urls import reverse

from investigations import services
from investigations.models import Investigation, InvestigationJob, TimelineNote
from investigations.services import notes as notes_svc
from playbooks import tsdb_server
from reports.models import Membership, Role, Team
from reports.services.activity import activity
from reports.services.sections import report_for

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def served(job_factory, synth_root, settings, django_user_model):
    """A team investigation on a generated job; alice edits, victor only views."""
    settings.STEPWISE_JOB_ROOTS = [synth_root]
    cache.clear()
    job_dir, truth = job_factory("thermal-straggler")
    job, _ = services.job_register(job_dir)
    team = Team.objects.create(name="infra")
    alice = django_user_model.objects.create_user("alice", password="x")
    victor = django_user_model.objects.create_user("victor", password="x")
    Membership.objects.create(team=team, user=alice, role=Role.EDITOR)
    Membership.objects.create(team=team, user=victor, role=Role.VIEWER)
    investigation = Investigation.objects.create(title="slow job", team="infra")
    InvestigationJob.objects.create(investigation=investigation, job=job, role=InvestigationJob.Role.PRIMARY)
    yield investigation, job, truth, alice, victor
    tsdb_server.reap_leftovers(settings.STEPWISE_TSDB_VIEWS)
    cache.clear()


def _add(client, investigation, job, where: str, text: str):
    url = reverse("investigations:timeline_note_add", args=[investigation.pk])
    return client.post(url, {"job": job.pk, "where": where, "text": text}, **HTMX)


def test_an_editor_adds_a_note_at_a_step_and_it_is_a_mark_on_every_panel(client, served) -> None:
    investigation, job, _truth, alice, victor = served
    client.force_login(alice)
    response = _add(client, investigation, job, "step 40", "restarted the NCCL watchdog <b>here</b>")
    assert response.status_code == 200
    note = TimelineNote.objects.get()
    assert note.step == 40 and note.created_by == alice
    body = response.content.decode()
    assert "restarted the NCCL watchdog &lt;b&gt;here&lt;/b&gt;" in body  # escaped, never markup
    # Through the step axis: the note's time is when the job reached step 40, and the step back from it.
    session = services.timeline.timeline_open(job.current_datasource(), services.timeline.TimelineView())
    try:
        assert note.at == pytest.approx(float(session.ctx.axis.time_at(40.0)))
    finally:
        session.close()
    # The viewer sees it on the panels (step and time axes) and in the list, without a form or a button.
    client.force_login(victor)
    for x in ("step", "time-utc"):
        panel = client.get(
            reverse("investigations:timeline_panel", args=[investigation.pk, "step_time"]),
            {"job": job.pk, "x": x},
        ).json()
        marks = [m for m in panel["figure"]["layout"]["meta"]["marks"] if m["kind"] == "note"]
        assert [m["label"] for m in marks] == ["✎ restarted the NCCL watchdog <b>here</b>"]
        texts = [a["text"] for a in panel["figure"]["layout"]["annotations"]]
        assert any(
            t.startswith("✎ restarted the NCCL watchdog &lt;b&gt;") for t in texts
        )  # Plotly draws it as text
    listing = client.get(reverse("investigations:timeline_notes", args=[investigation.pk]), {"job": job.pk})
    assert "restarted the NCCL watchdog" in listing.content.decode()
    assert "Add note" not in listing.content.decode() and "Delete" not in listing.content.decode()


def test_a_viewer_can_neither_add_nor_delete(client, served) -> None:
    investigation, job, _truth, alice, victor = served
    note = notes_svc.note_add(investigation, job, where="step 10", text="kept", user=alice)
    client.force_login(victor)
    assert _add(client, investigation, job, "step 20", "mine").status_code == 403
    delete = reverse("investigations:timeline_note_delete", args=[investigation.pk, note.pk])
    assert client.post(delete, {"job": job.pk}, **HTMX).status_code == 403
    assert list(TimelineNote.objects.values_list("text", flat=True)) == ["kept"]


def test_a_note_at_a_time_gets_its_step_and_a_bad_place_is_a_message(client, served) -> None:
    investigation, job, truth, alice, _victor = served
    client.force_login(alice)
    at = dt.datetime.fromtimestamp(truth["onset"], dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert _add(client, investigation, job, at, "GPU got hot").status_code == 200
    note = TimelineNote.objects.get()
    assert note.at == pytest.approx(int(truth["onset"]), abs=1) and note.step is not None and note.step > 0
    for where, message in [
        ("yesterday", "is neither a step"),
        ("step 99999999", "is not in this job&#x27;s data"),
        ("", "Say where the note goes"),
    ]:
        response = _add(client, investigation, job, where, "typed text kept")
        assert response.status_code == 400, where
        assert message in response.content.decode() and 'value="typed text kept"' in response.content.decode()
    assert TimelineNote.objects.count() == 1


def test_an_editor_deletes_a_note_and_the_activity_says_who_added_and_deleted_it(client, served) -> None:
    investigation, job, _truth, alice, _victor = served
    client.force_login(alice)
    _add(client, investigation, job, "step 60", "checkpoint looked slow")
    note = TimelineNote.objects.get()
    delete = reverse("investigations:timeline_note_delete", args=[investigation.pk, note.pk])
    response = client.post(delete, {"job": job.pk}, **HTMX)
    assert response.status_code == 200 and "checkpoint looked slow" not in response.content.decode()
    assert not TimelineNote.objects.exists()
    assert client.post(delete, {"job": job.pk}, **HTMX).status_code == 404
    events = [(e.who, e.what) for e in activity(report_for(investigation))]
    assert ("alice", "added a timeline note at step 60: checkpoint looked slow") in events
    assert ("alice", "deleted a timeline note at step 60: checkpoint looked slow") in events
