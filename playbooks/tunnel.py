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
    work_root/<host>-<port>-<hash>/ssh.log       ssh's stderr
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import logging
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import PlaybooksError
from .prometheus import PrometheusClient
from .tsdb_server import (
    _CHILDREN,
    _CHILDREN_LOCK,
    EntryStore,
    TSDBServerError,
    _alive,
    _entry_lock,
    _proc_args,
    _reap_children,
    _wait_exit,
    find_executable,
    find_free_port,
)

__all__ = [
    "OpenTunnel",
    "TunnelError",
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

#: Ports the seed system's tunnel block forwards besides Prometheus: the Ray dashboard and TensorBoard.
NOT_PROMETHEUS_PORTS = frozenset({8265, 6006})
#: Loopback ports tried for the local end (the TSDB copies use 19190-19989).
LOCAL_PORTS = (20190, 20990)
HOST_KEY_POLICIES = ("yes", "accept-new")
#: Where the head node may connect the forward: its own loopback only (never 169.254.169.254, a peer...).
REMOTE_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})

_USER = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9._-]{0,63}\Z")
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"\A(?=.{{1,253}}\Z){_LABEL}(?:\.{_LABEL})*\.?\Z")
# Absolute paths; no quotes (they delimit values in ssh_config), no '%' (ssh expands %-tokens in paths).
_PATH = re.compile(r"\A/[^\"'%\x00-\x1f\x7f]{0,1023}\Z")
_ENTRY = re.compile(r"\A[A-Za-z0-9._-]{1,60}-[0-9a-f]{12}\Z")
_MARKER = ".stepwise-ssh-tunnel"
_RECORD = "tunnel.json"
_CONFIG = "ssh_config"
_LOG = "ssh.log"
_PORT_ATTEMPTS = 5
_STOP_GRACE = 5.0

# ssh flags without a value that a pasted command may carry; they change nothing for a tunnel.
_HARMLESS_FLAGS = frozenset("NfTqvCn46")
# `-o` options a pasted command may carry that Stepwise sets itself: accepted and ignored.
_IGNORED_OPTIONS = frozenset(
    {"serveraliveinterval", "serveralivecountmax", "exitonforwardfailure", "batchmode", "connecttimeout",
     "compression", "tcpkeepalive", "loglevel"}
)  # fmt: skip


class TunnelError(PlaybooksError):
    """A tunnel spec is invalid, or the tunnel could not be opened; str() is a sentence for the user.

    Attributes:
        ssh_stderr: The last lines ssh wrote to stderr when it failed, else "".
    """

    def __init__(self, message: str, *, ssh_stderr: str = "") -> None:
        super().__init__(message)
        self.ssh_stderr = ssh_stderr

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep ssh_stderr when pickled (Celery, multiprocessing).
        return (type(self), (str(self),), {"ssh_stderr": self.ssh_stderr})


# -- the spec ---------------------------------------------------------------------------------------


def _check_host(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise TunnelError(f"{what} is missing.")
    text = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(text))
    if not _HOSTNAME.match(text):
        raise TunnelError(
            f"{what} {value!r} is not a host name or IP address (letters, digits, '.', '-' and '_' only, "
            "not starting with '-')."
        )
    return text


def _check_user(value: object, what: str) -> str:
    if not isinstance(value, str) or not _USER.match(value):
        raise TunnelError(
            f"{what} {value!r} is not a valid user name (letters, digits, '.', '_' and '-', not starting "
            "with '-' or '.', at most 64 characters)."
        )
    return value


def _check_port(value: object, what: str) -> int:
    if isinstance(value, bool):
        raise TunnelError(f"{what} {value!r} is not a port number.")
    try:
        port = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise TunnelError(f"{what} {value!r} is not a port number.") from None
    if not 1 <= port <= 65535 or str(port) != str(value).strip():
        raise TunnelError(f"{what} {value!r} is not a port number between 1 and 65535.")
    return port


def _check_path(value: object, what: str) -> str:
    if not isinstance(value, str) or not _PATH.match(value):
        raise TunnelError(
            f"{what} {value!r} must be an absolute path without quotes, '%' or control characters."
        )
    return value


