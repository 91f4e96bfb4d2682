"""A result's series named by Stepwise after Prometheus answered by the exporter's own labels.

A profile names a host from the exporter's label (DCGM's `Hostname`, node_exporter's `instance` less its
port). In PromQL that is `max by (host) (label_replace(max by (Hostname) (x), "host", "$1", "Hostname",
"(.+)"))`: a regex and a second aggregation over every result series at every step. On 128 hosts over 4 h
at 30 s that costs Prometheus as much as reading the data (0.02 -> 0.05 s of its CPU for a node gauge,
0.08 -> 0.12 s for a per-GPU one), over forty queries a diagnosis. A query that carries a `Relabel` is sent
without it (`max by (Hostname) (x)`) and its answer is renamed and combined here, to the same series.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

#: How series that get the same name combine, as the PromQL aggregation does at each step.
_COMBINE: dict[str, Callable[..., np.ndarray]] = {
    "sum": np.nansum,
    "max": np.nanmax,
    "min": np.nanmin,
    "avg": np.nanmean,
}


@dataclass(frozen=True)
class Relabel:
    """The rename PromQL would do: `agg by (by) (label_replace(..., target, "$1", source, regex) ...)`.

    Attributes:
        copies: (target, source, regex) label copies, applied in order as `label_replace` does them.
        by: the labels of the renamed series.
        agg: how series named alike combine ("sum", "max", "min", "avg").
        above: keep only the combined values above this (a declared query's filter `> 0`), or None.
    """

    copies: tuple[tuple[str, str, str], ...]
    by: tuple[str, ...]
    agg: str
    above: float | None = None

    def promql(self, expr: str) -> str:
        """Return the PromQL that renames `expr` as `apply` does (for a query that must name hosts itself)."""
        for target, source, regex in self.copies:
            expr = f'label_replace({expr}, "{target}", "$1", "{source}", "{regex}")'
        expr = f"{self.agg} by ({', '.join(self.by)}) ({expr})" if self.by else f"{self.agg}({expr})"
        return expr if self.above is None else f"({expr}) > {self.above:g}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "copies": [list(c) for c in self.copies],
            "by": list(self.by),
            "agg": self.agg,
            "above": self.above,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Relabel:
        above = d.get("above")
        return cls(
            tuple((str(t), str(s), str(r)) for t, s, r in d["copies"]),
            tuple(d["by"]),
            str(d["agg"]),
            None if above is None else float(above),
        )

    def labels(self, labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """Return the renamed label set of a series (sorted pairs): label_replace's copies (a value the regex
        does not match leaves the target as it was; an empty result removes it), then only `by`."""
        out = dict(labels)
        for target, source, regex in self.copies:
            m = _compiled(regex).fullmatch(out.get(source, ""))
            if m is None:
                continue
            value = m.expand(r"\g<1>") if m.re.groups else ""
            if value:
                out[target] = value
            else:
                out.pop(target, None)
        return tuple(sorted((k, out[k]) for k in self.by if out.get(k)))

    def apply(
        self, rows: Sequence[tuple[Mapping[str, str], np.ndarray]]
    ) -> list[tuple[dict[str, str], np.ndarray]]:
        """Return the renamed rows: each (labels, values on one grid, NaN where absent) renamed, rows named alike
        combined point by point over the values present (NaN where none is), in the order first named; with
        `above`, only the values above it, and only the rows that keep one."""
        groups: dict[tuple[tuple[str, str], ...], list[np.ndarray]] = {}
        for labels, values in rows:
            groups.setdefault(self.labels(labels), []).append(np.asarray(values, dtype=float))
        combine = _COMBINE[self.agg]
        out = []
        for key, members in groups.items():
            if len(members) == 1:
                out.append((dict(key), members[0]))
                continue
            stack = np.vstack(members)
            present = ~np.isnan(stack).all(axis=0)
            values = np.full(stack.shape[1], np.nan)
            if present.any():
                values[present] = combine(stack[:, present], axis=0)
            out.append((dict(key), values))
        if self.above is None:
            return out
        kept = []
        for labels, values in out:
            with np.errstate(invalid="ignore"):
                values = np.where(values > self.above, values, np.nan)
            if not np.isnan(values).all():
                kept.append((labels, values))
        return kept


@lru_cache(maxsize=64)
def _compiled(regex: str) -> re.Pattern[str]:
    return re.compile(regex)
