"""Metric-profile declarations: TOML files that map an exporter family's names and labels to signals.

A profile file (see `builtin/*.toml`; a team puts its own in a folder named by `STEPWISE_PROFILE_DIRS`)::

    name = "team-trainer"                      # a profile; a file without `name` is a fragment to include
    title = "PyTorch trainer + DCGM"
    vendor = "nvidia"                          # "nvidia", "amd" or "" (no GPU exporter)
    anchors = ["train_loss"]                   # any of these present identifies the family
    gpu_model_label = "modelName"              # label naming the GPU model, optional
    gpu_model_metric = "x_gpu_info"            # the metric carrying it (default: the GPU signals' own)
    include = ["node_exporter"]                # fragments (other files' stems) merged first

    [exporters.trainer]                        # one scrape target family
    anchor = "train_loss"                      # a metric it always exports (prefix, labels, jobs are read from it)
    scope = "job"                              # "job": rank 0's gauges; default: per host
    host_labels = ["hostname"]                 # the first label its series carry names the host, else `instance`
    join_uname = true                          # `instance` by address -> node_uname_info{nodename}
    gpu_label = "gpu"  match = 'x="y"'  prefixes = ["", "amd_"]  jobs = ["trainer"]  fill_filter = "metric"
    gpu_index = { value = "x_index", info = "x_gpu_info", label = "index" }
                                               # gpu_label names a GPU (a uuid) but not its index: the index
                                               # is the value of `value`{gpu_label}, else the `label` of
                                               # `info`{gpu_label} (the first the TSDB holds; neither: the
                                               # gpu_label's own value stands as the GPU's name)

    [signals]                                  # semantic signal -> how this family exports it
    loss = { exporter = "trainer", metric = "train_loss" }
    gpu_power = { exporter = "x", metrics = ["a", "b"] }   # gauge: the first present; counter: their sum
    gpu_util = { exporter = "x", metrics = ["pct", "ratio"], scales = [1.0, 100.0] }  # per alternative
    mem_used = { exporter = "x", metric = "a", expr = "a - b", more = ["b"] }
    up = { exporter = "x", target = "up" }     # Prometheus' own per-target series of that exporter's jobs
    rdma_ack_timeouts = { exporter = "node", metric = "a_total", suffixes = ["local_ack_timeout_err"] }
                                               # a counter: also every metric of the TSDB named
                                               # `<any prefix>_local_ack_timeout_err[_total]`, summed
    kernel_activity = { exporter = "node", metrics = ["a_total"], fallback = ["b_total"] }
                                               # a counter: b_total only when the TSDB holds none of
                                               # its metrics (a costlier or less direct stand-in)

Every key is checked: an unknown key, signal, exporter or aggregation, or a wrong type, raises
ProfileError naming the file and the item.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._signal import _SIGNAL_INFO, ProfileError

__all__ = ["ExporterSpec", "ProfileSpec", "SignalSpec", "load_specs", "parse_spec"]

_TOP_KEYS = {
    "name",
    "title",
    "vendor",
    "anchors",
    "gpu_model_label",
    "gpu_model_metric",
    "include",
    "exporters",
    "signals",
}
_EXPORTER_KEYS = {
    "anchor",
    "scope",
    "host_labels",
    "join_uname",
    "gpu_label",
    "match",
    "prefixes",
    "jobs",
    "fill_filter",
    "gpu_index",
}
_GPU_INDEX_KEYS = {"value", "info", "label"}
_SIGNAL_KEYS = {
    "exporter",
    "metric",
    "metrics",
    "more",
    "expr",
    "match",
    "scale",
    "scales",
    "agg",
    "as_counter",
    "target",
    "host",
    "fill_filter",
    "suffixes",
    "fallback",
}
_AGGS = {"", "sum", "max", "min", "avg"}
_TARGETS = {"", "up", "scrape_duration_seconds"}
_VENDORS = {"", "nvidia", "amd"}
_METRIC = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@dataclass(frozen=True)
class ExporterSpec:
    """One scrape-target family of a profile (DCGM exporter, node_exporter, a trainer)."""

    name: str
    anchor: str
    scope: str = "host"
    host_labels: tuple[str, ...] = ()
    join_uname: bool = False
    gpu_label: str = "gpu"
    match: str = ""
    prefixes: tuple[str, ...] = ("",)
    jobs: tuple[str, ...] = ()
    fill_filter: str = ""
    gpu_index: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class SignalSpec:
    """How one semantic signal is read from one exporter."""

    name: str
    exporter: str
    metrics: tuple[str, ...] = ()
    more: tuple[str, ...] = ()
    expr: str = ""
    match: str = ""
    scale: float = 1.0
    scales: tuple[float, ...] = ()
    agg: str = ""
    as_counter: bool = False
    target: str = ""
    host: str = ""
    fill_filter: bool = True
    suffixes: tuple[str, ...] = ()
    fallback: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProfileSpec:
    """A parsed profile declaration (or a fragment when `name` is empty)."""

    name: str
    title: str
    vendor: str
    anchors: tuple[str, ...]
    gpu_model_label: str
    exporters: dict[str, ExporterSpec]
    signals: dict[str, SignalSpec]
    source: str
    include: tuple[str, ...] = ()
    needed: frozenset[str] = field(default=frozenset())
    gpu_model_metric: str = ""


def _fail(source: str, where: str, msg: str) -> ProfileError:
    return ProfileError(f"{source}: {where}: {msg}")


def _strs(value: Any, source: str, where: str, pattern: re.Pattern[str] | None = None) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(source, where, f"expected a list of strings, got {value!r}")
    if pattern is not None:
        bad = [v for v in value if v and not pattern.match(v)]
        if bad:
            raise _fail(source, where, f"not a valid name: {', '.join(bad)}")
    return tuple(value)


def _check_keys(raw: dict[str, Any], allowed: set[str], source: str, where: str) -> None:
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise _fail(
            source, where, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )


def _typed(
    raw: dict[str, Any], key: str, kind: type | tuple[type, ...], source: str, where: str, default: Any
) -> Any:
    value = raw.get(key, default)
    ok = isinstance(value, bool) if kind is bool else isinstance(value, kind) and not isinstance(value, bool)
    if not ok:
        name = kind.__name__ if isinstance(kind, type) else "a number"
        raise _fail(source, where, f"{key} must be {name}, got {value!r}")
    return value


def _exporter(name: str, raw: Any, source: str) -> ExporterSpec:
    where = f"exporter {name}"
    if not isinstance(raw, dict):
        raise _fail(source, where, "expected a table")
    _check_keys(raw, _EXPORTER_KEYS, source, where)
    anchor = _typed(raw, "anchor", str, source, where, "")
    if not _METRIC.match(anchor):
        raise _fail(source, where, f"anchor must be a metric name, got {anchor!r}")
    scope = _typed(raw, "scope", str, source, where, "host")
    if scope not in ("host", "job"):
        raise _fail(source, where, f"scope must be host or job, got {scope!r}")
    gpu_label = _typed(raw, "gpu_label", str, source, where, "gpu")
    if not _LABEL.match(gpu_label):
        raise _fail(source, where, f"gpu_label is not a label name: {gpu_label!r}")
    return ExporterSpec(
        name=name,
        anchor=anchor,
        scope=scope,
        host_labels=_strs(raw.get("host_labels", []), source, f"{where}.host_labels", _LABEL),
        join_uname=_typed(raw, "join_uname", bool, source, where, False),
        gpu_label=gpu_label,
        match=_typed(raw, "match", str, source, where, ""),
        prefixes=_strs(raw.get("prefixes", [""]), source, f"{where}.prefixes", _METRIC) or ("",),
        jobs=_strs(raw.get("jobs", []), source, f"{where}.jobs"),
        fill_filter=_typed(raw, "fill_filter", str, source, where, ""),
        gpu_index=_gpu_index(raw.get("gpu_index", {}), source, f"{where}.gpu_index"),
    )


def _gpu_index(raw: Any, source: str, where: str) -> tuple[tuple[str, str], ...]:
    """Return the GPU index's sources, in the order tried: ("", metric) for a metric whose value is the index,
    (label, metric) for an info metric whose `label` is."""
    if not isinstance(raw, dict):
        raise _fail(source, where, "expected an inline table { value = ..., info = ..., label = ... }")
    _check_keys(raw, _GPU_INDEX_KEYS, source, where)
    got = {k: _typed(raw, k, str, source, where, "") for k in _GPU_INDEX_KEYS}
    for key in ("value", "info"):
        if got[key] and not _METRIC.match(got[key]):
            raise _fail(source, where, f"{key} must be a metric name, got {got[key]!r}")
    if bool(got["info"]) != bool(got["label"]) or (got["label"] and not _LABEL.match(got["label"])):
        raise _fail(source, where, "info (a metric) and label (its label holding the index) go together")
    return tuple((lab, m) for lab, m in (("", got["value"]), (got["label"], got["info"])) if m)


def _signal(name: str, raw: Any, source: str) -> SignalSpec:
    where = f"signal {name}"
    if name not in _SIGNAL_INFO:
        near = [s for s in _SIGNAL_INFO if s.split("_")[0] == name.split("_")[0]]
        hint = f" (did you mean {', '.join(near[:4])}?)" if near else ""
        raise _fail(source, where, f"unknown signal{hint}; known: see playbooks.profiles.SIGNALS")
    if not isinstance(raw, dict):
        raise _fail(source, where, "expected an inline table { exporter = ..., metric = ... }")
    _check_keys(raw, _SIGNAL_KEYS, source, where)
    if "metric" in raw and "metrics" in raw:
        raise _fail(source, where, "give metric or metrics, not both")
    metrics = _strs(raw.get("metrics", raw.get("metric", [])), source, where, _METRIC)
    target = _typed(raw, "target", str, source, where, "")
    if target not in _TARGETS:
        raise _fail(
            source, where, f"target must be one of {', '.join(sorted(_TARGETS - {''}))}, got {target!r}"
        )
    suffixes = _strs(raw.get("suffixes", []), source, f"{where}.suffixes", _LABEL)
    if not metrics and not target and not suffixes:
        raise _fail(source, where, "needs a metric, metrics, suffixes or target")
    expr = _typed(raw, "expr", str, source, where, "")
    kind = "counter" if raw.get("as_counter") else _SIGNAL_INFO[name][2]
    if suffixes and (kind != "counter" or target or not all(suffixes)):
        raise _fail(
            source, where, "suffixes name a counter's metrics under any prefix (summed): counters only"
        )
    fallback = _strs(raw.get("fallback", []), source, f"{where}.fallback", _METRIC)
    if fallback and (kind != "counter" or not metrics or target):
        raise _fail(source, where, "fallback names a counter's metrics read when none of its metrics is")
    if expr and kind == "counter":
        raise _fail(source, where, "expr is for gauges only (a counter is rated before anything else)")
    if expr and len(metrics) != 1:
        raise _fail(source, where, "expr needs exactly one metric (more = [...] lists the others it reads)")
    agg = _typed(raw, "agg", str, source, where, "")
    if agg not in _AGGS:
        raise _fail(source, where, f"agg must be one of {', '.join(sorted(_AGGS - {''}))}, got {agg!r}")
    scale = _typed(raw, "scale", (int, float), source, where, 1.0)
    scales = _scales(raw, metrics, kind, source, where)
    host = _typed(raw, "host", str, source, where, "")
    if host and not _LABEL.match(host):
        raise _fail(source, where, f"host is not a label name: {host!r}")
    return SignalSpec(
        name=name,
        exporter=_typed(raw, "exporter", str, source, where, ""),
        metrics=metrics,
        more=_strs(raw.get("more", []), source, f"{where}.more", _METRIC),
        expr=expr,
        match=_typed(raw, "match", str, source, where, ""),
        scale=float(scale),
        scales=scales,
        agg=agg,
        as_counter=_typed(raw, "as_counter", bool, source, where, False),
        target=target,
        host=host,
        fill_filter=_typed(raw, "fill_filter", bool, source, where, True),
        suffixes=suffixes,
        fallback=fallback,
    )


def _scales(
    raw: dict[str, Any], metrics: tuple[str, ...], kind: str, source: str, where: str
) -> tuple[float, ...]:
    """Return a gauge's per-alternative factors (one a metric: the one present is read, in its own unit)."""
    value = raw.get("scales", [])
    if not isinstance(value, list) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        raise _fail(source, where, f"scales must be a list of numbers, got {value!r}")
    if value and (kind == "counter" or "expr" in raw or len(value) != len(metrics)):
        raise _fail(source, where, "scales needs a gauge's metrics = [...] alternatives, one factor each")
    return tuple(float(v) for v in value)