def _split_hop(text: str, what: str) -> tuple[str, str, int | None]:
    """Return (user, host, port) of "[user@]host[:port]" (IPv6 as [addr]:port); user may be ""."""
    user, sep, hostport = text.rpartition("@")
    if sep and not user:
        raise TunnelError(f"{what} {text!r} has an empty user before '@'.")
    port: int | None = None
    if hostport.startswith("["):
        host, close, rest = hostport.partition("]")
        host += close
        if rest:
            if not rest.startswith(":"):
                raise TunnelError(f"{what} {text!r}: write an IPv6 address with a port as [addr]:port.")
            port = _check_port(rest[1:], f"{what} port")
    elif hostport.count(":") == 1:
        host, _, raw_port = hostport.partition(":")
        port = _check_port(raw_port, f"{what} port")
    else:
        host = hostport  # a bare IPv6 address, or a host name
    return (_check_user(user, f"{what} user") if user else ""), _check_host(host, what), port


def _hop_text(user: str, host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host and port is not None else host
    return f"{user + '@' if user else ''}{shown}{':' + str(port) if port is not None else ''}"


@dataclass(frozen=True)
class TunnelSpec:
    """Where a tunnel goes; validated when built, so an instance is always safe to hand to ssh.

    Attributes:
        user: Login on the head node ("" lets ssh choose: the local user or the ssh config's User).
        host: The head node (host name or IP address) where the job's Prometheus runs.
        remote_port: The Prometheus port on the head node.
        jump: ProxyJump hops, in order, each "[user@]host[:port]"; a comma-separated string is accepted.
        ssh_port: The head node's SSH port (None: 22 or the ssh config's Port).
        identity_file: Absolute path of the private key to use (None: the ssh config's / ssh's defaults).
        known_hosts_file: Absolute path of an extra known_hosts file, read before ~/.ssh/known_hosts.
        strict_host_key_checking: "yes" (unknown hosts are refused) or "accept-new" (trust on first use;
            a changed key is still refused). Never "no".
        remote_host: Where the head node connects the forward to (the log's "localhost").
    """

    user: str
    host: str
    remote_port: int
    jump: tuple[str, ...] = ()
    ssh_port: int | None = None
    identity_file: str | None = None
    known_hosts_file: str | None = None
    strict_host_key_checking: str = "yes"
    remote_host: str = "localhost"

    def __post_init__(self) -> None:
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        put("user", _check_user(self.user, "User") if self.user else "")
        put("host", _check_host(self.host, "Host"))
        put("remote_port", _check_port(self.remote_port, "Remote port"))
        hops: Iterable[Any]
        if isinstance(self.jump, str):
            hops = re.split(r"[,\s]+", self.jump.strip())
        elif isinstance(self.jump, Iterable):
            hops = self.jump
        else:
            raise TunnelError(f"Jump hosts {self.jump!r} are not a list of user@host[:port].")
        jump = []
        for hop in hops:
            if hop in ("", None):
                continue
            if not isinstance(hop, str):
                raise TunnelError(f"Jump host {hop!r} is not user@host[:port].")
            jump.append(_hop_text(*_split_hop(hop.strip(), "Jump host")))
        put("jump", tuple(jump))
        put("ssh_port", None if self.ssh_port in (None, "") else _check_port(self.ssh_port, "SSH port"))
        for name, what in (("identity_file", "Identity file"), ("known_hosts_file", "Known hosts file")):
            value = getattr(self, name)
            put(name, None if value in (None, "") else _check_path(value, what))
        if self.strict_host_key_checking not in HOST_KEY_POLICIES:
            raise TunnelError(
                f"StrictHostKeyChecking {self.strict_host_key_checking!r} is not one of "
                f"{', '.join(HOST_KEY_POLICIES)}."
            )
        put("remote_host", _check_host(self.remote_host, "Remote host"))
        if self.remote_host.lower() not in REMOTE_HOSTS:
            raise TunnelError(
                f"The forward's target {self.remote_host} is not the head node itself: a tunnel may only "
                "reach Prometheus on the head node's loopback (-L P:localhost:P or -L P:127.0.0.1:P)."
            )

    @property
    def destination(self) -> str:
        """Return "user@host" (or "host"), as ssh takes it after `--`."""
        return f"{self.user}@{self.host}" if self.user else self.host

    def describe(self) -> str:
        """Return the whole route on one line: "root@gpu-101 (ssh port 22) via alice@login01 → localhost:9191"."""
        hops = f" via {', '.join(self.jump)}" if self.jump else ""
        port = f" (ssh port {self.ssh_port or 22})"
        return f"{self.destination}{port}{hops} → {self.remote_host}:{self.remote_port}"

    def to_dict(self) -> dict[str, Any]:
        """Return the spec as JSON-ready values (DataSource.tunnel, tunnel.json)."""
        out = asdict(self)
        out["jump"] = list(self.jump)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TunnelSpec:
        """Return the spec stored by to_dict(), validated again (stored JSON may have been edited)."""
        if not isinstance(data, Mapping):
            raise TunnelError("The stored tunnel is not a JSON object.")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise TunnelError(f"The stored tunnel has unknown fields: {', '.join(unknown)}.")
        missing = [name for name in ("user", "host", "remote_port") if name not in data]
        if missing:
            raise TunnelError(f"The stored tunnel lacks {', '.join(missing)}.")
        return cls(**dict(data))

    def key(self) -> str:
        """Return a stable short hash of the spec: one recorded tunnel per spec and work root."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


# -- parsing the log's command ----------------------------------------------------------------------

# "ssh" as a word, followed by an option or user@host: not a sentence that merely mentions ssh.
_SSH_WORD = re.compile(r"(?:^|[\s:;|&(`])ssh\s+(?=-|\S+@)")


def _forward(value: str) -> tuple[int, str, int]:
    """Return (local port, remote host, remote port) of a -L value "[bind:]port:host:hostport"."""
    if "/" in value:
        raise TunnelError(f"-L {value}: Unix-socket forwards are not supported.")
    parts = re.findall(r"\[[^\]]*\]|[^:]+", value)
    if len(parts) not in (3, 4):
        raise TunnelError(f"-L {value} is not [bind_address:]port:host:hostport.")
    local, host, remote = parts[-3:]
    return (
        _check_port(local, f"-L {value}: local port"),
        _check_host(host, f"-L {value}: host"),
        _check_port(remote, f"-L {value}: remote port"),
    )


def _command_tokens(text: str) -> list[str]:
    """Return the argv after `ssh` of the first ssh command in `text` (a line, a log block or argv text)."""
    for line in text.splitlines():
        match = _SSH_WORD.search(line)
        if match:
            try:
                return shlex.split(line[match.end() :])
            except ValueError as exc:
                raise TunnelError(f"The tunnel command cannot be split into words: {exc}.") from None
    raise TunnelError(
        "No ssh command found: paste the line that starts with 'ssh' (e.g. ssh -J … -L … root@host)."
    )


def parse_tunnel_command(text: str, *, host_key_policy: str = "yes") -> TunnelSpec:
    """Return the spec of the ssh command in `text` (the log's tunnel block, one line of it, or a paste).

    1. Take the first line holding an `ssh` word, drop what precedes it (rank prefixes such as "0: "),
       and split it like a POSIX shell.
    2. Read -J/ProxyJump, -p/Port, -l/User, -i/IdentityFile and every -L; accept and ignore flags that
       change nothing for a tunnel (-N, -f, -T, -q, -v, -C, -n, -4, -6) and -o options Stepwise sets
       itself; refuse any other option, so a pasted command cannot smuggle in a ProxyCommand.
    3. The Prometheus forward is the first -L whose remote port is neither 8265 (Ray dashboard) nor
       6006 (TensorBoard); the remote port and host come from it, the local port is Stepwise's own.
    Raises TunnelError naming what is wrong.
    """
    args = _command_tokens(text)
    opts: dict[str, Any] = {"jump": [], "forwards": []}
    destination: str | None = None
    i = 0

    def value_of(flag: str, token: str) -> str:
        nonlocal i
        if len(token) > 2:
            return token[2:]
        i += 1
        if i >= len(args):
            raise TunnelError(f"Option {flag} needs a value.")
        return args[i]

    while i < len(args):
        token = args[i]
        if token == "--":
            i += 1
            destination = args[i] if i < len(args) else None
            break
        if not token.startswith("-") or token == "-":
            destination = token
            break
        flag = token[:2]
        if flag == "-J":
            opts["jump"].extend(value_of(flag, token).split(","))
        elif flag == "-p":
            opts["ssh_port"] = value_of(flag, token)
        elif flag == "-l":
            opts["user"] = value_of(flag, token)
        elif flag == "-i":
            opts["identity_file"] = value_of(flag, token)
        elif flag == "-L":
            opts["forwards"].append(_forward(value_of(flag, token)))
        elif flag == "-o":
            _option(value_of(flag, token), opts)
        elif all(c in _HARMLESS_FLAGS for c in token[1:]):
            pass
        else:
            raise TunnelError(
                f"Option {token} is not supported in a tunnel command (only -J, -p, -l, -i, -L, -o and "
                "flags such as -N are)."
            )
        i += 1
    if destination is None:
        raise TunnelError("The ssh command names no host (user@host) after its options.")
    rest = args[i + 1 :]
    if rest:
        raise TunnelError(f"The ssh command runs a remote command ({shlex.join(rest)}); a tunnel must not.")
    if destination.startswith("ssh://"):
        destination = destination[len("ssh://") :].rstrip("/")
    user, host, port = _split_hop(destination, "Host")
    prometheus = [f for f in opts["forwards"] if f[2] not in NOT_PROMETHEUS_PORTS]
    if not prometheus:
        raise TunnelError(
            "The ssh command forwards no Prometheus port: expected a -L P:localhost:P other than "
            "8265 (Ray dashboard) and 6006 (TensorBoard)."
        )
    _local, remote_host, remote_port = prometheus[0]
    return TunnelSpec(
        user=user or opts.get("user", ""),
        host=host,
        remote_port=remote_port,
        jump=tuple(opts["jump"]),
        ssh_port=port if port is not None else opts.get("ssh_port"),
        identity_file=opts.get("identity_file"),
        strict_host_key_checking=host_key_policy,
        remote_host=remote_host,
    )


def _option(text: str, opts: dict[str, Any]) -> None:
    name, value = _split_option(text)
    key = name.lower()
    if key == "proxyjump":
        opts["jump"].extend(value.split(","))
    elif key == "port":
        opts["ssh_port"] = value
    elif key == "user":
        opts["user"] = value
    elif key == "identityfile":
        opts["identity_file"] = value
    elif key not in _IGNORED_OPTIONS:
        raise TunnelError(f"ssh option -o {name} is not supported in a tunnel command.")


def _split_option(text: str) -> tuple[str, str]:
    match = re.match(r"\A\s*([A-Za-z]+)\s*(?:=\s*|\s+)(.*?)\s*\Z", text)
    if not match:
        raise TunnelError(f"-o {text!r} is not Name=value.")
    return match.group(1), match.group(2)


def spec_from_triage(triage: Mapping[str, Any], *, host_key_policy: str = "yes") -> TunnelSpec:
    """Return the spec of the tunnel that triage found in a job log.

    Accepts Triage.to_dict() (or Job.triage) or just its "prometheus" object ({head, port, tunnel}).
    The command text wins; head and port must agree with it.
    """
    prom = triage.get("prometheus", triage) if isinstance(triage, Mapping) else None
    if not isinstance(prom, Mapping):
        raise TunnelError("The triage has no Prometheus section.")
    text = prom.get("tunnel")
    if not text:
        raise TunnelError("The job log prints no SSH tunnel command (was the job started with RAY=1?).")
    spec = parse_tunnel_command(str(text), host_key_policy=host_key_policy)
    head, port = prom.get("head"), prom.get("port")
    if head and str(head) != spec.host:
        raise TunnelError(
            f"The log's head node {head!r} differs from the tunnel command's host {spec.host!r}."
        )
    if port and int(port) != spec.remote_port:
        raise TunnelError(
            f"The log's Prometheus port {port} differs from the tunnel command's {spec.remote_port}."
        )
    return spec


# -- the ssh command --------------------------------------------------------------------------------


def _quoted(path: str) -> str:
    return f'"{path}"'


def _forced_options(spec: TunnelSpec) -> list[tuple[str, str]]:
    """Return the (Name, value) options that every connection of the tunnel (jumps included) must use."""
    opts = [
        ("BatchMode", "yes"),  # never prompt: no terminal, and a prompt would hang the worker
        ("ExitOnForwardFailure", "yes"),  # a local port we cannot bind is an exit, not a silent tunnel
        ("ServerAliveInterval", "15"),
        ("ServerAliveCountMax", "3"),  # a dead link ends ssh within ~45 s, so the health check sees it
        ("ConnectTimeout", "10"),
        ("StrictHostKeyChecking", spec.strict_host_key_checking),
        # No multiplexing through a user's master connection: our pid must be the tunnel.
        ("ControlMaster", "no"),
        ("ControlPath", "none"),
        ("ForwardAgent", "no"),
        ("ForwardX11", "no"),
        ("PermitLocalCommand", "no"),
        ("RequestTTY", "no"),
    ]
    if spec.known_hosts_file:
        opts.append(
            ("UserKnownHostsFile", f"{_quoted(spec.known_hosts_file)} ~/.ssh/known_hosts ~/.ssh/known_hosts2")
        )
    if spec.identity_file:
        opts += [("IdentityFile", _quoted(spec.identity_file)), ("IdentitiesOnly", "yes")]
    return opts


def ssh_config_text(spec: TunnelSpec) -> str:
    """Return the ssh_config that `open_tunnel` writes for `spec` (passed with -F, to jump hosts too)."""
    lines = ["# Written by Stepwise for one tunnel. The first value ssh reads wins, so these come first."]
    lines += [f"{name} {value}" for name, value in _forced_options(spec)]
    # -F replaces the user's and the system's files; include them so Host-specific settings still apply.
    lines += ["Include ~/.ssh/config", "Include /etc/ssh/ssh_config", ""]
    return "\n".join(lines)


def forward_arg(spec: TunnelSpec, local_port: int) -> str:
    """Return the -L value: the local end bound on 127.0.0.1 only."""
    remote = f"[{spec.remote_host}]" if ":" in spec.remote_host else spec.remote_host
    return f"127.0.0.1:{local_port}:{remote}:{spec.remote_port}"


def ssh_command(
    spec: TunnelSpec,
    local_port: int,
    *,
    ssh_bin: str = "ssh",
    config_file: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Return the argv of `ssh -N` forwarding 127.0.0.1:<local_port> to the spec's Prometheus port.

    The options are given as -o (they win over any config) and, when `config_file` is given, also
    reach the jump hosts through it. The destination follows `--`.
    """
    local_port = _check_port(local_port, "Local port")
    argv = [ssh_bin, "-N"]
    if config_file is not None:
        argv += ["-F", os.fspath(config_file)]
    for name, value in _forced_options(spec):
        argv += ["-o", f"{name}={value}"]
    if spec.jump:
        argv += ["-J", ",".join(spec.jump)]
    if spec.ssh_port is not None:
        argv += ["-p", str(spec.ssh_port)]
    argv += ["-L", forward_arg(spec, local_port), "--", spec.destination]
    return argv


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


_STORE = EntryStore(_ENTRY, _MARKER, _RECORD, "SSH tunnel entry")
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
    args = _proc_args(t.pid)  # a zombie has an empty cmdline, so an exited ssh never matches
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
    try:
        pidfd: int | None = os.pidfd_open(t.pid)
    except ProcessLookupError:
        return False
    except (OSError, AttributeError):
        pidfd = None
    try:
        if not _is_ours(t):
            return False

        def send(sig: int) -> None:
            with contextlib.suppress(ProcessLookupError):
                if pidfd is not None:
                    signal.pidfd_send_signal(pidfd, sig)
                else:
                    os.kill(t.pid, sig)

        send(signal.SIGTERM)
        if not _wait_exit(t.pid, pidfd, grace):
            log.warning("ssh pid %s ignored SIGTERM for %.0f s; sending SIGKILL", t.pid, grace)
            send(signal.SIGKILL)
            _wait_exit(t.pid, pidfd, 10.0)
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _close_locked(entry: Path, rec: Mapping[str, Any] | None) -> bool:
    t = _tunnel_from(entry, rec) if rec is not None else None
    stopped = _terminate(t) if t is not None else False
    if t is not None and not stopped and t.pid > 0 and _alive(t.pid):
        # The pid was recycled, or the record was edited: that process is not ours to signal.
        log.warning(
            "not signalling pid %s: it is not the ssh tunnel recorded in %s (cmdline: %s); removing the record",
            t.pid, entry, " ".join(_proc_args(t.pid))[:200] or "unreadable",
        )  # fmt: skip
    _remove_entry(entry)
    return stopped


def _find_ssh(ssh_bin: str) -> str:
    found = find_executable(ssh_bin)
    if not found:
        raise TunnelError(
            f"The ssh client {ssh_bin!r} is not installed (Debian: apt install openssh-client), "
            "or set STEPWISE_SSH_BIN to its path."
        )
    return found


# -- stderr -----------------------------------------------------------------------------------------


def _stderr_tail(entry: Path, lines: int = 12) -> str:
    try:
        text = (entry / _LOG).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(line for line in text.splitlines()[-lines:] if line.strip())


# (pattern in ssh's stderr, what it means for the user); the first that matches explains the failure.
_DIAGNOSES: tuple[tuple[str, str], ...] = (
    ("open failed: connect failed",
     "the SSH login worked, but nothing accepts connections on {remote} at {host}: is the job's "
     "Prometheus running, and on that port?"),
    ("open failed: administratively prohibited",
     "the SSH server at {host} forbids port forwarding (AllowTcpForwarding)"),
    ("Permission denied",
     "{host} refused the SSH login of {user}: the key{key} is not authorized there"),
    ("Host key verification failed",
     "the host key of {host} (or a jump host) is unknown or has changed: add the right key to the "
     "known_hosts file, or allow trust on first use (accept-new)"),
    ("REMOTE HOST IDENTIFICATION HAS CHANGED",
     "the host key of {host} (or a jump host) has CHANGED: this may be an attack; fix known_hosts"),
    ("Could not resolve hostname", "a host name does not resolve"),
    ("Connection refused", "no SSH server accepts connections at {host} (or a jump host) on that port"),
    ("timed out", "the SSH connection timed out: is the host reachable from the Stepwise server?"),
    ("No route to host", "there is no route to the host"),
    ("Address already in use", "the local port was taken"),
    ("jumphost loop", "a jump host is the destination itself"),
)  # fmt: skip


def _last_reason(tail: str) -> str:
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(("Warning:", "debug"))] or lines
    return useful[-1][:300] if useful else "(no output)"


def _explain(spec: TunnelSpec, tail: str, fallback: str) -> str:
    remote = f"{spec.remote_host}:{spec.remote_port}"
    key = f" {spec.identity_file}" if spec.identity_file else ""
    for pattern, meaning in _DIAGNOSES:
        if pattern in tail:
            hint = meaning.format(host=spec.host, user=spec.user or "(default user)", key=key, remote=remote)
            line = next((ln.strip() for ln in reversed(tail.splitlines()) if pattern in ln), "")
            return f"SSH tunnel to {spec.describe()}: {hint} (ssh: {line[:300]})"
    return f"SSH tunnel to {spec.describe()}: {fallback} (ssh: {_last_reason(tail)})"


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
            if "open failed" in _stderr_tail(entry):
                return False, "refused"
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)
    return False, "exited" if proc.poll() is not None else "timeout"


