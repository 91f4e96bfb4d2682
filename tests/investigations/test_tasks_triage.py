"""The triage task claims the job's queued triage, stores it, and then enqueues discovery of its sources."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.urls import reverse
from kombu.exceptions import OperationalError as BrokerError

from investigations.models import DataSource, Investigation, Job
from investigations.services import investigations as inv
from investigations.tasks import job_triage_task
from playbooks.synth import SCENARIOS

pytestmark = pytest.mark.django_db


@pytest.fixture
def opened(settings, synth_root: Path, job_factory):
    """Return open(scenario) -> (investigation, job, truth) for a generated job directory."""
    settings.STEPWISE_JOB_ROOTS = [synth_root]

    def open_(scenario: str) -> tuple[Investigation, Job, dict]:
        job_dir, truth = job_factory(scenario)
        investigation = inv.investigation_create(
            title=scenario, source=inv.SourceRequest(kind="job_dir", job_dir=str(job_dir))
        )
        job = inv.investigation_primary_job(investigation)
        assert job is not None
        return investigation, job, truth

    return open_


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_it_triages_a_queued_job_and_then_enqueues_discovery(
    opened, scenario: str, django_capture_on_commit_callbacks
) -> None:
    investigation, job, truth = opened(scenario)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job_triage_task(job.pk)
    job.refresh_from_db()
    investigation.refresh_from_db()
    assert job.triage["state"] == "done"
    assert (job.triage["job"]["status"], job.triage["job"]["triage_class"]) == (
        truth["status"],
        truth["triage_class"],
    )
    assert job.config["JOB_ID"] == truth["job_id"]
    assert investigation.incident_class == (truth["triage_class"] or "")
    assert len(callbacks) == 1  # the job TSDB's discovery
    assert DataSource.objects.get(job=job).discovery_status == "queued"


@pytest.mark.parametrize("state", ["running", "done", "failed"])
def test_it_leaves_a_triage_that_is_not_queued(
    opened, state: str, django_capture_on_commit_callbacks
) -> None:
    """A second delivery (acks_late) or a finished triage does nothing."""
    _, job, _ = opened("healthy")
    Job.objects.filter(pk=job.pk).update(triage={"state": state}, triage_status=state)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job_triage_task(job.pk)
    job.refresh_from_db()
    assert job.triage == {"state": state}
    assert not callbacks


def test_running_it_twice_does_the_work_once(opened, django_capture_on_commit_callbacks) -> None:
    _, job, _ = opened("healthy")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job_triage_task(job.pk)
        finished = Job.objects.get(pk=job.pk).triage["finished"]
        job_triage_task(job.pk)
    assert Job.objects.get(pk=job.pk).triage["finished"] == finished
    assert len(callbacks) == 1


def test_a_log_that_cannot_be_read_is_recorded_and_discovery_still_follows(
    opened, tmp_path: Path, settings, django_capture_on_commit_callbacks
) -> None:
    _, job, _ = opened("healthy")
    Job.objects.filter(pk=job.pk).update(job_dir="", log_path=str(tmp_path / "gone.log"))
    settings.STEPWISE_JOB_ROOTS = [*settings.STEPWISE_JOB_ROOTS, tmp_path]
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job_triage_task(job.pk)
    job.refresh_from_db()
    assert job.triage["state"] == "failed"
    assert job.triage["error"].startswith("The log could not be read: log not found")
    assert len(callbacks) == 1


def test_a_bug_is_recorded_on_the_job_and_raised(opened, monkeypatch) -> None:
    _, job, _ = opened("healthy")

    def broken(job_id: int, **kw) -> Job:
        raise RuntimeError("bug")

    monkeypatch.setattr(inv, "job_triage", broken)
    with pytest.raises(RuntimeError):
        job_triage_task(job.pk)
    job.refresh_from_db()
    assert job.triage["state"] == "failed" and "Internal error" in job.triage["error"]


# --- Running the triage again: the last good triage stays until a new one is done ----------------


def _triaged(opened) -> tuple[Investigation, Job, dict]:
    """Return an opened healthy job whose triage is done, and that triage."""
    investigation, job, _ = opened("healthy")
    job_triage_task(job.pk)
    job.refresh_from_db()
    good = job.finished_triage()
    assert good is not None and good["state"] == "done"
    return investigation, job, good


def test_a_rerun_whose_log_moved_keeps_the_last_good_triage_and_shows_the_failure(
    opened, tmp_path: Path, settings, alice_client, django_capture_on_commit_callbacks
) -> None:
    investigation, job, good = _triaged(opened)
    assert inv.job_triage_queue(job)
    job.refresh_from_db()
    assert job.triage["state"] == "queued" and job.finished_triage() == good  # queued: still the good one
    # The log moved away before the re-run's worker got to it.
    Job.objects.filter(pk=job.pk).update(job_dir="", log_path=str(tmp_path / "moved.log"))
    settings.STEPWISE_JOB_ROOTS = [*settings.STEPWISE_JOB_ROOTS, tmp_path]
    with django_capture_on_commit_callbacks(execute=False):
        job_triage_task(job.pk)
    job.refresh_from_db()
    assert job.triage["state"] == "failed" and "log not found" in job.triage["error"]
    assert job.finished_triage() == good

    body = alice_client.get(reverse("investigations:detail", args=[investigation.pk])).content.decode()
    assert "Triage failed at " in body and "log not found" in body
    assert 'data-testid="triage-last-good"' in body
    assert f'data-testid="triage-status">{good["job"]["status"]}<' in body


def test_a_rerun_the_broker_never_got_keeps_the_last_good_triage(
    opened, alice_client, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    investigation, job, good = _triaged(opened)

    def broker_down(*args, **kwargs):
        raise BrokerError("Connection refused")

    monkeypatch.setattr(job_triage_task, "delay", broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        alice_client.post(reverse("investigations:triage_rerun", args=[investigation.pk]))
    job.refresh_from_db()
    assert job.triage["state"] == "failed" and "Could not reach the task broker" in job.triage["error"]
    assert job.finished_triage() == good

    body = alice_client.get(reverse("investigations:triage", args=[investigation.pk])).content.decode()
    assert "Could not reach the task broker" in body and 'data-testid="triage-last-good"' in body


def test_a_rerun_that_succeeds_replaces_the_last_good_triage(
    opened, django_capture_on_commit_callbacks
) -> None:
    _, job, good = _triaged(opened)
    inv.job_triage_queue(job)
    with django_capture_on_commit_callbacks(execute=False):
        job_triage_task(job.pk)
    job.refresh_from_db()
    assert job.triage["state"] == "done" and "last_good" not in job.triage
    assert job.finished_triage() == job.triage
    assert job.triage["finished"] != good["finished"]
