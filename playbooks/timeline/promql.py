"""PromQL building blocks of the panel queries: durations, selectors, label matchers and per-device
expressions under the exporter's own labels."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace

from playbooks.profiles import Profile, Signal


def _fmt_seconds(seconds: float) -> str:
    return f"{max(1, int(math.ceil(seconds)))}s"


def _is_selector(text: str) -> bool:
    """Return True for `name` or `name{...}`: a *_over_time function applies without a subquery."""
    head, _, rest = text.strip().partition("{")
    return head.replace("_", "").replace(":", "").isalnum() and (not rest or rest.endswith("}"))


def _bare_ok(profile: Profile, signal: str) -> bool:
    """Return True if a signal can be queried without its per-device aggregation when its series are unique."""
    if not profile.has(signal):
        return False
    sig = profile.signal(signal)
    mapped = sig.renamed
    return sig.scope in ("gpu", "host") and not sig.fill_filter and not mapped and _is_selector(sig.selector)


def _device_expr(sig: Signal, fn: str | None, window: str, bare: bool) -> str:
    """Return one series per device (host, or host and GPU) under the exporter's own labels.

    One series per device already (`bare`): the raw selector is the per-device value, no aggregation.
    """
    if bare:
        return _bare_expr(sig, fn, window)
    plain = replace(sig, host_from="host", gpu_from="gpu" if sig.scope == "gpu" else "")
    raw = tuple(sig.host_from if n == "host" else sig.gpu_from for n in sig.labels)
    return plain.expr(fn, window=window, by=raw)


def _bare_expr(sig: Signal, fn: str | None, window: str) -> str:
    """Return a signal's per-series PromQL without aggregation (a counter rated, a gauge as is), scaled."""
    if sig.is_counter:
        inner = f"{fn or 'rate'}({sig.selector}[{window}])"
    elif fn:
        inner = f"{fn}({sig.selector}[{window}])"
    else:
        inner = sig.selector
    return f"({inner}) * {sig.scale:g}" if sig.scale != 1.0 else inner


def _select(selector: str, labels: Mapping[str, str]) -> str:
    """Return a simple selector with exact label matchers added: `m{a="1"}` + {b: 2} -> `m{a="1", b="2"}`."""
    extra = ", ".join(f'{k}="{_escape_matcher(v)}"' for k, v in labels.items())
    head, brace, rest = selector.strip().partition("{")
    if not brace:
        return f"{head}{{{extra}}}"
    body = rest[:-1].strip()
    return f"{head}{{{body + ', ' if body else ''}{extra}}}"


def _escape_matcher(value: str) -> str:
    """Return a label value as the body of a PromQL double-quoted string: backslash, quote and every
    control character (a newline is a legal label value) escaped, as Go's string literals read them."""
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", value.replace("\\", "\\\\").replace('"', '\\"'))


def _label_vector(rows: Sequence[Mapping[str, str]]) -> str:
    """Return PromQL for a vector with one sample per label set: `x and on (...) (it)` keeps those series."""
    parts = []
    for row in rows:
        expr = "vector(1)"
        for name, value in row.items():
            expr = f'label_replace({expr}, "{name}", "{_escape(value)}", "", "")'
        parts.append(expr)
    return " or ".join(parts)


def _escape(value: str) -> str:
    """Return a label value as label_replace's replacement: a string body (`_escape_matcher`), `$` doubled."""
    return _escape_matcher(value).replace("$", "$$")


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
