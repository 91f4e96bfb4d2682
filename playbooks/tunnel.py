"""SSH tunnels to a job's Prometheus, opened with the system `ssh` and recorded so they can be closed.

A training job's Prometheus listens on its head node, reachable only through SSH (often through a login
host). The job log prints the command a user would type (seed-system.md §2.5)::

    ssh -J alice@login01.example.org -L 8265:localhost:8265 -L 6006:localhost:6006 -L 9191:localhost:9191 root@gpu-101

`parse_tunnel_command()` turns such a command (or a form's fields, through `TunnelSpec`) into a validated
spec; `open_tunnel()` runs `ssh -N` with that spec, forwarding a free port on 127.0.0.1 to the
Prometheus port, and waits until Prometheus answers `/-/ready` through it.

Every value that reaches the ssh command line is validated first (user and host names restricted to
safe characters, no leading '-', ports in range, absolute paths), and the destination follows `--`, so
nothing a log or a form holds can become an ssh option.

ssh reads its options from a config file that Stepwise writes per tunnel (`-F`): ProxyJump starts one
more `ssh` for each jump host and passes it only `-F`, never `-o` or `-i`, so the jump connections get
the same batch mode, key and known_hosts only this way. That file includes the user's and the system's
ssh config after Stepwise's own options (the first value ssh reads wins).

Layout of one entry (the web server and every Celery worker share one tunnel per spec)::

    work_root/<host>-<port>-<hash>.lock          fcntl lock serializing open/reuse/close of this entry
    work_root/<host>-<port>-<hash>/.stepwise-ssh-tunnel   marker: only such directories are ever deleted
    work_root/<host>-<port>-<hash>/tunnel.json   {pid, pid_start, cmdline, local_port, url, spec, ...}
    work_root/<host>-<port>-<hash>/ssh_config
    work_root/<host>-<port>-<hash>/ssh.log       ssh's stderr (read back by `_tunnel_errors`)
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import procs
from ._tunnel_errors import SSH_LOG, explain, last_reason, stderr_tail
from ._tunnel_parse import parse_tunnel_command, spec_from_triage
from ._tunnel_spec import (
    HOST_KEY_POLICIES,
    NOT_PROMETHEUS_PORTS,
    REMOTE_HOSTS,
    TunnelError,
    TunnelRefused,
    TunnelSpec,
    forward_arg,
    ssh_command,
    ssh_config_text,
)
from .procs import ENTRY_NAME, EntryStore
from .prometheus import PrometheusClient

__all__ = [
    "HOST_KEY_POLICIES",
    "LOCAL_PORTS",
    "NOT_PROMETHEUS_PORTS",
    "REMOTE_HOSTS",
    "OpenTunnel",
    "TunnelError",
    "TunnelRefused",
    "TunnelSpec",
    "close_idle_tunnels",
    "close_tunnel",
    "find_tunnel",
    "forward_arg",
    "list_tunnels",
    "open_tunnel",
    "parse_tunnel_command",
    "reap_leftover_tunnels",
    "spec_from_triage",
    "ssh_command",
    "ssh_config_text",
    "tunnel_healthy",
    "tunnel_problem",
]

log = logging.getLogger(__name__)

#: Loopback ports tried for the local end (the TSDB copies use 19190-19989).
LOCAL_PORTS = (20190, 20990)
_MARKER = ".stepwise-ssh-tunnel"
_RECORD = "tunnel.json"
_CONFIG = "ssh_config"
_PORT_ATTEMPTS = 5
_STOP_GRACE = 5.0


# -- records and entries ----------------------------------------------------------------------------


@dataclass(frozen=True)
class OpenTunnel:
    """A running `ssh -N` that Stepwise started and recorded.

    Attributes:
        spec: Where it goes.
        url: The local end as a Prometheus base URL, http://127.0.0.1:<local_port>.
        local_port: The loopback port ssh listens on.
        pid: The ssh process id.
        pid_start: The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), which
            tells a recycled pid apart.
        started_at: Unix seconds when Prometheus first answered through it.
        last_used: Unix seconds of the last open_tunnel() that returned it.
        entry_dir: Its directory under the work root (record, ssh_config, ssh.log).
        cmdline: The argv it was started with.
    """

    spec: TunnelSpec
    url: str
    local_port: int
    pid: int
    pid_start: int
    started_at: float
    last_used: float
    entry_dir: str
    cmdline: tuple[str, ...] = field(default=())


def _entry_dir(work_root: str | os.PathLike[str], spec: TunnelSpec) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{spec.host}-{spec.remote_port}").strip("-.")[:40] or "tunnel"
    return Path(work_root).resolve() / f"{slug}-{spec.key()}"


_STORE = EntryStore(ENTRY_NAME, _MARKER, _RECORD, "SSH tunnel entry")
_entries, _read_record, _write_record, _remove_entry = (
    _STORE.entries,
    _STORE.read,
    _STORE.write,
    _STORE.remove,
)


def _tunnel_from(entry: Path, rec: Mapping[str, Any]) -> OpenTunnel | None:
    """Return the record as an OpenTunnel, or None if it does not parse (an edited or foreign file)."""
    try:
        return OpenTunnel(
            spec=TunnelSpec.from_dict(rec["spec"]),
            url=str(rec["url"]),
            local_port=int(rec["local_port"]),
            pid=int(rec["pid"]),
            pid_start=int(rec.get("pid_start") or 0),
            started_at=float(rec["started_at"]),
            last_used=float(rec.get("last_used") or rec["started_at"]),
            entry_dir=str(entry),
            cmdline=tuple(str(a) for a in rec.get("cmdline") or ()),
        )
    except (KeyError, TypeError, ValueError, TunnelError) as exc:
        log.warning("ignoring unreadable tunnel record in %s: %s", entry, exc)
        return None


# -- processes --------------------------------------------------------------------------------------


def _pid_start(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return int(fields[19])  # field 22 overall; fields[0] is field 3 (state)
    except (OSError, IndexError, ValueError):
        return None


def _is_ours(t: OpenTunnel) -> bool:
    """Return True if t.pid runs and is the ssh we started for this entry (pid-reuse and tamper safe).

    The record's cmdline and start time must match the process, and that argv must be an ssh that
    reads this entry's ssh_config and forwards this entry's local port: paths derived from where the
    record lies, not from what it says, so an edited record cannot point us at a foreign process.
    """
    if t.pid <= 0:
        return False
    args = procs.proc_args(t.pid)  # a zombie has an empty cmdline, so an exited ssh never matches
    if not args or tuple(args) != t.cmdline:
        return False
    config = os.path.join(os.path.realpath(t.entry_dir), _CONFIG)
    wanted_forward = forward_arg(t.spec, t.local_port)
    if not (
        os.path.basename(args[0]).startswith("ssh")
        and _follows(args, "-F", config)
        and _follows(args, "-L", wanted_forward)
        and args[-1] == t.spec.destination
    ):
        return False
    return t.pid_start <= 0 or _pid_start(t.pid) == t.pid_start


def _follows(args: list[str], flag: str, value: str) -> bool:
    return any(a == flag and b == value for a, b in zip(args, args[1:], strict=False))


def _terminate(t: OpenTunnel, grace: float = _STOP_GRACE) -> bool:
    """Return True after stopping t.pid, if and only if it is our ssh for t (checked on a pinned pid)."""
    return procs.terminate(t.pid, lambda _pid: _is_ours(t), grace, "ssh")


def _close_locked(entry: Path, rec: Mapping[str, Any] | None) -> bool:
    t = _tunnel_from(entry, rec) if rec is not None else None
    stopped = _terminate(t) if t is not None else False
    if t is not None and not stopped and t.pid > 0 and procs.alive(t.pid):
        # The pid was recycled, or the record was edited: that process is not ours to signal.
        log.warning(
            "not signalling pid %s: it is not the ssh tunnel recorded in %s (cmdline: %s); removing the record",
            t.pid, entry, " ".join(procs.proc_args(t.pid))[:200] or "unreadable",
        )  # fmt: skip
    _remove_entry(entry)
    return stopped


def _find_ssh(ssh_bin: str) -> str:
    found = procs.find_executable(ssh_bin)
    if not found:
        raise TunnelError(
            f"The ssh client {ssh_bin!r} is not installed (Debian: apt install openssh-client), "
            "or set STEPWISE_SSH_BIN to its path."
        )
    return found


# -- opening ----------------------------------------------------------------------------------------


def _wait_forward(proc: subprocess.Popen[bytes], url: str, entry: Path, timeout: float) -> tuple[bool, str]:
    """Return (True, "") once Prometheus answers /-/ready through the forward, else (False, why).

    `why` is "exited" when ssh exits, "refused" when the head node could not connect the forward
    (ssh logs "open failed" and stays up: ExitOnForwardFailure does not cover it), "timeout" otherwise.
    """
    deadline = time.monotonic() + timeout
    delay = 0.05
    with PrometheusClient(url, timeout=5.0, retries=1) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False, "exited"
            if client.ready():
                return True, ""
            if "open failed" in stderr_tail(entry):
                return False, "refused"
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)
    return False, "exited" if proc.poll() is not None else "timeout"


def _start(spec: TunnelSpec, binary: str, entry: Path, timeout: float) -> dict[str, Any]:
    """Return the record of a new ssh whose forward reaches Prometheus; raise TunnelError if it cannot."""
    config = entry / _CONFIG
    for attempt in range(_PORT_ATTEMPTS):
        try:
            port = procs.free_port(*LOCAL_PORTS)
        except procs.NoFreePort as exc:
            raise TunnelError(f"No free local port for the tunnel: {exc}.") from None
        argv = ssh_command(spec, port, ssh_bin=binary, config_file=config)
        url = f"http://127.0.0.1:{port}"
        with open(entry / SSH_LOG, "wb") as logf:
            # Own session: a Ctrl-C on the caller's terminal does not reach ssh, and no controlling
            # terminal means ssh can never prompt. stdin closed: nothing to read from us.
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=logf,
                cwd=entry, start_new_session=True, close_fds=True,
            )  # fmt: skip
        procs.child_add(proc)
        rec = {
            "pid": proc.pid,
            "pid_start": _pid_start(proc.pid) or 0,
            "cmdline": argv,
            "local_port": port,
            "url": url,
            "spec": spec.to_dict(),
            "started_at": time.time(),
            "last_used": time.time(),
        }
        t = _tunnel_from(entry, rec)
        assert t is not None  # built from a validated spec
        try:
            ok, why = _wait_forward(proc, url, entry, timeout)
        except BaseException:
            # Ctrl-C while waiting: the tunnel is not recorded yet, so nobody else could close it.
            _terminate(t, 2.0)
            raise
        if ok:
            rec["started_at"] = rec["last_used"] = time.time()
            return rec
        if why != "exited":
            _terminate(t, 2.0)
        procs.reap_children()
        tail = stderr_tail(entry)
        if why == "exited" and "Address already in use" in tail and attempt + 1 < _PORT_ATTEMPTS:
            # Port race: another program bound the port between our check and ssh's bind.
            log.info(
                "local port %s was taken before ssh bound it (attempt %d); trying another", port, attempt + 1
            )
            continue
        fallback = {
            "exited": f"ssh exited with status {proc.returncode}",
            "refused": "the forward was refused",
            "timeout": f"no Prometheus answered /-/ready through the tunnel within {timeout:g} s",
        }[why]
        raise TunnelError(explain(spec, tail, fallback), ssh_stderr=tail)
    raise TunnelError(f"SSH tunnel to {spec.describe()}: {_PORT_ATTEMPTS} local ports were taken in a row.")


def _answers(t: OpenTunnel, within: float) -> bool:
    deadline = time.monotonic() + within
    with PrometheusClient(t.url, timeout=5.0, retries=1) as client:
        while True:
            if client.ready():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)


def open_tunnel(
    spec: TunnelSpec,
    work_root: str | os.PathLike[str],
    *,
    ssh_bin: str = "ssh",
    timeout: float = 20.0,
    refuse_start: Callable[[], str | None] | None = None,
) -> OpenTunnel:
    """Return a tunnel to the spec's Prometheus: the one recorded for this spec if healthy, else a new one.

    1. Under the entry's lock (shared by every process using `work_root`): a recorded tunnel that is
       our live ssh and through which Prometheus answers /-/ready is reused (last_used is touched);
       a recorded one that is not is closed (only if verified ours) and its entry removed.
       Still under the lock, `refuse_start()` (if given) may return why no new ssh may start (say, the
       run that wants it was cancelled as the tunnel closed): TunnelRefused with that reason. Asked under the lock that
       closing takes too, so a close and an open racing for one entry never leave an ssh nobody wants.
    2. Write ssh_config, start `ssh -N` in its own session (stdin closed, stderr to ssh.log) on a free
       loopback port (another one if that port is taken meanwhile).
    3. Wait up to `timeout` s until Prometheus answers /-/ready through the forward, then record the
       tunnel in tunnel.json. If ssh exits, or the head node refuses the forward, or time runs out,
       ssh is stopped, the entry removed, and TunnelError says why (with ssh's stderr attached).
    """
    binary = _find_ssh(ssh_bin)
    entry = _entry_dir(work_root, spec)
    procs.reap_children()
    with procs.entry_lock(entry):
        rec = _read_record(entry)
        if rec is not None:
            t = _tunnel_from(entry, rec)
            if t is not None and _is_ours(t) and _answers(t, within=2.0):
                rec["last_used"] = time.time()
                _write_record(entry, rec)
                return _tunnel_from(entry, rec) or t
            _close_locked(entry, rec)
        else:
            _remove_entry(entry)
        refused = refuse_start() if refuse_start is not None else None
        if refused:
            raise TunnelRefused(refused)
        entry.mkdir(parents=True, exist_ok=True)
        (entry / _MARKER).write_text("Stepwise SSH tunnel; deleted when its ssh is closed.\n")
        config = entry / _CONFIG
        config.write_text(ssh_config_text(spec))
        config.chmod(0o600)
        try:
            rec = _start(spec, binary, entry, timeout)
            _write_record(entry, rec)
        except BaseException:
            _remove_entry(entry)
            raise
    t = _tunnel_from(entry, rec)
    assert t is not None
    log.info("SSH tunnel to %s open at %s (pid %s)", spec.describe(), t.url, t.pid)
    return t


# -- health and closing -----------------------------------------------------------------------------


def tunnel_problem(t: OpenTunnel, *, within: float = 2.0) -> str | None:
    """Return None if t's ssh is alive and Prometheus answers /-/ready through it, else the reason."""
    entry = Path(t.entry_dir)
    if not _is_ours(t):
        tail = stderr_tail(entry)
        why = f": {last_reason(tail)}" if tail else ""
        return f"the ssh process (pid {t.pid}) of the tunnel to {t.spec.describe()} is gone{why}"
    if _answers(t, within=within):
        return None
    tail = stderr_tail(entry, lines=4)
    return explain(t.spec, tail, f"ssh runs, but Prometheus does not answer through {t.url}")


def tunnel_healthy(t: OpenTunnel) -> bool:
    """Return True if t's ssh process is alive (and ours) AND Prometheus answers /-/ready through it."""
    return tunnel_problem(t) is None


def find_tunnel(spec: TunnelSpec, work_root: str | os.PathLike[str]) -> OpenTunnel | None:
    """Return the tunnel recorded for `spec` whose ssh is alive and ours (healthy or not), else None."""
    entry = _entry_dir(work_root, spec)
    rec = _read_record(entry)
    t = _tunnel_from(entry, rec) if rec is not None else None
    return t if t is not None and _is_ours(t) else None


def close_tunnel(t: OpenTunnel | TunnelSpec, work_root: str | os.PathLike[str] | None = None) -> bool:
    """Return True if an ssh was stopped; the tunnel's entry is removed either way.

    Pass an OpenTunnel, or a TunnelSpec with its work_root. Only the pid recorded in the entry is
    signalled (SIGTERM, SIGKILL after 5 s), and only after checking on a pinned pid that it is the ssh
    started for this entry (same argv and start time, this entry's ssh_config and forward).
    """
    procs.reap_children()
    if isinstance(t, TunnelSpec):
        if work_root is None:
            raise TunnelError("close_tunnel(spec) needs the work_root.")
        entry = _entry_dir(work_root, t)
    else:
        entry = Path(t.entry_dir)
    # Looked at under the lock: an open holding it may be about to create the entry.
    with procs.entry_lock(entry):
        if not entry.exists():
            return False
        return _close_locked(entry, _read_record(entry))


def close_idle_tunnels(work_root: str | os.PathLike[str], idle_seconds: float) -> list[int]:
    """Return the pids of tunnels closed because open_tunnel() last returned them idle_seconds ago.

    Entries whose ssh is gone are removed too; an entry whose lock is held (being opened or reused right
    now) is skipped.
    """
    procs.reap_children()
    closed = []
    now = time.time()
    for entry in _entries(work_root):
        try:
            with procs.entry_lock(entry, blocking=False):
                rec = _read_record(entry)
                t = _tunnel_from(entry, rec) if rec is not None else None
                if t is not None and _is_ours(t) and now - t.last_used < idle_seconds:
                    continue
                if _close_locked(entry, rec) and t is not None:
                    closed.append(t.pid)
        except BlockingIOError:
            continue
    return closed


def reap_leftover_tunnels(work_root: str | os.PathLike[str]) -> list[int]:
    """Return the pids stopped while closing every tunnel recorded in work_root (for start-up and tests).

    Each recorded ssh is stopped only if verified ours; every entry directory is deleted.
    """
    procs.reap_children()
    closed = []
    for entry in _entries(work_root):
        with procs.entry_lock(entry):
            rec = _read_record(entry)
            t = _tunnel_from(entry, rec) if rec is not None else None
            if _close_locked(entry, rec) and t is not None:
                closed.append(t.pid)
    return closed


def list_tunnels(work_root: str | os.PathLike[str]) -> list[OpenTunnel]:
    """Return the tunnels recorded in work_root whose ssh is alive and ours (not probed through)."""
    procs.reap_children()
    out = []
    for entry in _entries(work_root):
        rec = _read_record(entry)
        t = _tunnel_from(entry, rec) if rec is not None else None
        if t is not None and _is_ours(t):
            out.append(t)
    return out
