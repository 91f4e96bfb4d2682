"""What ssh's stderr says about a tunnel that failed, in words a user can act on.

ssh writes its stderr to the tunnel entry's ssh.log; `explain` matches it against what ssh says for each
known failure (refused login, unknown host key, nothing listening, ...) and names the cause.
"""

from __future__ import annotations

from pathlib import Path

from ._tunnel_spec import TunnelSpec

#: ssh's stderr, in the tunnel's entry directory.
SSH_LOG = "ssh.log"


def stderr_tail(entry: Path, lines: int = 12) -> str:
    """Return the last `lines` non-blank lines of the tunnel's ssh.log ("" if there is none)."""
    try:
        text = (entry / SSH_LOG).read_text(errors="replace")
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


def last_reason(tail: str) -> str:
    """Return ssh's last useful line (warnings and debug output skipped)."""
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(("Warning:", "debug"))] or lines
    return useful[-1][:300] if useful else "(no output)"


def explain(spec: TunnelSpec, tail: str, fallback: str) -> str:
    """Return why the tunnel failed, in the user's words: what ssh's stderr means, else `fallback`."""
    remote = f"{spec.remote_host}:{spec.remote_port}"
    key = f" {spec.identity_file}" if spec.identity_file else ""
    for pattern, meaning in _DIAGNOSES:
        if pattern in tail:
            hint = meaning.format(host=spec.host, user=spec.user or "(default user)", key=key, remote=remote)
            line = next((ln.strip() for ln in reversed(tail.splitlines()) if pattern in ln), "")
            return f"SSH tunnel to {spec.describe()}: {hint} (ssh: {line[:300]})"
    return f"SSH tunnel to {spec.describe()}: {fallback} (ssh: {last_reason(tail)})"
