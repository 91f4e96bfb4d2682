"""Opening investigations of each kind of source, all-or-nothing; updating them; browsing the roots; triage."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from investigations.models import DataSource, Investigation, InvestigationJob, Job
from investigations.services import investigations as inv
from playbooks.triage import TriageError

pytestmark = pytest.mark.django_db


@pytest.fixture
def roots(settings, synth_root: Path, tmp_path: Path) -> Path:
    """Allow the generated jobs' folder as the only job root; uploads go to a private media root."""
    settings.STEPWISE_JOB_ROOTS = [synth_root]
    settings.MEDIA_ROOT = tmp_path / "media"
    return synth_root


def _nothing_saved(media: Path | None = None) -> None:
    assert not Investigation.objects.exists()
    assert not InvestigationJob.objects.exists()
    assert not Job.objects.exists()
    assert not DataSource.objects.exists()
    if media is not None:
        assert not media.exists() or not any(p.is_file() for p in media.rglob("*"))


def _log_upload(job_dir: Path, name: str = "job.log") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, (job_dir / "log").read_bytes(), content_type="text/plain")


def test_it_opens_an_investigation_on_a_job_directory(roots, job_factory, alice) -> None:
    job_dir, truth = job_factory("healthy")
    investigation = inv.investigation_create(
        title="  Healthy run  ",
        severity="sev2",
        team="infra",
        owner=alice,
        source=inv.SourceRequest(kind="job_dir", job_dir=str(job_dir)),
    )
    assert (investigation.title, investigation.severity, investigation.owner) == (
        "Healthy run",
        "sev2",
        alice,
    )
    job = inv.investigation_primary_job(investigation)
    assert job is not None and job.job_id == truth["job_id"] and job.job_dir == str(job_dir.resolve())
    assert job.triage == {"state": "queued", "queued": job.triage["queued"]}
    ds = job.current_datasource()
    assert ds is not None and (ds.kind, ds.address) == (DataSource.Kind.JOB_TSDB, str(job_dir.resolve()))


@pytest.mark.parametrize(
    "path, message",
    [
        ("/etc", "outside the allowed job roots"),
        ("relative/dir", "not an absolute path"),
        ("", "Pick a job directory"),
    ],
)
def test_a_bad_job_directory_is_refused_and_nothing_is_saved(roots, path: str, message: str) -> None:
    with pytest.raises(inv.InvestigationError, match=message) as caught:
        inv.investigation_create(title="x", source=inv.SourceRequest(kind="job_dir", job_dir=path))
    assert caught.value.field == "job_dir"
    _nothing_saved()


def test_a_dotdot_path_leading_out_of_the_roots_is_refused(roots, job_factory) -> None:
    job_dir, _ = job_factory("healthy")
    with pytest.raises(inv.InvestigationError, match="outside the allowed job roots"):
        inv.investigation_create(
            title="x", source=inv.SourceRequest(kind="job_dir", job_dir=f"{job_dir}/../../../etc")
        )
    _nothing_saved()


def test_a_job_directory_without_a_tsdb_is_refused(roots) -> None:
    job_dir = roots / "12345-no-tsdb"
    job_dir.mkdir(exist_ok=True)
    (job_dir / "job.log").write_text("JOB_ID=12345\n")
    with pytest.raises(inv.InvestigationError, match="has no prometheus/ folder"):
        inv.investigation_create(title="x", source=inv.SourceRequest(kind="job_dir", job_dir=str(job_dir)))
    _nothing_saved()


def test_it_opens_one_on_an_uploaded_log_with_the_url_of_its_prometheus(roots, served_job, settings) -> None:
    client, truth, job_dir = served_job("collective-hang")
    investigation = inv.investigation_create(
        title="hang",
        source=inv.SourceRequest(
            kind="upload", log=_log_upload(job_dir), prometheus_url=client.base_url + "/"
        ),
    )
    job = inv.investigation_primary_job(investigation)
    assert job is not None
    assert (job.job_id, job.name) == (truth["job_id"], truth["job_name"])
    assert Path(job.log_upload.path).read_bytes() == (job_dir / "log").read_bytes()
    assert Path(job.log_upload.path).is_relative_to(settings.MEDIA_ROOT)
    ds = job.current_datasource()
    assert ds is not None and (ds.kind, ds.address, ds.state) == ("url", client.base_url, "up")
    assert job.triage["state"] == "queued"


