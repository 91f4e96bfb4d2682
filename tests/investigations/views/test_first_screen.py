"""What a first-time user meets on the investigation page (issue 13): one verdict on top that reconciles the
diagnosis with the comparison and says where it came from, effects and context told apart in the causal
story, a warning on a second investigation of the same job, deleting (owner only, confirmed, audited), the
job root typed as a job directory, one data source per job directory, and error pages in the app's layout."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.views import defaults

from investigations.models import DataSource, DiagnosisRun, Finding, Investigation, Job

from .investigation_helpers import HTMX, make_investigation

pytestmark = pytest.mark.django_db

ONSET = 1_778_632_215.0
LEAK_ALONE = {
    "class": "restore-resource-leak",
    "root_cause_family": "cpu-contention",
    "culprits": [],
    "onset": ONSET,
    "confidence": 0.45,
    "summary": "Uniformly more runnable processes after a restore. Confirm with `compare`.",
    "chain": ["Runnable processes uniformly high after a restore (27 per host)"],
}
LEAK_COMPARED = LEAK_ALONE | {
    "onset": ONSET - 150,
    "confidence": 0.9,
    "summary": "job 13076 carries a uniform extra CPU load against its fresh-start baseline.",
}


def _done(investigation: Investigation, diagnosis: dict, *, comparison: bool = False) -> DiagnosisRun:
    return DiagnosisRun.objects.create(
        investigation=investigation,
        job=investigation.jobs.get(),
        status="done",
        kind=DiagnosisRun.Kind.COMPARISON if comparison else DiagnosisRun.Kind.DIAGNOSIS,
        playbooks=[] if comparison else ["contention"],
        result={"diagnosis": diagnosis},
        finished=timezone.now(),
    )


def _page(client: Client, investigation: Investigation) -> str:
    return client.get(reverse("investigations:detail", args=[investigation.pk])).content.decode()


def _verdict(body: str) -> str:
    return re.search(r'<section id="verdict".*?</section>', body, re.S).group(0)


def test_the_header_verdict_takes_the_comparison_into_account_and_says_so(alice_client) -> None:
    investigation = make_investigation("slower after restore")
    diagnosed = _done(investigation, LEAK_ALONE)
    alone = _verdict(_page(alice_client, investigation))
    assert "45 % confidence" in alone and f"From the diagnosis (run #{diagnosed.pk})." in alone
    assert "Confirm before acting" in alone  # low confidence: the first next step says so

    compared = _done(investigation, LEAK_COMPARED, comparison=True)
    verdict = _verdict(_page(alice_client, investigation))
    assert 'data-testid="verdict-class">restore-resource-leak<' in verdict
    assert "90 % confidence" in verdict and "45 %" not in verdict
    assert f"The diagnosis and the comparison agree (runs #{compared.pk} and #{diagnosed.pk})." in verdict
    assert "fresh-start baseline" in verdict  # the comparison's summary, the one that saw the baseline
    assert "2026-05-13 00:27:45 UTC" in verdict  # its onset
    assert "Confirm before acting" not in verdict
    assert "Restart fresh from the checkpoint" in verdict  # the report's next steps for cpu-contention


def test_a_named_incident_wins_over_healthy_and_the_other_word_is_kept(alice_client) -> None:
    investigation = make_investigation("slower after restore")
    healthy = _done(
        investigation, {"class": "healthy", "confidence": 0.8, "summary": "Nothing.", "culprits": []}
    )
    compared = _done(investigation, LEAK_COMPARED, comparison=True)
    verdict = _verdict(_page(alice_client, investigation))
    assert 'data-testid="verdict-class">restore-resource-leak<' in verdict
    assert (
        f"From the comparison (run #{compared.pk}); the diagnosis (run #{healthy.pk}) said healthy at 80 %."
        in verdict
    )


def test_the_verdict_names_culprits_and_onset_and_is_swapped_in_when_a_diagnosis_finishes(
    alice_client,
) -> None:
    investigation = make_investigation("rdma")
    job = investigation.jobs.get()
    run = DiagnosisRun.objects.create(
        investigation=investigation, job=job, status="running", playbooks=["network"]
    )
    assert "No verdict yet: the diagnosis is running" in _page(alice_client, investigation)
    DiagnosisRun.objects.filter(pk=run.pk).update(
        status="done",
        finished=timezone.now(),
        result={
            "diagnosis": {
                "class": "rdma-degradation",
                "confidence": 0.7,
                "onset": ONSET,
                "culprits": [{"host": "gpu-109", "gpu": None}, {"host": "gpu-111", "gpu": "3"}],
                "summary": "Sustained RDMA retransmits.",
                "chain": [],
            }
        },
    )
    status = reverse("investigations:diagnosis_status", args=[investigation.pk])
    body = alice_client.get(status, {"job": job.pk, "poll": "1"}, **HTMX).content.decode()
    verdict = re.search(r'<section id="verdict"[^>]*hx-swap-oob="true".*?</section>', body, re.S).group(0)
    assert "gpu-109, gpu-111 GPU 3" in verdict and "2026-05-13 00:30:15 UTC" in verdict
    assert "Act on the culprits first: gpu-109, gpu-111 GPU 3." in verdict


def _finding(investigation, run, **fields) -> Finding:
    defaults = {
        "playbook": "network",
        "rule": "r",
        "incident_class": "healthy",
        "severity": "info",
        "title": "t",
    }
    return Finding.objects.create(investigation=investigation, job=run.job, run=run, **(defaults | fields))


def test_informational_findings_are_effect_or_context_and_an_effect_before_its_cause_is_flagged(
    alice_client,
) -> None:
    investigation = make_investigation("rdma")
    job = investigation.jobs.get()
    chain = ["2026-05-13 00:30:15 UTC: RDMA", "2026-05-13 00:32:00 UTC: Collective bandwidth down on gpu-109"]
    rdma = {"class": "rdma-degradation", "confidence": 0.7, "onset": ONSET, "culprits": [], "chain": chain}
    run = _done(investigation, rdma)
    _finding(investigation, run, rule="rdma", incident_class="rdma-degradation", severity="warning",
             title="Sustained RDMA retransmits", onset=ONSET)  # fmt: skip
    _finding(investigation, run, playbook="training", rule="step_time_regression",
             title="Step time +28% above the job's own steady state", onset=ONSET - 240)  # fmt: skip
    _finding(
        investigation,
        run,
        rule="tcp",
        title="High TCP retransmits (not the collective path)",
        onset=ONSET - 4000,
    )
    _finding(investigation, run, rule="bw", title="Collective bandwidth down on gpu-109", onset=ONSET + 105)
    url = reverse("investigations:diagnosis", args=[investigation.pk])
    body = alice_client.get(url, {"job": job.pk}, **HTMX).content.decode()
    rows = _rows(body)
    assert "finding-role-effect" in rows["Step time"] and "finding-role-context" in rows["High TCP"]
    assert "finding-role-effect" in rows["Collective bandwidth"]  # an info finding the chain tells
    assert ">healthy<" not in body
    assert "Began 4 min 00 s before the rdma-degradation onset" in rows["Step time"]
    assert "finding-order-note" not in rows["High TCP"] and "finding-role" not in rows["Sustained RDMA"]
    chain = re.search(r'<ol class="diagnosis-chain".*?</ol>', body, re.S).group(0)
    assert (
        "effect</span>" in chain and "Step time +28%" in chain and 'data-testid="chain-order-note"' in chain
    )


def _rows(body: str) -> dict[str, str]:
    """Return each finding row's HTML keyed by the first two words of its title."""
    rows = {}
    for match in re.finditer(r'<tr id="finding-\d+".*?</tr>', body, re.S):
        title = re.search(r'class="finding-title">([^<]+)<', match.group(0)).group(1)
        rows[" ".join(title.split()[:2])] = match.group(0)
    return rows


