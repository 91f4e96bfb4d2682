"""Posting the new-investigation form: one of each source opens an investigation and enqueues its work after
commit; bad input re-renders the form with a message on the field and saves nothing."""

from __future__ import annotations

import getpass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from investigations.models import DataSource, DiagnosisRun, Investigation, Job
from playbooks import tsdb_server
from playbooks import tunnel as tunnels
from tests.support.sshd import SSHServer, sshd_fixture  # noqa: F401 (registers the `sshd` fixture)

from .investigation_helpers import (
    assert_login_required,
    closed_port_url,
    job_alone_in,
    roots,  # noqa: F401 (a fixture, used through usefixtures)
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("roots")]
URL = reverse("investigations:create")


def sshd_user() -> str:
    return getpass.getuser()  # the test sshd authorizes its client key for the user running the tests


def _post(client, captured, **data):
    form = {"title": "Incident", "severity": "sev2", "team": "infra"} | data
    with captured(execute=False) as callbacks:
        response = client.post(URL, form)
    return response, callbacks


def _tasks(callbacks) -> list[str]:
    """Return the short names of the tasks the on-commit callbacks send (each is partial(send, task, id, ...))."""
    return [cb.args[0].name.rsplit(".", 1)[-1] for cb in callbacks]


def test_it_needs_a_login(client) -> None:
    assert_login_required(client, URL, "post")


def test_a_job_directory_opens_and_enqueues_its_triage(
    alice_client,
    alice,
    job_factory,
    django_capture_on_commit_callbacks,
) -> None:
    job_dir, truth = job_factory("healthy")
    response, callbacks = _post(
        alice_client, django_capture_on_commit_callbacks, source="job_dir", job_dir=str(job_dir)
    )
    investigation = Investigation.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("investigations:detail", args=[investigation.pk])
    assert (investigation.owner, investigation.severity, investigation.team) == (alice, "sev2", "infra")
    job = Job.objects.get()
    assert job.job_id == truth["job_id"] and job.triage["state"] == "queued"
    assert DataSource.objects.get().discovery_status == "queued"
    # The triage (it enqueues discovery when done), and the diagnosis, diagnosed on open as the demo's
    # investigations are: its plan waits for the triage.
    assert _tasks(callbacks) == ["job_triage_task", "diagnosis_plan_task"]
    run = DiagnosisRun.objects.get()
    assert (run.investigation, run.job, run.status, run.created_by) == (investigation, job, "queued", alice)


def test_an_upload_with_a_url_opens(alice_client, served_job, django_capture_on_commit_callbacks) -> None:
    client, truth, job_dir = served_job("healthy")
    log = SimpleUploadedFile("81234.log", (job_dir / "log").read_bytes())
    with django_capture_on_commit_callbacks(execute=False):
        response = alice_client.post(
            URL,
            {
                "title": "up",
                "severity": "sev3",
                "source": "upload",
                "log": log,
                "prometheus_url": client.base_url,
            },
        )
    assert response.status_code == 302
    job = Job.objects.get()
    assert job.log_upload and job.job_id == truth["job_id"]
    assert DataSource.objects.get().kind == "url"


def test_a_url_alone_enqueues_discovery_at_once(
    alice_client, served_job, django_capture_on_commit_callbacks
) -> None:
    client, _, _ = served_job("healthy")
    response, callbacks = _post(
        alice_client, django_capture_on_commit_callbacks, source="url", prometheus_url=client.base_url
    )
    assert response.status_code == 302
    assert Job.objects.get().triage["state"] == "none"
    # discovery (there is no log to triage first), and the diagnosis
    assert _tasks(callbacks) == ["datasource_discover_task", "diagnosis_plan_task"]


def test_a_job_id_opens_the_job_directory_it_names(
    alice_client, job_factory, job_root, settings, django_capture_on_commit_callbacks
) -> None:
    """The alert gives the job id: typed instead of a path, it finds the folder whose log header names it."""
    generated, truth = job_factory("healthy")
    job_dir = job_alone_in(job_root, generated)
    settings.STEPWISE_JOB_ROOTS = [job_root]
    response, _ = _post(
        alice_client, django_capture_on_commit_callbacks, source="job_dir", job_dir=f" {truth['job_id']} "
    )
    assert response.status_code == 302
    job = Job.objects.get()
    assert job.job_id == truth["job_id"] and job.job_dir == str(job_dir.resolve())
    assert DataSource.objects.get().address == str(job_dir.resolve())


def test_a_job_id_in_two_folders_asks_for_the_path(
    alice_client, job_root, django_capture_on_commit_callbacks
) -> None:
    for name in ("81234-JAX-llama", "81234-JAX-llama-8N-TGS_1234.5"):
        (job_root / name / "prometheus").mkdir(parents=True)
    response, callbacks = _post(
        alice_client, django_capture_on_commit_callbacks, source="job_dir", job_dir="81234"
    )
    assert response.status_code == 400
    body = response.content.decode()
    assert "Job 81234 matches 2 job directories" in body and "81234-JAX-llama-8N-TGS_1234.5" in body
    assert not Investigation.objects.exists() and not Job.objects.exists() and not callbacks