def _metric_name(raw: dict[str, Any], key: str, source: str) -> str:
    value = _typed(raw, key, str, source, key, "")
    if value and not _METRIC.match(value):
        raise _fail(source, key, f"not a metric name: {value!r}")
    return str(value)


def parse_spec(text: str, source: str) -> ProfileSpec:
    """Parse one profile file (a fragment has no `name`); raise ProfileError naming `source` and the item."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{source}: not valid TOML: {exc}") from None
    _check_keys(raw, _TOP_KEYS, source, "top level")
    name = _typed(raw, "name", str, source, "name", "")
    if name and not re.match(r"^[a-z0-9][a-z0-9_-]*$", name):
        raise _fail(source, "name", f"use lower-case letters, digits, - and _: {name!r}")
    vendor = _typed(raw, "vendor", str, source, "vendor", "")
    if vendor not in _VENDORS:
        raise _fail(source, "vendor", f"must be nvidia, amd or empty, got {vendor!r}")
    exporters = raw.get("exporters", {})
    signals = raw.get("signals", {})
    if not isinstance(exporters, dict) or not isinstance(signals, dict):
        raise _fail(source, "top level", "exporters and signals must be tables")
    anchors = _strs(raw.get("anchors", []), source, "anchors", _METRIC)
    if name and not anchors:
        raise _fail(source, "anchors", "a profile needs at least one anchor metric to be recognised")
    return ProfileSpec(
        name=name,
        title=_typed(raw, "title", str, source, "title", name),
        vendor=vendor,
        anchors=anchors,
        gpu_model_label=_typed(raw, "gpu_model_label", str, source, "gpu_model_label", ""),
        gpu_model_metric=_metric_name(raw, "gpu_model_metric", source),
        exporters={k: _exporter(k, v, source) for k, v in exporters.items()},
        signals={k: _signal(k, v, source) for k, v in signals.items()},
        source=source,
        include=_strs(raw.get("include", []), source, "include"),
    )


def _merge(spec: ProfileSpec, fragments: dict[str, ProfileSpec]) -> ProfileSpec:
    exporters: dict[str, ExporterSpec] = {}
    signals: dict[str, SignalSpec] = {}
    for inc in spec.include:
        if inc not in fragments:
            raise _fail(spec.source, "include", f"no fragment {inc!r}; known: {', '.join(sorted(fragments))}")
        exporters.update(fragments[inc].exporters)
        signals.update(fragments[inc].signals)
    exporters.update(spec.exporters)
    signals.update(spec.signals)
    for sig in signals.values():
        if sig.exporter not in exporters:
            raise _fail(
                spec.source,
                f"signal {sig.name}",
                f"unknown exporter {sig.exporter!r}; declared: {', '.join(sorted(exporters)) or 'none'}",
            )
        exp = exporters[sig.exporter]
        scope = _SIGNAL_INFO[sig.name][1]
        if (scope == "job") != (exp.scope == "job"):
            raise _fail(
                spec.source,
                f"signal {sig.name}",
                f"a {scope}-scope signal cannot come from the {exp.scope}-scope exporter {exp.name}",
            )
    if not signals:
        raise _fail(spec.source, "signals", "a profile needs at least one signal")
    needed = frozenset(
        p + m for s in signals.values() for m in (*s.metrics, *s.more) for p in exporters[s.exporter].prefixes
    )
    return ProfileSpec(
        name=spec.name,
        title=spec.title,
        vendor=spec.vendor,
        anchors=spec.anchors,
        gpu_model_label=spec.gpu_model_label,
        gpu_model_metric=spec.gpu_model_metric,
        exporters=exporters,
        signals=signals,
        source=spec.source,
        include=spec.include,
        needed=needed,
    )


def load_specs(dirs: list[Path]) -> dict[str, ProfileSpec]:
    """Return {name: merged ProfileSpec} from every *.toml of `dirs` (fragments are included, not returned)."""
    parsed: list[ProfileSpec] = []
    for d in dirs:
        if not d.is_dir():
            raise ProfileError(f"{d}: profile folder not found (STEPWISE_PROFILE_DIRS)")
        for path in sorted(d.glob("*.toml")):
            parsed.append(parse_spec(path.read_text(encoding="utf-8"), str(path)))
    fragments = {Path(s.source).stem: s for s in parsed if not s.name}
    out: dict[str, ProfileSpec] = {}
    for spec in parsed:
        if not spec.name:
            continue
        if spec.name in out:
            raise ProfileError(
                f"{spec.source}: profile {spec.name!r} is already declared in {out[spec.name].source}"
            )
        out[spec.name] = _merge(spec, fragments)
    return out
