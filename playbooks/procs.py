"""Processes Stepwise starts and records on disk, shared by the served TSDB copies and the SSH tunnels.

Both keep one folder per process under a work root (an *entry*: a marker file, a JSON record with the
pid and cmdline, the process's log), serialize start/reuse/stop of an entry with an fcntl lock file next
to it, and only ever signal a pid whose /proc cmdline still says it is theirs. This module holds what
they share: the entry store and its lock, the children this process started (reaped, never zombies),
liveness and cmdline checks, a pid-pinned terminate, free loopback ports and the TCP connections to one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import PlaybooksError

log = logging.getLogger(__name__)

# Popen objects of the processes this process started, so that they can be reaped (no zombies).
CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
CHILDREN_LOCK = threading.Lock()

_TCP_LISTEN, _TCP_ESTABLISHED = "0A", "01"

#: The name of an entry folder: a readable slug, then 12 hex digits of a hash of what it serves.
ENTRY_NAME = re.compile(r"\A[A-Za-z0-9._-]{1,60}-[0-9a-f]{12}\Z")


class NoFreePort(PlaybooksError):
    """No port of the range is free."""


# -- children and pids -------------------------------------------------------------------------------


def child_add(proc: subprocess.Popen[bytes]) -> None:
    """Remember a process this process started, so that reap_children() and wait_exit() can reap it."""
    with CHILDREN_LOCK:
        CHILDREN[proc.pid] = proc


def reap_children() -> None:
    """Forget (and reap) the children that have exited."""
    with CHILDREN_LOCK:
        for pid, proc in list(CHILDREN.items()):
            if proc.poll() is not None:
                del CHILDREN[pid]


def proc_args(pid: int) -> list[str]:
    """Return the command line of `pid` ([] if it is gone, a zombie, or unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def pids_with_arg_prefix(prefix: str) -> list[int]:
    """Return the pids whose command line has an argument starting with `prefix` (a zombie's has none)."""
    want = prefix.encode()
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                args = fh.read().split(b"\0")
        except OSError:
            continue
        if any(a.startswith(want) for a in args):
            pids.append(int(name))
    return pids


def alive(pid: int) -> bool:
    """Return True if `pid` runs (a zombie does not)."""
    with CHILDREN_LOCK:
        proc = CHILDREN.get(pid)
    if proc is not None:
        return proc.poll() is None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_exit(pid: int, pidfd: int | None, timeout: float) -> bool:
    """Return True once `pid` has exited (reaping it if it is our child), False after `timeout`."""
    if pidfd is not None:
        # A pidfd becomes readable when the process exits, child or not.
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        exited = bool(poller.poll(timeout * 1000))
    else:
        deadline = time.monotonic() + timeout
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        exited = not alive(pid)
    if exited:
        with CHILDREN_LOCK:
            proc = CHILDREN.pop(pid, None)
        if proc is not None:
            proc.wait()
    return exited


def terminate(pid: int, is_ours: Callable[[int], bool], grace: float, what: str = "process") -> bool:
    """Return True after stopping `pid`, if and only if is_ours(pid) says it is the process we started.

    The pid is pinned with pidfd_open() before it is checked, so it cannot be recycled for an unrelated
    process between the check and the signal: SIGTERM, then SIGKILL after `grace` seconds.
    """
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except (OSError, AttributeError):
        pidfd = None
    try:
        if not is_ours(pid):
            return False

        def send(sig: int) -> None:
            with contextlib.suppress(ProcessLookupError):
                if pidfd is not None:
                    signal.pidfd_send_signal(pidfd, sig)
                else:
                    os.kill(pid, sig)

        send(signal.SIGTERM)
        if not wait_exit(pid, pidfd, grace):
            log.warning("%s pid %s ignored SIGTERM for %.0f s; sending SIGKILL", what, pid, grace)
            send(signal.SIGKILL)
            wait_exit(pid, pidfd, 10.0)
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)


