"""Discovery glue: queue it, run it against a real served TSDB, store what it found and the identity check."""

from __future__ import annotations

from pathlib import Path

import pytest

from investigations import services
from investigations.models import DataSource, Job, TaskStatus
from investigations.services import discovery as disc
from playbooks.discovery import Discovery
from playbooks.prometheus import PrometheusUnreachable
from playbooks.triage import triage_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def registered(job_factory, synth_root: Path, view_root: Path, settings):
    """Return register(scenario, seed=1, profile="amd", triage_of=None) -> DataSource of a job TSDB.

    The job's triage is its own log's unless `triage_of` names another job directory.
    """
    settings.STEPWISE_JOB_ROOTS = [synth_root]
    settings.STEPWISE_TSDB_VIEWS = view_root

    def register(
        scenario: str, seed: int = 1, profile: str = "amd", triage_of: Path | None = None
    ) -> DataSource:
        job_dir, _ = job_factory(scenario, seed, profile)
        job, source = services.job_register(job_dir)
        job.triage = triage_job(triage_of or job_dir).to_dict() | {"state": "done"}
        job.save()
        return source

    return register


def test_request_queues_once_and_clears_the_error(url_source) -> None:
    url_source.discovery_error = "old"
    url_source.save()
    assert disc.discovery_request(url_source) is True
    assert url_source.discovery_status == TaskStatus.QUEUED and url_source.discovery_error == ""
    assert disc.discovery_request(url_source) is False  # already queued
    DataSource.objects.filter(pk=url_source.pk).update(discovery_status=TaskStatus.RUNNING)
    assert disc.discovery_request(url_source) is False
    DataSource.objects.filter(pk=url_source.pk).update(discovery_status=TaskStatus.DONE)
    assert disc.discovery_request(url_source) is True


def test_claim_moves_queued_to_running_once(url_source) -> None:
    disc.discovery_request(url_source)
    assert disc.discovery_claim(url_source.pk) is True
    assert disc.discovery_claim(url_source.pk) is False
    url_source.refresh_from_db()
    assert url_source.discovery_status == TaskStatus.RUNNING


@pytest.mark.parametrize("profile", ["amd", "nvidia"])
def test_execute_stores_the_discovery_of_a_job_tsdb(registered, profile: str) -> None:
    source = registered("healthy", profile=profile)
    ds = disc.discovery_execute(source.pk)
    found = Discovery.from_dict(ds.discovery)
    assert ds.state == DataSource.State.UP and "discovered" in ds.state_detail
    assert ds.discovered is not None and ds.discovery_error == ""
    assert found.profile == profile
    assert found.identity.status == "match"
    assert found.identity.log_loss is not None  # the losses came from the job's own log
    assert len(found.hosts) == 4 and found.gpus_typical == 4
    assert ds.discovery["time_range_utc"][0].startswith("20")
    assert all(t["last_scrape_utc"] for t in ds.discovery["targets"])


def test_execute_flags_the_wrong_prometheus(registered, job_factory) -> None:
    """A job whose log is another job's (different last step) gets a mismatch stored."""
    other_dir, _ = job_factory("collective-hang", 2)
    source = registered("healthy", triage_of=other_dir)
    ds = disc.discovery_execute(source.pk)
    ident = ds.discovery["identity"]
    assert ident["status"] == "mismatch"
    assert "wrong Prometheus" in ident["message"]


def test_execute_without_a_triage_leaves_the_identity_unknown(served_job) -> None:
    client, truth, _ = served_job("healthy")
    source = DataSource.objects.create(kind=DataSource.Kind.URL, address=client.base_url)
    ds = disc.discovery_execute(source.pk)
    assert ds.discovery["identity"]["status"] == "unknown"
    assert set(ds.discovery["hosts"]) == set(truth["hosts"])


def test_execute_ignores_a_triage_that_is_still_running(served_job) -> None:
    client, _, _ = served_job("healthy")
    job = Job.objects.create(job_id="1", triage={"state": "running"})
    source = DataSource.objects.create(kind=DataSource.Kind.URL, address=client.base_url, job=job)
    ds = disc.discovery_execute(source.pk)
    assert ds.discovery["identity"]["status"] == "unknown"


def test_execute_on_a_down_server_marks_it_down_and_keeps_the_old_discovery(url_source) -> None:
    url_source.discovery = {"profile": "amd"}
    url_source.save()
    with pytest.raises(PrometheusUnreachable):
        disc.discovery_execute(url_source.pk)
    url_source.refresh_from_db()
    assert url_source.state == DataSource.State.DOWN
    assert "unreachable" in url_source.state_detail
    assert url_source.discovery == {"profile": "amd"}


def test_execute_refuses_a_job_dir_outside_the_roots(job_root: Path, tmp_path: Path) -> None:
    source = DataSource.objects.create(kind=DataSource.Kind.JOB_TSDB, address=str(tmp_path / "elsewhere"))
    with pytest.raises(services.DataSourceError, match="outside the allowed job roots"):
        disc.discovery_execute(source.pk)
    source.refresh_from_db()
    assert source.state == DataSource.State.ERROR and "outside the allowed job roots" in source.state_detail


def test_finish_only_moves_a_running_discovery(url_source) -> None:
    assert disc.discovery_finish(url_source.pk, TaskStatus.DONE) is False
    DataSource.objects.filter(pk=url_source.pk).update(discovery_status=TaskStatus.RUNNING)
    assert disc.discovery_finish(url_source.pk, TaskStatus.FAILED, "boom") is True
    url_source.refresh_from_db()
    assert url_source.discovery_status == TaskStatus.FAILED and url_source.discovery_error == "boom"


def test_a_discovery_whose_worker_died_can_be_queued_again(url_source, settings) -> None:
    """Running past the hard time limit means the worker is gone: a forced request queues it again."""
    disc.discovery_request(url_source)
    assert disc.discovery_claim(url_source.pk)
    url_source.refresh_from_db()
    claimed = url_source.discovery[disc.CLAIMED_KEY]
    assert not disc.discovery_stuck(url_source)
    assert disc.discovery_request(url_source, force=True) is False  # a live discovery is left alone
    later = claimed + settings.CELERY_TASK_TIME_LIMIT + disc.STUCK_GRACE_S + 1
    assert disc.discovery_stuck(url_source, now=later)
    url_source.discovery[disc.CLAIMED_KEY] = (
        claimed - settings.CELERY_TASK_TIME_LIMIT - disc.STUCK_GRACE_S - 1
    )
    url_source.save()
    assert disc.discovery_request(url_source) is False  # not without force
    assert disc.discovery_request(url_source, force=True) is True
    assert url_source.discovery_status == TaskStatus.QUEUED
