"""SSH tunnels end to end: a real sshd on loopback forwarding to a real Prometheus serving a generated job."""

from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from playbooks import tsdb_server
from playbooks.prometheus import PrometheusClient
from playbooks.triage import find_job_log, triage_job
from playbooks.tunnel import (
    OpenTunnel,
    TunnelError,
    TunnelRefused,
    TunnelSpec,
    close_idle_tunnels,
    close_tunnel,
    find_tunnel,
    list_tunnels,
    open_tunnel,
    parse_tunnel_command,
    reap_leftover_tunnels,
    spec_from_triage,
    ssh_command,
    ssh_config_text,
    tunnel_healthy,
    tunnel_problem,
)
from tests.support.sshd import SSHServer, sshd_fixture  # noqa: F401 (registers the `sshd` fixture)

LOG_LINE = (
    "0:   ssh -J alice@login01.example.org -L 8265:localhost:8265 -L 6006:localhost:6006 "
    "-L 9191:localhost:9191 root@gpu-101"
)


@pytest.fixture
def work_root(tmp_path: Path):
    """A tunnel work root whose tunnels are all closed after the test."""
    root = tmp_path / "tunnels"
    yield root
    reap_leftover_tunnels(root)


@pytest.fixture(scope="session")
def prom(served_job) -> tuple[PrometheusClient, int]:
    """The healthy job's read-only Prometheus (direct client) and its loopback port."""
    client, _truth, _job_dir = served_job("healthy")
    return client, int(urlsplit(client.base_url).port or 0)


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def _processes_using(path: str) -> list[int]:
    """Return the pids whose argv mentions `path` (our ssh and the ssh it starts for a jump host)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    if path.encode() in fh.read():
                        found.append(int(name))
            except OSError:
                continue
    return found


# -- parsing and validation -------------------------------------------------------------------------

PARSE_CASES = [
    (LOG_LINE, {"user": "root", "host": "gpu-101", "remote_port": 9191, "jump": ("alice@login01.example.org",)}),
    ("ssh -J alice@198.51.100.7 -L 8265:localhost:8265 -L 9190:localhost:9190 root@gpu-101",
     {"host": "gpu-101", "remote_port": 9190, "jump": ("alice@198.51.100.7",)}),
    ("ssh -N -p 2222 -L 19090:localhost:9090 bob@head.example", {"user": "bob", "ssh_port": 2222, "remote_port": 9090}),
    ("ssh -J a@j1:2200,b@j2 -L9192:127.0.0.1:9192 root@10.0.0.5",
     {"host": "10.0.0.5", "jump": ("a@j1:2200", "b@j2"), "remote_host": "127.0.0.1", "remote_port": 9192}),
    ("ssh -o ProxyJump=a@j1 -o Port=23 -o ServerAliveInterval=5 -l carol -L 1:localhost:9090 h",
     {"user": "carol", "jump": ("a@j1",), "ssh_port": 23, "host": "h"}),
    ("ssh -i /keys/id_ed25519 -L 9090:localhost:9090 ssh://dave@h:2201",
     {"user": "dave", "ssh_port": 2201, "identity_file": "/keys/id_ed25519"}),
    ("ssh -L 9090:[::1]:9090 -- root@[2001:db8::5]", {"host": "2001:db8::5", "remote_host": "::1"}),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), PARSE_CASES)
def test_parse_tunnel_command_reads_the_fields(text: str, expected: dict) -> None:
    """Each supported way of writing the command gives the same spec fields."""
    spec = parse_tunnel_command(text)
    for name, value in expected.items():
        assert getattr(spec, name) == value, name


REJECTED = [
    ("ssh -L 9191:localhost:9191 -oProxyCommand=sh root@h", "ProxyCommand"),
    ("ssh -L 9191:localhost:9191 -o LocalCommand=id root@h", "LocalCommand"),
    ("ssh -L 9191:localhost:9191 -- -oProxyCommand=touch root@h", "remote command"),
    ("ssh -L 9191:localhost:9191 -- -oProxyCommand=touch", "not a host name"),
    ("ssh -J -oProxyCommand=x -L 1:localhost:2 h", "Jump host"),
    ("ssh -L 9191:localhost:9191 root@h id", "remote command"),
    ("ssh -L 9191:localhost:9191 -- '-oProxyCommand=x@h'", "not a valid user name"),
    ("ssh -L 9191:localhost:9191 'root@h -oProxyCommand=x'", "not a host name"),
    ("ssh -L 9191:localhost:9191 'root;touch x@h'", "not a valid user name"),
    ("ssh -L 8265:localhost:8265 -L 6006:localhost:6006 root@h", "no Prometheus port"),
    ("ssh -R 9191:localhost:9191 root@h", "-R"),
    ("ssh -L 99999:localhost:99999 root@h", "port"),
    ("ssh -L 9191:localhost:9191", "no host"),
    ("echo hello", "No ssh command"),
]


@pytest.mark.parametrize(("text", "fragment"), REJECTED)
def test_parse_tunnel_command_refuses_unsafe_or_incomplete_commands(text: str, fragment: str) -> None:
    """Option injection and commands that are not a plain tunnel are refused with a message naming why."""
    with pytest.raises(TunnelError) as info:
        parse_tunnel_command(text)
    assert fragment in str(info.value)


BAD_SPECS = [
    ({"host": "-oProxyCommand=sh"}, "Host"),
    ({"host": "gpu 101"}, "Host"),
    ({"host": "gpu-101\n-oProxyCommand=x"}, "Host"),
    ({"host": '"gpu"'}, "Host"),
    ({"host": ""}, "Host"),
    ({"user": "-lroot"}, "User"),
    ({"user": "ro ot"}, "User"),
    ({"user": "root'"}, "User"),
    ({"remote_port": 0}, "Remote port"),
    ({"remote_port": "9191 -oX"}, "Remote port"),
    ({"remote_port": True}, "Remote port"),
    ({"ssh_port": 70000}, "SSH port"),
    ({"jump": ("-oProxyCommand=sh",)}, "Jump host"),
    ({"jump": "alice@login -oProxyCommand=sh"}, "Jump host"),
    ({"identity_file": "id_rsa"}, "Identity file"),
    ({"identity_file": '/keys/"x'}, "Identity file"),
    ({"identity_file": "/keys/%d"}, "Identity file"),
    ({"known_hosts_file": "/k\nProxyCommand sh"}, "Known hosts"),
    ({"strict_host_key_checking": "no"}, "StrictHostKeyChecking"),
    ({"remote_host": "-x"}, "Remote host"),
]


@pytest.mark.parametrize(("override", "fragment"), BAD_SPECS)
def test_tunnel_spec_refuses_values_that_could_become_ssh_options(override: dict, fragment: str) -> None:
    """A spec with an unsafe or malformed field cannot be built."""
    values = {"user": "root", "host": "gpu-101", "remote_port": 9191} | override
    with pytest.raises(TunnelError) as info:
        TunnelSpec(**values)
    assert fragment in str(info.value)


def test_tunnel_spec_round_trips_through_json_and_normalises_jumps() -> None:
    """to_dict/from_dict give the same spec; a comma-separated jump string becomes a tuple."""
    spec = TunnelSpec(user="root", host="gpu-101", remote_port="9191", jump="a@j1, b@j2:2200", ssh_port="22")
    assert spec.jump == ("a@j1", "b@j2:2200")
    assert spec.remote_port == 9191 and spec.ssh_port == 22
    assert TunnelSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(TunnelError, match="unknown fields"):
        TunnelSpec.from_dict(spec.to_dict() | {"proxy_command": "sh"})


def test_ssh_command_binds_loopback_and_puts_the_destination_after_double_dash() -> None:
    """The argv carries batch mode, forward-failure exit, keep-alives, ProxyJump and a loopback -L."""
    spec = parse_tunnel_command(LOG_LINE)
    argv = ssh_command(spec, 20191, config_file="/w/ssh_config")
    joined = " ".join(argv)
    for option in ("BatchMode=yes", "ExitOnForwardFailure=yes", "ServerAliveInterval=15",
                   "ServerAliveCountMax=3", "ConnectTimeout=10", "ControlMaster=no"):  # fmt: skip
        assert f"-o {option}" in joined
    assert argv[:2] == ["ssh", "-N"]
    assert "-J alice@login01.example.org" in joined
    assert "-L 127.0.0.1:20191:localhost:9191" in joined
    assert argv[-2:] == ["--", "root@gpu-101"]
    assert "BatchMode yes" in ssh_config_text(spec)


def test_tunnel_of_a_generated_job_log_is_parsed_from_its_block_and_from_triage(job_factory) -> None:
    """The job log's framed tunnel block and triage_job's tunnel both give the head node and port."""
    job_dir, truth = job_factory("healthy")
    triage = triage_job(job_dir).to_dict()
    spec = spec_from_triage(triage)
    assert spec.host == truth["head"] == triage["prometheus"]["head"]
    assert spec.remote_port == triage["prometheus"]["port"]
    assert spec.user == "root" and spec.jump == ("alice@login01.example.org",)

    lines = Path(find_job_log(job_dir)).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "SSH tunnel from your local machine" in line)
    block = "\n".join(lines[start - 1 : start + 4])
    assert parse_tunnel_command(block) == spec


def test_spec_from_triage_says_when_the_log_has_no_tunnel() -> None:
    """A triage without a tunnel command gives a clear error."""
    with pytest.raises(TunnelError, match="no SSH tunnel command"):
        spec_from_triage({"prometheus": {"head": None, "port": None, "tunnel": None}})


def test_tunnel_error_keeps_ssh_stderr_when_pickled() -> None:
    """Celery pickles exceptions: the stderr tail survives."""
    err = pickle.loads(pickle.dumps(TunnelError("boom", ssh_stderr="Permission denied (publickey).")))
    assert str(err) == "boom" and err.ssh_stderr == "Permission denied (publickey)."


# -- against a real sshd ----------------------------------------------------------------------------


def test_open_query_close(sshd: SSHServer, prom, work_root: Path) -> None:
    """A query through the tunnel returns what the server returns directly; close frees pid and port."""
    direct, port = prom
    t = open_tunnel(sshd.spec(port), work_root)
    assert t.url == f"http://127.0.0.1:{t.local_port}"
    assert tunnel_healthy(t)
    start, end = direct.data_time_range()
    with PrometheusClient(t.url, timeout=30) as through:
        got = through.query_range("tb_step", start, end, step=60)
    want = direct.query_range("tb_step", start, end, step=60)
    assert got and [s.values for s in got] == [s.values for s in want]
    assert list_tunnels(work_root) == [t]

    assert close_tunnel(t) is True
    assert _gone(t.pid)
    assert _port_free(t.local_port)
    assert not Path(t.entry_dir).exists()
    assert list_tunnels(work_root) == []


def test_open_twice_reuses_the_healthy_tunnel(sshd: SSHServer, prom, work_root: Path) -> None:
    """A second open of the same spec returns the recorded ssh and touches last_used."""
    _direct, port = prom
    first = open_tunnel(sshd.spec(port), work_root)
    again = open_tunnel(sshd.spec(port), work_root)
    assert (again.pid, again.local_port) == (first.pid, first.local_port)
    assert again.last_used >= first.last_used
    assert find_tunnel(sshd.spec(port), work_root) == again


def test_concurrent_opens_of_one_spec_start_one_ssh(sshd: SSHServer, prom, work_root: Path) -> None:
    """Callers racing to open the same spec (web and workers) share one ssh: the entry lock serializes them."""
    _direct, port = prom
    with ThreadPoolExecutor(max_workers=3) as pool:
        opened = list(pool.map(lambda _i: open_tunnel(sshd.spec(port), work_root), range(3)))
    assert len({t.pid for t in opened}) == 1
    assert len(list_tunnels(work_root)) == 1


def test_a_refused_start_starts_no_ssh_but_a_healthy_tunnel_is_still_reused(
    sshd: SSHServer, prom, work_root: Path
) -> None:
    """`refuse_start` is asked under the entry's lock just before a new ssh would start: its reason is the
    error and nothing is left behind; a tunnel already open and healthy is returned without asking."""
    _direct, port = prom
    asked: list[int] = []

    def refuse() -> str:
        asked.append(1)
        return "the run was cancelled"

    with pytest.raises(TunnelRefused, match="the run was cancelled"):
        open_tunnel(sshd.spec(port), work_root, refuse_start=refuse)
    assert asked == [1] and list_tunnels(work_root) == []
    assert not [p for p in work_root.iterdir() if p.is_dir()]

    first = open_tunnel(sshd.spec(port), work_root)
    again = open_tunnel(sshd.spec(port), work_root, refuse_start=refuse)
    assert again.pid == first.pid and asked == [1]


def test_proxy_jump_through_the_same_sshd(sshd: SSHServer, prom, work_root: Path) -> None:
    """ProxyJump gets the tunnel's key and known_hosts through -F; closing ends the jump ssh too."""
    direct, port = prom
    spec = sshd.spec(port, jump=(f"{sshd.user}@localhost:{sshd.port}",))
    t = open_tunnel(spec, work_root)
    with PrometheusClient(t.url, timeout=30) as through:
        assert through.buildinfo()["version"] == direct.buildinfo()["version"]
    config = str(Path(t.entry_dir) / "ssh_config")
    users = _processes_using(config)
    assert t.pid in users and len(users) == 2, "the tunnel's ssh and the one it runs for the jump host"
    assert close_tunnel(t)
    assert all(_gone(pid) for pid in users)


