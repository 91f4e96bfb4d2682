"""The diagnosis region: start, live status that stops polling when finished (and updates the page header's
class in place), cancel, and a finding's evidence."""

from __future__ import annotations

import html
import json
import re
from unittest import mock
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from kombu.exceptions import OperationalError

from investigations.models import (
    DataSource,
    DiagnosisRun,
    Finding,
    Investigation,
    InvestigationJob,
    Job,
    PlaybookExecution,
    TaskStatus,
)
from investigations.tasks.diagnosis import diagnosis_plan_task

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
CRASH = 1_763_800_000.0


@pytest.fixture
def case(db):
    """An investigation whose primary job has a URL data source and a triage with a crash time."""
    job = Job.objects.create(
        job_id="81234", name="llama", triage={"state": "done", "job": {"crash_time": CRASH}}
    )
    DataSource.objects.create(job=job, kind=DataSource.Kind.URL, address="http://127.0.0.1:9")
    investigation = Investigation.objects.create(title="GPU hang")
    InvestigationJob.objects.create(investigation=investigation, job=job, role=InvestigationJob.Role.PRIMARY)
    return investigation, job


def _run(investigation, job, status=TaskStatus.RUNNING, **fields) -> DiagnosisRun:
    run = DiagnosisRun.objects.create(
        investigation=investigation, job=job, status=status, progress_total=10, progress_done=4, **fields
    )
    PlaybookExecution.objects.create(run=run, playbook="gpu-health", status=TaskStatus.RUNNING,
                                     queries=[{"name": "q"}] * 6, output={"done": 4, "total": 6})  # fmt: skip
    return run


def _finding(investigation, job, **fields) -> Finding:
    defaults = {
        "playbook": "gpu-health",
        "rule": "hot_gpu",
        "incident_class": "thermal-straggler",
        "severity": "warning",
        "title": "GPU 3 on node-2 runs hot",
        "hosts": ["node-2"],
        "gpus": ["3"],
        "onset": CRASH - 725,
        "evidence": [
            {
                "query": 'max by (host, gpu) (hw_gpu_temperature_celsius{host="node-2"})',
                "labels": {"host": "node-2", "gpu": "3"},
                "value": 97.25,
                "interpretation": "12 °C above its peers",
            }
        ],
    }
    return Finding.objects.create(investigation=investigation, job=job, **(defaults | fields))


def _urls(investigation, run=None, finding=None) -> list[tuple[str, str]]:
    urls = [
        ("get", reverse("investigations:diagnosis", args=[investigation.pk])),
        ("post", reverse("investigations:diagnosis_start", args=[investigation.pk])),
        ("get", reverse("investigations:diagnosis_status", args=[investigation.pk])),
    ]
    if run:
        urls.append(("post", reverse("investigations:diagnosis_cancel", args=[investigation.pk, run.pk])))
    if finding:
        urls.append(("get", reverse("investigations:finding_detail", args=[investigation.pk, finding.pk])))
    return urls


# --- Access --------------------------------------------------------------------------------------


def test_every_diagnosis_url_needs_a_signed_in_user(client, case) -> None:
    investigation, job = case
    run, finding = _run(*case), _finding(*case)
    for method, url in _urls(investigation, run, finding):
        response = getattr(client, method)(url, **HTMX)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url
    run.refresh_from_db()
    assert run.status == TaskStatus.RUNNING


def test_unknown_investigations_runs_findings_and_jobs_are_404(alice_client, case) -> None:
    investigation, job = case
    other = Investigation.objects.create(title="other")
    run, finding = _run(*case), _finding(*case)
    for method, url in _urls(other, run, finding)[3:]:  # a run or finding through another investigation
        assert getattr(alice_client, method)(url, **HTMX).status_code == 404, url
    stranger = Job.objects.create(job_id="99")
    status = reverse("investigations:diagnosis_status", args=[investigation.pk])
    assert alice_client.get(status, {"job": stranger.pk}, **HTMX).status_code == 404
    assert alice_client.get(status, {"job": "x"}, **HTMX).status_code == 404
    assert alice_client.get(reverse("investigations:diagnosis_status", args=[999]), **HTMX).status_code == 404


@pytest.mark.parametrize("name", ["diagnosis_start"])
def test_actions_need_a_post(alice_client, case, name) -> None:
    assert alice_client.get(reverse(f"investigations:{name}", args=[case[0].pk])).status_code == 405


