"""The comparison region: sign-in required, start (enqueued on commit, refusals shown), a status that polls
while active and stops when done, the result side by side, cancel, and the page header's class updated in
place when a run finishes."""

from __future__ import annotations

import html
import json
import re
from unittest import mock
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client
from django.urls import reverse
from kombu.exceptions import OperationalError

from investigations.models import (
    DataSource,
    DiagnosisRun,
    Finding,
    Investigation,
    InvestigationJob,
    Job,
    TaskStatus,
)
from investigations.tasks.comparison import comparison_execute_task

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def case(db):
    """An investigation with a restored primary job and its baseline, both with a URL data source."""
    restored = Job.objects.create(
        job_id="81234",
        name="llama",
        triage={"state": "done", "job": {"id": "81234"}, "progress": {"restored_from": 500}},
    )
    baseline = Job.objects.create(
        job_id="81200", name="llama", triage={"state": "done", "job": {"id": "81200"}}
    )
    for job in (restored, baseline):
        DataSource.objects.create(job=job, kind=DataSource.Kind.URL, address="http://127.0.0.1:9")
    investigation = Investigation.objects.create(title="slower after restore")
    InvestigationJob.objects.create(
        investigation=investigation, job=restored, role=InvestigationJob.Role.PRIMARY
    )
    InvestigationJob.objects.create(
        investigation=investigation, job=baseline, role=InvestigationJob.Role.BASELINE, position=1
    )
    return investigation, restored, baseline


RESULT = {
    "jobs": [
        {"id": "81200", "status": "completed", "first_step": 0, "last_step": 900},
        {"id": "81234", "status": "completed", "first_step": 501, "last_step": 1400},
    ],
    "diagnosis": {"class": "restore-resource-leak", "root_cause_family": "cpu-contention", "confidence": 0.9,
                  "onset": None, "summary": "81234 carries a uniform extra CPU load.",
                  "chain": ["checkpoint restore path leaked threads", "slower steps"]},
    "findings": [],
    "timings": {"total_s": 1.5, "queries": 40, "prometheus_s": 1.2},
    "comparison": {
        "overlap_steps": [501, 900],
        "config_diff": {"global_batch_size": ["1024", "2048"]},
        "metrics": [
            {"name": "procs_running", "values": [2.0, 9.5], "delta_pct": 375.0, "likely_cause": "leaked threads"},
            {"name": "gpu_temp", "values": [61.0, 62.0], "delta_pct": 1.64, "likely_cause": "within noise"},
            {"name": "tcp_retransmits", "values": [1174.0, 928.9], "delta_pct": -20.9,
             "likely_cause": "within noise"},
            {"name": "rdma_retransmits", "values": [0.0093, 0.0077], "delta_pct": -0.16,
             "likely_cause": "within noise"},
        ],
        "baseline": 0,
    },
}  # fmt: skip


def _cancel_url(run: DiagnosisRun) -> str:
    return reverse("investigations:comparison_cancel", args=[run.investigation_id, run.pk])


def _header_class(body: str) -> str:
    """Return the out-of-band header fragment of a response (its whole element), or ""."""
    found = re.search(r'(<span id="incident-class" hx-swap-oob="true">.*</span>)\s*$', body, re.S)
    return found.group(1) if found else ""


def _run(investigation, job, status=TaskStatus.RUNNING, **fields) -> DiagnosisRun:
    jobs = [link.job_id for link in investigation.job_links.order_by("role")]
    return DiagnosisRun.objects.create(
        investigation=investigation, job=job, status=status, kind=DiagnosisRun.Kind.COMPARISON,
        request={"jobs": jobs}, progress_total=2, progress_done=1, **fields,
    )  # fmt: skip


def test_every_comparison_url_needs_a_signed_in_user(client, case) -> None:
    investigation, restored, _ = case
    for method, name in (("get", "comparison"), ("post", "comparison_start"), ("get", "comparison_status")):
        response = getattr(client, method)(reverse(f"investigations:{name}", args=[investigation.pk]), **HTMX)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), name
    assert not DiagnosisRun.objects.exists()
    run = _run(investigation, restored)
    response = client.post(_cancel_url(run), **HTMX)
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    run.refresh_from_db()
    assert run.status == TaskStatus.RUNNING


def test_start_creates_a_queued_comparison_and_enqueues_it_on_commit(
    alice_client, case, django_capture_on_commit_callbacks
) -> None:
    investigation, restored, baseline = case
    url = reverse("investigations:comparison_start", args=[investigation.pk])
    with mock.patch.object(comparison_execute_task, "delay") as delay:
        with django_capture_on_commit_callbacks(execute=True):
            response = alice_client.post(url, **HTMX)
    run = DiagnosisRun.objects.get()
    delay.assert_called_once_with(run.pk)
    assert run.is_comparison and run.request == {"jobs": [baseline.pk, restored.pk]}
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="comparison"')
    assert 'hx-trigger="every 1s"' in body and "0 / 2 jobs connected" in body