def find_executable(name: str) -> str | None:
    """Return the absolute path of `name` (a path, or a command looked up on PATH) if it can be run."""
    if os.sep in name:
        path = os.path.abspath(name)
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which(name)


# -- ports ---------------------------------------------------------------------------------------------


def _tcp_rows() -> Iterator[list[str]]:
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 3:
                yield fields


def listening_ports() -> set[int]:
    """Return the ports with a TCP listener on any address (IPv4 or IPv6) in this network namespace."""
    return {int(f[1].rsplit(":", 1)[1], 16) for f in _tcp_rows() if f[3] == _TCP_LISTEN}


def connections_to(port: int) -> int:
    """Return how many established TCP connections a local listener on `port` has (any address).

    A client that queried a server in the last few seconds keeps its connection open (keep-alive), so
    this tells a server in use from an idle one without asking its clients.
    """
    return sum(1 for f in _tcp_rows() if f[3] == _TCP_ESTABLISHED and int(f[1].rsplit(":", 1)[1], 16) == port)


def can_bind(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # No SO_REUSEADDR: the bind must fail if anything (even a TIME_WAIT socket) uses the port.
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(start: int, end: int, host: str = "127.0.0.1") -> int:
    """Return the first port in [start, end) that is free on `host` and has no listener on any address.

    The /proc/net check matters: an SSH tunnel on [::1]:p or 127.0.0.2:p, or a server on another
    interface, does not stop a bind on 127.0.0.1:p, but a user reaching "localhost:p" would hit the
    wrong server. Raises NoFreePort.
    """
    busy = listening_ports()
    for port in range(start, end):
        if port not in busy and can_bind(host, port):
            return port
    raise NoFreePort(f"no free TCP port in {start}-{end - 1} on {host}")


# -- entries -------------------------------------------------------------------------------------------


@contextlib.contextmanager
def entry_lock(entry: Path, *, blocking: bool = True) -> Iterator[None]:
    """Hold the entry's fcntl lock; flock conflicts across processes and across threads alike.

    The lock file sits next to the entry directory, so removing the entry never drops a held lock.
    Non-blocking, a lock held elsewhere raises BlockingIOError.
    """
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.parent / f"{entry.name}.lock", "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@dataclass(frozen=True)
class EntryStore:
    """Folders of one kind under a work root, one per process Stepwise started, each with a JSON record.

    Attributes:
        pattern: what an entry folder's name must match.
        marker: a file every entry holds; with the name pattern, the proof that we created the folder.
        record: the JSON record's file name.
        what: the kind of entry in words, for log messages.
    """

    pattern: re.Pattern[str]
    marker: str
    record: str
    what: str

    def entries(self, work_root: str | os.PathLike[str]) -> list[Path]:
        """Return the entry folders under `work_root`, sorted."""
        root = Path(work_root)
        if not root.is_dir():
            return []
        return [
            p for p in sorted(root.iterdir())
            if self.pattern.match(p.name) and p.is_dir() and (p / self.marker).exists()
        ]  # fmt: skip

    def read(self, entry: Path) -> dict[str, Any] | None:
        """Return the entry's record, None when it is missing or not a JSON object."""
        try:
            rec = json.loads((entry / self.record).read_text())
        except (OSError, ValueError):
            return None
        return rec if isinstance(rec, dict) else None

    def write(self, entry: Path, rec: Mapping[str, Any]) -> None:
        """Replace the entry's record atomically."""
        # Readers in other processes must never see a half-written record: write, then rename.
        tmp = entry / f".{self.record}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(rec, indent=2, sort_keys=True))
        os.replace(tmp, entry / self.record)

    def remove(self, entry: str | os.PathLike[str]) -> None:
        """Delete the entry folder, only if its name and marker say we created it."""
        path = Path(os.path.realpath(entry))
        # Never delete anything we did not create: the name pattern AND our marker file must both match.
        if not (self.pattern.match(path.name) and (path / self.marker).exists()):
            if path.exists():
                log.warning("not deleting %s: it is not a Stepwise %s", path, self.what)
            return
        shutil.rmtree(path, ignore_errors=True)
