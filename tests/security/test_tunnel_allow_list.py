"""Item 2: SSH tunnels obey their own allow-list (head/jump hosts, SSH ports, Prometheus ports, key folder);
the forward's target is the head node's loopback only; the source's label shows the whole route."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.urls import reverse

from investigations.models import DataSource, Investigation, Job
from investigations.services import DataSourceError
from investigations.services import tunnels as tunnel_services
from playbooks.tunnel import TunnelError, TunnelSpec, list_tunnels, parse_tunnel_command
from playbooks.tunnel_policy import TunnelPolicy, parse_ports
from tests.support.sshd import SSHServer, sshd_fixture  # noqa: F401 (registers the `sshd` fixture)

pytestmark = pytest.mark.django_db
HEAD = "10.1.2.3"


@pytest.fixture
def one_head(settings, tmp_path: Path) -> Path:
    """The allow-list names one remote address; keys come from one folder."""
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "id_ed25519").write_text("not a real key")
    settings.STEPWISE_TUNNEL_HOSTS = [HEAD]
    settings.STEPWISE_TUNNEL_SSH_PORTS = "22"
    settings.STEPWISE_TUNNEL_PROMETHEUS_PORTS = "9090-9199"
    settings.STEPWISE_TUNNEL_KEYS_DIR = keys
    settings.STEPWISE_TUNNELS_DIR = tmp_path / "tunnels"
    return keys


@pytest.fixture
def job(db) -> Job:
    return Job.objects.create(job_id="81234")


ATTACKS = [
    ("ssh -p 2222 -L 9191:localhost:9191 root@127.0.0.1", "127.0.0.1 is not in the tunnel allow-list"),
    (f"ssh -p 2222 -L 9191:localhost:9191 root@{HEAD}", "SSH port 2222"),
    (f"ssh -J eve@evil.example.org -L 9191:localhost:9191 root@{HEAD}", "Jump host evil.example.org"),
    (f"ssh -J eve@{HEAD}:2200 -L 9191:localhost:9191 root@{HEAD}", "SSH port 2200"),
    (f"ssh -L 9191:169.254.169.254:80 root@{HEAD}", "not the head node itself"),
    (f"ssh -L 9191:10.0.0.9:9191 root@{HEAD}", "not the head node itself"),
    (f"ssh -L 6379:localhost:6379 root@{HEAD}", "Prometheus port 6379"),
    (f"ssh -i /etc/shadow -L 9191:localhost:9191 root@{HEAD}", "outside the key folder"),
]


@pytest.mark.parametrize("command, message", ATTACKS)
def test_the_service_refuses_every_route_outside_the_allow_list(one_head, job: Job, command, message) -> None:
    with pytest.raises(DataSourceError, match=message):
        tunnel_services.tunnel_datasource_create(job, command)
    assert not DataSource.objects.exists()


@pytest.mark.parametrize("command, message", ATTACKS)
def test_the_new_investigation_form_refuses_them_on_the_field(
    one_head, client, django_user_model, command, message
) -> None:
    client.force_login(django_user_model.objects.create_user("mallory", password="x"))
    form = {"title": "t", "severity": "sev2", "team": "", "source": "tunnel", "tunnel_command": command}
    response = client.post(reverse("investigations:create"), form)
    assert response.status_code == 400
    assert message.split(" ")[-1] in response.content.decode()
    assert not Investigation.objects.exists() and not DataSource.objects.exists()


def test_a_known_hosts_file_outside_the_key_folder_is_refused(one_head: Path, job: Job) -> None:
    spec = {"user": "root", "host": HEAD, "remote_port": 9191, "known_hosts_file": "/etc/shadow"}
    with pytest.raises(DataSourceError, match="Known hosts file /etc/shadow is outside the key folder"):
        tunnel_services.tunnel_datasource_create(job, spec)


def test_a_key_symlinked_into_the_key_folder_is_refused(one_head: Path, job: Job) -> None:
    (one_head / "shadow").symlink_to("/etc/shadow")
    with pytest.raises(DataSourceError, match="outside the key folder"):
        tunnel_services.tunnel_datasource_create(
            job, f"ssh -i {one_head}/shadow -L 9191:localhost:9191 root@{HEAD}"
        )


def test_an_allowed_route_is_stored_and_labelled_whole(one_head: Path, job: Job) -> None:
    command = f"ssh -J alice@{HEAD} -i {one_head}/id_ed25519 -L 9191:localhost:9191 root@{HEAD}"
    ds = tunnel_services.tunnel_datasource_create(job, command)
    assert ds.tunnel["host"] == HEAD and ds.tunnel["identity_file"] == f"{one_head}/id_ed25519"
    assert f"root@{HEAD} (ssh port 22) via alice@{HEAD} → localhost:9191" in ds.state_detail


def test_tunnels_are_off_by_default() -> None:
    with pytest.raises(TunnelError, match="SSH tunnels are off"):
        TunnelPolicy().check(TunnelSpec(user="root", host="gpu-101", remote_port=9191))


def test_host_patterns_and_cidrs_never_resolve_names() -> None:
    policy = TunnelPolicy(hosts=("gpu-*.cluster.example.org", "10.0.0.0/8"))
    for host in ("gpu-101.cluster.example.org", "10.4.5.6"):
        policy.check(TunnelSpec(user="root", host=host, remote_port=9191))
    for host in ("gpu-101.cluster.example.org.evil.com", "localhost", "127.0.0.1", "11.0.0.1"):
        with pytest.raises(TunnelError, match="not in the tunnel allow-list"):
            policy.check(TunnelSpec(user="root", host=host, remote_port=9191))


def test_port_lists_parse_and_refuse_nonsense() -> None:
    assert parse_ports("22, 2200-2202", "X") == {22, 2200, 2201, 2202}
    for bad in ("0", "22-21", "ssh", "70000"):
        with pytest.raises(ValueError, match="X"):
            parse_ports(bad, "X")


def test_the_target_of_a_forward_is_the_head_nodes_loopback_only() -> None:
    assert parse_tunnel_command("ssh -L 9191:127.0.0.1:9191 root@gpu-1").remote_host == "127.0.0.1"
    with pytest.raises(TunnelError, match="not the head node itself"):
        TunnelSpec(user="root", host="gpu-1", remote_port=80, remote_host="169.254.169.254")


def test_a_stored_spec_outside_the_list_never_starts_ssh(
    one_head, job: Job, sshd: SSHServer, settings
) -> None:
    """The spec the issue connected with (root@127.0.0.1 -p <any port>), stored by editing the row: opening
    it is refused before ssh runs, and the source says why."""
    ds = DataSource.objects.create(
        job=job, kind=DataSource.Kind.SSH_TUNNEL, tunnel=sshd.spec(9191, identity_file=None).to_dict()
    )
    with pytest.raises(DataSourceError, match="127.0.0.1 is not in the tunnel allow-list"):
        tunnel_services.tunnel_open(ds)
    ds.refresh_from_db()
    assert ds.state == DataSource.State.ERROR and "allow-list" in ds.state_detail
    assert list_tunnels(settings.STEPWISE_TUNNELS_DIR) == []


def test_a_bad_port_list_is_a_system_check_error(settings) -> None:
    from stepwise.checks import check_tunnel_ports

    settings.STEPWISE_TUNNEL_SSH_PORTS = "22,ssh"
    assert [e.id for e in check_tunnel_ports()] == ["stepwise.E007"]
