"""An SSH tunnel's spec: where it goes, validated when built (`TunnelSpec`), and the ssh command line and
config file that open it. Every value that reaches ssh is checked here first: user and host names
restricted to safe characters, no leading '-', ports in range, absolute paths. Used by `playbooks.tunnel`.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .errors import PlaybooksError

#: Ports the seed system's tunnel block forwards besides Prometheus: the Ray dashboard and TensorBoard.
NOT_PROMETHEUS_PORTS = frozenset({8265, 6006})
HOST_KEY_POLICIES = ("yes", "accept-new")
#: Where the head node may connect the forward: its own loopback only (never 169.254.169.254, a peer...).
REMOTE_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})

_USER = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9._-]{0,63}\Z")
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"\A(?=.{{1,253}}\Z){_LABEL}(?:\.{_LABEL})*\.?\Z")
# Absolute paths; no quotes (they delimit values in ssh_config), no '%' (ssh expands %-tokens in paths).
_PATH = re.compile(r"\A/[^\"'%\x00-\x1f\x7f]{0,1023}\Z")


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


class TunnelRefused(TunnelError):
    """No new ssh was started: the caller's `refuse_start()` said why (the message)."""


# -- the spec ---------------------------------------------------------------------------------------


def check_host(value: object, what: str) -> str:
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


def check_user(value: object, what: str) -> str:
    if not isinstance(value, str) or not _USER.match(value):
        raise TunnelError(
            f"{what} {value!r} is not a valid user name (letters, digits, '.', '_' and '-', not starting "
            "with '-' or '.', at most 64 characters)."
        )
    return value


def check_port(value: object, what: str) -> int:
    if isinstance(value, bool):
        raise TunnelError(f"{what} {value!r} is not a port number.")
    try:
        port = int(str(value))
    except (TypeError, ValueError):
        raise TunnelError(f"{what} {value!r} is not a port number.") from None
    if not 1 <= port <= 65535 or str(port) != str(value).strip():
        raise TunnelError(f"{what} {value!r} is not a port number between 1 and 65535.")
    return port


def check_path(value: object, what: str) -> str:
    if not isinstance(value, str) or not _PATH.match(value):
        raise TunnelError(
            f"{what} {value!r} must be an absolute path without quotes, '%' or control characters."
        )
    return value


def split_hop(text: str, what: str) -> tuple[str, str, int | None]:
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
            port = check_port(rest[1:], f"{what} port")
    elif hostport.count(":") == 1:
        host, _, raw_port = hostport.partition(":")
        port = check_port(raw_port, f"{what} port")
    else:
        host = hostport  # a bare IPv6 address, or a host name
    return (check_user(user, f"{what} user") if user else ""), check_host(host, what), port


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

        put("user", check_user(self.user, "User") if self.user else "")
        put("host", check_host(self.host, "Host"))
        put("remote_port", check_port(self.remote_port, "Remote port"))
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
            jump.append(_hop_text(*split_hop(hop.strip(), "Jump host")))
        put("jump", tuple(jump))
        raw_port: object = self.ssh_port  # a form gives "" for no port
        put("ssh_port", None if raw_port in (None, "") else check_port(raw_port, "SSH port"))
        for name, what in (("identity_file", "Identity file"), ("known_hosts_file", "Known hosts file")):
            value = getattr(self, name)
            put(name, None if value in (None, "") else check_path(value, what))
        if self.strict_host_key_checking not in HOST_KEY_POLICIES:
            raise TunnelError(
                f"StrictHostKeyChecking {self.strict_host_key_checking!r} is not one of "
                f"{', '.join(HOST_KEY_POLICIES)}."
            )
        put("remote_host", check_host(self.remote_host, "Remote host"))
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
    local_port = check_port(local_port, "Local port")
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