def test_wrong_key_is_a_clear_error(sshd: SSHServer, prom, work_root: Path) -> None:
    """A key the server does not accept fails at once with "Permission denied", leaving nothing behind."""
    _direct, port = prom
    with pytest.raises(TunnelError) as info:
        open_tunnel(sshd.spec(port, identity_file=str(sshd.wrong_key)), work_root, timeout=15)
    assert "refused the SSH login" in str(info.value)
    assert "Permission denied" in str(info.value) and "Permission denied" in info.value.ssh_stderr
    assert list_tunnels(work_root) == [] and not any(work_root.glob("*/tunnel.json"))


def test_unknown_host_key_is_a_clear_error(sshd: SSHServer, prom, work_root: Path, tmp_path: Path) -> None:
    """With an empty known_hosts and StrictHostKeyChecking=yes, the host key problem is named."""
    _direct, port = prom
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    spec = sshd.spec(port, known_hosts_file=str(empty), host="localhost")
    with pytest.raises(TunnelError, match="host key of localhost"):
        open_tunnel(spec, work_root, timeout=15)


def test_accept_new_trusts_an_unknown_host_once_and_records_its_key(
    sshd: SSHServer, prom, work_root: Path, tmp_path: Path
) -> None:
    """With accept-new, an unknown host key is added to the spec's known_hosts file and the tunnel opens."""
    _direct, port = prom
    fresh = tmp_path / "fresh_known_hosts"
    fresh.write_text("")
    spec = sshd.spec(port, known_hosts_file=str(fresh), strict_host_key_checking="accept-new")
    t = open_tunnel(spec, work_root)
    assert tunnel_healthy(t)
    host_key = (sshd.root / "host_ed25519.pub").read_text().split()[1]
    assert host_key in fresh.read_text()  # host names may be hashed (Debian's HashKnownHosts yes)