def test_start_refuses_an_investigation_with_one_job_and_says_why(alice_client, db) -> None:
    job = Job.objects.create(job_id="81234")
    DataSource.objects.create(job=job, kind=DataSource.Kind.URL, address="http://127.0.0.1:9")
    investigation = Investigation.objects.create(title="alone")
    InvestigationJob.objects.create(investigation=investigation, job=job)
    response = alice_client.post(reverse("investigations:comparison_start", args=[investigation.pk]), **HTMX)
    assert response.status_code == 200
    assert "at least two jobs with a data source" in response.content.decode()
    assert not DiagnosisRun.objects.exists()


def test_start_refuses_a_second_comparison_while_one_runs(alice_client, case) -> None:
    investigation, restored, _ = case
    running = _run(investigation, restored)
    response = alice_client.post(reverse("investigations:comparison_start", args=[investigation.pk]), **HTMX)
    assert f"already running (run #{running.pk})" in response.content.decode()
    assert DiagnosisRun.objects.count() == 1


@pytest.mark.django_db(transaction=True)  # the enqueue happens on a real commit
def test_start_fails_the_run_when_the_broker_is_unreachable(alice_client, case) -> None:
    investigation, *_ = case
    with mock.patch.object(
        comparison_execute_task, "delay", side_effect=OperationalError("Connection refused")
    ):
        alice_client.post(reverse("investigations:comparison_start", args=[investigation.pk]), **HTMX)
    run = DiagnosisRun.objects.get()
    assert run.status == TaskStatus.FAILED and "task broker" in run.error


def test_status_polls_while_the_comparison_is_active(alice_client, case) -> None:
    investigation, restored, _ = case
    _run(investigation, restored)
    response = alice_client.get(reverse("investigations:comparison_status", args=[investigation.pk]), **HTMX)
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="comparison-status"')
    assert 'hx-trigger="every 1s"' in body and "1 / 2 jobs connected" in body


def test_a_poll_that_finds_it_done_gets_the_result_side_by_side_without_the_trigger(
    alice_client, case
) -> None:
    investigation, restored, _ = case
    run = _run(investigation, restored, status=TaskStatus.DONE, result=RESULT)
    Finding.objects.create(investigation=investigation, job=restored, run=run, playbook="comparison",
                           rule="restore-resource-leak:uniform", incident_class="restore-resource-leak",
                           severity="warning", title="81234 carries a uniform extra CPU load")  # fmt: skip
    url = reverse("investigations:comparison_status", args=[investigation.pk])
    response = alice_client.get(url, {"poll": "1"}, **HTMX)
    body = response.content.decode()
    assert "hx-trigger" not in body
    assert response["HX-Retarget"] == "#comparison" and response["HX-Reswap"] == "outerHTML"
    assert json.loads(response["HX-Trigger"]) == {"comparison-finished": {"run": run.pk}}
    assert body.lstrip().startswith('<section id="comparison"')
    # One column per job, baseline first, with role, restore and steps.
    assert body.index('data-job="81200"') < body.index('data-job="81234"')
    assert "step 500" in body and "fresh start" in body and "501 – 1400" in body
    assert "501 – 900" in body  # overlap
    assert "global_batch_size" in body and "2048" in body
    # What the engine judged beyond noise is highlighted; a large swing it judged noise is not.
    assert 'class="comparison-metric comparison-delta" data-metric="procs_running"' in body
    assert 'class="comparison-metric" data-metric="gpu_temp"' in body
    assert 'class="comparison-metric" data-metric="tcp_retransmits"' in body
    # a near-zero baseline's change is shown as an absolute value, not "-0.2 %" against the floor
    assert "-0.0016 (absolute)" in body
    assert "+375.0 %" in body and "leaked threads" in body
    assert "restore-resource-leak" in body and "90 %" in body
    assert "<li>checkpoint restore path leaked threads</li>" in body
    assert "81234 carries a uniform extra CPU load" in body
    assert "Compare jobs again" in body
    # the other job drawn over this one by step, on step time and what was beyond noise
    link = re.search(r'href="([^"]+)" data-testid="comparison-timeline"', body)
    url = urlsplit(html.unescape(link[1]))
    assert url.path == reverse("investigations:timeline", args=[investigation.pk])
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    baseline = next(link.job_id for link in investigation.job_links.all() if link.job_id != restored.pk)
    assert query == {"job": str(restored.pk), "x": "step", "compare": str(baseline),
                     "panels": "step_time,procs_running"}  # fmt: skip
    # ... and the same jobs and panels side by side, one column per job
    grid = urlsplit(html.unescape(re.search(r'href="([^"]+)" data-testid="comparison-grid"', body)[1]))
    assert grid.path == reverse("investigations:comparison_grid", args=[investigation.pk])
    assert {k: v[0] for k, v in parse_qs(grid.query).items()} == {
        "jobs": f"{restored.pk},{baseline}", "panels": "step_time,procs_running"}  # fmt: skip


