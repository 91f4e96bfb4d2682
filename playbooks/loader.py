"""Load and validate the declarative playbooks of `playbooks/definitions/*.toml` (once).

Usage::

    playbooks = load_playbooks()            # {name: Playbook}, validated and cached
    pb = parse_playbook(text, source="x")   # one TOML document
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .detectors import DETECTORS
from .errors import PlaybooksError
from .model import CLASSES, ROLES, SEVERITIES, Playbook, QuerySpec, RuleSpec, WindowRule
from .profiles import SIGNALS
from .prometheus import parse_duration

__all__ = ["DEFINITIONS", "PlaybookError", "load_playbooks", "parse_playbook", "validate_set"]

DEFINITIONS = Path(__file__).with_name("definitions")

_TOP_KEYS = {"name", "title", "description", "trigger", "window", "queries", "rules"}
_QUERY_KEYS = {
    "name",
    "signal",
    "promql",
    "fn",
    "window",
    "by",
    "agg",
    "kind",
    "resolution",
    "post",
    "description",
    "peers",
    "log_hosts",
    "at_least",
}
_RULE_KEYS = {"id", "detector", "queries", "class", "severity", "role", "title", "meaning", "params"}
_AGGS = {"", "sum", "max", "min", "avg", "count", "stddev"}
_TRIGGERS = {
    "always",
    "hang",
    "heartbeat-timeout",
    "oom-host",
    "node-fail",
    "signal-kill",
    "unknown-death",
    "nccl-timeout",
    "tgs-degradation",
    "checkpoint-fs-error",
    "restore",
}


class PlaybookError(PlaybooksError):
    """A playbook declaration is malformed; str() names the file, the item and what is wrong."""


def _duration(value: Any, where: str) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return parse_duration(str(value))
    except ValueError:
        raise PlaybookError(f"{where}: {value!r} is not a duration (use 30m, 1h, 90s)") from None


def _unknown(keys: Mapping[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(keys) - allowed)
    if extra:
        raise PlaybookError(
            f"{where}: unknown key(s) {', '.join(extra)}; allowed: {', '.join(sorted(allowed))}"
        )


def _query(raw: Mapping[str, Any], where: str) -> QuerySpec:
    _unknown(raw, _QUERY_KEYS, where)
    name = raw.get("name")
    if not isinstance(name, str) or not name.isidentifier():
        raise PlaybookError(f"{where}: a query needs a `name` made of letters, digits and _")
    where = f"{where} {name!r}"
    signal, promql = str(raw.get("signal", "")), str(raw.get("promql", ""))
    if bool(signal) == bool(promql):
        raise PlaybookError(f"{where}: give exactly one of `signal` or `promql`")
    if signal and signal not in SIGNALS:
        raise PlaybookError(f"{where}: unknown signal {signal!r}")
    by = raw.get("by")
    if by is not None and (not isinstance(by, list) or not all(isinstance(b, str) for b in by)):
        raise PlaybookError(f"{where}: `by` must be a list of label names")
    kind = raw.get("kind", "range")
    if kind not in ("range", "instant"):
        raise PlaybookError(f"{where}: kind must be range or instant, not {kind!r}")
    resolution = raw.get("resolution", "fine")
    if resolution not in ("fine", "coarse"):
        raise PlaybookError(f"{where}: resolution must be fine or coarse, not {resolution!r}")
    agg = str(raw.get("agg", ""))
    if agg not in _AGGS:
        raise PlaybookError(f"{where}: agg must be one of {', '.join(sorted(_AGGS - {''}))}")
    window = str(raw.get("window", "auto"))
    if window not in ("auto", "job", "step"):
        _duration(window, where)
    peers = str(raw.get("peers", ""))
    if peers not in ("", "up", "down") or (peers and (not signal or kind != "range" or by is not None)):
        raise PlaybookError(f"{where}: peers is up or down, on a range query of a per-GPU signal")
    log_hosts = str(raw.get("log_hosts", ""))
    if log_hosts not in ("", "xid"):
        raise PlaybookError(
            f"{where}: log_hosts is xid (the hosts the log reports a hardware Xid on) or absent"
        )
    at_least = raw.get("at_least")
    if at_least is not None and (
        not isinstance(at_least, int | float) or not signal or kind != "range" or by is not None or peers
    ):
        raise PlaybookError(
            f"{where}: at_least is a number, on a range query of a per-GPU signal's own series"
        )
    q = QuerySpec(
        name=name,
        signal=signal,
        promql=promql,
        fn=str(raw.get("fn", "")),
        window=window,
        by=tuple(by) if by is not None else None,
        agg=agg,
        kind=kind,
        resolution=resolution,
        post=str(raw.get("post", "")),
        description=str(raw.get("description", "")),
        peers=peers,
        log_hosts=log_hosts,
        at_least=None if at_least is None else float(at_least),
    )
    for s in q.signals:
        if s not in SIGNALS:
            raise PlaybookError(f"{where}: template names unknown signal {{{s}}}")
    return q


def _rule(raw: Mapping[str, Any], queries: set[str], where: str) -> RuleSpec:
    _unknown(raw, _RULE_KEYS, where)
    rid = raw.get("id")
    if not isinstance(rid, str) or not rid.replace("-", "_").isidentifier():
        raise PlaybookError(f"{where}: a rule needs an `id` made of letters, digits, _ and -")
    where = f"{where} {rid!r}"
    det = raw.get("detector")
    if det not in DETECTORS:
        raise PlaybookError(f"{where}: unknown detector {det!r}; known: {', '.join(sorted(DETECTORS))}")
    qs = raw.get("queries", [])
    if isinstance(qs, str):
        qs = [qs]
    missing = [q for q in qs if q not in queries]
    if missing:
        raise PlaybookError(
            f"{where}: refers to undeclared quer{'y' if len(missing) == 1 else 'ies'} {', '.join(missing)}"
        )
    klass = raw.get("class")
    if klass not in CLASSES:
        raise PlaybookError(f"{where}: class {klass!r} is not in the contract's vocabulary")
    sev = raw.get("severity", "warning")
    if sev not in SEVERITIES:
        raise PlaybookError(f"{where}: severity must be one of {', '.join(SEVERITIES)}")
    role = raw.get("role", "cause")
    if role not in ROLES:
        raise PlaybookError(f"{where}: role must be one of {', '.join(ROLES)}")
    params = raw.get("params", {})
    if not isinstance(params, Mapping):
        raise PlaybookError(f"{where}: params must be a table")
    for key in ("mask", "failed", "gpu_detail", "onset_from", "gpu_query"):
        if key in params and params[key] not in qs:
            raise PlaybookError(
                f"{where}: params.{key} names {params[key]!r}, which is not among its queries"
            )
    wrong = DETECTORS[det].check(tuple(qs), params)
    if wrong:
        raise PlaybookError(f"{where}: {wrong}")
    for key in ("presence", "needs"):
        if key in params and not (
            isinstance(params[key], list) and all(isinstance(x, str) for x in params[key])
        ):
            raise PlaybookError(f"{where}: params.{key} must be a list of names")
    for q in params.get("presence", ()):
        if q not in qs:
            raise PlaybookError(f"{where}: params.presence names {q!r}, which is not among its queries")
    for key, value in params.items():
        if key.endswith(("_duration", "_window", "_margin")) or key in ("margin", "before_stall"):
            _duration(value, f"{where} params.{key}")
    return RuleSpec(
        id=rid,
        detector=det,
        queries=tuple(qs),
        klass=klass,
        severity=sev,
        role=role,
        title=str(raw.get("title", rid)),
        meaning=str(raw.get("meaning", "")),
        params=dict(params),
    )


def parse_playbook(text: str | Mapping[str, Any], *, source: str = "<string>") -> Playbook:
    """Return the Playbook declared by a TOML document (or an already parsed mapping)."""
    if isinstance(text, str):
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PlaybookError(f"{source}: not valid TOML: {exc}") from None
    else:
        raw = dict(text)
    _unknown(raw, _TOP_KEYS, source)
    name = raw.get("name")
    if not isinstance(name, str) or not name.replace("-", "_").isidentifier():
        raise PlaybookError(f"{source}: a playbook needs a `name`")
    where = f"{source} playbook {name!r}"
    trigger = raw.get("trigger", [])
    if isinstance(trigger, str):
        trigger = [trigger]
    bad = [t for t in trigger if t not in _TRIGGERS]
    if bad or not trigger:
        raise PlaybookError(
            f"{where}: trigger must list triage classes or 'always' (bad: {', '.join(bad) or 'none given'})"
        )
    w = raw.get("window", {})
    if not isinstance(w, Mapping) or w.get("anchor", "job") not in ("job", "crash", "stall"):
        raise PlaybookError(f"{where}: window.anchor must be job, crash or stall")
    window = WindowRule(
        anchor=w.get("anchor", "job"),
        before=_duration(w.get("before"), f"{where} window.before"),
        after=_duration(w.get("after"), f"{where} window.after"),
    )
    queries = tuple(_query(q, f"{where} query") for q in raw.get("queries", []))
    names = [q.name for q in queries]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise PlaybookError(f"{where}: duplicate query name(s) {', '.join(sorted(dup))}")
    rules = tuple(_rule(r, set(names), f"{where} rule") for r in raw.get("rules", []))
    _check_thresholds(rules, {q.name: q for q in queries}, where)
    ids = [r.id for r in rules]
    if len(set(ids)) != len(ids):
        raise PlaybookError(f"{where}: duplicate rule ids")
    if not rules:
        raise PlaybookError(f"{where}: a playbook needs at least one rule")
    return Playbook(
        name=name,
        title=str(raw.get("title", name)),
        trigger=tuple(trigger),
        window=window,
        queries=queries,
        rules=rules,
        description=str(raw.get("description", "")),
    )


def _check_thresholds(rules: tuple[RuleSpec, ...], queries: Mapping[str, QuerySpec], where: str) -> None:
    """Raise PlaybookError when a rule reads a GPU query's `at_least` bits at another threshold than it asks."""
    for r in rules:
        q = queries.get(str(r.params.get("gpu_query", "")))
        if q is not None and q.at_least is not None and float(r.params.get("util_min", 70.0)) != q.at_least:
            raise PlaybookError(
                f"{where} rule {r.id!r}: params.util_min {r.params.get('util_min', 70.0)} differs from "
                f"query {q.name!r}'s at_least {q.at_least}: the query only says which GPUs reach at_least"
            )


