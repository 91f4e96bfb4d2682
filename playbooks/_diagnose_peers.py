"""A per-GPU series judged against its peers, aggregated by Prometheus: the pack, and the few that stand out.

On 8,192 GPUs, pulling one series per GPU to compare each with the others costs Prometheus and Stepwise a
million points per signal. What the peer detector reasons on is smaller: the pack's median at each
instant, the pack's typical robust spread, and the GPUs that leave the pack. The answer holds

- the pack's level at each step (`stepwise_stat="median"`): the median of its GPUs' moves from their own
  usual level (each GPU's median over the window) plus the median usual level, so that a pack made of two
  packs (a rack capped by design) has a level that one GPU cannot flip from one group to the other;
- the median absolute deviation of those moves at each step (`stepwise_stat="mad"`; the detector takes
  its median over the window as the pack's spread, scaled to a standard deviation, as it did from every row);
- its size, the GPUs reporting at the window's end (`stepwise_stat="count"`, constant);
- the full series of the candidates only: the `CANDIDATES` GPUs whose excursion from the pack, beyond their
  own usual level, is the largest in the direction asked (the peak of `x - median` less the GPU's own
  median over the window: "up"), or the deepest ("down"); for "up" also the `CANDIDATES` hottest in
  absolute terms (a rule against a model's limit reads the same query).

The candidates are chosen on a grid of `SCREEN_S` (a subquery pinned at the window's end, so
Prometheus evaluates it once): every peer rule needs a GPU out of the pack for at least 5 minutes, which puts
it out of the pack at one point of that grid at least. The detector then judges the candidates exactly as it
judged every GPU: against the median at each step, beyond their own offset over the steady state.

`peer_expr` asks all of it in one query. PromQL shares no sub-expression: the MAD needs the moves twice (around
their median, itself a median of the moves), and the candidates' series are read by filtering every GPU at
each step. Where Prometheus (2.42) spends it, temperature of 8,192 GPUs x 61 steps, each part alone (6.1 s in
all): the median 1.45 s, the MAD 3.3 s, the candidates 1.9 s (the screen 1.4 s, filtering every GPU 0.6 s).
A read of the window costs about 0.25 s whatever the grid, the moves 0.9 s (the match of every GPU with its
usual level at each step), `on (host, gpu)` matching no cheaper.

`PeerFollowUp` asks it in two, for a signal that is one metric selector (the others keep the one query):
first the moves' median at each step and the median usual level, the pack's size and the candidates' names;
then, from that answer, the MAD around the median written out as numbers (one per step, exact: Prometheus
sends the shortest decimal that reads back to the same float), and the candidates' series by their own
label matchers (no GPU read but theirs). The same answer (the pack's statistics to the bit), the moves read
twice instead of three times and no GPU filtered but the candidates: temperature and clock of 8,192 GPUs,
asked alternately three times on a machine at load 10, 14.3 -> 11.4 s of Prometheus's CPU for the two (the
MAD alone 3.65 -> 2.3 s; the medians written out cost 0.1 s).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ._diagnose_bits import add_matchers
from .prometheus import PrometheusClient, Series

#: Below this many points (GPUs x steps), the GPUs' own series are cheaper to read than the pack: Prometheus
#: reads every sample of the window once per selector, and this query has nine (1,024 GPUs x 49 points: 0.15 s
#: of Prometheus's CPU for every series, 0.6 s for the pack and its stand-outs; 8,192 x 61 points: a million
#: points per signal for Stepwise to parse and hold).
PEERS_MIN_POINTS = 200_000
#: How many GPUs come back per criterion.
CANDIDATES = 32
#: The grid (seconds) of the candidate screen: the shortest duration a peer rule needs.
SCREEN_S = 300
#: What the follow-up's templates hold until the first answer fills them in.
_CENTER, _CHOSEN = "STEPWISE_CENTER", "STEPWISE_CANDIDATES"


def _tag(expr: str, stat: str) -> str:
    return f'label_replace({expr}, "stepwise_stat", "{stat}", "", "")'


@dataclasses.dataclass(frozen=True)
class _Parts:
    """The PromQL pieces of a peer query (see the module's docstring)."""

    base: str
    keys: tuple[str, str]
    scale: str
    own: str
    moves: str
    screen: str
    seen: str
    plain: bool


def _parts(sig: Any, agg: str, direction: str, start: float, end: float) -> _Parts:
    plain = " | " not in sig.selector and not sig.fill_filter and not sig.host_join and not sig.gpu_index
    if plain:
        # the raw series: one per GPU, without the relabelling every step would pay for
        base, keys = sig.selector, (sig.host_from, sig.gpu_from or "gpu")
        scale = f" * {sig.scale:g}" if sig.scale != 1.0 else ""
    else:
        base, keys, scale = sig.expr(None, by=("host", "gpu"), agg=agg), ("host", "gpu"), ""
    at = f"@ {end:.3f}"
    rng = f"{max(SCREEN_S, int(end - start))}s"
    grid = f"[{rng}:{SCREEN_S}s] {at}"
    dev = f"({base} - scalar(quantile(0.5, {base})))"
    # a GPU's own usual level: its median over the window (its median place in the pack, less the pack's
    # median level, which is the same for every GPU and so leaves the ranking alone), on the screen's grid:
    # it only ranks the candidates (each is then judged on every step), and the median of a GPU's every
    # sample (480 a GPU over 2 h at 15 s) cost Prometheus a quarter of the screen's memory for the same order
    own = f"quantile_over_time(0.5, {base}{grid})"
    if direction == "up":
        level = f"max_over_time({base}[{rng}] {at})" if plain else f"max_over_time({base}{grid})"
        screen = f"topk({CANDIDATES}, max_over_time({dev}{grid}) - {own}) or topk({CANDIDATES}, {level})"
    else:
        screen = f"topk({CANDIDATES}, {own} - min_over_time({dev}{grid}))"
    # the pack's size: the GPUs reporting at the end (one lookback, not the window's every sample)
    seen = f"{base} {at}" if plain else f"count_over_time({base}{grid})"
    # the pack's level and spread are those of its GPUs' moves from their own usual level (a rack capped by
    # design runs cooler: two packs whose raw median flips from one to the other when one GPU moves)
    moves = f"({base} - {own})"
    return _Parts(base, keys, scale, own, moves, screen, seen, plain)


def _candidates(sig: Any, agg: str, p: _Parts, chosen: str) -> str:
    """Return the PromQL of the candidates' series, `chosen` the raw series they are read from."""
    if p.plain:
        return str(dataclasses.replace(sig, selector=chosen).expr(None, by=("host", "gpu"), agg=agg))
    return chosen


def peer_expr(sig: Any, agg: str, *, direction: str, start: float, end: float) -> str:
    """Return the PromQL of the pack and the candidates of a per-GPU signal over [start, end], in one query.

    `sig` is a `playbooks.profiles.Signal` of GPU scope; `agg` combines the series of one GPU.
    """
    p = _parts(sig, agg, direction, start, end)
    on = f"on ({', '.join(p.keys)})"
    pack = [
        _tag(f"(quantile(0.5, {p.moves}) + scalar(quantile(0.5, {p.own}))){p.scale}", "median"),
        _tag(f"quantile(0.5, abs({p.moves} - scalar(quantile(0.5, {p.moves})))){p.scale}", "mad"),
        _tag(f"count({p.seen})", "count"),
    ]
    return " or ".join([*pack, _candidates(sig, agg, p, f"({p.base} and {on} ({p.screen}))")])


@dataclasses.dataclass(frozen=True)
class PeerFollowUp:
    """How to ask a peer query in two (see the module's docstring), carried by its `PlannedQuery`.

    Attributes:
        first: the first query's PromQL (its series tagged `center`, `level`, `count` and `screen`).
        mad: the second's MAD, the moves' median at each step to fill in.
        candidates: the second's candidates, their series' selectors to fill in.
        selector: the signal's selector (a candidate's own adds its key labels' matchers).
        keys: the exporter's labels that name a GPU (its host's, its index's).
        scale: the factor of the pack's level and spread ("" when none), as the PromQL writes it.
    """

    first: str
    mad: str
    candidates: str
    selector: str
    keys: tuple[str, str]
    scale: str

    @classmethod
    def of(cls, sig: Any, agg: str, *, direction: str, start: float, end: float) -> PeerFollowUp | None:
        """Return how to ask the peer query of `sig` in two, or None when its selector is not one metric's."""
        p = _parts(sig, agg, direction, start, end)
        if not p.plain or not p.keys[0] or "," in p.keys[0]:
            return None
        first = [
            _tag(f"quantile(0.5, {p.moves})", "center"),
            _tag(f"quantile(0.5, {p.own})", "level"),
            _tag(f"count({p.seen})", "count"),
            _tag(f"group by ({', '.join(p.keys)}) ({p.screen})", "screen"),
        ]
        mad = _tag(f"quantile(0.5, abs({p.moves} - ({_CENTER}))){p.scale}", "mad")
        chosen = _candidates(sig, agg, p, _CHOSEN)
        return cls(" or ".join(first), mad, chosen, p.base, p.keys, p.scale)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "keys": list(self.keys)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PeerFollowUp:
        keys = (str(d["keys"][0]), str(d["keys"][1]))
        return cls(
            str(d["first"]), str(d["mad"]), str(d["candidates"]), str(d["selector"]), keys, str(d["scale"])
        )

    def then(self, first: Sequence[Series], step: float) -> str | None:
        """Return the second query's PromQL from the first's answer (on a grid of `step` seconds), or None
        when the moves' median is not a finite number wherever it has one (the one query then answers)."""
        center = _stats(first).get("center")
        values = center.values if center is not None else ()
        if not all(abs(v) < math.inf for v in values):
            return None
        # the median at each step: its number where `time()` is that step, 0 elsewhere (v * 1 + 0 is v)
        terms = [
            f"{v!r} * (time() > bool {t - step / 2!r}) * (time() < bool {t + step / 2!r})"
            for t, v in zip(center.timestamps if center else (), values, strict=True)
        ]
        mad = self.mad.replace(_CENTER, " + ".join(terms) or "0")
        chosen = [
            add_matchers(self.selector, [f"{k}={json.dumps(s.labels.get(k, ''))}" for k in self.keys])
            for s in first
            if s.labels.get("stepwise_stat") == "screen"
        ]
        return f"{mad} or {self.candidates.replace(_CHOSEN, f'({" or ".join(chosen)})')}" if chosen else mad

    def answer(self, first: Sequence[Series], then: Sequence[Series]) -> list[Series]:
        """Return the one query's answer from the two: the pack's level (the moves' median plus the usual
        level, scaled, as Prometheus adds and multiplies them), its size, its MAD and the candidates."""
        stats = _stats(first)
        out = [stats["count"]] if "count" in stats else []
        center, level = stats.get("center"), stats.get("level")
        if center is not None:
            usual = dict(zip(level.timestamps, level.values, strict=True)) if level is not None else {}
            factor = float(self.scale.removeprefix(" * ")) if self.scale else 1.0
            values = [
                (v + usual.get(t, math.nan)) * factor
                for t, v in zip(center.timestamps, center.values, strict=True)
            ]
            out.append(Series({"stepwise_stat": "median"}, center.timestamps, tuple(values)))
        return [*out, *then]


def _stats(answer: Sequence[Series]) -> dict[str, Series]:
    return {str(s.labels["stepwise_stat"]): s for s in answer if "stepwise_stat" in s.labels}


def ask_in_two(
    client: PrometheusClient,
    follow: PeerFollowUp,
    one_query: str,
    first: Sequence[Series],
    grid: tuple[float, float, float],
) -> list[Series]:
    """Return the answer of a peer query whose first part answered `first` on the range query's grid
    (start, end, step): the second part's, else (a median Prometheus could not give as a number) the one query's."""
    promql = follow.then(first, grid[2])
    if promql is None:
        return client.query_range(one_query, *grid)
    return follow.answer(first, client.query_range(promql, *grid))
