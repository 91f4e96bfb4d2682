"""Which GPUs of each host stand at or above a value, as the bits of one number per host.

The busy-wait detector describes each host by its set of spinning GPU indices (utilisation at or above its
`util_min`): it never reads the utilisation itself. On 8,192 GPUs, one series per GPU is a million points
for Prometheus to encode and Stepwise to parse, for one bit each. One range query returns instead, per host
and step, the number

    sum over GPU indices i of  (2^OFFSET + [value_i >= threshold]) * 2^i

whose bit OFFSET + i says GPU i reported at that step and whose bit i says it stood at or above the
threshold (GPU indices 0 to OFFSET - 1; 2 x 26 bits are exact in a float). A GPU whose index label is
anything else (a padded "00", a UUID, an index from 26 up) comes back as its own series, values and all.
`expand` turns the numbers back into one row per GPU: the threshold where it stood at or above, 0 where
below, missing where it did not report, as reading each GPU's series would have shown them to the
detector.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from typing import Any

from .profiles._signal import _ADDRESS

#: GPU indices 0 .. OFFSET-1 are encoded; bit OFFSET + i marks GPU i present.
OFFSET = 26
#: The label the encoded series carry (its value: the threshold).
LABEL = "stepwise_bits"


def _plain(sig: Any) -> bool:
    """Return whether a signal reads one metric selector as it is (no sum of parts, no fill filter)."""
    return not sig.fill_filter and bool(re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})?", sig.selector))


def add_matchers(selector: str, matchers: Iterable[str]) -> str:
    """Return one metric selector with more label matchers."""
    for m in matchers:
        selector = f"{selector[:-1]}, {m}}}" if selector.endswith("}") else f"{selector}{{{m}}}"
    return selector


def with_matcher(sig: Any, matcher: str) -> Any:
    """Return the signal `sig` (one metric selector) with one more label matcher on its selector."""
    return dataclasses.replace(sig, selector=add_matchers(sig.selector, [matcher]))


def bits_expr(sig: Any, threshold: float, gpus: int, agg: str, per_gpu: Callable[[Any], str]) -> str:
    """Return the PromQL of the per-host bits of a per-GPU signal `sig` (a `playbooks.profiles.Signal` whose
    selector is one metric selector) on hosts of `gpus` GPUs (indices 0 .. gpus - 1 encoded, any other index
    as its own series); `agg` combines the series of one GPU; `per_gpu(s)` renders a signal's series by
    (host, gpu)."""
    label, n = sig.gpu_from or "gpu", min(OFFSET, max(1, gpus))

    def one(i: int) -> Any:
        return with_matcher(sig, f'{label}="{i}"')

    raw = sig.host_from
    if raw and "," not in raw and not sig.host_join and not sig.host_alias:
        # by the exporter's own labels, renamed once at the end: a third of the work of renaming every term
        scale = f" * {sig.scale:g}" if sig.scale != 1.0 else ""
        each = [f"{agg} by ({raw}, {label}) ({one(i).selector}){scale}" for i in range(n)]
    else:
        each, raw = [per_gpu(one(i)) for i in range(n)], "host"
    terms = [f"(({e} >= bool {threshold:g}) + {2**OFFSET}) * {2**i}" for i, e in enumerate(each)]
    bits = f"sum by ({raw}) ({' or '.join(terms)})"
    if raw == "instance":
        # the host is the instance less its port: one exporter instance a host (as _pushdown assumes); were
        # there two, one's word is kept whole (a sum of two words would mix their bits). 8,192 GPUs over 2 h:
        # 3.25 -> 2.68 s of Prometheus CPU, 0.69 -> 0.50 GB allocated, the same words
        bits = f'max by (host) (label_replace({bits}, "host", "$1", "instance", "{_ADDRESS}"))'
    elif raw != "host":
        bits = f'sum by (host) (label_replace({bits}, "host", "$1", "{raw}", "(.+)"))'

    rest = per_gpu(with_matcher(sig, f'{label}!~"{"|".join(str(i) for i in range(n))}"'))
    return f'label_replace({bits}, "{LABEL}", "{threshold:g}", "", "") or {rest}'


def expand(series: Iterable[dict[str, Any]]) -> list[tuple[dict[str, str], list[float | None]]]:
    """Return one (labels, values) row per GPU from a stored result's series: each host's bits expanded
    (its GPUs by index), the other series as they are."""
    rows: list[tuple[dict[str, str], list[float | None]]] = []
    for s in series:
        labels = dict(s["labels"])
        threshold = labels.pop(LABEL, None)
        if threshold is None:
            rows.append((labels, list(s["values"])))
            continue
        at = float(threshold)
        words = [None if x is None else int(x) for x in s["values"]]
        seen = 0
        for w in words:
            seen |= 0 if w is None else w >> OFFSET
        for i in range(OFFSET):
            if seen >> i & 1:
                values = [
                    None if w is None or not (w >> (OFFSET + i)) & 1 else (at if (w >> i) & 1 else 0.0)
                    for w in words
                ]
                rows.append(({**labels, "gpu": str(i)}, values))
    return rows