def validate_set(playbooks: Mapping[str, Playbook]) -> None:
    """Raise PlaybookError when two playbooks give one query name two different meanings."""
    seen: dict[str, tuple[str, QuerySpec]] = {}
    for pb in playbooks.values():
        for q in pb.queries:
            if q.name in seen and seen[q.name][1] != q:
                raise PlaybookError(
                    f"query {q.name!r} differs between playbooks {seen[q.name][0]!r} and "
                    f"{pb.name!r}: one name must mean one query"
                )
            seen.setdefault(q.name, (pb.name, q))


def load_playbooks(directory: str | Path | None = None) -> dict[str, Playbook]:
    """Return {name: Playbook} for every definitions/*.toml, validated (cached for the default directory)."""
    if directory is None:
        return dict(_load_default())
    return _load(Path(directory))


@functools.cache
def _load_default() -> tuple[tuple[str, Playbook], ...]:
    return tuple(_load(DEFINITIONS).items())


def _load(directory: Path) -> dict[str, Playbook]:
    out: dict[str, Playbook] = {}
    files = sorted(directory.glob("*.toml"))
    if not files:
        raise PlaybookError(f"no playbook definitions in {directory}")
    for path in files:
        pb = parse_playbook(path.read_text(encoding="utf-8"), source=path.name)
        if pb.name in out:
            raise PlaybookError(f"{path.name}: playbook {pb.name!r} is declared twice")
        out[pb.name] = pb
    validate_set(out)
    return out
