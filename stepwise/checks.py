"""System checks for Stepwise's own settings, and the parser of the Prometheus allow-list.

Registered by InvestigationsConfig.ready(); `manage.py check` (and every command that runs checks,
such as runserver and migrate) reports them with the ids below:

- stepwise.E001  the Celery broker URL has a scheme Stepwise does not support
- stepwise.E002  an STEPWISE_ALLOWED_PROMETHEUS entry does not parse
- stepwise.W003  a STEPWISE_JOB_ROOTS folder does not exist (the default demo root excepted)
- stepwise.W004  the Prometheus binary (STEPWISE_PROMETHEUS_BIN) is not installed
- stepwise.E005  CELERY_TASK_ALWAYS_EAGER is on (tasks would run inside the web request)
- stepwise.W006  the ssh client (STEPWISE_SSH_BIN) is not installed: SSH-tunnel sources cannot open
- stepwise.E007  STEPWISE_TUNNEL_SSH_PORTS or STEPWISE_TUNNEL_PROMETHEUS_PORTS is not a list of ports/ranges
"""

from __future__ import annotations

import ipaddress
import re
import shutil
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.core import checks

BROKER_SCHEMES = ("redis", "rediss", "filesystem")
_HOSTNAME_RE = re.compile(
    r"\A(?=.{1,253}\Z)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*\Z"
)

type _Address = ipaddress.IPv4Address | ipaddress.IPv6Address
type _Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class AllowRule:
    """One parsed STEPWISE_ALLOWED_PROMETHEUS entry.

    Attributes:
        entry: the entry as written.
        host: a lower-case hostname, or None for an IP or a network.
        network: the IP network (a single address is a /32 or /128), or None for a hostname.
        port: the only port allowed, or None for any port.
        port_last: the last port of a range `host:first-last` (None: `port` alone).
    """

    entry: str
    host: str | None
    network: _Network | None
    port: int | None
    port_last: int | None = None

    def allows(self, host: str, port: int) -> bool:
        """Return True when `host` (hostname or IP literal, no brackets) and `port` match this rule."""
        if self.port is not None and not self.port <= port <= (self.port_last or self.port):
            return False
        address = _ip(host)
        if self.network is not None:
            return address is not None and address in self.network
        return address is None and host.lower().rstrip(".") == self.host


def _ip(text: str) -> _Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def allow_rule_parse(entry: str) -> AllowRule:
    """Return the rule for one allow-list entry: host, host:port, [v6]:port, IP or CIDR.

    Raises ValueError with a sentence saying what is wrong.
    """
    text = entry.strip()
    if "://" in text or ("/" in text and not _is_cidr(text)):
        raise ValueError(f"{entry!r} is not a host, host:port or CIDR (leave out the scheme and path)")
    if "/" in text:
        return AllowRule(entry, None, ipaddress.ip_network(text, strict=False), None)
    ports: tuple[int | None, int | None] = (None, None)
    host = text
    if text.startswith("["):
        inner, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"{entry!r}: write an IPv6 address with a port as [addr]:port")
        host, ports = inner, _ports(entry, rest[1:]) if rest else (None, None)
    elif text.count(":") == 1:
        host, port_text = text.split(":")
        ports = _ports(entry, port_text)
    port, port_last = ports
    address = _ip(host)
    if address is not None:
        return AllowRule(entry, None, ipaddress.ip_network(address), port, port_last)
    if text.startswith("[") or ":" in host:
        raise ValueError(f"{entry!r}: {host!r} is not an IP address")
    name = host.lower().rstrip(".")
    if not _HOSTNAME_RE.match(name):
        raise ValueError(f"{entry!r}: {host!r} is not a valid hostname")
    return AllowRule(entry, name, None, port, port_last)


