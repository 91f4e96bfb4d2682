"""The discovery region: start a discovery (enqueued after commit), poll while it runs, stop when done."""

from __future__ import annotations

from unittest import mock

import pytest
from django.urls import reverse
from kombu.exceptions import OperationalError

from investigations.models import DataSource, Investigation, InvestigationJob, Job, TaskStatus
from investigations.tasks.discovery import datasource_discover_task
from playbooks.discovery import Discovery, Identity

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
POLL = 'hx-trigger="every 1s"'


@pytest.fixture
def investigation(alice) -> Investigation:
    inv = Investigation.objects.create(title="Step time up 30 %", owner=alice)
    job = Job.objects.create(job_id="33129", name="JAX-llama")
    InvestigationJob.objects.create(investigation=inv, job=job, role=InvestigationJob.Role.PRIMARY)
    DataSource.objects.create(job=job, kind=DataSource.Kind.URL, address="http://127.0.0.1:9")
    return inv


def _source(investigation: Investigation) -> DataSource:
    return DataSource.objects.get(job__investigation_links__investigation=investigation)


def _discovered(investigation: Investigation, identity: Identity) -> DataSource:
    found = Discovery(
        url="http://127.0.0.1:9",
        time_range=(1773431100.0, 1773435780.0),
        profile="amd",
        hosts=("dgx031", "dgx032"),
        gpus_per_host={"dgx031": 8, "dgx032": 8},
        gpus_typical=8,
        gpus_min=8,
        gpus_max=8,
        identity=identity,
    )
    DataSource.objects.filter(pk=_source(investigation).pk).update(
        discovery_status=TaskStatus.DONE, discovery=found.to_dict()
    )
    return _source(investigation)


def test_anonymous_users_are_sent_to_the_login_page(client, investigation) -> None:
    for response in (
        client.get(reverse("investigations:discovery_status", args=[investigation.pk]), **HTMX),
        client.post(reverse("investigations:discovery_start", args=[investigation.pk])),
    ):
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))
    assert _source(investigation).discovery_status == ""


def test_start_queues_and_enqueues_after_commit(
    alice_client, investigation, django_capture_on_commit_callbacks
):
    with mock.patch.object(datasource_discover_task, "delay") as delay:
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            response = alice_client.post(
                reverse("investigations:discovery_start", args=[investigation.pk]), **HTMX
            )
        assert delay.call_count == 0  # nothing leaves before the commit
        assert len(callbacks) == 1
        callbacks[0]()
    source = _source(investigation)
    delay.assert_called_once_with(source.pk)
    assert source.discovery_status == TaskStatus.QUEUED
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="discovery-status"' in body and POLL in body
    assert "<html" not in body  # the partial only


def test_start_while_running_does_not_enqueue_again(
    alice_client, investigation, django_capture_on_commit_callbacks
):
    DataSource.objects.filter(pk=_source(investigation).pk).update(discovery_status=TaskStatus.RUNNING)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        alice_client.post(reverse("investigations:discovery_start", args=[investigation.pk]), **HTMX)
    assert callbacks == []


def test_start_without_htmx_redirects_to_the_investigation(alice_client, investigation) -> None:
    with mock.patch.object(datasource_discover_task, "delay"):
        response = alice_client.post(reverse("investigations:discovery_start", args=[investigation.pk]))
    assert response.status_code == 302
    assert response["Location"] == reverse("investigations:detail", args=[investigation.pk])


@pytest.mark.django_db(transaction=True)  # the enqueue happens on a real commit
def test_start_fails_the_discovery_when_the_broker_is_unreachable(alice_client, investigation) -> None:
    with mock.patch.object(
        datasource_discover_task, "delay", side_effect=OperationalError("Connection refused")
    ):
        response = alice_client.post(
            reverse("investigations:discovery_start", args=[investigation.pk]), **HTMX
        )
    source = _source(investigation)
    assert source.discovery_status == TaskStatus.FAILED
    assert "task broker" in source.discovery_error
    assert POLL not in response.content.decode()


@pytest.mark.parametrize("status", [TaskStatus.QUEUED, TaskStatus.RUNNING])
def test_the_status_polls_while_pending(alice_client, investigation, status: str) -> None:
    DataSource.objects.filter(pk=_source(investigation).pk).update(discovery_status=status)
    response = alice_client.get(reverse("investigations:discovery_status", args=[investigation.pk]), **HTMX)
    body = response.content.decode()
    assert response.status_code == 200 and POLL in body
    assert "Discover again" not in body


def test_polling_stops_when_done_and_a_mismatch_is_loud(alice_client, investigation) -> None:
    _discovered(
        investigation,
        Identity(
            status="mismatch",
            message="The log's last step is 4,812 but this "
            "Prometheus's tb_step ends at 9,120: this is probably the wrong Prometheus.",
            step_metric="tb_step",
            log_last_step=4812,
            tsdb_last_step=9120,
        ),
    )
    response = alice_client.get(reverse("investigations:discovery_status", args=[investigation.pk]), **HTMX)
    body = response.content.decode()
    assert POLL not in body
    assert 'data-testid="identity-mismatch"' in body
    assert "This is probably the wrong Prometheus for this job" in body and "9,120" in body
    assert "Discover again" in body and "csrfmiddlewaretoken" in body
    # what was discovered is shown along with the warning: the profile and the hosts
    assert 'data-testid="discovery-profile">amd</span>' in body
    assert "dgx031" in body and "dgx032" in body