def test_cancel_needs_a_post(alice_client, case) -> None:
    run = _run(*case)
    assert (
        alice_client.get(reverse("investigations:diagnosis_cancel", args=[case[0].pk, run.pk])).status_code
        == 405
    )


# --- Start ---------------------------------------------------------------------------------------


def test_start_creates_a_queued_run_and_enqueues_it_on_commit(
    alice_client, alice, case, django_capture_on_commit_callbacks
) -> None:
    investigation, job = case
    url = reverse("investigations:diagnosis_start", args=[investigation.pk])
    with mock.patch.object(diagnosis_plan_task, "delay") as delay:
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            response = alice_client.post(url, {"job": job.pk, "scope": "triage"}, **HTMX)
        run = DiagnosisRun.objects.get()
        assert delay.call_count == 0  # nothing leaves before the commit
        assert len(callbacks) == 1
        callbacks[0]()
    delay.assert_called_once_with(run.pk)
    assert response.status_code == 200
    assert run.status == TaskStatus.QUEUED and run.created_by == alice
    assert run.request["playbooks"] is None  # the triage decides
    body = response.content.decode()
    assert 'id="diagnosis"' in body and 'hx-trigger="every 1s"' in body


def test_start_with_all_playbooks_and_a_window(
    alice_client, case, django_capture_on_commit_callbacks
) -> None:
    investigation, job = case
    url = reverse("investigations:diagnosis_start", args=[investigation.pk])
    with django_capture_on_commit_callbacks(execute=False):
        alice_client.post(url, {"scope": "all", "start": "2025-11-22T08:00:00Z", "end": "1763800000"}, **HTMX)
    run = DiagnosisRun.objects.get()
    assert run.job == job  # the primary job by default
    assert run.window == {"start": 1763798400.0, "end": 1763800000.0}
    assert run.request == {"playbooks": ["all"], "profile": "auto", "gpu_model": "auto"}
    assert run.result == {}  # nothing comes out before it is done


def test_start_with_the_users_profile_and_gpu_model(
    alice_client, case, django_capture_on_commit_callbacks
) -> None:
    """The Options hold the metric profile and the GPU model; both reach the run."""
    investigation, _ = case
    url = reverse("investigations:diagnosis_start", args=[investigation.pk])
    page = alice_client.get(
        reverse("investigations:diagnosis", args=[investigation.pk]), **HTMX
    ).content.decode()
    assert '<select name="gpu_model">' in page and '<option value="H100">H100</option>' in page
    assert '<option value="nvidia">nvidia</option>' in page
    with django_capture_on_commit_callbacks(execute=False):
        alice_client.post(url, {"scope": "triage", "profile": "nvidia", "gpu_model": "H100"}, **HTMX)
    run = DiagnosisRun.objects.get()
    assert (run.request["profile"], run.request["gpu_model"]) == ("nvidia", "H100")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"scope": "triage", "start": "yesterday"}, "Enter unix seconds or an ISO 8601 time"),
        ({"scope": "triage", "start": "200", "end": "100"}, "end must come after its start"),
        ({"scope": "sideways"}, "Select a valid choice"),
        ({"scope": "triage", "gpu_model": "GTX1080"}, "Select a valid choice"),
    ],
)
def test_start_refuses_bad_input_and_says_why(alice_client, case, data, message) -> None:
    url = reverse("investigations:diagnosis_start", args=[case[0].pk])
    response = alice_client.post(url, data, **HTMX)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not DiagnosisRun.objects.exists()