def test_the_investigation_page_loads_the_region_and_the_diagnosis_ignores_comparisons(
    alice_client, case
) -> None:
    investigation, restored, _ = case
    _run(investigation, restored)
    page = alice_client.get(reverse("investigations:detail", args=[investigation.pk])).content.decode()
    region = reverse("investigations:comparison", args=[investigation.pk])
    assert f'hx-get="{region}" hx-trigger="load"' in page
    diagnosis = alice_client.get(reverse("investigations:diagnosis", args=[investigation.pk]), **HTMX)
    assert "No diagnosis has run for this job yet" in diagnosis.content.decode()


def test_one_job_shows_no_comparison(alice_client, db) -> None:
    job = Job.objects.create(job_id="81234")
    investigation = Investigation.objects.create(title="alone")
    InvestigationJob.objects.create(investigation=investigation, job=job)
    body = alice_client.get(
        reverse("investigations:comparison", args=[investigation.pk]), **HTMX
    ).content.decode()
    assert "Compare jobs" not in body and "hidden" in body


def test_the_region_outside_htmx_is_the_investigation_page(alice_client, case) -> None:
    response = alice_client.get(reverse("investigations:comparison", args=[case[0].pk]))
    assert response.status_code == 302
    assert response["Location"] == reverse("investigations:detail", args=[case[0].pk])


# --- Cancel --------------------------------------------------------------------------------------


def test_a_running_comparison_shows_a_cancel_button_that_posts_with_a_token(alice_client, case) -> None:
    investigation, restored, _ = case
    run = _run(investigation, restored)
    body = alice_client.get(
        reverse("investigations:comparison", args=[investigation.pk]), **HTMX
    ).content.decode()
    action = re.escape(_cancel_url(run))
    form = re.search(rf'<form method="post" action="{action}".*?</form>', body, re.S)
    assert form, "a Cancel form for the active run"
    assert f'hx-post="{_cancel_url(run)}" hx-target="#comparison" hx-swap="outerHTML"' in form.group(0)
    assert 'name="csrfmiddlewaretoken"' in form.group(0) and ">Cancel</button>" in form.group(0)
    DiagnosisRun.objects.filter(pk=run.pk).update(status=TaskStatus.DONE, result=RESULT)
    done = alice_client.get(reverse("investigations:comparison", args=[investigation.pk]), **HTMX)
    assert ">Cancel</button>" not in done.content.decode()


def test_cancel_marks_the_run_cancelled_and_keeps_the_previous_result(alice_client, case) -> None:
    investigation, restored, _ = case
    earlier = _run(investigation, restored, status=TaskStatus.DONE, result=RESULT)
    Finding.objects.create(investigation=investigation, job=restored, run=earlier, playbook="comparison",
                           rule="restore-resource-leak:uniform", incident_class="restore-resource-leak",
                           severity="warning", title="81234 carries a uniform extra CPU load")  # fmt: skip
    run = _run(investigation, restored)
    response = alice_client.post(_cancel_url(run), **HTMX)
    run.refresh_from_db()
    assert run.status == TaskStatus.CANCELLED and run.finished is not None
    assert run.error == "Cancelled by alice." and run.progress_done == 1  # who cancelled it
    body = response.content.decode()
    # The whole region, in place: the run cancelled, polling stopped, the earlier comparison still shown.
    assert body.lstrip().startswith('<section id="comparison"')
    assert "hx-trigger" not in body and ">Cancel</button>" not in body
    assert '<span class="badge badge-cancelled">Cancelled</span>' in body
    assert "Cancelled by alice." in body and "1 / 2 jobs connected" in body
    assert f"From run #{earlier.pk} of" in body and "81234 carries a uniform extra CPU load" in body
    assert "Compare jobs again" in body and "already finished" not in body
    assert Finding.objects.filter(run=earlier).count() == 1


def test_a_queued_comparison_can_be_cancelled_before_a_worker_takes_it(alice_client, case) -> None:
    investigation, restored, _ = case
    run = _run(investigation, restored, status=TaskStatus.QUEUED)
    alice_client.post(_cancel_url(run), **HTMX)
    run.refresh_from_db()
    assert run.status == TaskStatus.CANCELLED


