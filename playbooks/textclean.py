"""Values read from a log or a TSDB, made safe to store (plain Python).

A log header or a label value can hold any byte: a NUL inside a log header's JOB_ID was stored as the job
id, and PostgreSQL refuses NUL in text and in JSON outright. `printable` drops control characters
(Unicode category Cc: C0, DEL, C1) and lone surrogates (which no UTF-8 database stores) from one value;
`scrub` does it for every string, key included, of a JSON-like structure, keeping tabs and newlines in
free text (a log line) but never in a key.
"""

from __future__ import annotations

import re
from typing import Any

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTROL_BUT_SPACE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def printable(value: str) -> str:
    """Return `value` without control characters (tabs and newlines included) or lone surrogates."""
    return _CONTROL.sub("", value)


def scrub(obj: Any) -> Any:
    """Return `obj` (dicts, lists, tuples, strings, numbers) with every string cleaned for storage."""
    if isinstance(obj, str):
        return _CONTROL_BUT_SPACE.sub("", obj)
    if isinstance(obj, dict):
        return {printable(str(k)): scrub(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub(v) for v in obj]
    return obj