def test_an_upload_without_a_header_gets_a_generated_job_id(roots) -> None:
    log = SimpleUploadedFile("garbage.bin", os.urandom(4096))
    investigation = inv.investigation_create(title="g", source=inv.SourceRequest(kind="upload", log=log))
    job = inv.investigation_primary_job(investigation)
    assert job is not None and job.job_id.startswith("upload-") and job.name == "garbage.bin"
    assert job.current_datasource() is None


def test_an_empty_upload_is_refused_and_nothing_is_saved(roots, settings) -> None:
    with pytest.raises(inv.InvestigationError, match="is empty") as caught:
        inv.investigation_create(
            title="x", source=inv.SourceRequest(kind="upload", log=SimpleUploadedFile("empty.log", b""))
        )
    assert caught.value.field == "log"
    _nothing_saved(settings.MEDIA_ROOT)


def test_an_upload_over_the_size_limit_is_refused(roots, settings) -> None:
    settings.STEPWISE_LOG_UPLOAD_MAX_MB = 1
    big = SimpleUploadedFile("big.log", b"x" * (1024 * 1024 + 1))
    with pytest.raises(inv.InvestigationError, match="the limit is 1 MB"):
        inv.investigation_create(title="x", source=inv.SourceRequest(kind="upload", log=big))
    _nothing_saved(settings.MEDIA_ROOT)


def test_a_failure_after_the_upload_was_saved_removes_the_file(
    roots, job_factory, settings, monkeypatch
) -> None:
    """The rows are rolled back and the saved log deleted when a later step fails."""
    job_dir, _ = job_factory("healthy")

    def boom(job: Job) -> bool:
        raise inv.InvestigationError("simulated failure after the upload was saved")

    monkeypatch.setattr(inv, "job_triage_queue", boom)
    with pytest.raises(inv.InvestigationError, match="simulated"):
        inv.investigation_create(title="x", source=inv.SourceRequest(kind="upload", log=_log_upload(job_dir)))
    _nothing_saved(settings.MEDIA_ROOT)


def test_it_opens_one_on_a_prometheus_url(roots, served_job) -> None:
    client, _, _ = served_job("healthy")
    investigation = inv.investigation_create(
        title="url", source=inv.SourceRequest(kind="url", prometheus_url=client.base_url, job_id="81234")
    )
    job = inv.investigation_primary_job(investigation)
    assert job is not None and job.job_id == "81234"
    assert job.triage["state"] == "none"  # no log: nothing to triage
    ds = job.current_datasource()
    assert ds is not None and (ds.kind, ds.state) == ("url", "up")


@pytest.mark.parametrize(
    "url, message",
    [
        ("http://10.20.30.40:9090", "is not allowed"),
        ("ftp://127.0.0.1:9090", "is not an http:// or https:// URL"),
        ("", "Give the Prometheus URL"),
    ],
)
def test_a_bad_url_is_refused_and_nothing_is_saved(roots, url: str, message: str) -> None:
    with pytest.raises(inv.InvestigationError, match=message) as caught:
        inv.investigation_create(title="x", source=inv.SourceRequest(kind="url", prometheus_url=url))
    assert caught.value.field == "prometheus_url"
    _nothing_saved()


def test_a_down_prometheus_is_refused_and_nothing_is_saved(roots, job_factory, settings) -> None:
    job_dir, _ = job_factory("healthy")
    closed = _closed_port_url()
    with pytest.raises(inv.InvestigationError, match=f"No Prometheus answers at {closed}"):
        inv.investigation_create(
            title="x",
            source=inv.SourceRequest(kind="upload", log=_log_upload(job_dir), prometheus_url=closed),
        )
    _nothing_saved(settings.MEDIA_ROOT)


def test_a_missing_title_or_unknown_severity_is_refused(roots, job_factory) -> None:
    job_dir, _ = job_factory("healthy")
    source = inv.SourceRequest(kind="job_dir", job_dir=str(job_dir))
    with pytest.raises(inv.InvestigationError, match="title"):
        inv.investigation_create(title=" ", source=source)
    with pytest.raises(inv.InvestigationError, match="severity"):
        inv.investigation_create(title="x", severity="sev9", source=source)
    _nothing_saved()