@pytest.mark.parametrize("status", [TaskStatus.CANCELLED, TaskStatus.DONE, TaskStatus.FAILED])
def test_cancelling_a_finished_comparison_changes_nothing_and_says_so(alice_client, case, status) -> None:
    investigation, restored, _ = case
    run = _run(investigation, restored, status=status, error="as it was", result=RESULT)
    response = alice_client.post(_cancel_url(run), **HTMX)
    assert response.status_code == 200
    assert "The comparison had already finished." in response.content.decode()
    after = DiagnosisRun.objects.get(pk=run.pk)
    assert (after.status, after.error, after.finished, after.result) == (status, "as it was", None, RESULT)


def test_cancel_without_htmx_goes_back_to_the_page_with_a_message(alice_client, case) -> None:
    investigation, restored, _ = case
    run = _run(investigation, restored)
    detail = reverse("investigations:detail", args=[investigation.pk])
    response = alice_client.post(_cancel_url(run))
    assert response.status_code == 302 and response["Location"] == detail
    run.refresh_from_db()
    assert run.status == TaskStatus.CANCELLED
    again = alice_client.post(_cancel_url(run), follow=True)
    assert "The comparison had already finished." in again.content.decode()


def test_cancel_needs_a_post_and_a_csrf_token(alice, alice_client, case) -> None:
    investigation, restored, _ = case
    run = _run(investigation, restored)
    assert alice_client.get(_cancel_url(run), **HTMX).status_code == 405
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(alice)
    assert strict.post(_cancel_url(run), **HTMX).status_code == 403
    run.refresh_from_db()
    assert run.status == TaskStatus.RUNNING
    token = strict.get(reverse("investigations:detail", args=[investigation.pk])).context["csrf_token"]
    assert strict.post(_cancel_url(run), HTTP_X_CSRFTOKEN=str(token), **HTMX).status_code == 200
    run.refresh_from_db()
    assert run.status == TaskStatus.CANCELLED


def test_cancel_only_reaches_this_investigations_comparisons(alice_client, case) -> None:
    investigation, restored, _ = case
    run = _run(investigation, restored)
    diagnosis = DiagnosisRun.objects.create(
        investigation=investigation, job=restored, status=TaskStatus.RUNNING
    )
    other = Investigation.objects.create(title="other")
    for url in (
        reverse("investigations:comparison_cancel", args=[other.pk, run.pk]),
        reverse("investigations:comparison_cancel", args=[investigation.pk, diagnosis.pk]),
        reverse("investigations:comparison_cancel", args=[investigation.pk, 999_999]),
    ):
        assert alice_client.post(url, **HTMX).status_code == 404, url
    assert set(DiagnosisRun.objects.values_list("status", flat=True)) == {TaskStatus.RUNNING}


# --- The page header's class ---------------------------------------------------------------------


def test_the_page_header_holds_an_empty_class_slot_to_swap_into(alice_client, case) -> None:
    investigation, *_ = case
    page = alice_client.get(reverse("investigations:detail", args=[investigation.pk])).content.decode()
    assert '<span id="incident-class"></span>' in page


def test_the_poll_that_finds_it_done_swaps_the_header_class_out_of_band(alice_client, case) -> None:
    investigation, restored, _ = case
    run = _run(investigation, restored)
    url = reverse("investigations:comparison_status", args=[investigation.pk])
    active = alice_client.get(url, {"poll": "1"}, **HTMX).content.decode()
    assert "incident-class" not in active, "only the poll that sees it finished carries the header"
    # The worker finishes the run and sets the class, as comparison_execute does in one transaction.
    DiagnosisRun.objects.filter(pk=run.pk).update(status=TaskStatus.DONE, result=RESULT)
    Investigation.objects.filter(pk=investigation.pk).update(incident_class="restore-resource-leak")
    body = alice_client.get(url, {"poll": "1"}, **HTMX).content.decode()
    assert body.lstrip().startswith('<section id="comparison"')
    assert _header_class(body) == (
        '<span id="incident-class" hx-swap-oob="true">· class '
        '<span class="badge badge-class">restore-resource-leak</span></span>'
    )


def test_a_cancel_or_a_plain_region_does_not_touch_the_header(alice_client, case) -> None:
    investigation, restored, _ = case
    run = _run(investigation, restored)
    assert "incident-class" not in alice_client.post(_cancel_url(run), **HTMX).content.decode()
    region = alice_client.get(reverse("investigations:comparison", args=[investigation.pk]), **HTMX)
    assert "incident-class" not in region.content.decode()