def test_a_match_is_green_and_shows_hosts_by_gpus(alice_client, investigation) -> None:
    source = _discovered(investigation, Identity(status="match", message="The log's last step 137 matches."))
    DataSource.objects.filter(pk=source.pk).update(
        discovery=source.discovery
        | {"hosts_count": 2, "time_range_utc": ["2026-03-13 19:45:00", "2026-03-13 21:03:00"]}
    )
    body = alice_client.get(
        reverse("investigations:discovery_status", args=[investigation.pk]), **HTMX
    ).content.decode()
    assert 'data-testid="identity-match"' in body and "wrong Prometheus" not in body
    assert "2 × 8" in body and "2026-03-13 19:45:00" in body


def test_a_failed_discovery_shows_its_error(alice_client, investigation) -> None:
    DataSource.objects.filter(pk=_source(investigation).pk).update(
        discovery_status=TaskStatus.FAILED, discovery_error="Gave up after 5 attempts: unreachable"
    )
    body = alice_client.get(
        reverse("investigations:discovery_status", args=[investigation.pk]), **HTMX
    ).content.decode()
    assert "Gave up after 5 attempts" in body and POLL not in body


def test_a_full_page_load_of_the_status_goes_to_the_investigation(alice_client, investigation) -> None:
    response = alice_client.get(reverse("investigations:discovery_status", args=[investigation.pk]))
    assert response.status_code == 302
    assert response["Location"] == reverse("investigations:detail", args=[investigation.pk])


def test_an_unknown_investigation_is_404(alice_client) -> None:
    assert alice_client.get(reverse("investigations:discovery_status", args=[999]), **HTMX).status_code == 404
    assert alice_client.post(reverse("investigations:discovery_start", args=[999])).status_code == 404


def test_the_investigation_page_includes_the_region(alice_client, investigation) -> None:
    body = alice_client.get(reverse("investigations:detail", args=[investigation.pk])).content.decode()
    assert 'id="discovery-status"' in body and "Not discovered yet" in body


def test_a_stuck_discovery_stops_polling_and_can_be_started_again(
    alice_client, investigation, django_capture_on_commit_callbacks
) -> None:
    DataSource.objects.filter(pk=_source(investigation).pk).update(
        discovery_status=TaskStatus.RUNNING, discovery={"claimed_at": 1.0}
    )
    body = alice_client.get(
        reverse("investigations:discovery_status", args=[investigation.pk]), **HTMX
    ).content.decode()
    assert 'data-testid="discovery-stuck"' in body and POLL not in body and "Discover again" in body
    with mock.patch.object(datasource_discover_task, "delay"):
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            alice_client.post(reverse("investigations:discovery_start", args=[investigation.pk]), **HTMX)
    assert len(callbacks) == 1
    assert _source(investigation).discovery_status == TaskStatus.QUEUED


def test_a_first_discovery_that_failed_shows_only_its_error(alice_client, investigation) -> None:
    """Nothing was ever discovered: no empty summary and no identity banner, just the error."""
    DataSource.objects.filter(pk=_source(investigation).pk).update(
        discovery_status=TaskStatus.FAILED,
        discovery={"claimed_at": 1.0},
        discovery_error="no prometheus/ folder",
    )
    body = alice_client.get(
        reverse("investigations:discovery_status", args=[investigation.pk]), **HTMX
    ).content.decode()
    assert "no prometheus/ folder" in body
    assert "identity-" not in body and "Metric families" not in body


def test_the_discovery_responses_carry_the_source_card_out_of_band(
    alice_client, investigation, django_capture_on_commit_callbacks
) -> None:
    """A discovery changes the source's state: its responses refresh the source card, which polls while pending."""
    DataSource.objects.filter(pk=_source(investigation).pk).update(
        state=DataSource.State.ERROR, state_detail="Host key verification failed"
    )
    with (
        mock.patch.object(datasource_discover_task, "delay"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        started = alice_client.post(
            reverse("investigations:discovery_start", args=[investigation.pk]), **HTMX
        )
    card = started.content.decode().split('<section id="source-state"', 1)[1]
    assert card.startswith(' class="card source-state" hx-swap-oob="true"')
    assert 'hx-trigger="every 2s"' in card.split(">", 1)[0]  # pending discovery: the card polls again

    DataSource.objects.filter(pk=_source(investigation).pk).update(
        state=DataSource.State.UP, state_detail="discovered: amd profile", discovery_status=TaskStatus.DONE
    )
    done = alice_client.get(reverse("investigations:discovery_status", args=[investigation.pk]), **HTMX)
    card = done.content.decode().split('<section id="source-state"', 1)[1]
    assert 'hx-swap-oob="true"' in card.split(">", 1)[0]
    assert "every 2s" not in card.split(">", 1)[0]  # final: no more polling
    assert "discovered: amd profile" in card and "Host key verification failed" not in card
