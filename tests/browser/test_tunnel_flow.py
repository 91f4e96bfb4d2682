"""A user opens investigations whose data source is an SSH tunnel that Stepwise opens itself, in a real
browser, against a real sshd forwarding to a real (read-only) Prometheus of a generated job.

Configured as an operator would: the Stepwise service user's HOME (`stepwise_app.home`, the HOME of
gunicorn and the Celery worker) has an ~/.ssh/config whose Host aliases name the test sshd, its key and a
known_hosts file; the user pastes or types only the alias, the user name and the Prometheus port. ssh
runs with BatchMode and StrictHostKeyChecking=yes, so a host whose key is unknown is refused.

Every tunnel is recorded under <data>/tunnels; the tests find the ssh process there and never signal it.
Each test tunnels to a Prometheus of its own (or a host alias of its own): one tunnel per spec is shared.
"""

from __future__ import annotations

import getpass
import re
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Page, expect

from playbooks import tsdb_server
from playbooks import tunnel as tunnels
from tests.browser.page_helpers import unfold
from tests.support.sshd import SSHServer, sshd_fixture  # noqa: F401 (registers the `sshd` fixture)

DETAIL_URL = re.compile(r"/investigations/(\d+)/$")
USER = getpass.getuser()  # the test sshd authorizes its client key for the user running the tests

#: Host aliases of ~/.ssh/config, all naming the test sshd: the head node, one whose host key is not in
#: its known_hosts yet, and one that logs in with a key the server does not authorize.
HEAD, STRANGER, LOCKED = "gpu-head", "gpu-stranger", "gpu-locked"

_HOST_BLOCK = """\
Host {alias}
    HostName 127.0.0.1
    Port {port}
    User {user}
    IdentityFile {key}
    IdentitiesOnly yes
    UserKnownHostsFile {known_hosts}
"""


@pytest.fixture(scope="module")
def ssh_home(stepwise_app, sshd: SSHServer) -> Path:
    """Return the service user's ~/.ssh after writing its config; close every tunnel left open after."""
    dot_ssh = stepwise_app.home / ".ssh"
    dot_ssh.mkdir(mode=0o700, exist_ok=True)
    stranger_hosts = dot_ssh / "known_hosts_stranger"
    stranger_hosts.write_text("")  # the key of gpu-stranger is not known yet
    blocks = [
        (HEAD, sshd.client_key, sshd.known_hosts),
        (STRANGER, sshd.client_key, stranger_hosts),
        (LOCKED, sshd.wrong_key, sshd.known_hosts),
    ]
    config = dot_ssh / "config"
    config.write_text("\n".join(
        _HOST_BLOCK.format(alias=alias, port=sshd.port, user=sshd.user, key=key, known_hosts=known)
        for alias, key, known in blocks
    ))  # fmt: skip
    config.chmod(0o600)  # ssh refuses a config others may write
    yield dot_ssh
    # Stepwise's own reaper: it stops only the ssh processes recorded there, after checking each is ours.
    tunnels.reap_leftover_tunnels(stepwise_app.data_dir / "tunnels")


def _port(client) -> int:
    return int(urlsplit(client.base_url).port or 0)


def _start(page: Page, title: str) -> None:
    page.goto("/investigations/new/")
    page.get_by_label("Title").fill(title)
    page.locator(".source-tab", has_text="SSH tunnel").click()


def _submit(page: Page) -> int:
    """Submit the form and return the id of the investigation page it lands on."""
    with page.expect_navigation():
        page.get_by_role("button", name="Open investigation").click()
    expect(page).to_have_url(DETAIL_URL)
    # A mark on this document: if anything below reloaded the page, the mark would be gone.
    page.evaluate("() => { window.__stepwiseSameDocument = true; }")
    return int(DETAIL_URL.search(page.url).group(1))


def _open_from_log_command(page: Page, title: str, alias: str, port: int, team: str = "") -> int:
    """Open an investigation from the tunnel command the job log prints; return its id."""
    _start(page, title)
    if team:
        page.get_by_label("Team").fill(team)
    page.get_by_label("Tunnel command from the log").fill(f"ssh -L {port}:localhost:{port} {USER}@{alias}")
    return _submit(page)


def _assert_no_reload(page: Page) -> None:
    assert page.evaluate("() => window.__stepwiseSameDocument === true"), "the page was reloaded"


def _open_tunnel(stepwise_app, host: str, remote_port: int) -> tunnels.OpenTunnel:
    """Return the one live tunnel that Stepwise recorded for host:remote_port in its tunnels dir."""
    found = [
        t for t in tunnels.list_tunnels(stepwise_app.data_dir / "tunnels")
        if t.spec.host == host and t.spec.remote_port == remote_port
    ]  # fmt: skip
    assert len(found) == 1, f"recorded tunnels to {host}:{remote_port}: {found}"
    return found[0]