def _is_cidr(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True


def _ports(entry: str, text: str) -> tuple[int, int | None]:
    """Return (first, last) of "9090" (last None) or "9090-9199"."""
    first, sep, last = text.partition("-")
    if not sep:
        return _port(entry, first), None
    low, high = _port(entry, first), _port(entry, last)
    if high < low:
        raise ValueError(f"{entry!r}: the port range {text!r} ends before it starts")
    return low, high


def _port(entry: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{entry!r}: {text!r} is not a port number (1-65535)")
    return int(text)


def allow_rules() -> list[AllowRule]:
    """Return the rules of settings.STEPWISE_ALLOWED_PROMETHEUS, skipping entries that do not parse.

    Skipped entries allow nothing; stepwise.E002 reports them.
    """
    rules = []
    for entry in settings.STEPWISE_ALLOWED_PROMETHEUS:
        try:
            rules.append(allow_rule_parse(entry))
        except ValueError:
            continue
    return rules


def check_broker(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    scheme = urlsplit(settings.CELERY_BROKER_URL).scheme
    if scheme in BROKER_SCHEMES:
        return []
    return [
        checks.Error(
            f"The Celery broker URL has the scheme {scheme!r}.",
            hint="Set REDIS_URL to redis://host:6379/0 (or rediss:// for TLS), or unset it to use the "
            "embedded filesystem broker.",
            id="stepwise.E001",
        )
    ]


def check_allowed_prometheus(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    for entry in settings.STEPWISE_ALLOWED_PROMETHEUS:
        try:
            allow_rule_parse(entry)
        except ValueError as exc:
            errors.append(
                checks.Error(
                    f"STEPWISE_ALLOWED_PROMETHEUS: {exc}.",
                    hint="Use a comma-separated list of host, host:port, [IPv6]:port or CIDR "
                    "(for example 127.0.0.1,prometheus:9090,10.0.0.0/8).",
                    id="stepwise.E002",
                )
            )
    return errors


def check_job_roots(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    # The default demo root appears with the first `manage.py rundemo`: not worth a warning before.
    return [
        checks.Warning(
            f"The job root {str(root)!r} does not exist.",
            hint="Create it, or fix STEPWISE_JOB_ROOTS (folders separated by ':'). "
            "`manage.py rundemo` creates the default demo root.",
            id="stepwise.W003",
        )
        for root in settings.STEPWISE_JOB_ROOTS
        if not root.is_dir() and root != settings.STEPWISE_DEMO_JOBS
    ]


def check_prometheus_bin(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    if shutil.which(settings.STEPWISE_PROMETHEUS_BIN):
        return []
    return [
        checks.Warning(
            f"The Prometheus binary {settings.STEPWISE_PROMETHEUS_BIN!r} was not found; "
            "job TSDBs cannot be served.",
            hint="Install it (apt-get install prometheus) or set STEPWISE_PROMETHEUS_BIN to its path.",
            id="stepwise.W004",
        )
    ]


def check_ssh_bin(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    if shutil.which(settings.STEPWISE_SSH_BIN):
        return []
    return [
        checks.Warning(
            f"The ssh client {settings.STEPWISE_SSH_BIN!r} was not found; SSH-tunnel data sources cannot open.",
            hint="Install it (apt-get install openssh-client) or set STEPWISE_SSH_BIN to its path.",
            id="stepwise.W006",
        )
    ]


def check_not_eager(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    if not getattr(settings, "CELERY_TASK_ALWAYS_EAGER", False):
        return []
    return [
        checks.Error(
            "CELERY_TASK_ALWAYS_EAGER is on: query runs would execute inside the web request.",
            hint="Remove it; tests call tasks directly instead.",
            id="stepwise.E005",
        )
    ]


def check_tunnel_ports(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    from playbooks.tunnel_policy import parse_ports

    errors: list[checks.CheckMessage] = []
    for name in ("STEPWISE_TUNNEL_SSH_PORTS", "STEPWISE_TUNNEL_PROMETHEUS_PORTS"):
        try:
            parse_ports(getattr(settings, name), name)
        except ValueError as exc:
            errors.append(checks.Error(f"{exc}.", hint="For example 22,2200-2210.", id="stepwise.E007"))
    return errors


def register() -> None:
    """Register every Stepwise check under the tag "stepwise"."""
    for check in (
        check_broker,
        check_allowed_prometheus,
        check_job_roots,
        check_prometheus_bin,
        check_ssh_bin,
        check_not_eager,
        check_tunnel_ports,
    ):
        checks.register(check, "stepwise")