# --- update and more jobs -----------------------------------------------------------------------


@pytest.fixture
def opened(roots, job_factory) -> Investigation:
    job_dir, _ = job_factory("restore-resource-leak")
    return inv.investigation_create(
        title="leak", source=inv.SourceRequest(kind="job_dir", job_dir=str(job_dir))
    )


def test_it_updates_status_severity_owner_team_and_title(opened, alice) -> None:
    inv.investigation_update(
        opened, status="monitoring", severity="sev1", owner=alice, team=" ml ", title="T"
    )
    opened.refresh_from_db()
    assert (opened.status, opened.severity, opened.owner, opened.team, opened.title) == (
        "monitoring", "sev1", alice, "ml", "T",
    )  # fmt: skip


@pytest.mark.parametrize(
    "changes", [{"status": "closed"}, {"severity": "x"}, {"title": ""}, {"summary": "y"}]
)
def test_a_bad_update_is_refused_and_changes_nothing(opened, changes) -> None:
    with pytest.raises(inv.InvestigationError):
        inv.investigation_update(opened, **changes)
    opened.refresh_from_db()
    assert (opened.status, opened.severity, opened.title) == ("open", "sev3", "leak")


def test_it_adds_the_baseline_job_and_refuses_it_twice(opened, job_factory) -> None:
    job_dir, _ = job_factory("restore-resource-leak")
    baseline_dir = job_dir.with_name(job_dir.name + "-baseline")
    link = inv.investigation_job_add(opened, job_dir=str(baseline_dir), role="baseline")
    assert (link.role, link.position, link.job.triage["state"]) == ("baseline", 1, "queued")
    with pytest.raises(inv.InvestigationError, match="already part of this investigation"):
        inv.investigation_job_add(opened, job_dir=str(baseline_dir), role="compare")
    with pytest.raises(inv.InvestigationError, match="outside the allowed job roots"):
        inv.investigation_job_add(opened, job_dir="/tmp", role="compare")
    assert opened.job_links.count() == 2


# --- browsing -------------------------------------------------------------------------------------


def test_browsing_lists_the_roots_then_their_folders_with_job_markers(roots, job_factory) -> None:
    job_dir, _ = job_factory("healthy")
    top = inv.job_dir_browse("")
    assert [e.path for e in top.entries] == [str(roots.resolve())]
    listing = inv.job_dir_browse(str(roots))
    entry = next(e for e in listing.entries if e.name == job_dir.name)
    assert entry.has_tsdb and entry.has_log and entry.is_job
    assert listing.parent == ""
    inside = inv.job_dir_browse(str(job_dir))
    assert [e.name for e in inside.entries] == ["prometheus"] and inside.parent == str(roots.resolve())
    assert inside.current is not None and inside.current.has_tsdb and inside.current.has_log
    assert listing.current is None  # a root is not a job directory


@pytest.mark.parametrize("path", ["/etc", "../", "/tmp/../etc", "relative"])
def test_browsing_refuses_paths_outside_the_roots_with_a_message(roots, path: str) -> None:
    listing = inv.job_dir_browse(path)
    assert listing.error and listing.path == ""
    assert [e.path for e in listing.entries] == [str(roots.resolve())]


def test_browsing_hides_symlinks_that_lead_out_of_the_roots(roots, tmp_path: Path) -> None:
    folder = roots / "links"
    folder.mkdir(exist_ok=True)
    link = folder / "escape"
    if not link.is_symlink():
        link.symlink_to("/etc")
    (folder / "inside").mkdir(exist_ok=True)
    names = [e.name for e in inv.job_dir_browse(str(folder)).entries]
    assert names == ["inside"]
    assert inv.job_dir_browse(str(link)).error


# --- triage --------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["healthy", "collective-hang", "heartbeat-false-positive"])
def test_triage_of_a_job_directory_stores_the_contract_and_the_class(
    roots, job_factory, scenario: str
) -> None:
    job_dir, truth = job_factory(scenario)
    investigation = inv.investigation_create(
        title=scenario, source=inv.SourceRequest(kind="job_dir", job_dir=str(job_dir))
    )
    job = inv.investigation_primary_job(investigation)
    assert job is not None
    job = inv.job_triage(job.pk)
    assert job.triage["state"] == "done"
    assert job.triage["job"]["status"] == truth["status"]
    assert job.triage["job"]["triage_class"] == truth["triage_class"]
    assert job.config["JOB_ID"] == truth["job_id"]
    assert set(job.triage) >= {"job", "matches", "progress", "config", "nodes", "prometheus", "unreadable"}
    json.dumps(job.triage)  # stored as JSON
    investigation.refresh_from_db()
    assert investigation.incident_class == (truth["triage_class"] or "")


