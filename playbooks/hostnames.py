"""One name per host (#10): the scheduler's, else the exporters' shortest.

The exporters of one job may name a node differently: DCGM by its `Hostname` (`gpu-238`), node_exporter
by the FQDN it is scraped at (`gpu-238.cluster.internal:9100`) or the one node_uname_info reports, and the
scheduler's node list by its short name. A host has one name: the log's (the scheduler's) when it has
one, else the name without a domain an exporter gives it. An FQDN whose first label is such a known name
IS that host; an IP address is never cut at its dots. `canonical_names` says which names to rename and
`rename_outputs` applies it to the playbooks' results before anything is judged, so that every finding,
its evidence and the culprits name each host once, and signals of two exporters meet on one host.
`HostNames` (`host_names`) is the same naming for whatever shows a host later (the timeline, the
comparison): each name a source holds -> the one name, and back (PromQL must still select by the
exporter's own label values), including an `instance` scraped by address that node_uname_info names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "HostNames",
    "address_note",
    "canonical_names",
    "host_names",
    "rename_outputs",
    "result_hosts",
    "is_ipv4",
    "same_host",
    "short_name",
    "unnamed_addresses",
    "without_port",
]

_IPV4 = re.compile(r"^[0-9]{1,3}(?:\.[0-9]{1,3}){3}$")
#: `instance` without its port (host names, IPv4, bracketed IPv6), as the profiles' PromQL strips it.
_PORT = re.compile(r"^(.+?)(?::[0-9]+)?$", re.DOTALL)


def is_ipv4(name: str) -> bool:
    """Return True if `name` is a bare IPv4 address (a target no node name joins)."""
    return bool(_IPV4.match(name))


def without_port(instance: str) -> str:
    """Return a scrape address without its port (`gpu-238.cluster.internal:9100` -> `gpu-238.cluster.internal`)."""
    return _PORT.sub(r"\1", instance)


def short_name(name: str) -> str:
    """Return the first label of a DNS name (`gpu-238.cluster.internal` -> `gpu-238`); an IP address whole."""
    if _IPV4.match(name) or ":" in name:
        return name
    return name.split(".", 1)[0]


def same_host(a: str, b: str) -> bool:
    """Return True when `a` and `b` name one host: equal, or one is the other's FQDN."""
    return a == b or (short_name(a) == short_name(b) and (short_name(a) in (a, b)))


def unnamed_addresses(hosts: Iterable[str], nodes: Iterable[str] = ()) -> list[str]:
    """Return the `hosts` that are bare addresses and not the log's `nodes`: an exporter scraped at an
    address (a Kubernetes pod's IP) that no identity series or log line joined to its node's name."""
    known = {without_port(str(n)) for n in nodes if n}
    return [h for h in hosts if is_ipv4(without_port(h)) and without_port(h) not in known]


def address_note(addresses: list[str]) -> str:
    """Return the sentence saying that `addresses` (`unnamed_addresses`) name no node: what was looked for,
    and where the node is found instead (a guess between the nodes would send someone to drain the wrong one)."""
    one = len(addresses) == 1
    return (
        f"{', '.join(addresses)} {'is the address' if one else 'are the addresses'} a GPU or host exporter "
        f"was scraped at (a pod's or a node's IP), not a node name: neither this TSDB (no `Hostname`, `hostname` "
        f"or `node` label, no node_uname_info at the same address) nor the log ties {'it' if one else 'them'} "
        f"to a node; find {'its node' if one else 'their nodes'} in the cluster (`kubectl get pods -A -o wide`)."
    )


def canonical_names(hosts: Iterable[str], nodes: Iterable[str] = ()) -> dict[str, str]:
    """Return {TSDB name: canonical name} for the `hosts` that another name names better.

    `nodes` are the scheduler's names (the log's node list): they win. Else a TSDB name without a domain
    is the host's name, and the FQDNs whose first label it is are renamed to it. An FQDN whose first
    label no one knows keeps its name (there is nothing to say it is any other host).
    """
    known: dict[str, str] = {}
    for n in nodes:
        if n:
            known.setdefault(short_name(str(n)), str(n))
    hosts = [h for h in hosts if h]
    for h in hosts:
        if short_name(h) == h:
            known.setdefault(h, h)
    out = {}
    for h in hosts:
        name = known.get(short_name(h), h)
        if name != h and same_host(name, h):
            out[h] = name
    return out


def _renamed_labels(labels: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    host = labels.get("host")
    return {**labels, "host": names[host]} if isinstance(host, str) and host in names else dict(labels)


def _key(labels: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in labels.items()))


