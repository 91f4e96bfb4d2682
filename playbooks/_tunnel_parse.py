"""Reading an SSH tunnel from what a job log prints: `parse_tunnel_command` (the log's command, one line of
it, or a paste) and `spec_from_triage` (the triage's Prometheus section). Refuses any ssh option that is not
plain routing, so a pasted command cannot smuggle in a ProxyCommand. Used by `playbooks.tunnel`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from ._tunnel_spec import NOT_PROMETHEUS_PORTS, TunnelError, TunnelSpec, check_host, check_port, split_hop

# ssh flags without a value that a pasted command may carry; they change nothing for a tunnel.
_HARMLESS_FLAGS = frozenset("NfTqvCn46")
# `-o` options a pasted command may carry that Stepwise sets itself: accepted and ignored.
_IGNORED_OPTIONS = frozenset(
    {"serveraliveinterval", "serveralivecountmax", "exitonforwardfailure", "batchmode", "connecttimeout",
     "compression", "tcpkeepalive", "loglevel"}
)  # fmt: skip


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
        check_port(local, f"-L {value}: local port"),
        check_host(host, f"-L {value}: host"),
        check_port(remote, f"-L {value}: remote port"),
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
    opts, destination, i = _read_args(args)
    if destination is None:
        raise TunnelError("The ssh command names no host (user@host) after its options.")
    rest = args[i + 1 :]
    if rest:
        raise TunnelError(f"The ssh command runs a remote command ({shlex.join(rest)}); a tunnel must not.")
    if destination.startswith("ssh://"):
        destination = destination[len("ssh://") :].rstrip("/")
    user, host, port = split_hop(destination, "Host")
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


def _read_args(args: list[str]) -> tuple[dict[str, Any], str | None, int]:
    """Return the options read from ssh's argv, its destination (None if absent) and the destination's index."""
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
    return opts, destination, i


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
