"""The report page and its actions through the views (Django test client; htmx requests)."""

from __future__ import annotations

import re

import pytest
from django.core import mail
from django.urls import reverse

from investigations.models import Finding, QueryRun
from reports.models import HumanFinding, InboxItem, Verdict
from reports.services import sections

from .conftest import HTMX

pytestmark = pytest.mark.django_db


def url(name, case, *args):
    return reverse(f"reports:{name}", args=[case.pk, *args])


def test_the_page_shows_every_section_and_the_findings(case, alice_client) -> None:
    body = alice_client.get(url("page", case)).content.decode()
    for title in ("Summary", "Impact", "Metric evidence", "Anomalies detected", "Recommended next steps"):
        assert f">{title}</a></h2>" in body
    assert "thermal-straggler" in body and 'data-testid="finding"' in body
    assert 'property="og:title"' in body


def test_the_investigation_page_links_to_the_report(case, alice_client) -> None:
    body = alice_client.get(reverse("investigations:detail", args=[case.pk])).content.decode()
    assert url("page", case) in body


def test_markdown_is_rendered_and_sanitised(case, alice_client) -> None:
    report = sections.report_for(case)
    s = report.sections.get(key="source_trace")
    evil = (
        '**bold** <script>alert(1)</script> [x](javascript:alert(1)) <img src=x onerror="alert(1)">\n\n'
        '<a href="#" onclick="alert(1)">raw</a>'
    )
    alice_client.post(
        url("section_save", case, "source_trace"), {"base_version": s.version, "body": evil}, **HTMX
    )
    body = alice_client.get(url("page", case)).content.decode()
    assert "<strong>bold</strong>" in body
    assert "<script>alert(1)" not in body and 'href="javascript:' not in body
    # Raw HTML is shown as text, never as tags: no <img> with its handler, no <a> with onclick.
    assert "<img" not in body and "&lt;img src=x" in body
    assert '<a href="#" onclick' not in body


def test_saving_over_a_newer_version_merges_or_answers_409_with_both_texts(
    case, alice_client, bob_client
) -> None:
    report = sections.report_for(case)
    s = report.sections.get(key="source_trace")
    base = "a\nb\nc\nd\ne"
    alice_client.post(url("section_save", case, s.key), {"base_version": s.version, "body": base}, **HTMX)
    v = s.version + 1
    alice_client.post(
        url("section_save", case, s.key), {"base_version": v, "body": base.replace("a", "A")}, **HTMX
    )
    merged = bob_client.post(
        url("section_save", case, s.key), {"base_version": v, "body": base.replace("e", "E")}, **HTMX
    )
    assert merged.status_code == 200 and "Merged with alice" in merged.content.decode()
    conflict = bob_client.post(
        url("section_save", case, s.key), {"base_version": v, "body": base.replace("a", "Z")}, **HTMX
    )
    html = conflict.content.decode()
    assert conflict.status_code == 409 and 'data-testid="mine"' in html and 'data-testid="theirs"' in html
    s.refresh_from_db()
    assert s.body == "A\nb\nc\nd\nE"


def test_a_finding_is_rejected_only_with_a_reason_and_the_verdict_survives_a_rediagnosis(
    case, alice_client
) -> None:
    finding = Finding.objects.filter(investigation=case).exclude(severity="info").first()
    response = alice_client.post(
        url("verdict", case, finding.pk), {"value": "rejected", "reason": ""}, **HTMX
    )
    assert response.status_code == 400 and "Say why" in response.content.decode()
    response = alice_client.post(
        url("verdict", case, finding.pk),
        {"value": "rejected", "reason": "Checkpoint spike, not heat", "note": "see *logs*"},
        **HTMX,
    )
    html = response.content.decode()
    assert response.status_code == 200 and "Checkpoint spike, not heat" in html and "<em>logs</em>" in html
    verdict = Verdict.objects.get()
    assert verdict.value == "rejected" and verdict.history.count() == 1
    # A re-run replaces the finding row's fields but keeps its key: the verdict still applies.
    Finding.objects.filter(pk=finding.pk).update(title="re-run title")
    assert "Checkpoint spike, not heat" in alice_client.get(url("page", case)).content.decode()


def test_a_human_finding_with_log_lines_freezes_them(case, alice_client) -> None:
    job = case.job_links.get().job
    match = job.triage["matches"][0] if job.triage.get("matches") else None
    if match is None:
        pytest.skip("this generated job's log has no failure signature to pick")
    alice_client.post(
        url("finding_add", case),
        {"title": "The log says so", "kind": "log", "severity": "warning", "log_line": [match["line"]]},
        **HTMX,
    )
    hf = HumanFinding.objects.get()
    assert hf.evidence["lines"][0]["text"] == match["text"]