def test_start_refuses_a_second_run_of_the_same_job(alice_client, case) -> None:
    investigation, job = case
    active = _run(investigation, job)
    response = alice_client.post(
        reverse("investigations:diagnosis_start", args=[investigation.pk]), {"scope": "triage"}
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("investigations:detail", args=[investigation.pk])
    assert DiagnosisRun.objects.get() == active
    page = alice_client.get(response["Location"]).content.decode()
    assert f"already running (run #{active.pk})" in page


def test_start_refuses_a_job_without_a_data_source(alice_client, case) -> None:
    investigation, job = case
    job.datasources.all().delete()
    response = alice_client.post(
        reverse("investigations:diagnosis_start", args=[investigation.pk]), {"scope": "triage"}, **HTMX
    )
    assert "has no data source" in response.content.decode()
    assert not DiagnosisRun.objects.exists()


@pytest.mark.django_db(transaction=True)  # the enqueue happens on a real commit
def test_start_fails_the_run_when_the_broker_is_unreachable(alice_client, case) -> None:
    with mock.patch.object(diagnosis_plan_task, "delay", side_effect=OperationalError("Connection refused")):
        alice_client.post(
            reverse("investigations:diagnosis_start", args=[case[0].pk]), {"scope": "triage"}, **HTMX
        )
    run = DiagnosisRun.objects.get()
    assert run.status == TaskStatus.FAILED
    assert run.error == "Could not reach the task broker: Connection refused"


# --- Status --------------------------------------------------------------------------------------


def test_status_polls_while_the_run_is_active(alice_client, case) -> None:
    investigation, job = case
    _run(investigation, job)
    response = alice_client.get(reverse("investigations:diagnosis_status", args=[investigation.pk]), **HTMX)
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="diagnosis-status"')
    assert 'hx-trigger="every 1s"' in body
    assert "4 / 10 queries" in body and "gpu-health" in body and "4 / 6 queries" in body
    assert 'aria-valuenow="4"' in body
    assert response["Cache-Control"].startswith("max-age=0")


def test_a_poll_that_finds_the_run_finished_gets_the_region_without_the_trigger(alice_client, case) -> None:
    investigation, job = case
    result = {"diagnosis": {"class": "thermal-straggler", "root_cause_family": "thermal", "confidence": 0.82,
                            "culprits": [{"host": "node-2", "gpu": "3"}], "onset": CRASH - 725,
                            "summary": "GPU 3 of node-2 overheated.", "chain": ["GPU hot", "clock down", "job slow"]}}  # fmt: skip
    _run(investigation, job, status=TaskStatus.DONE, result=result)
    _finding(investigation, job)
    url = reverse("investigations:diagnosis_status", args=[investigation.pk])
    response = alice_client.get(url, {"job": job.pk, "poll": "1"}, **HTMX)
    body = response.content.decode()
    assert "hx-trigger" not in body
    assert response["HX-Retarget"] == "#diagnosis" and response["HX-Reswap"] == "outerHTML"
    assert json.loads(response["HX-Trigger"]) == {"diagnosis-finished": {"job": job.pk}}
    assert body.lstrip().startswith('<section id="diagnosis"')
    assert "thermal-straggler" in body and "82 %" in body and "node-2 GPU 3" in body
    assert "12 min 05 s before the crash" in body
    assert "<li>GPU hot</li><li>clock down</li><li>job slow</li>" in body.replace("\n", "")
    without_poll = alice_client.get(url, **HTMX)
    assert "hx-trigger" not in without_poll.content.decode() and "HX-Retarget" not in without_poll


def test_the_poll_that_finds_the_run_finished_swaps_the_header_class_out_of_band(alice_client, case) -> None:
    investigation, job = case
    run = _run(investigation, job)
    url = reverse("investigations:diagnosis_status", args=[investigation.pk])
    assert (
        "incident-class" not in alice_client.get(url, {"job": job.pk, "poll": "1"}, **HTMX).content.decode()
    )
    page = alice_client.get(reverse("investigations:detail", args=[investigation.pk])).content.decode()
    assert '<span id="incident-class"></span>' in page, "no badge yet, but a slot to swap into"
    # The decision marks the run done and sets the class in one transaction (services.diagnosis_decide).
    DiagnosisRun.objects.filter(pk=run.pk).update(
        status=TaskStatus.DONE, result={"diagnosis": {"class": "hang"}}
    )
    Investigation.objects.filter(pk=investigation.pk).update(incident_class="hang")
    body = alice_client.get(url, {"job": job.pk, "poll": "1"}, **HTMX).content.decode()
    assert body.lstrip().startswith('<section id="diagnosis"')
    assert body.rstrip().endswith(
        '<span id="incident-class" hx-swap-oob="true">· class '
        '<span class="badge badge-class">hang</span></span>'
    )
    # A diagnosis that set no class still sends the slot: the header shows what the row says.
    Investigation.objects.filter(pk=investigation.pk).update(incident_class="")
    body = alice_client.get(url, {"job": job.pk, "poll": "1"}, **HTMX).content.decode()
    assert body.rstrip().endswith('<span id="incident-class" hx-swap-oob="true"></span>')


def test_the_region_lists_findings_by_onset_with_their_hosts_and_onsets(alice_client, case) -> None:
    investigation, job = case
    late = _finding(investigation, job, rule="late", onset=CRASH - 10, hosts=["node-1", "node-3"])
    early = _finding(investigation, job, rule="early", onset=CRASH - 3600)
    body = alice_client.get(
        reverse("investigations:diagnosis", args=[investigation.pk]), **HTMX
    ).content.decode()
    assert body.index(f'id="finding-{early.pk}"') < body.index(f'id="finding-{late.pk}"')
    assert 'data-hosts="node-1,node-3"' in body
    assert f'data-onset="{CRASH - 10}"' in body
    assert f'hx-get="{reverse("investigations:finding_detail", args=[investigation.pk, late.pk])}"' in body
    assert "1 h 00 min before the crash" in body
    assert "Run diagnosis" in body


def test_the_investigation_page_loads_the_region(alice_client, case) -> None:
    investigation, job = case
    page = alice_client.get(reverse("investigations:detail", args=[investigation.pk])).content.decode()
    region = reverse("investigations:diagnosis", args=[investigation.pk])
    assert f'hx-get="{region}?job={job.pk}" hx-trigger="load"' in page


def test_the_region_outside_htmx_is_the_investigation_page(alice_client, case) -> None:
    response = alice_client.get(reverse("investigations:diagnosis", args=[case[0].pk]))
    assert response.status_code == 302
    assert response["Location"] == reverse("investigations:detail", args=[case[0].pk])


# --- Cancel --------------------------------------------------------------------------------------


def test_cancel_stops_an_active_run(alice_client, case) -> None:
    investigation, job = case
    run = _run(investigation, job)
    url = reverse("investigations:diagnosis_cancel", args=[investigation.pk, run.pk])
    response = alice_client.post(url, **HTMX)
    run.refresh_from_db()
    assert run.status == TaskStatus.CANCELLED
    assert "hx-trigger" not in response.content.decode()
    again = alice_client.post(url, **HTMX)
    assert "The diagnosis had already finished." in again.content.decode()


def test_cancel_without_htmx_goes_back_to_the_page_with_a_message(alice_client, case) -> None:
    investigation, job = case
    run = _run(investigation, job)
    url = reverse("investigations:diagnosis_cancel", args=[investigation.pk, run.pk])
    response = alice_client.post(url)
    assert response.status_code == 302
    assert response["Location"] == reverse("investigations:detail", args=[investigation.pk])
    run.refresh_from_db()
    assert run.status == TaskStatus.CANCELLED
    assert run.executions.get().status == TaskStatus.RUNNING, "a running playbook stops by itself"
    again = alice_client.post(url, follow=True)
    assert "The diagnosis had already finished." in again.content.decode()


# --- Finding detail ------------------------------------------------------------------------------


def test_a_finding_expands_into_its_evidence_table(alice_client, case) -> None:
    investigation, job = case
    finding = _finding(investigation, job)
    url = reverse("investigations:finding_detail", args=[investigation.pk, finding.pk])
    body = alice_client.get(url, **HTMX).content.decode()
    assert body.lstrip().startswith("<details")
    assert (
        '<code class="mono finding-query">max by (host, gpu) (hw_gpu_temperature_celsius{host=&quot;node-2&quot;})</code>'
        in body
    )
    assert "host=&quot;node-2&quot;" in body and "97.25" in body and "12 °C above its peers" in body
    assert "2025-11-22 08:14:35 UTC" in body
    assert "12 min 05 s before the crash" in body


def test_a_finding_has_its_own_page(alice_client, case) -> None:
    investigation, job = case
    finding = _finding(investigation, job)
    page = alice_client.get(reverse("investigations:finding_detail", args=[investigation.pk, finding.pk]))
    body = page.content.decode()
    assert "<!doctype html>" in body and "GPU 3 on node-2 runs hot" in body
    assert reverse("investigations:detail", args=[investigation.pk]) in body


def test_a_finding_links_to_its_evidence_on_the_timeline_and_says_where_it_came_from(
    alice_client, case
) -> None:
    """Evidence binding: the run, data source and data range it was computed from, and an absolute link to
    the panels its rule reads, its hosts highlighted, the hour around its onset clipped to the data."""
    investigation, job = case
    run = DiagnosisRun.objects.create(
        investigation=investigation,
        job=job,
        datasource=job.datasources.first(),
        status=TaskStatus.DONE,
        result={
            "source": {"url": "http://127.0.0.1:19191", "profile": "amd", "time_range": [CRASH - 3600, CRASH]}
        },
    )
    finding = _finding(investigation, job, playbook="gpu_health", rule="gpu_health.gpu_hot", run=run)
    body = alice_client.get(
        reverse("investigations:finding_detail", args=[investigation.pk, finding.pk])
    ).content.decode()
    link = re.search(r'href="([^"]+)" data-testid="finding-timeline-link"', body)
    assert link is not None
    url = urlsplit(html.unescape(link[1]))
    assert url.path == reverse("investigations:timeline", args=[investigation.pk])
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert query == {
        "x": "time-utc",
        "job": str(job.pk),
        "panels": "step_time,gpu_temp",
        "hosts": "node-2",
        "start": f"{CRASH - 725 - 1800:.0f}",
        "end": f"{CRASH:.0f}",  # clipped to the data the run saw
    }
    assert f"From diagnosis run #{run.pk}" in body and "(amd profile)" in body


# --- Markdown report -----------------------------------------------------------------------------

_CONTRACT = {
    "job": {"id": "81234", "status": "completed", "triage_class": "tgs-degradation", "first_step": 0,
            "last_step": 600, "crash_time": None},
    "source": {"url": "http://127.0.0.1:9", "profile": "amd", "hosts": ["node-1", "node-2"], "gpus_per_host": 8,
               "time_range": [CRASH - 3600, CRASH]},
    "diagnosis": {"class": "thermal-straggler", "root_cause_family": "thermal",
                  "culprits": [{"host": "node-2", "gpu": "3"}], "onset": CRASH - 725, "confidence": 0.65,
                  "summary": "GPU 3 on node-2 runs hot.", "chain": ["GPU 3 hot", "steps slower"]},
    "findings": [],
    "timings": {"total_s": 1.0, "queries": 10, "prometheus_s": 0.5},
}  # fmt: skip


def test_a_finished_diagnosis_is_a_markdown_report_to_paste_into_a_ticket(alice_client, case) -> None:
    """The region links the decided run's report: the seeds' TSDB Diagnosis format, as `diagnose` prints it."""
    investigation, job = case
    run = DiagnosisRun.objects.create(
        investigation=investigation,
        job=job,
        status=TaskStatus.DONE,
        result=_CONTRACT,
        finished=timezone.now(),
    )
    region = alice_client.get(
        reverse("investigations:diagnosis", args=[investigation.pk]), **HTMX
    ).content.decode()
    url = reverse("investigations:run_report", args=[investigation.pk, run.pk])
    assert f'href="{url}" data-testid="diagnosis-report"' in region
    response = alice_client.get(url)
    assert response.status_code == 200 and response["Content-Type"] == "text/markdown; charset=utf-8"
    body = response.content.decode()
    assert body.startswith("## TSDB Diagnosis: 81234")
    assert "**Class:** thermal-straggler (root cause: thermal, confidence 65%)" in body
    assert "**Culprits:** node-2 GPU 3" in body


def test_a_report_of_an_unfinished_or_foreign_run_is_refused(alice_client, case) -> None:
    investigation, job = case
    running = DiagnosisRun.objects.create(investigation=investigation, job=job, status=TaskStatus.RUNNING)
    response = alice_client.get(reverse("investigations:run_report", args=[investigation.pk, running.pk]))
    assert response.status_code == 409 and "its report exists once it is done" in response.content.decode()
    other = Investigation.objects.create(title="another")
    assert (
        alice_client.get(reverse("investigations:run_report", args=[other.pk, running.pk])).status_code == 404
    )
    anonymous = Client().get(reverse("investigations:run_report", args=[investigation.pk, running.pk]))
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")


@pytest.mark.parametrize(
    ("name", "set_by_user", "warned"),
    [("H100", True, True), ("MI355X", True, False), ("H100", False, False)],
)
def test_a_gpu_model_of_another_vendor_than_the_exporters_is_pointed_out(
    alice_client, case, name, set_by_user, warned
) -> None:
    """The user's GPU model wins, but an NVIDIA model on an AMD job's exporters is said to be odd."""
    investigation, job = case
    result = {**_CONTRACT, "gpu_model": {"name": name, "set_by_user": set_by_user}}
    DiagnosisRun.objects.create(
        investigation=investigation, job=job, status=TaskStatus.DONE, result=result, finished=timezone.now()
    )
    region = alice_client.get(
        reverse("investigations:diagnosis", args=[investigation.pk]), **HTMX
    ).content.decode()
    assert f'data-testid="diagnosis-gpu-model">{name}' in region
    assert ('data-testid="gpu-model-mismatch"' in region) is warned
    if warned:
        assert "H100 is an NVIDIA GPU but this job&#x27;s exporters are AMD&#x27;s (amd profile)" in region