def test_no_ssh_server_on_the_port_is_a_clear_error(sshd: SSHServer, prom, work_root: Path) -> None:
    """An SSH port where nothing listens is named as such."""
    _direct, port = prom
    closed = tsdb_server.find_free_port(25000, 25999)
    with pytest.raises(TunnelError, match="no SSH server accepts connections"):
        open_tunnel(sshd.spec(port, ssh_port=closed), work_root, timeout=15)


def test_remote_port_with_nothing_listening_is_a_clear_error(sshd: SSHServer, work_root: Path) -> None:
    """ssh stays up when the head node cannot connect the forward; open_tunnel notices and says so."""
    dead = tsdb_server.find_free_port(24000, 24999)
    with pytest.raises(TunnelError, match=rf"nothing accepts connections on localhost:{dead}") as info:
        open_tunnel(sshd.spec(dead), work_root, timeout=15)
    assert "open failed" in info.value.ssh_stderr
    assert _processes_using(str(work_root)) == []


def test_health_check_reports_a_prometheus_that_went_away(
    sshd: SSHServer, job_factory, work_root: Path, tmp_path: Path
) -> None:
    """The tunnel's ssh survives its Prometheus stopping; the health check does not call that healthy."""
    job_dir, _truth = job_factory("healthy")
    # A port outside the range other tests' servers use, so nobody takes it over once it is stopped.
    own_port = tsdb_server.find_free_port(23000, 23999)
    served = tsdb_server.serve_readonly(job_dir / "prometheus", work_root=tmp_path / "views", port=own_port)
    try:
        t = open_tunnel(sshd.spec(served.port), work_root)
        assert tunnel_healthy(t)
    finally:
        tsdb_server.stop(served)
    problem = tunnel_problem(t)
    assert problem is not None and f"nothing accepts connections on localhost:{served.port}" in problem
    assert not tunnel_healthy(t)
    assert find_tunnel(t.spec, work_root) == t, "ssh itself is still up"


