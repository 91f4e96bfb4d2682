"""One name per host (#10): the scheduler's, else the exporters' shortest.

The exporters of one job may name a node differently: DCGM by its `Hostname` (`gpu-238`), node_exporter
by the FQDN it is scraped at (`gpu-238.cluster.internal:9100`) or the one node_uname_info reports, and the
scheduler's node list by its short name. A host has one name: the log's (the scheduler's) when it has
one, else the name without a domain an exporter gives it. An FQDN whose first label is such a known name
IS that host; an IP address is never cut at its dots. `canonical_names` says which names to rename and
`rename_outputs` applies it to the playbooks' results before anything is judged, so that every finding,
its evidence and the culprits name each host once, and signals of two exporters meet on one host.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["canonical_names", "rename_outputs", "result_hosts", "same_host", "short_name"]

_IPV4 = re.compile(r"^[0-9]{1,3}(?:\.[0-9]{1,3}){3}$")


def short_name(name: str) -> str:
    """Return the first label of a DNS name (`gpu-238.cluster.internal` -> `gpu-238`); an IP address whole."""
    if _IPV4.match(name) or ":" in name:
        return name
    return name.split(".", 1)[0]


def same_host(a: str, b: str) -> bool:
    """Return True when `a` and `b` name one host: equal, or one is the other's FQDN."""
    return a == b or (short_name(a) == short_name(b) and (short_name(a) in (a, b)))


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
