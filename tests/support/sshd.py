"""A real OpenSSH server on a loopback port, for end-to-end tunnel tests.

`running_sshd(tmp)` starts Debian's /usr/sbin/sshd in the foreground (`-D -e -f <config>`) with a
throwaway host key and one authorized client key, all generated into `tmp`; the `sshd` fixture runs one
per test session. Test modules import the fixture, which is named `sshd`:
`from tests.support.sshd import sshd_fixture  # noqa: F401`.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from playbooks.tsdb_server import find_free_port
from playbooks.tunnel import TunnelSpec

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "ssh-keygen"
ON_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")

_CONFIG = """\
# Throwaway sshd for Stepwise's tests: loopback only, public keys only, port forwarding allowed.
Port {port}
ListenAddress 127.0.0.1
HostKey {root}/host_ed25519
PidFile {root}/sshd.pid
AuthorizedKeysFile {root}/authorized_keys
UsePAM no
# The keys live in a tmp directory whose modes sshd would otherwise reject.
StrictModes no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowTcpForwarding yes
PermitOpen any
MaxStartups 50
LogLevel VERBOSE
"""


@dataclass(frozen=True)
class SSHServer:
    """A running sshd and the client files that reach it.

    Attributes:
        port: Its loopback port (127.0.0.1).
        user: The login the tests use (the user running the tests, whose key is authorized).
        client_key: Private key authorized to log in.
        wrong_key: Private key that is NOT authorized.
        known_hosts: A known_hosts file holding the host key for [127.0.0.1]:port and [localhost]:port.
        root: The directory holding its keys, config and log.
        pid: The sshd process id.
    """

    port: int
    user: str
    client_key: Path
    wrong_key: Path
    known_hosts: Path
    root: Path
    pid: int

    def spec(self, remote_port: int, **overrides: Any) -> TunnelSpec:
        """Return a spec through this server to `remote_port` on its loopback."""
        values: dict[str, Any] = {
            "user": self.user,
            "host": "127.0.0.1",
            "ssh_port": self.port,
            "remote_port": remote_port,
            "identity_file": str(self.client_key),
            "known_hosts_file": str(self.known_hosts),
        }
        return TunnelSpec(**(values | overrides))

    def log(self) -> str:
        return (self.root / "sshd.log").read_text(errors="replace")


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True, stdin=subprocess.DEVNULL, timeout=30,
    )  # fmt: skip


def _wait_listening(proc: subprocess.Popen[bytes], port: int, log: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"sshd exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}"
            )
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"sshd did not listen on 127.0.0.1:{port} within {timeout} s")


@contextlib.contextmanager
def running_sshd(root: Path) -> Iterator[SSHServer]:
    """Yield a foreground sshd on a free loopback port with keys generated into `root`; stop it after."""
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    for name, comment in (
        ("host_ed25519", "stepwise-test-host"),
        ("client_ed25519", "stepwise-test-client"),
        ("wrong_ed25519", "stepwise-test-wrong"),
    ):
        _keygen(root / name, comment)
    shutil.copyfile(root / "client_ed25519.pub", root / "authorized_keys")
    # sshd refuses to start without its privilege separation directory when run as root.
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    port = find_free_port(22200, 22999)
    host_key = (root / "host_ed25519.pub").read_text().split()[:2]
    (root / "known_hosts").write_text(f"[127.0.0.1]:{port},[localhost]:{port} {' '.join(host_key)}\n")
    (root / "sshd_config").write_text(_CONFIG.format(port=port, root=root))
    log = root / "sshd.log"
    with open(log, "wb") as logf:
        proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(root / "sshd_config")],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        _wait_listening(proc, port, log)
        yield SSHServer(
            port=port,
            user=getpass.getuser(),
            client_key=root / "client_ed25519",
            wrong_key=root / "wrong_ed25519",
            known_hosts=root / "known_hosts",
            root=root,
            pid=proc.pid,
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session", name="sshd")
def sshd_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """A real sshd on loopback for the whole session (skipped without openssh-server, failed on CI)."""
    if not (os.path.exists(SSHD) and shutil.which("ssh")):
        message = "needs openssh-server and openssh-client: apt-get install -y openssh-server"
        if ON_CI:
            pytest.fail(f"{message} (CI=true: this test must run)")
        pytest.skip(message)
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server