def test_tunnel_killed_externally_is_reported_and_reopened(sshd: SSHServer, prom, work_root: Path) -> None:
    """After its ssh is killed, the health check says so and open_tunnel starts a new one."""
    _direct, port = prom
    t = open_tunnel(sshd.spec(port), work_root)
    os.kill(t.pid, signal.SIGKILL)
    assert _gone(t.pid)
    problem = tunnel_problem(t)
    assert problem is not None and f"pid {t.pid}" in problem and "gone" in problem
    assert find_tunnel(t.spec, work_root) is None
    again = open_tunnel(t.spec, work_root)
    assert again.pid != t.pid and tunnel_healthy(again)


def test_close_never_signals_a_pid_it_did_not_start(sshd: SSHServer, prom, work_root: Path) -> None:
    """A record edited to name a foreign process (pid and cmdline) is removed without signalling it."""
    _direct, port = prom
    t = open_tunnel(sshd.spec(port), work_root)
    record = Path(t.entry_dir) / "tunnel.json"
    foreign = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
    try:
        rec = json.loads(record.read_text())
        rec["pid"] = foreign.pid
        rec["pid_start"] = 0
        rec["cmdline"] = ["sleep", "300"]
        record.write_text(json.dumps(rec))
        assert close_tunnel(t.spec, work_root) is False
        time.sleep(0.2)
        assert foreign.poll() is None, "the foreign process must not have been signalled"
        assert not Path(t.entry_dir).exists()
    finally:
        foreign.kill()
        foreign.wait()
        os.kill(t.pid, signal.SIGTERM)  # the real ssh, which the tampered record no longer names