def _press(page: Page, region: str, button) -> None:
    """Press a button of a region that htmx swapped in; htmx binds its handlers as the region settles
    (a person is never faster than that, a test is)."""
    page.wait_for_function(f"() => !document.querySelector('{region}.htmx-added, {region} .htmx-added')")
    button.click()


def _running(pid: int) -> bool:
    """Return True if the process runs (a zombie waiting for its parent to reap it has stopped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _expect_up_and_discovered(
    page: Page, stepwise_app, host: str, remote_port: int, truth: dict
) -> tunnels.OpenTunnel:
    """Return the recorded tunnel once the badge is up and the discovery of the job behind it has arrived,
    without a reload; the page names the tunnel's local end."""
    expect(page.get_by_test_id("source-state")).to_have_text("Up")
    hosts = truth["hosts"]
    expect(page.get_by_test_id("discovery-hosts")).to_have_text(f"{len(hosts)} × {truth['gpus_per_host']}")
    expect(page.get_by_test_id("discovery-profile")).to_have_text(truth["profile"])
    unfold(page, "#discovery-status")
    listed = page.locator("#discovery-status details.discovery-hosts")
    listed.locator("summary").click()
    for name in hosts:
        expect(listed.locator(".host", has_text=name)).to_be_visible()
    # No log came with a tunnel: the Prometheus cannot be matched against the job's log.
    expect(page.get_by_test_id("identity-unknown")).to_be_visible()
    opened = _open_tunnel(stepwise_app, host, remote_port)
    assert _running(opened.pid)
    source = page.locator("#source-state")
    expect(source.locator(".source-line")).to_contain_text("SSH tunnel")
    expect(source).to_contain_text(f"tunnel to {host}")
    expect(source.locator(".mono.wrap")).to_have_text(opened.url)
    _assert_no_reload(page)
    return opened


def test_the_tunnel_command_from_the_log_opens_and_the_job_is_discovered(
    page: Page, stepwise_app, served_job, ssh_home: Path
) -> None:
    client, truth, _job_dir = served_job("healthy")
    port = _port(client)
    _open_from_log_command(page, "Tunnel from the log", HEAD, port)
    opened = _expect_up_and_discovered(page, stepwise_app, HEAD, port, truth)
    assert opened.cmdline[:2] == (tsdb_server.find_executable("ssh"), "-N")
    assert opened.cmdline[-2:] == ("--", f"{USER}@{HEAD}")


def test_the_head_node_user_and_port_fields_open_the_same_way(
    page: Page, stepwise_app, served_job, ssh_home: Path
) -> None:
    client, truth, _job_dir = served_job("heartbeat-false-positive", profile="nvidia")
    port = _port(client)
    _start(page, "Tunnel from its parts")
    page.get_by_label("Head node").fill(HEAD)
    page.get_by_label("User", exact=True).fill(USER)
    page.get_by_label("Prometheus port").fill(str(port))
    _submit(page)
    opened = _expect_up_and_discovered(page, stepwise_app, HEAD, port, truth)
    assert opened.spec.jump == () and opened.spec.user == USER and opened.spec.ssh_port is None


@pytest.mark.parametrize(
    ("alias", "dead_port", "reason"),
    [
        (LOCKED, False, f"{LOCKED} refused the SSH login of {USER}"),
        (HEAD, True, "the SSH login worked, but nothing accepts connections on localhost:{port} at " + HEAD),
    ],
    ids=["login-refused", "nothing-listening"],
)
def test_a_tunnel_that_cannot_open_is_a_form_error_and_creates_nothing(
    page: Page, stepwise_app, served_job, ssh_home: Path, alias: str, dead_port: bool, reason: str
) -> None:
    client, _truth, _job_dir = served_job("healthy")
    port = tsdb_server.find_free_port(24000, 24999) if dead_port else _port(client)
    reason = reason.format(port=port)
    title = f"Tunnel refused ({alias}, {port})"
    command = f"ssh -L {port}:localhost:{port} {USER}@{alias}"
    _start(page, title)
    page.get_by_label("Team").fill("training-infra")
    page.get_by_label("Tunnel command from the log").fill(command)
    page.get_by_role("button", name="Open investigation").click()
    expect(page.get_by_role("alert").filter(has_text="The SSH tunnel did not open")).to_contain_text(reason)
    # Nothing the user typed is lost, and nothing was saved: no investigation, no job, no tunnel.
    expect(page.get_by_label("Title")).to_have_value(title)
    expect(page.get_by_label("Team")).to_have_value("training-infra")
    expect(page.get_by_label("Tunnel command from the log")).to_have_value(command)
    assert stepwise_app.rows(
        "SELECT count(*) FROM investigations_investigation WHERE title = ?", (title,)
    ) == [(0,)]
    assert stepwise_app.rows(
        "SELECT count(*) FROM investigations_datasource WHERE json_extract(tunnel, '$.host') = ?"
        " AND json_extract(tunnel, '$.remote_port') = ?",
        (alias, port),
    ) == [(0,)]
    assert not [t for t in tunnels.list_tunnels(stepwise_app.data_dir / "tunnels") if t.spec.host == alias
                and t.spec.remote_port == port]  # fmt: skip


