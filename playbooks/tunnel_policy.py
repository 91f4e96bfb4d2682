"""Which SSH tunnels may be opened: head and jump hosts, SSH ports, Prometheus ports, key folder.

`TunnelSpec` already guarantees that no value can become an ssh option and that the forward's remote
end is the head node's own loopback. This policy adds what an operator decides (plain Python; the web
app builds it from its settings and checks every spec when it is stored and again before ssh runs):

- `hosts`: the head nodes and jump hosts a tunnel may reach; exact names, shell patterns
  (`gpu-*.cluster.example.org`), IP addresses or CIDR ranges. Names are compared as written, never
  resolved. Empty: no tunnel may be opened.
- `ssh_ports`: the SSH ports of the head node and of every jump host (default 22 when the spec names none).
- `remote_ports`: the Prometheus ports a tunnel may forward to on the head node.
- `keys_dir`: the only folder an identity or known_hosts file may come from (after resolving symlinks).
"""

from __future__ import annotations

import fnmatch
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ._tunnel_spec import TunnelError, TunnelSpec, split_hop

DEFAULT_SSH_PORT = 22


def parse_ports(text: str | Iterable[str], what: str) -> frozenset[int]:
    """Return the ports of "22,2200-2210" (or of a list of such items); ValueError naming `what`."""
    items = text.split(",") if isinstance(text, str) else list(text)
    ports: set[int] = set()
    for raw in items:
        item = str(raw).strip()
        if not item:
            continue
        low, sep, high = item.partition("-")
        try:
            first, last = int(low), int(high) if sep else int(low)
        except ValueError:
            raise ValueError(f"{what}: {item!r} is not a port or a range of ports (9090-9199)") from None
        if not 1 <= first <= last <= 65535:
            raise ValueError(f"{what}: {item!r} is not a port range within 1-65535")
        ports.update(range(first, last + 1))
    return frozenset(ports)


def _host_matches(host: str, pattern: str) -> bool:
    pattern = pattern.strip().lower()
    host = host.lower().rstrip(".")
    try:
        network = ipaddress.ip_network(pattern, strict=False)
    except ValueError:
        return fnmatch.fnmatchcase(host, pattern.rstrip("."))
    try:
        return ipaddress.ip_address(host) in network
    except ValueError:
        return False  # a name is never resolved to match an address rule


@dataclass(frozen=True)
class TunnelPolicy:
    """The operator's allow-list for SSH tunnels (see the module docstring)."""

    hosts: tuple[str, ...] = ()
    ssh_ports: frozenset[int] = frozenset({DEFAULT_SSH_PORT})
    remote_ports: frozenset[int] = frozenset(range(9090, 9200))
    keys_dir: str | None = None

    def _host(self, host: str, what: str) -> None:
        if not self.hosts:
            raise TunnelError(
                "SSH tunnels are off: no head node or jump host is allowed (an administrator lists them in "
                "STEPWISE_TUNNEL_HOSTS)."
            )
        if not any(_host_matches(host, p) for p in self.hosts):
            raise TunnelError(
                f"{what} {host} is not in the tunnel allow-list ({', '.join(self.hosts)}); ask an "
                "administrator to add it to STEPWISE_TUNNEL_HOSTS."
            )

    def _ssh_port(self, port: int | None, what: str) -> None:
        if (port or DEFAULT_SSH_PORT) not in self.ssh_ports:
            raise TunnelError(
                f"SSH port {port or DEFAULT_SSH_PORT} of {what} is not allowed (STEPWISE_TUNNEL_SSH_PORTS)."
            )

    def _key(self, path: str | None, what: str) -> None:
        if path is None:
            return
        if not self.keys_dir:
            raise TunnelError(
                f"{what} {path} is refused: no key folder is configured (STEPWISE_TUNNEL_KEYS_DIR)."
            )
        real, folder = Path(os.path.realpath(path)), Path(os.path.realpath(self.keys_dir))
        if real == folder or not real.is_relative_to(folder):
            raise TunnelError(f"{what} {path} is outside the key folder {folder} (STEPWISE_TUNNEL_KEYS_DIR).")

    def check(self, spec: TunnelSpec) -> TunnelSpec:
        """Return `spec` if every hop, port and file it names is allowed; TunnelError naming the first that is not."""
        self._host(spec.host, "Head node")
        self._ssh_port(spec.ssh_port, f"head node {spec.host}")
        for hop in spec.jump:
            _user, host, port = split_hop(hop, "Jump host")
            self._host(host, "Jump host")
            self._ssh_port(port, f"jump host {host}")
        if spec.remote_port not in self.remote_ports:
            raise TunnelError(
                f"Prometheus port {spec.remote_port} is not one a tunnel may forward to "
                "(STEPWISE_TUNNEL_PROMETHEUS_PORTS)."
            )
        self._key(spec.identity_file, "Identity file")
        self._key(spec.known_hosts_file, "Known hosts file")
        return spec