@pytest.mark.parametrize(
    "data, field_message",
    [
        ({"source": "job_dir", "job_dir": "/etc"}, "outside the allowed job roots"),
        ({"source": "job_dir", "job_dir": ""}, "Pick a job directory"),
        (
            {"source": "job_dir", "job_dir": "4242424242"},
            "No job directory of job 4242424242 under the allowed job roots",
        ),
        ({"source": "url", "prometheus_url": "http://10.9.8.7:9090"}, "is not allowed"),
        ({"source": "url", "prometheus_url": ""}, "Give the URL of the Prometheus"),
        ({"source": "upload"}, "Choose the job&#x27;s log file"),
        ({"source": "tunnel"}, "Give the head node"),
        ({"source": "tunnel", "tunnel_command": "ssh -o ProxyCommand=evil root@gpu-1"}, "ProxyCommand"),
        ({"source": "tunnel", "head_host": "-oProxyCommand=x", "remote_port": "9090"}, "Host"),
        ({"source": "ftp"}, "Select a valid choice"),
        ({"source": "job_dir", "job_dir": "/x", "title": ""}, "This field is required"),
    ],
)
def test_bad_input_is_shown_on_the_form_and_nothing_is_saved(
    alice_client,
    data,
    field_message,
    django_capture_on_commit_callbacks,
) -> None:
    response, callbacks = _post(alice_client, django_capture_on_commit_callbacks, **data)
    assert response.status_code == 400
    assert field_message in response.content.decode()
    assert not Investigation.objects.exists() and not Job.objects.exists() and not DataSource.objects.exists()
    assert not callbacks


def test_a_down_prometheus_is_a_clear_message(alice_client, django_capture_on_commit_callbacks) -> None:
    closed = closed_port_url()
    response, _ = _post(alice_client, django_capture_on_commit_callbacks, source="url", prometheus_url=closed)
    assert response.status_code == 400
    assert f"No Prometheus answers at {closed}" in response.content.decode()
    assert not Investigation.objects.exists()


@pytest.fixture
def head_alias(sshd: SSHServer, served_job, settings, tmp_path: Path, monkeypatch) -> int:
    """Return the port of a real Prometheus behind the head node `gpu-101`: a Host alias of ~/.ssh/config
    (HOME is a private folder, as the service user's) naming the test sshd. The form opens the tunnel."""
    client, _truth, _job_dir = served_job("healthy")
    dot_ssh = tmp_path / "home" / ".ssh"
    dot_ssh.mkdir(parents=True, mode=0o700)
    (dot_ssh / "config").write_text(
        f"Host gpu-101\n    HostName 127.0.0.1\n    Port {sshd.port}\n    User {sshd.user}\n"
        f"    IdentityFile {sshd.client_key}\n    IdentitiesOnly yes\n    UserKnownHostsFile {sshd.known_hosts}\n"
    )
    (dot_ssh / "config").chmod(0o600)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    settings.STEPWISE_TUNNELS_DIR = tmp_path / "tunnels"
    yield int(urlsplit(client.base_url).port or 0)
    tunnels.reap_leftover_tunnels(tmp_path / "tunnels")


def test_a_pasted_tunnel_command_opens_and_enqueues_discovery(
    alice_client, django_capture_on_commit_callbacks, head_alias: int
) -> None:
    command = f"ssh -L 6006:localhost:6006 -L {head_alias}:localhost:{head_alias} {sshd_user()}@gpu-101"
    response, callbacks = _post(
        alice_client, django_capture_on_commit_callbacks, source="tunnel", tunnel_command=command
    )
    assert response.status_code == 302
    ds = DataSource.objects.get()
    assert (ds.kind, ds.tunnel["host"], ds.tunnel["remote_port"]) == ("ssh_tunnel", "gpu-101", head_alias)
    # discovery, through the tunnel the form opened, and the diagnosis
    assert _tasks(callbacks) == ["datasource_discover_task", "diagnosis_plan_task"]


def test_tunnel_fields_open_one(alice_client, django_capture_on_commit_callbacks, head_alias: int) -> None:
    response, _ = _post(
        alice_client,
        django_capture_on_commit_callbacks,
        source="tunnel",
        head_host="gpu-101",
        ssh_user=sshd_user(),
        remote_port=str(head_alias),
    )
    assert response.status_code == 302
    assert DataSource.objects.get().tunnel["host"] == "gpu-101"


def test_a_tunnel_that_does_not_open_is_a_message_on_the_form(
    alice_client, django_capture_on_commit_callbacks, head_alias: int
) -> None:
    dead = tsdb_server.find_free_port(24000, 24999)
    response, callbacks = _post(
        alice_client, django_capture_on_commit_callbacks, source="tunnel", head_host="gpu-101",
        ssh_user=sshd_user(), remote_port=str(dead),
    )  # fmt: skip
    assert response.status_code == 400 and not callbacks
    body = response.content.decode()
    assert (
        "The SSH tunnel did not open" in body and f"nothing accepts connections on localhost:{dead}" in body
    )
    assert 'value="gpu-101"' in body and f'value="{dead}"' in body  # what was typed is kept
    assert not Investigation.objects.exists() and not DataSource.objects.exists()
