"""Turn a profile declaration into the `Profile` of one TSDB: which host label, job names, prefix, metric.

The same exporter is deployed differently from one cluster to the next (DCGM's host label is `Hostname`,
`hostname` or absent; node_exporter is scraped by name or by address; the scrape job is whatever the
deployer called it; AMD's exporter may prefix every field). `read_facts(client, spec, names)` asks the
TSDB (a few label queries) and returns the choices as a small string mapping; `build(spec, choices)`
makes the Profile. The choices travel inside the profile's name (`nvidia@dcgm.host=hostname&...`), so
that a task on another worker rebuilds the very same Profile from `PROFILES[name]`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode

from ._declared import ExporterSpec, ProfileSpec, SignalSpec
from ._signal import _SIGNAL_INFO, Profile, ProfileError, Signal, _regex_literal

if TYPE_CHECKING:  # the client imports the profiles: only its type is needed here
    from playbooks.prometheus import PrometheusClient

__all__ = ["build", "decode_name", "encode_name", "read_facts"]

_ADDRESS = re.compile(r"^(.+?)(?::[0-9]+)?$")
_METRIC = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
#: labels that name a GPU by its physical identity (DCGM's `UUID`, nvidia_gpu_exporter's `uuid`)
_GPU_IDS = ("UUID", "uuid", "gpu_uuid")


def encode_name(base: str, choices: Mapping[str, str]) -> str:
    return f"{base}@{urlencode(sorted(choices.items()))}" if choices else base


def decode_name(name: str) -> tuple[str, dict[str, str]]:
    base, _, query = name.partition("@")
    return base, dict(parse_qsl(query, keep_blank_values=False))


def _address(instance: str) -> str:
    m = _ADDRESS.match(instance)
    return m.group(1) if m else instance


def _job_matcher(jobs: Iterable[str]) -> str:
    jobs = sorted(set(jobs))
    if len(jobs) == 1:
        return f'job="{jobs[0]}"'
    return 'job=~"' + "|".join(re.sub(r"([.+*?()\[\]{}|^$\\])", r"\\\\\1", j) for j in jobs) + '"'


def _selector(metric: str, matchers: Iterable[str]) -> str:
    ms = [m for m in matchers if m]
    return f"{metric}{{{', '.join(ms)}}}" if ms else metric


def _host_of(exp: ExporterSpec, sig: SignalSpec, choices: Mapping[str, str]) -> tuple[str, str]:
    """Return (host_from, host_join) for a signal of `exp`."""
    if sig.host:
        return sig.host, ""
    host = choices.get(f"{exp.name}.host") or (",".join(exp.host_labels[:1]) or "instance")
    if host == "uname":
        return "instance", "uname"
    return host, ""


def _target(sig: SignalSpec, exp: ExporterSpec, choices: Mapping[str, str], host: str, join: str) -> str:
    jobs = [j for j in choices.get(f"{exp.name}.jobs", "").split(",") if j] or list(exp.jobs)
    if not jobs:
        raise ProfileError(f"{sig.name}: the {exp.name} exporter's scrape jobs are unknown")
    sel = _selector(sig.target, [_job_matcher(jobs)])
    if join or host == "instance":
        return sel
    # The exporter names its host in a label its targets' own series lack: borrow it from the anchor,
    # one name per target (a restarted exporter pod may have carried two), never many-to-many. The names of
    # the last hour are read from the per-target groups at a 1-minute resolution (a subquery): reading every
    # GPU's samples of the hour at every step cost a hundred times more.
    prefix = choices.get(f"{exp.name}.prefix", exp.prefixes[0])
    anchor = _selector(prefix + exp.anchor, [exp.match])
    labels = host.split(",")
    first = labels[0]
    return (
        f"max by (instance, job, {first}) ({sel} * on (instance, job) group_left ({first}) "
        f"topk by (instance, job) (1, last_over_time(group by (instance, job, {first}) ({anchor})[1h:1m])))"
    )


def _one(spec: ProfileSpec, sig: SignalSpec, choices: Mapping[str, str]) -> Signal | None:
    exp = spec.exporters[sig.exporter]
    prefix = choices.get(f"{exp.name}.prefix", exp.prefixes[0])
    host, join = _host_of(exp, sig, choices)
    kind = "counter" if sig.as_counter else _SIGNAL_INFO[sig.name][2]
    matchers = (exp.match, sig.match)
    scale = sig.scale
    if sig.target:
        try:
            selector = _target(sig, exp, choices, host, join)
        except ProfileError:
            return None
        if not join and host != "instance":
            host = host.split(",")[0]
        metrics: tuple[str, ...] = (sig.target,)
    elif sig.expr:
        selector, metrics = sig.expr, (prefix + sig.metrics[0], *(prefix + m for m in sig.more))
    elif kind == "counter" and (len(sig.metrics) > 1 or f"also.{sig.name}" in choices):
        also = [m for m in choices.get(f"also.{sig.name}", "").split(",") if _METRIC.match(m)]
        metrics = tuple(dict.fromkeys([prefix + m for m in sig.metrics] + also))
        selector = " | ".join(_selector(m, matchers) for m in metrics)
    elif not sig.metrics:
        return None  # named by suffixes only, none of which this TSDB holds
    else:
        chosen = choices.get(f"pick.{sig.name}") or sig.metrics[0]
        metrics = (prefix + chosen,)
        selector = _selector(prefix + chosen, matchers)
        if sig.scales:
            scale *= sig.scales[sig.metrics.index(chosen)]
    fill = exp.fill_filter if (sig.fill_filter and exp.fill_filter) else ""
    pairs = [p.split(":", 1) for p in choices.get(f"{exp.name}.alias", "").split(",") if ":" in p]
    alias = tuple((old, new) for old, new in pairs)
    return Signal(
        sig.name,
        selector,
        metrics,
        host_from=host,
        gpu_from=exp.gpu_label if _SIGNAL_INFO[sig.name][1] == "gpu" else "",
        scale=scale,
        agg=sig.agg,
        fill_filter=fill,
        as_counter=sig.as_counter,
        host_join=join,
        host_alias=alias if not sig.host else (),
        gpu_index=_gpu_index(exp, choices) if _SIGNAL_INFO[sig.name][1] == "gpu" else (),
    )


def _gpu_index(exp: ExporterSpec, choices: Mapping[str, str]) -> tuple[str, ...]:
    """Return the GPU index source this TSDB holds ((label, metric), see `Signal.gpu_index`), else ()."""
    if not exp.gpu_index:
        return ()
    chosen = choices.get(f"{exp.name}.gpu_index", exp.gpu_index[0][1])
    return next((src for src in exp.gpu_index if src[1] == chosen), ())


def build(spec: ProfileSpec, choices: Mapping[str, str] | None = None) -> Profile:
    """Return the Profile of `spec` with the per-TSDB `choices` of `read_facts` (none: the declared defaults)."""
    choices = dict(choices or {})
    signals = {}
    for sig in spec.signals.values():
        built = _one(spec, sig, choices)
        if built is not None:
            signals[sig.name] = built
    prefixes = {p for e in spec.exporters.values() for p in e.prefixes}
    anchors = tuple(
        sorted({p + a for a in spec.anchors for p in prefixes}, key=lambda a: (a not in spec.anchors, a))
    )
    title = spec.title + (f" ({describe(choices)})" if choices else "")
    return Profile(
        name=encode_name(spec.name, choices),
        title=title,
        signals=signals,
        anchors=anchors,
        vendor=spec.vendor,
        base=spec.name,
        gpu_model_label=spec.gpu_model_label,
        gpu_model_metric=spec.gpu_model_metric,
        source=spec.source,
    )


def describe(choices: Mapping[str, str]) -> str:
    """Return the per-TSDB choices in words: "dcgm: host from hostname; node: host from node_uname_info"."""
    words = {
        "host": "host from",
        "jobs": "scrape jobs",
        "prefix": "prefix",
        "alias": "renamed",
        "gpu_index": "GPU index from",
    }
    parts = []
    for key, value in sorted(choices.items()):
        who, _, what = key.partition(".")
        if who == "pick":
            parts.append(f"{what} from {value}")
        elif who == "also":
            parts.append(f"{what} also from {value.replace(',', ', ')}")
        elif what == "host":
            parts.append(
                f"{who}: host from {'node_uname_info (scraped by address)' if value == 'uname' else value}"
            )
        else:
            parts.append(f"{who}: {words.get(what, what)} {value}")
    return "; ".join(parts)


def _uname_addresses(series: list[dict[str, str]]) -> dict[str, str]:
    return {_address(s["instance"]): s["nodename"] for s in series if s.get("instance") and s.get("nodename")}


def _renamed_targets(series: list[dict[str, str]], labels: list[str], nodenames: set[str]) -> dict[str, str]:
    """Return {old: node name} for targets whose host label changed (a restarted exporter pod named itself
    after the pod, then after the node): the earlier name is the same node, not a host that died."""
    per_target: dict[tuple[str, str], set[str]] = {}
    for s in series:
        name = next((s[lab] for lab in labels if s.get(lab)), "")
        if name:
            per_target.setdefault((s.get("job", ""), s.get("instance", "")), set()).add(name)
    alias: dict[str, str] = {}
    for names in per_target.values():
        known = names & nodenames
        if len(names) > 1 and len(known) == 1:
            node = next(iter(known))
            alias.update({n: node for n in names - known if re.match(r"^[A-Za-z0-9._-]+$", n)})
    return alias


def _same_gpus(series: list[dict[str, str]]) -> list[list[str]]:
    """Return the groups of GPU exporter addresses that report (mostly) the same GPUs, by their UUIDs (a
    physical identity): an exporter pod restarted under another address, one node before and after."""
    label = next((lab for lab in _GPU_IDS if any(s.get(lab) for s in series)), "")
    gpus: dict[str, set[str]] = {}
    for s in series:
        if label and s.get("instance") and s.get(label):
            gpus.setdefault(_address(s["instance"]), set()).add(s[label])
    groups: list[list[str]] = []
    for addr in sorted(gpus):
        same = next((g for g in groups if 2 * len(gpus[addr] & gpus[g[0]]) > len(gpus[addr])), None)
        if same is None:
            groups.append([addr])
        else:
            same.append(addr)
    return [g for g in groups if len(g) > 1 and all(re.match(r"^[A-Za-z0-9._-]+$", a) for a in g)]


def _moved_choice(
    client: PrometheusClient, metric: str, series: list[dict[str, str]], uname: Mapping[str, str] | None
) -> str:
    """Return the `alias` choice (`old:new,...`) of a GPU exporter named by its address whose pod restarted
    elsewhere (`_same_gpus`): each group's node_uname_info-named address, else the one that reported last,
    names it (one instant query over the data's span, only when such a group exists); "" for none."""
    groups = _same_gpus(series)
    if not groups:
        return ""
    last: dict[str, float] = {}
    span = client.data_time_range()
    if span is not None:
        addrs = "|".join(_regex_literal(a) for g in groups for a in g)
        width = max(int(span[1] - span[0]) + 60, 120)
        sel = _selector(metric, [f'instance=~"({addrs})(:[0-9]+)?"'])
        expr = f"max by (instance) (max_over_time(timestamp({sel})[{width}s:{max(width // 500, 15)}s]))"
        for sample in client.query(expr, at=span[1]):
            addr = _address(sample.labels.get("instance", ""))
            last[addr] = max(last.get(addr, 0.0), float(sample.value))
    pairs = []
    for group in groups:
        keep = max(group, key=lambda a: (a in (uname or {}), last.get(a, 0.0), a))
        pairs += [f"{a}:{keep}" for a in group if a != keep]
    return ",".join(sorted(pairs))


def _anchors(spec: ProfileSpec, present: set[str]) -> dict[str, tuple[str, str]]:
    """Return exporter -> (prefix, metric read for its labels): its anchor, else any metric of its signals
    the TSDB holds (a custom counter set may leave the anchor out)."""
    out = {}
    for exp in spec.exporters.values():
        names_of = [exp.anchor] + [
            m for s in spec.signals.values() if s.exporter == exp.name and not s.target for m in s.metrics
        ]
        found = next(((p, m) for m in names_of for p in exp.prefixes if p + m in present), None)
        if found is not None:
            out[exp.name] = found
    return out


def _host_choice(
    exp: ExporterSpec, series: list[dict[str, str]], uname: dict[str, str] | None, choices: dict[str, str]
) -> None:
    labels = {k for s in series for k in s}
    hosts = [h for h in exp.host_labels if h in labels]
    host = ",".join(hosts) if hosts else "instance"
    if hosts and exp.join_uname and uname:
        alias = _renamed_targets(series, hosts, set(uname.values()))
        if alias:
            choices[f"{exp.name}.alias"] = ",".join(f"{a}:{b}" for a, b in sorted(alias.items()))
    if not hosts and exp.join_uname and uname:
        addrs = {_address(s["instance"]) for s in series if s.get("instance")}
        renamed = [a for a in addrs if a in uname and uname[a] != a]
        if addrs and 2 * len(renamed) >= len(addrs):
            host = "uname"
    if host != (exp.host_labels[0] if exp.host_labels else "instance"):
        choices[f"{exp.name}.host"] = host


def _index_choice(
    client: PrometheusClient, exp: ExporterSpec, present: set[str], choices: dict[str, str]
) -> None:
    """Choose the first GPU index source the TSDB holds (an info metric: with its index label), else none
    (`-`: the GPU label's own value names the GPU)."""
    if not exp.gpu_index:
        return
    found = "-"
    for label, metric in exp.gpu_index:
        if metric in present and (not label or client.label_values(label, [metric])):
            found = metric
            break
    if found != exp.gpu_index[0][1]:
        choices[f"{exp.name}.gpu_index"] = found


def suffix_matches(sig: SignalSpec, present: Iterable[str], declared: Iterable[str] = ()) -> list[str]:
    """Return the metrics of `present` a signal's `suffixes` name (`<any prefix>_<suffix>`, optionally
    `_total`: a textfile collector's `node_rdma_hw_local_ack_timeout_err_total`, another exporter's
    `mlx5_hw_counters_local_ack_timeout_err`), but the `declared` ones (the signal's own metrics)."""
    if not sig.suffixes:
        return []
    pattern = re.compile(r"(?:^|_)(?:" + "|".join(map(re.escape, sig.suffixes)) + r")(?:_total)?$")
    skip = set(declared)
    return sorted(n for n in present if n not in skip and pattern.search(n) and _METRIC.match(n))


def read_facts(client: PrometheusClient, spec: ProfileSpec, names: Iterable[str]) -> dict[str, str]:
    """Return the choices this TSDB calls for (only those that differ from the declared defaults).

    Per exporter: its metric-name prefix; the host labels its series carry (every one present, in the
    declared order, so that nodes on two exporter releases still meet), else `instance`, joined through
    node_uname_info when the exporter is scraped by addresses that uname names otherwise; a restarted
    exporter pod's earlier host name; its scrape job names. Per gauge with alternatives: the first metric
    the TSDB holds. Per counter declared with `suffixes`: the TSDB's metrics those name, under any prefix;
    with a `fallback`: those of its fallback metrics the TSDB holds, when it holds none of its own.
    The label sets of one metric per exporter (and node_uname_info) are asked in parallel.
    """
    present = set(names)
    choices: dict[str, str] = {}
    anchors = _anchors(spec, present)
    for exp_name, (prefix, _) in anchors.items():
        if prefix != spec.exporters[exp_name].prefixes[0]:
            choices[f"{exp_name}.prefix"] = prefix
    asked = [e for e in anchors if spec.exporters[e].scope != "job"]
    metrics = [anchors[e][0] + anchors[e][1] for e in asked]
    want_uname = "node_uname_info" in present and any(spec.exporters[e].join_uname for e in asked)
    calls: list[Callable[[], Any]] = [functools.partial(client.series, [m]) for m in metrics]
    if want_uname:
        calls.append(functools.partial(client.series, ["node_uname_info"]))
    results: list[list[dict[str, str]]] = []
    for r in client.run_parallel(calls, max_concurrency=4):
        if isinstance(r, Exception):
            raise r
        results.append(r)
    uname = _uname_addresses(results[-1]) if want_uname else None
    for exp_name, metric, series in zip(asked, metrics, results, strict=False):
        exp = spec.exporters[exp_name]
        jobs = sorted({s["job"] for s in series if s.get("job")})
        if jobs and not set(jobs) <= set(exp.jobs):
            choices[f"{exp.name}.jobs"] = ",".join(jobs)
        _host_choice(exp, series, uname, choices)
        if not any(h in s for h in exp.host_labels for s in series) and exp.gpu_label:
            moved = _moved_choice(client, metric, series, uname)
            if moved:
                choices[f"{exp.name}.alias"] = moved
        _index_choice(client, exp, present, choices)
    for sig in spec.signals.values():
        exp = spec.exporters[sig.exporter]
        kind = "counter" if sig.as_counter else _SIGNAL_INFO[sig.name][2]
        prefix = choices.get(f"{exp.name}.prefix", exp.prefixes[0])
        if len(sig.metrics) > 1 and kind != "counter" and not sig.expr:
            found = next((m for m in sig.metrics if prefix + m in present), sig.metrics[0])
            if found != sig.metrics[0]:
                choices[f"pick.{sig.name}"] = found
        also = suffix_matches(sig, present, [prefix + m for m in sig.metrics])
        if not also and not any(prefix + m in present for m in sig.metrics):
            also = [prefix + m for m in sig.fallback if prefix + m in present]
        if also:
            choices[f"also.{sig.name}"] = ",".join(also)
    return choices