def _rename_result(data: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """Rename the hosts of one query's result; series that now share their labels become one (the first
    series' point where it has one, the other's where it has none), instant samples keep the first."""
    out = dict(data)
    if data.get("kind") == "range":
        merged: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
        for s in data.get("series", []):
            labels = _renamed_labels(s.get("labels", {}), names)
            prev = merged.get(_key(labels))
            if prev is None:
                merged[_key(labels)] = {**s, "labels": labels, "values": list(s.get("values", []))}
            else:
                prev["values"] = [
                    a if a is not None else b for a, b in zip(prev["values"], s["values"], strict=True)
                ]
        out["series"] = list(merged.values())
    elif "samples" in data:
        seen: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
        for s in data.get("samples", []):
            labels = _renamed_labels(s.get("labels", {}), names)
            seen.setdefault(_key(labels), {**s, "labels": labels})
        out["samples"] = list(seen.values())
    return out


def result_hosts(results: Mapping[str, Any]) -> set[str]:
    """Return every host a playbook's `results` (query name -> result dict) names in a series or sample."""
    out: set[str] = set()
    for data in results.values():
        if isinstance(data, Mapping):
            for s in [*data.get("series", []), *data.get("samples", [])]:
                host = s.get("labels", {}).get("host")
                if isinstance(host, str) and host:
                    out.add(host)
    return out


def rename_outputs(results: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """Return a playbook's `results` (query name -> result dict) with every host named by `names`."""
    if not names:
        return dict(results)
    return {k: _rename_result(v, names) if isinstance(v, Mapping) else v for k, v in results.items()}


@dataclass(frozen=True)
class HostNames:
    """Every name a source knows each host by, and the one name shown for it.

    Attributes:
        tsdb: {host label value the profiles' PromQL gives (DCGM's `gpu-238`, node_exporter's
            `gpu-238.cluster.internal`, a node_uname_info nodename): its one name}, every host of the source.
        raw: {exporter label value that is no such host name (`gpu-238.cluster.internal:9100`, an address
            `10.0.3.17:9100` / `10.0.3.17` that node_uname_info names): its one name}.
    """

    tsdb: Mapping[str, str] = field(default_factory=dict)
    raw: Mapping[str, str] = field(default_factory=dict)

    def name(self, value: str) -> str:
        """Return the one name of a host named `value` (any of its names or label values); an unknown
        value as it is (a label value is data: `host:9100` that no host is named by stays whole)."""
        forms = (value, without_port(value))
        for names in (self.tsdb, self.raw):
            found = next((names[v] for v in forms if v in names), None)
            if found is not None:
                return found
        return value

    def knows(self, value: str) -> bool:
        """Return True when `value` (or it without its port) is one of the source's names of a host."""
        return any(v in self.tsdb or v in self.raw for v in (value, without_port(value)))

    def aliases(self, value: str) -> tuple[str, ...]:
        """Return the host label values the source's PromQL gives the host `value` names (its one name
        first, when the source holds it): what a host filter typed as any of its names selects.

        A name the source does not hold is matched as an FQDN of a known name or the reverse (`gpu-7`
        finds `gpu-7.cluster.internal`); nothing matching, `value` alone."""
        one = self.name(value)
        found = [h for h, n in self.tsdb.items() if n == one]
        if not found:
            found = [h for h in self.tsdb if same_host(h, value) or same_host(h, one)]
        if not found:
            return (value,)
        return tuple(sorted(set(found), key=lambda h: (h != one, h)))

    def select(self, values: Iterable[str]) -> tuple[str, ...]:
        """Return every alias of each of `values` (`aliases`), each once, in order."""
        return tuple(dict.fromkeys(a for v in values for a in self.aliases(v)))

    def renames(self) -> dict[str, str]:
        """Return {host label value: its one name} for the values named otherwise (`rename_outputs`)."""
        return {h: n for h, n in self.tsdb.items() if h != n}


def host_names(
    hosts: Iterable[str], nodes: Iterable[str] = (), uname: Iterable[tuple[str, str]] = ()
) -> HostNames:
    """Return the naming of a source's hosts (`canonical_names`, the diagnosis's own).

    `hosts` are the host label values the profiles' PromQL gives (the source's host list: the diagnosis
    names the same hosts alike), `nodes` the scheduler's names, `uname` node_uname_info's (instance,
    nodename) pairs: an address no host is named by (`10.0.3.17:9100`) is the host its node names itself.
    """
    known = list(dict.fromkeys(str(h) for h in hosts if h))
    renames = canonical_names(known, [str(n) for n in nodes if n])
    tsdb = {h: renames.get(h, h) for h in known}
    raw: dict[str, str] = {}
    for instance, nodename in uname:
        if instance and nodename and without_port(str(instance)) not in tsdb:
            for value in (str(instance), without_port(str(instance))):
                raw.setdefault(value, tsdb.get(str(nodename), str(nodename)))
    return HostNames(tsdb, raw)