def test_an_unknown_host_key_is_refused_until_the_operator_adds_it(
    page: Page, stepwise_app, served_job, sshd: SSHServer, ssh_home: Path
) -> None:
    client, truth, _job_dir = served_job("healthy")
    port = _port(client)
    title = "Head node with a new host key"
    _start(page, title)
    page.get_by_label("Tunnel command from the log").fill(f"ssh -L {port}:localhost:{port} {USER}@{STRANGER}")
    page.get_by_role("button", name="Open investigation").click()
    reason = f"the host key of {STRANGER} (or a jump host) is unknown or has changed"
    alert = page.get_by_role("alert").filter(has_text="The SSH tunnel did not open")
    expect(alert).to_contain_text(reason)
    expect(alert).to_contain_text("Host key verification failed")
    assert stepwise_app.rows(
        "SELECT count(*) FROM investigations_investigation WHERE title = ?", (title,)
    ) == [(0,)]
    # The operator checks the key and adds it; the form still holds the command: submit it again as it is.
    (ssh_home / "known_hosts_stranger").write_text(sshd.known_hosts.read_text())
    _submit(page)
    opened = _expect_up_and_discovered(page, stepwise_app, STRANGER, port, truth)
    assert _running(opened.pid)


def test_a_command_that_smuggles_an_option_is_refused_on_the_form(page: Page, stepwise_app) -> None:
    title = "Smuggled ProxyCommand"
    _start(page, title)
    command = f"ssh -o 'ProxyCommand=nc %h %p' -L 9192:localhost:9192 {USER}@{HEAD}"
    page.get_by_label("Tunnel command from the log").fill(command)
    page.get_by_role("button", name="Open investigation").click()
    expect(page.get_by_role("alert").filter(has_text="-o ProxyCommand is not supported")).to_be_visible()
    expect(page.get_by_label("Title")).to_have_value(title)
    expect(page.get_by_label("Tunnel command from the log")).to_have_value(command)
    assert stepwise_app.rows(
        "SELECT count(*) FROM investigations_investigation WHERE title = ?", (title,)
    ) == [(0,)]


def test_resolving_the_investigation_closes_its_tunnel(
    page: Page, stepwise_app, served_job, ssh_home: Path
) -> None:
    client, truth, _job_dir = served_job("thermal-straggler")
    port = _port(client)
    pk = _open_from_log_command(page, "Straggler, resolved", HEAD, port)
    opened = _expect_up_and_discovered(page, stepwise_app, HEAD, port, truth)

    page.locator("#investigation-header").get_by_label("Status").select_option("resolved")
    expect(page.locator("#investigation-header select.status-resolved")).to_be_visible()  # swapped in place
    assert stepwise_app.rows("SELECT status FROM investigations_investigation WHERE id = ?", (pk,)) == [
        ("resolved",)
    ]
    # The web server closed it while saving the status; a zombie waits only for its parent to reap it.
    # Closing ends ssh first, then removes the tunnel's entry: wait for both (the test once looked between them).
    deadline = time.monotonic() + 15
    while (_running(opened.pid) or Path(opened.entry_dir).exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(opened.pid), f"ssh {opened.pid} still runs after the investigation was resolved"
    assert not Path(opened.entry_dir).exists()
    # the status change's response carries the source card: it says the tunnel is closed, no reload
    expect(page.get_by_test_id("source-state")).to_have_text("Down")
    expect(page.locator("#source-state")).to_contain_text("closed: no open investigation needs it")
    _press(page, "#source-state", page.locator("#source-state").get_by_role("button", name="Check now"))
    expect(page.get_by_test_id("source-state")).to_have_text("Down")
    expect(page.locator("#source-state")).to_contain_text(
        f"the SSH tunnel to {USER}@{HEAD} (ssh port 22) → localhost:{port} is not open"
    )
    _assert_no_reload(page)
