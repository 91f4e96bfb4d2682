"""A GPU driver fault's onset is its first timeout or gap of the recurring stretch (contract: the earliest
anomaly of the causal chain), not a lone timeout like the pack's own before it, not the start of the
counting window, and not where the stretch passed its own usual place (corpus D4 28, D5 03: 174 s and
145 s early; F33 17: 52 s early; E23 09: 156 s late)."""

from __future__ import annotations

import numpy as np

from playbooks.anomaly import stretch_start
from playbooks.detectors.gaps import _det_gaps
from playbooks.detectors.peers import _det_peer_outlier
from playbooks.loader import load_playbooks

from .test_analysis import STEP, N, _ctx, _grid, _t

HOSTS = [f"h{i}" for i in range(8)]


def _rule(rule_id: str):
    pb = load_playbooks()["exporter_health"]
    return pb, next(r for r in pb.rules if r.id == rule_id)


def _scrapes(culprit: np.ndarray) -> dict:
    """Scrape durations of eight hosts, each peer timing out (10 s) once or twice in the hour."""
    rng = np.random.default_rng(5)
    rows = {}
    for k, h in enumerate(HOSTS):
        x = 0.02 + rng.uniform(0, 0.03, N)
        x[(37 * k + 11) % N] = 10.0
        rows[(h, None)] = culprit if h == "h3" else x
    return {"scrape": _grid(rows), "up_host": _grid({(h, None): np.ones(N) for h in HOSTS})}


def _scrape_onset(culprit: np.ndarray) -> float:
    pb, rule = _rule("scrape_timeouts")
    t = _t()
    f = _det_peer_outlier(_ctx(_scrapes(culprit)), pb, rule, (float(t[0]), float(t[-1])))
    assert f is not None and f.hosts == ["h3"]
    assert f.onset is not None
    return f.onset


def test_a_lone_timeout_before_the_stretch_is_not_its_start():
    """Two lone timeouts, as every host shows now and then, a minute or two before the timeouts that keep
    coming: the stretch starts at the first of those."""
    rng = np.random.default_rng(6)
    x = 0.02 + rng.uniform(0, 0.03, N)
    x[100] = x[105] = 10.0
    x[112:] = rng.uniform(2.0, 10.0, N - 112)
    onset = _scrape_onset(x)
    assert abs(onset - _t()[112]) <= STEP


def test_a_stretch_that_fills_most_of_the_data_is_dated_where_it_began():
    """Timeouts from index 40 to the end, slowly lengthening: the host's usual place in the pack, learnt
    over the steady part that the stretch mostly fills, is the stretch's own; it began where the host left
    the place it held before."""
    rng = np.random.default_rng(7)
    x = 0.02 + rng.uniform(0, 0.03, N)
    x[40:] = np.linspace(7.0, 9.5, N - 40) + rng.uniform(-0.3, 0.3, N - 40)
    onset = _scrape_onset(x)
    assert abs(onset - _t()[40]) <= STEP


def test_metric_gaps_are_dated_at_the_first_missing_scrape():
    """Samples counted over 60 s (four scrapes): a count one short is no gap yet, two short is; the first
    missing scrape is where the count first fell, not a whole window before the first gap."""
    counts = {(h, None): np.full(N, 4.0) for h in HOSTS}
    x = np.full(N, 4.0)
    for s in range(120, N - 4, 10):
        x[s : s + 4] -= 1  # scrape s missing
        x[s + 1 : s + 5] -= 1  # and s + 1
    counts[("h3", None)] = x
    pb, rule = _rule("gpu_metric_gaps")
    t = _t()
    f = _det_gaps(_ctx({"gpu_samples": _grid(counts)}), pb, rule, (float(t[0]), float(t[-1])))
    assert f is not None and f.hosts == ["h3"]
    assert f.onset is not None and abs(f.onset - t[120]) <= STEP / 2


def test_stretch_start_keeps_a_sparse_stretch_whole():
    """Hits one in four from the first: the gaps between them are the stretch's own rate, not a lead-in."""
    mask = np.zeros(80, bool)
    mask[10::4] = True
    assert stretch_start(mask, 10, 40, 0.2, 1e-3) == 10
    mask[3] = True  # a lone hit, then 6 clean points before a 25 % stretch: chance 0.75**6 = 0.18
    assert stretch_start(mask, 3, 40, 0.2, 1e-3) == 3
    dense = np.zeros(80, bool)
    dense[[3, 8]] = True
    dense[15:] = True  # a lone hit, then clean points before a solid stretch: not its start
    assert stretch_start(dense, 3, 40, 0.2, 1e-3) == 15