def test_triage_of_a_garbage_upload_reports_what_it_could_not_read(roots) -> None:
    log = SimpleUploadedFile("garbage.bin", bytes(range(256)) * 64 + b"\n" + os.urandom(2048))
    investigation = inv.investigation_create(title="g", source=inv.SourceRequest(kind="upload", log=log))
    job = inv.job_triage(inv.investigation_primary_job(investigation).pk)  # type: ignore[union-attr]
    assert job.triage["state"] == "done"
    assert any("binary" in u for u in job.triage["unreadable"])


def test_triage_of_a_job_whose_log_vanished_raises(roots) -> None:
    job = Job.objects.create(job_id="1", log_path=str(roots / "gone.log"))
    with pytest.raises(TriageError):
        inv.job_triage(job.pk)


def test_claiming_a_triage_succeeds_once(roots) -> None:
    job = Job.objects.create(job_id="2", log_path=str(roots / "x.log"))
    assert inv.job_triage_queue(job)
    assert inv.job_triage_claim(job.pk)
    assert not inv.job_triage_claim(job.pk)
    job.refresh_from_db()
    assert job.triage["state"] == "running"


def _closed_port_url() -> str:
    """Return a loopback URL where nothing listens (a kernel-chosen port, outside the TSDB servers' range)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_a_tunnel_that_does_not_open_creates_nothing(roots, settings, tmp_path) -> None:
    """The tunnel is opened before anything is saved (tests/investigations/services/test_tunnel_create.py
    has the real sshd): a head node that cannot be reached is the form's error on the tunnel field."""
    from playbooks.tunnel import parse_tunnel_command

    settings.STEPWISE_TUNNELS_DIR = tmp_path / "tunnels"
    spec = parse_tunnel_command("ssh -p 1 -L 9192:localhost:9192 root@127.0.0.1")
    with pytest.raises(inv.InvestigationError, match="The SSH tunnel did not open") as caught:
        inv.investigation_create(
            title="tunnel",
            source=inv.SourceRequest(kind="tunnel", tunnel=spec, job_id="81234", cluster="east"),
        )
    assert caught.value.field == "tunnel"
    _nothing_saved()


def test_a_tunnel_without_a_spec_is_refused(roots) -> None:
    with pytest.raises(inv.InvestigationError, match="Paste the tunnel command") as caught:
        inv.investigation_create(title="x", source=inv.SourceRequest(kind="tunnel"))
    assert caught.value.field == "tunnel"
    _nothing_saved()


def test_a_stalled_triage_can_be_queued_again(roots, settings) -> None:
    from datetime import timedelta

    from django.utils import timezone

    long_ago = (timezone.now() - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 120)).isoformat()
    job = Job.objects.create(
        job_id="3", log_path=str(roots / "x.log"), triage={"state": "running", "started": long_ago}
    )
    assert job.triage_stalled() and not job.triage_in_progress()
    assert inv.job_triage_queue(job)
    job.refresh_from_db()
    assert job.triage["state"] == job.triage_status == "queued"
    assert not job.triage_stalled() and job.triage_in_progress()
    fresh = Job.objects.create(
        job_id="4",
        log_path=str(roots / "x.log"),
        triage={"state": "running", "started": timezone.now().isoformat()},
    )
    assert inv.job_triage_queue(fresh)
    fresh.refresh_from_db()
    assert fresh.triage["state"] == "running"


def test_a_second_investigation_on_the_same_url_reuses_the_job_and_its_source(roots, served_job) -> None:
    client, _, _ = served_job("healthy")
    source = inv.SourceRequest(kind="url", prometheus_url=client.base_url)
    first = inv.investigation_create(title="one", source=source)
    second = inv.investigation_create(title="two", source=source)
    assert inv.investigation_primary_job(first) == inv.investigation_primary_job(second)
    assert DataSource.objects.count() == 1