def _start(spec: TunnelSpec, binary: str, entry: Path, timeout: float) -> dict[str, Any]:
    """Return the record of a new ssh whose forward reaches Prometheus; raise TunnelError if it cannot."""
    config = entry / _CONFIG
    for attempt in range(_PORT_ATTEMPTS):
        try:
            port = find_free_port(*LOCAL_PORTS)
        except TSDBServerError as exc:
            raise TunnelError(f"No free local port for the tunnel: {exc}.") from None
        argv = ssh_command(spec, port, ssh_bin=binary, config_file=config)
        url = f"http://127.0.0.1:{port}"
        with open(entry / _LOG, "wb") as logf:
            # Own session: a Ctrl-C on the caller's terminal does not reach ssh, and no controlling
            # terminal means ssh can never prompt. stdin closed: nothing to read from us.
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=logf,
                cwd=entry, start_new_session=True, close_fds=True,
            )  # fmt: skip
        with _CHILDREN_LOCK:
            _CHILDREN[proc.pid] = proc
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
        _reap_children()
        tail = _stderr_tail(entry)
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
        raise TunnelError(_explain(spec, tail, fallback), ssh_stderr=tail)
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
    spec: TunnelSpec, work_root: str | os.PathLike[str], *, ssh_bin: str = "ssh", timeout: float = 20.0
) -> OpenTunnel:
    """Return a tunnel to the spec's Prometheus: the one recorded for this spec if healthy, else a new one.

    1. Under the entry's lock (shared by every process using `work_root`): a recorded tunnel that is
       our live ssh and through which Prometheus answers /-/ready is reused (last_used is touched);
       a recorded one that is not is closed (only if verified ours) and its entry removed.
    2. Write ssh_config, start `ssh -N` in its own session (stdin closed, stderr to ssh.log) on a free
       loopback port (another one if that port is taken meanwhile).
    3. Wait up to `timeout` s until Prometheus answers /-/ready through the forward, then record the
       tunnel in tunnel.json. If ssh exits, or the head node refuses the forward, or time runs out,
       ssh is stopped, the entry removed, and TunnelError says why (with ssh's stderr attached).
    """
    binary = _find_ssh(ssh_bin)
    entry = _entry_dir(work_root, spec)
    _reap_children()
    with _entry_lock(entry):
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
        tail = _stderr_tail(entry)
        why = f": {_last_reason(tail)}" if tail else ""
        return f"the ssh process (pid {t.pid}) of the tunnel to {t.spec.describe()} is gone{why}"
    if _answers(t, within=within):
        return None
    tail = _stderr_tail(entry, lines=4)
    return _explain(t.spec, tail, f"ssh runs, but Prometheus does not answer through {t.url}")


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
    _reap_children()
    if isinstance(t, TunnelSpec):
        if work_root is None:
            raise TunnelError("close_tunnel(spec) needs the work_root.")
        entry = _entry_dir(work_root, t)
    else:
        entry = Path(t.entry_dir)
    if not entry.exists():
        return False
    with _entry_lock(entry):
        return _close_locked(entry, _read_record(entry))


def close_idle_tunnels(work_root: str | os.PathLike[str], idle_seconds: float) -> list[int]:
    """Return the pids of tunnels closed because open_tunnel() last returned them idle_seconds ago.

    Entries whose ssh is gone are removed too; an entry whose lock is held (being opened or reused right
    now) is skipped.
    """
    _reap_children()
    closed = []
    now = time.time()
    for entry in _entries(work_root):
        try:
            with _entry_lock(entry, blocking=False):
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
    _reap_children()
    closed = []
    for entry in _entries(work_root):
        with _entry_lock(entry):
            rec = _read_record(entry)
            t = _tunnel_from(entry, rec) if rec is not None else None
            if _close_locked(entry, rec) and t is not None:
                closed.append(t.pid)
    return closed


def list_tunnels(work_root: str | os.PathLike[str]) -> list[OpenTunnel]:
    """Return the tunnels recorded in work_root whose ssh is alive and ours (not probed through)."""
    _reap_children()
    out = []
    for entry in _entries(work_root):
        rec = _read_record(entry)
        t = _tunnel_from(entry, rec) if rec is not None else None
        if t is not None and _is_ours(t):
            out.append(t)
    return out