def test_close_with_a_stale_open_tunnel_object_leaves_a_recycled_pid_alone(
    sshd: SSHServer, prom, work_root: Path
) -> None:
    """An OpenTunnel naming a pid that now belongs to someone else is not signalled."""
    _direct, port = prom
    t = open_tunnel(sshd.spec(port), work_root)
    foreign = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
    try:
        fake = OpenTunnel(**{**t.__dict__, "pid": foreign.pid})
        assert not tunnel_healthy(fake)
        # close_tunnel reads the entry's record (the real ssh), never the pid the caller passes in.
        assert close_tunnel(fake) is True
        assert foreign.poll() is None and _gone(t.pid)
    finally:
        foreign.kill()
        foreign.wait()


def test_idle_tunnels_are_closed_and_leftovers_reaped(sshd: SSHServer, prom, work_root: Path) -> None:
    """close_idle_tunnels keeps recently used tunnels; reap_leftover_tunnels closes everything."""
    _direct, port = prom
    t = open_tunnel(sshd.spec(port), work_root)
    assert close_idle_tunnels(work_root, idle_seconds=3600) == []
    assert close_idle_tunnels(work_root, idle_seconds=0) == [t.pid]
    assert _gone(t.pid)
    t2 = open_tunnel(sshd.spec(port), work_root)
    assert reap_leftover_tunnels(work_root) == [t2.pid]
    assert _gone(t2.pid) and list_tunnels(work_root) == []


def test_missing_ssh_binary_is_a_clear_error(work_root: Path) -> None:
    """A wrong STEPWISE_SSH_BIN names the binary and how to install it."""
    spec = TunnelSpec(user="root", host="gpu-101", remote_port=9191)
    with pytest.raises(TunnelError, match="not installed"):
        open_tunnel(spec, work_root, ssh_bin="/nonexistent/ssh")