def test_a_second_investigation_of_the_same_job_warns_and_links_to_the_first(alice_client) -> None:
    first = make_investigation("GPU hang")
    second = Investigation.objects.create(title="Same hang again")
    second.job_links.create(job=first.jobs.get(), role="primary")
    body = _page(alice_client, second)
    warning = re.search(r'data-testid="duplicate-warning">.*?</div>', body, re.S).group(0)
    assert f'href="{reverse("investigations:detail", args=[first.pk])}"' in warning and "GPU hang" in warning
    assert 'data-testid="duplicate-warning"' not in _page(
        alice_client, make_investigation("other", job_id="9")
    )


def test_only_the_owner_deletes_after_typing_the_number_and_it_is_audited(
    alice, alice_client, django_user_model
):
    investigation = make_investigation("to delete", owner=alice)
    job = investigation.jobs.get()
    url = reverse("investigations:delete", args=[investigation.pk])
    assert 'data-testid="delete-investigation"' in _page(alice_client, investigation)

    bob = Client()
    bob.force_login(django_user_model.objects.create_user("bob", password="x"))
    assert 'data-testid="delete-investigation"' not in _page(bob, investigation)
    refused = bob.post(url, {"confirm": str(investigation.pk)}, follow=True)
    assert "Only the investigation&#x27;s owner (alice) can delete it." in refused.content.decode()
    wrong = alice_client.post(url, {"confirm": "12345"}, follow=True)
    assert f"Type the investigation&#x27;s number, {investigation.pk}, to confirm." in wrong.content.decode()
    assert alice_client.get(url).status_code == 405
    assert Investigation.objects.filter(pk=investigation.pk).exists()

    done = alice_client.post(url, {"confirm": f"#{investigation.pk}"})
    assert done.status_code == 303 and done["Location"] == reverse("investigations:home")
    assert not Investigation.objects.filter(pk=investigation.pk).exists()
    assert Job.objects.filter(pk=job.pk).exists()  # jobs (and their sources) stay
    entry = LogEntry.objects.get()
    assert (entry.user, entry.action_flag, entry.object_id) == (alice, DELETION, str(investigation.pk))
    assert "to delete" in entry.change_message and job.job_id in entry.change_message


