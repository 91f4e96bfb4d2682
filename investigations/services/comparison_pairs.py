"""Which jobs a comparison compares, pair by pair, and one `compare` object from the pairs' results.

With two jobs there is one pair. With three or more, `playbooks.compare.compare_jobs` judged every job
against one baseline and reported the deltas of the last job only, so the investigated (primary) job
could go uncompared. Here each job is compared with the baseline (or, without a baseline, the primary
with each other job), one `compare_jobs` call per pair, and the pairs' results are joined into the
contract's `compare` object:

- `jobs`, `sources`: every job once, in the comparison's order (baseline first);
- `diagnosis`, `comparison.overlap_steps`: those of the pair that holds the primary job (the
  investigation's subject); the other pairs' verdicts are listed in `pairs`;
- `comparison.metrics`: one value per job (each from its own pair; the baseline's from the primary's
  pair), `deltas` per job against the baseline (None for it), `delta_pct` and `likely_cause` of the
  primary's pair;
- `findings`: every pair's (their titles name both jobs), `timings` summed;
- `pairs`: [{"jobs": [i, j], "ids": [id_i, id_j], "class", "confidence", "summary", "overlap_steps"}].
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

BASELINE = "baseline"
PRIMARY = "primary"


def comparison_pairs(roles: Sequence[str]) -> list[tuple[int, int]]:
    """Return the (reference, other) index pairs to compare, the primary's pair first.

    Each job against the baseline (the first baseline when there are several); without one, the primary
    against each other job; without either, the first job against each other.
    """
    if len(roles) < 2:
        return []
    if BASELINE in roles:
        ref = roles.index(BASELINE)
    elif PRIMARY in roles:
        ref = roles.index(PRIMARY)
    else:
        ref = 0
    others = [i for i in range(len(roles)) if i != ref]
    others.sort(key=lambda i: (roles[i] != PRIMARY, i))
    return [(ref, i) for i in others]


def compare_pairs(
    compare: Callable[[list[Any]], dict[str, Any]], specs: Sequence[Any], roles: Sequence[str]
) -> dict[str, Any]:
    """Return one `compare` object for the jobs `specs` (with `roles`), compared pair by pair by `compare`.

    Two jobs: `compare(specs)` itself, with `pairs` added. More: see the module docstring.
    """
    pairs = comparison_pairs(roles)
    if len(specs) == 2:
        result = compare(list(specs))
        return {**result, "pairs": [_pair_entry(pairs[0] if pairs else (0, 1), result, (0, 1))]}
    results = [(pair, compare([specs[pair[0]], specs[pair[1]]])) for pair in pairs]
    return join_pairs(results, len(specs))


def _pair_entry(pair: tuple[int, int], result: dict[str, Any], local: tuple[int, int]) -> dict[str, Any]:
    """Return the `pairs` row of one pair: its jobs (indexes into the whole comparison), ids and verdict."""
    jobs = result.get("jobs") or []
    diagnosis = result.get("diagnosis") or {}
    ids = [(jobs[k].get("id") if k < len(jobs) else None) for k in local]
    return {
        "jobs": list(pair),
        "ids": ids,
        "class": diagnosis.get("class") or "healthy",
        "confidence": diagnosis.get("confidence"),
        "summary": diagnosis.get("summary") or "",
        "overlap_steps": (result.get("comparison") or {}).get("overlap_steps"),
    }


def join_pairs(results: list[tuple[tuple[int, int], dict[str, Any]]], count: int) -> dict[str, Any]:
    """Return one `compare` object from pairs' results, the primary's pair first (module docstring)."""
    (ref, _), lead = results[0]
    jobs: list[dict[str, Any] | None] = [None] * count
    sources: list[dict[str, Any] | None] = [None] * count
    for (a, b), result in results:
        for whole, local in ((a, 0), (b, 1)):
            # a pair's result lists its two jobs in the order given (the reference first)
            jobs[whole] = jobs[whole] or (result.get("jobs") or [None, None])[local]
            sources[whole] = sources[whole] or (result.get("sources") or [None, None])[local]
    findings = [f for _, result in results for f in result.get("findings") or []]
    timings = {
        key: round(sum(float((r.get("timings") or {}).get(key) or 0) for _, r in results), 3)
        for key in ("total_s", "prometheus_s")
    }
    timings["queries"] = sum(int((r.get("timings") or {}).get("queries") or 0) for _, r in results)
    lead_cmp = lead.get("comparison") or {}
    return {
        **lead,
        "jobs": jobs,
        "source": sources[ref],
        "sources": sources,
        "findings": findings,
        "timings": timings,
        "comparison": {
            **lead_cmp,
            "baseline": ref,
            "config_diff": _config_diff(results, count),
            "metrics": _metrics(results, count),
        },
        "pairs": [_pair_entry(pair, result, (0, 1)) for pair, result in results],
    }


def _config_diff(results: list[tuple[tuple[int, int], dict[str, Any]]], count: int) -> dict[str, list[Any]]:
    """Return {key: [value per job]} for every key some pair found different; a job whose pair found the
    key equal has the reference's value."""
    ref = results[0][0][0]
    found: dict[str, list[Any]] = {}
    for (a, b), result in results:
        for key, values in ((result.get("comparison") or {}).get("config_diff") or {}).items():
            row = found.setdefault(key, [None] * count)
            row[a], row[b] = values[0], values[1]
    for row in found.values():
        for (_, b), _result in results:
            if row[b] is None:
                row[b] = row[ref]
    return found


def _metrics(results: list[tuple[tuple[int, int], dict[str, Any]]], count: int) -> list[dict[str, Any]]:
    """Return the metric rows with one value per job and each job's delta against the reference."""
    rows: dict[str, dict[str, Any]] = {}
    for index, ((a, b), result) in enumerate(results):
        for m in (result.get("comparison") or {}).get("metrics") or []:
            name = m.get("name")
            values = m.get("values") or [None, None]
            row = rows.get(name)
            if row is None:
                row = rows[name] = {
                    "name": name,
                    "values": [None] * count,
                    "deltas": [None] * count,
                    "causes": [""] * count,
                    "delta_pct": None,
                    "likely_cause": "",
                }
            row["values"][a] = row["values"][a] if row["values"][a] is not None else values[0]
            row["values"][b] = values[1]
            row["deltas"][b] = m.get("delta_pct")
            row["causes"][b] = m.get("likely_cause") or ""
            if index == 0:
                row["delta_pct"], row["likely_cause"] = m.get("delta_pct"), m.get("likely_cause") or ""
    return list(rows.values())
