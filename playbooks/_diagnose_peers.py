"""A per-GPU series judged against its peers, aggregated by Prometheus: the pack, and the few that stand out.

On 8,192 GPUs, pulling one series per GPU to compare each with the others costs Prometheus and Stepwise a
million points per signal. What the peer detector reasons on is smaller: the pack's median at each
instant, the pack's typical robust spread, and the GPUs that leave the pack. One range query returns

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

Where Prometheus (2.42) spends it, temperature of 8,192 GPUs x 61 steps, each part alone (9.3 s in all): the
median 2.0 s, the MAD 4.8 s, the candidates 2.5 s (the screen 1.7 s, reading and filtering every GPU at each
step 0.7 s), the count 0.1 s. A read of the window costs about 0.3 s whatever the grid (the usual level on a
120, 300, 600 or 900 s grid: 0.35, 0.37, 0.28, 0.29 s), each operation over every GPU at each step about 0.4 s.
PromQL shares no sub-expression: a MAD at each step needs the moves twice (the disarray test reads it at every
step: on the screen's grid it would cost 2.5 s, not a per-step value), and `on (host, gpu)` matching is no
cheaper (1.6 s against 1.3 s for the moves alone).
"""

from __future__ import annotations

import dataclasses
from typing import Any

#: Below this many points (GPUs x steps), the GPUs' own series are cheaper to read than the pack: Prometheus
#: reads every sample of the window once per selector, and this query has nine (1,024 GPUs x 49 points: 0.15 s
#: of Prometheus's CPU for every series, 0.6 s for the pack and its stand-outs; 8,192 x 61 points: a million
#: points per signal for Stepwise to parse and hold).
PEERS_MIN_POINTS = 200_000
#: How many GPUs come back per criterion.
CANDIDATES = 32
#: The grid (seconds) of the candidate screen: the shortest duration a peer rule needs.
SCREEN_S = 300


def _tag(expr: str, stat: str) -> str:
    return f'label_replace({expr}, "stepwise_stat", "{stat}", "", "")'


def peer_expr(sig: Any, agg: str, *, direction: str, start: float, end: float) -> str:
    """Return the PromQL of the pack and the candidates of a per-GPU signal over [start, end].

    `sig` is a `playbooks.profiles.Signal` of GPU scope; `agg` combines the series of one GPU.
    """
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
    on = f"on ({', '.join(keys)})"
    if plain:
        chosen = dataclasses.replace(sig, selector=f"({base} and {on} ({screen}))")
        candidates = chosen.expr(None, by=("host", "gpu"), agg=agg)
    else:
        candidates = f"({base} and {on} ({screen}))"
    # the pack's size: the GPUs reporting at the end (one lookback, not the window's every sample)
    seen = f"{base} {at}" if plain else f"count_over_time({base}{grid})"
    # the pack's level and spread are those of its GPUs' moves from their own usual level (a rack capped by
    # design runs cooler: two packs whose raw median flips from one to the other when one GPU moves)
    moves = f"({base} - {own})"
    pack = [
        _tag(f"(quantile(0.5, {moves}) + scalar(quantile(0.5, {own}))){scale}", "median"),
        _tag(f"quantile(0.5, abs({moves} - scalar(quantile(0.5, {moves})))){scale}", "mad"),
        _tag(f"count({seen})", "count"),
    ]
    return " or ".join([*pack, candidates])