def test_the_job_root_typed_as_a_job_directory_says_so_and_opens_the_browser(alice_client, job_root) -> None:
    (job_root / "81234-llama" / "prometheus").mkdir(parents=True)
    response = alice_client.post(
        reverse("investigations:create"),
        {"title": "t", "severity": "sev3", "source": "job_dir", "job_dir": f"{job_root}/"},
    )
    body = response.content.decode()
    assert response.status_code == 400
    assert "is a job root, the folder that holds the job directories" in body
    assert "outside the allowed job roots" not in body
    assert "81234-llama" in body  # the browser lists the root's job directories


def test_the_data_sources_page_lists_a_job_directory_once(alice_client, job_root) -> None:
    job_dir = job_root / "81234-llama"
    (job_dir / "prometheus").mkdir(parents=True)
    for cluster in ("demo", "", "browser-1"):
        job = Job.objects.create(job_id="81234", cluster=cluster, job_dir=str(job_dir))
        DataSource.objects.create(job=job, kind="job_tsdb", address=str(job_dir))
    body = alice_client.get(reverse("investigations:sources")).content.decode()
    assert body.count(f'title="{job_dir}"') == 1
    also = re.search(r'data-testid="source-also">(.*?)</div>', body, re.S).group(1)
    assert "81234 (demo)" in also and "81234," in also


@pytest.mark.parametrize("code", [400, 403, 404, 500])
def test_error_pages_render_in_the_app_layout(code, alice, rf) -> None:
    request = rf.get("/x")
    request.user = alice  # 400 and 500 render without the request (a broken request or server)
    view = {400: defaults.bad_request, 403: defaults.permission_denied, 404: defaults.page_not_found,
            500: defaults.server_error}[code]  # fmt: skip
    response = view(request) if code == 500 else view(request, Exception("nope"))
    body = response.content.decode()
    assert response.status_code == code
    assert 'class="topbar"' in body and "stepwise.css" in body and f'<p class="error-code">{code}</p>' in body


def test_a_wrong_job_on_the_timeline_is_a_styled_404(alice_client) -> None:
    investigation = make_investigation()
    response = alice_client.get(reverse("investigations:timeline", args=[investigation.pk]), {"job": "999"})
    body = response.content.decode()
    assert response.status_code == 404
    assert 'data-testid="error-page"' in body and "no such job in this investigation" in body
    assert "Log out" in body  # the signed-in layout


def test_a_retried_run_shows_when_it_began_and_a_cancel_says_who(alice_client) -> None:
    investigation = make_investigation("retrying")
    job = investigation.jobs.get()
    run = DiagnosisRun.objects.create(
        investigation=investigation, job=job, status="running", playbooks=["network"]
    )
    began = run.created.strftime("%Y-%m-%d %H:%M:%S")
    # a retry claims the run again: its `started` moves, the time it began does not; a run whose worker
    # died is run again as attempt 2 (services/deadruns.py), and the page counts attempts apart
    DiagnosisRun.objects.filter(pk=run.pk).update(
        started=run.created + timezone.timedelta(minutes=7),
        attempt=2,
        error="Attempt 1 failed: timed out (retrying in 4 s)",
    )
    url = reverse("investigations:diagnosis", args=[investigation.pk])
    body = alice_client.get(url, {"job": job.pk}, **HTMX).content.decode()
    assert f'began <span data-testid="run-began">{began}</span> UTC' in body
    assert "this attempt since" in body and "Attempt 1 failed" in body
    assert 'attempt <span data-testid="run-attempt">2</span>' in body
    cancel = reverse("investigations:diagnosis_cancel", args=[investigation.pk, run.pk])
    assert "Cancelled by alice." in alice_client.post(cancel, **HTMX).content.decode()
