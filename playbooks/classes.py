"""The incident classes as declarations (`classes.toml`): family, priority, causal links and summary.

Usage::

    classes = load_classes()          # {name: ClassSpec}, validated and cached
    classes["node-death"].family      # "node"
"""

from __future__ import annotations

import functools
import string
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import PlaybooksError
from .model import CLASSES, FAMILIES

__all__ = ["CLASSES_FILE", "ClassError", "ClassSpec", "load_classes", "parse_classes"]

CLASSES_FILE = Path(__file__).with_name("classes.toml")
_KEYS = {"family", "priority", "stops_job", "fallback", "absorbs", "explains", "summary"}
_FIELDS = {"hosts", "onset", "stall", "gpu", "what", "accused", "odd", "exporter", "data"}


class ClassError(PlaybooksError):
    """The class declarations are malformed; str() names the file, the class and what is wrong."""


@dataclass(frozen=True)
class ClassSpec:
    """One incident class (see the comments of classes.toml for what each attribute means)."""

    name: str
    family: str
    priority: int
    stops_job: bool = False
    fallback: bool = False
    absorbs: tuple[str, ...] = ()
    explains: tuple[str, ...] = ()
    summary: str = ""


def _spec(name: str, raw: Mapping[str, Any], where: str) -> ClassSpec:
    extra = sorted(set(raw) - _KEYS)
    if extra:
        raise ClassError(f"{where}: unknown key(s) {', '.join(extra)}; allowed: {', '.join(sorted(_KEYS))}")
    if raw.get("family") not in FAMILIES:
        raise ClassError(f"{where}: family {raw.get('family')!r} is not in the contract's vocabulary")
    prio = raw.get("priority")
    if not isinstance(prio, int) or isinstance(prio, bool) or not 0 <= prio <= 10:
        raise ClassError(f"{where}: priority must be an integer from 0 to 10")
    for key in ("stops_job", "fallback"):
        if not isinstance(raw.get(key, False), bool):
            raise ClassError(f"{where}: {key} must be true or false")
    links = {}
    for key in ("absorbs", "explains"):
        vals = raw.get(key, [])
        bad = [v for v in vals if v not in CLASSES] if isinstance(vals, list) else [vals]
        if bad:
            raise ClassError(f"{where}: {key} names unknown class(es) {', '.join(map(str, bad))}")
        links[key] = tuple(vals)
    summary = str(raw.get("summary", ""))
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(summary) if f}
    except ValueError as exc:
        raise ClassError(f"{where}: summary is not a valid template: {exc}") from None
    if fields - _FIELDS:
        raise ClassError(
            f"{where}: summary names unknown field(s) {', '.join(sorted(fields - _FIELDS))}; "
            f"known: {', '.join(sorted(_FIELDS))}"
        )
    if name != "healthy" and not summary:
        raise ClassError(f"{where}: a summary is needed")
    return ClassSpec(
        name=name,
        family=raw["family"],
        priority=prio,
        stops_job=raw.get("stops_job", False),
        fallback=raw.get("fallback", False),
        summary=summary,
        **links,
    )


def parse_classes(text: str, *, source: str = "<string>") -> dict[str, ClassSpec]:
    """Return {name: ClassSpec} of a TOML document; every contract class must be declared once."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ClassError(f"{source}: not valid TOML: {exc}") from None
    unknown = sorted(set(raw) - set(CLASSES))
    if unknown:
        raise ClassError(f"{source}: {', '.join(unknown)} not in the contract's class vocabulary")
    missing = [c for c in CLASSES if c not in raw]
    if missing:
        raise ClassError(f"{source}: class(es) {', '.join(missing)} not declared")
    out = {c: _spec(c, raw[c], f"{source} class {c!r}") for c in CLASSES}
    if sum(s.fallback for s in out.values()) > 1:
        raise ClassError(f"{source}: only one class may be the fallback")
    return out


@functools.cache
def load_classes() -> Mapping[str, ClassSpec]:
    """Return the shipped class declarations (validated once)."""
    return parse_classes(CLASSES_FILE.read_text(encoding="utf-8"), source=CLASSES_FILE.name)