def test_a_human_finding_with_a_query_runs_it_on_the_jobs_source_and_freezes_the_result(
    case, alice_client, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = alice_client.post(
            url("finding_add", case),
            {
                "title": "GPU 3 is hot",
                "kind": "query",
                "promql": "max by (host) (hw_gpu_temperature_celsius)",
                "start": "",
                "end": "",
            },
            **HTMX,
        )
    assert response.status_code == 200 and len(callbacks) == 1
    hf = HumanFinding.objects.get()
    run = QueryRun.objects.get(pk=hf.evidence["run_id"])
    assert run.queries[0]["promql"] == "max by (host) (hw_gpu_temperature_celsius)"
    assert hf.evidence["state"] == "running"
    # The worker's task runs it (here in-process) against the real served TSDB; then the page freezes
    # the result into the finding.
    from investigations.tasks import queryrun_execute_task

    queryrun_execute_task.apply(args=[run.pk])
    alice_client.get(url("page", case))
    hf.refresh_from_db()
    assert hf.evidence["state"] == "done" and hf.evidence["series_count"] > 0
    assert hf.evidence["result"]["series"][0]["max"] > 0
    run.delete()  # the source's run is gone: the finding still renders from its frozen copy
    assert "GPU 3 is hot" in alice_client.get(url("page", case)).content.decode()


def test_a_mention_reaches_the_inbox_and_the_mail_backend(
    case, alice_client, bob_client, bob, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):  # the mail leaves once the comment is committed
        alice_client.post(
            url("comment", case), {"body": "@bob can you check GPU 3?", "anchor": "section:summary"}, **HTMX
        )
    item = InboxItem.objects.get(user=bob)
    assert item.kind == "mention" and "GPU 3" in item.text
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["bob@example.org"]
    inbox = bob_client.get(reverse("reports:inbox")).content.decode()
    assert "can you check GPU 3" in inbox and f"#comment-{item.comment_id}" in inbox
    reply = bob_client.post(url("comment", case), {"body": "On it.", "parent": item.comment_id}, **HTMX)
    assert 'data-testid="reply"' in reply.content.decode()


def test_an_assigned_action_item_reaches_the_owners_inbox(case, alice_client, bob) -> None:
    alice_client.post(
        url("action_add", case), {"text": "Replace fan", "owner": bob.pk, "due": "2026-12-01"}, **HTMX
    )
    assert InboxItem.objects.get(user=bob).kind == "assignment"


def test_the_live_poll_returns_changed_sections_comments_and_presence(case, alice_client, bob_client) -> None:
    report = sections.report_for(case)
    s = report.sections.get(key="summary")
    bob_client.get(url("live", case), {"editing": "summary"})
    alice_client.post(
        url("section_save", case, "summary"), {"base_version": s.version, "body": "New words."}, **HTMX
    )
    alice_client.post(url("comment", case), {"body": "Hello there"}, **HTMX)
    response = bob_client.get(url("live", case), {"v_summary": s.version, "v_impact": 1, "t_comments": "old"})
    html = response.content.decode()
    assert 'id="section-summary"' in html and "New words." in html and 'id="section-impact"' not in html
    assert "Hello there" in html and 'hx-swap-oob="true"' in html
    bob_client.get(url("live", case), {"editing": "summary"})
    presence = alice_client.get(url("live", case)).content.decode()
    assert "bob" in presence and "is editing" in presence


def test_a_section_being_edited_is_never_replaced_by_the_poll(case, alice_client, bob_client) -> None:
    report = sections.report_for(case)
    s = report.sections.get(key="summary")
    alice_client.post(url("section_save", case, "summary"), {"base_version": s.version, "body": "x"}, **HTMX)
    html = bob_client.get(url("live", case), {"v_summary": s.version, "editing": "summary"}).content.decode()
    assert 'id="section-summary"' not in html


def test_history_lists_versions_with_diffs_and_restores(case, alice_client) -> None:
    report = sections.report_for(case)
    s = report.sections.get(key="summary")
    alice_client.post(url("section_save", case, "summary"), {"base_version": 1, "body": "Edited."}, **HTMX)
    html = alice_client.get(url("section_history", case, "summary"), **HTMX).content.decode()
    assert 'data-testid="restore-1"' in html and "diff-add" in html
    first = s.history.get(version=1)
    restored = alice_client.post(
        url("section_restore", case, "summary", first.history_id), {"base_version": 2}, **HTMX
    )
    assert restored.status_code == 200
    s.refresh_from_db()
    assert s.version == 3 and s.body == first.body


def test_the_activity_stream_merges_people_and_machine(case, alice_client) -> None:
    alice_client.post(url("comment", case), {"body": "Looks thermal"}, **HTMX)
    alice_client.post(url("status", case), {"status": "in_review", "base_version": 1}, **HTMX)
    html = alice_client.get(url("activity", case)).content.decode()
    assert "commented: Looks thermal" in html and "set the report to In review" in html
    assert "diagnosis #" in html and "onset:" in html


def test_a_comment_on_a_finding_links_to_it_and_a_made_up_anchor_is_refused(case, alice_client) -> None:
    from reports.services.findings import finding_key

    finding = case.findings.first()
    key = finding_key(finding)
    response = alice_client.post(
        url("comment", case), {"body": "Is this real?", "anchor": f"finding:{key}"}, **HTMX
    )
    assert response.status_code == 200 and f'href="#finding-{key}"' in response.content.decode()
    bad = alice_client.post(url("comment", case), {"body": "x", "anchor": "finding:9:nope:nope"}, **HTMX)
    assert bad.status_code == 400


def test_the_live_poll_shows_a_query_finding_once_the_worker_froze_its_result(
    case, alice_client, django_capture_on_commit_callbacks
) -> None:
    from investigations.tasks import queryrun_execute_task

    with django_capture_on_commit_callbacks(execute=False):
        alice_client.post(
            url("finding_add", case),
            {"title": "Hot GPU", "kind": "query", "promql": "max(hw_gpu_temperature_celsius)"},
            **HTMX,
        )
    page = alice_client.get(url("page", case)).content.decode()
    token = re.search(r'name="t_findings" value="([^"]+)"', page).group(1)
    assert 'id="findings"' not in alice_client.get(url("live", case), {"t_findings": token}).content.decode()
    queryrun_execute_task.apply(args=[HumanFinding.objects.get().evidence["run_id"]])
    html = alice_client.get(url("live", case), {"t_findings": token}).content.decode()
    assert 'id="findings"' in html and "frozen" in html
