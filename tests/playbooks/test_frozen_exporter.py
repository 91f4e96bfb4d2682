"""The frozen-exporter rule (ghost data, #10) on small canned arrays: what a freeze is and the red herrings
that are not one. End-to-end freezes on a real TSDB are in test_ghost_data.py."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from playbooks.analysis import Context, Timeline, evaluate
from playbooks.anomaly import Grid
from playbooks.loader import load_playbooks

NOW = 1_772_323_200.0
STEP = 15.0
N = 240  # one hour of 15 s scrapes
HOSTS = "abcdef"
WINDOW = 60.0  # the changes() window: 4 scrapes


def _grid(rows: dict[str, np.ndarray]) -> Grid:
    t = NOW + STEP * np.arange(N)
    return Grid(t=t, labels=[{"host": h} for h in rows], values=np.array(list(rows.values()), dtype=float))


def _moving(rate: float = 12.0) -> dict[str, np.ndarray]:
    """Every host's changes per window: 4 GPUs, each changing at nearly every scrape."""
    return {h: np.full(N, rate) for h in HOSTS}


def _evaluate(power, temp=None, scrape=None, samples=None, level=None):
    results = {
        "power_changes": _grid(power),
        "temp_changes": _grid(temp or _moving(2.0)),
        "gpu_samples": _grid(samples or {h: np.full(N, 16.0) for h in HOSTS}),  # 4 GPUs x 4 scrapes
        "power_by_host": _grid(level or {h: np.full(N, 600.0) for h in HOSTS}),
    }
    if scrape is not None:
        results["scrape_changes"] = _grid(scrape)
    t = NOW + STEP * np.arange(N)
    tl = Timeline(start=float(t[0]), end=float(t[-1]), train_start=float(t[0]), last_advance=float(t[-1]))
    ctx = Context(
        results=results,
        meta={k: {"promql": k, "window_s": WINDOW} for k in results},
        timeline=tl,
        triage=None,
        source=SimpleNamespace(profile="amd", metric_names=(), gpus_per_host=4, gpu_model=None),
        gpu=None,
    )
    pb = load_playbooks()["exporter_health"]
    rule = next(r for r in pb.rules if r.id == "ghost_data")
    pb = dataclasses.replace(pb, rules=(rule,))
    return evaluate(ctx, [pb])


def _frozen(rows: dict[str, np.ndarray], host: str, a: int, b: int) -> dict[str, np.ndarray]:
    rows[host] = rows[host].copy()
    rows[host][a:b] = 0.0
    return rows


@pytest.mark.parametrize("minutes", [5, 8, 15])
def test_a_short_freeze_of_the_whole_exporter_is_ghost_data(minutes):
    """Power, temperature and the exporter's own collection time stop changing at once on one host for
    5-15 min while its peers move: ghost data on that host, dated at the freeze's start."""
    a = 120
    b = a + int(minutes * 60 / STEP) - int(WINDOW / STEP)  # the windows that lie wholly in the freeze
    power = _frozen(_moving(), "c", a, b)
    temp = _frozen(_moving(2.0), "c", a, b)
    scrape = _frozen(_moving(1.0), "c", a, b)
    [f] = _evaluate(power, temp, scrape=scrape)
    assert f.klass == "monitoring-ghost-data" and f.hosts == ["c"]
    assert f.onset == pytest.approx(NOW + a * STEP - WINDOW, abs=1.0)


def test_one_quiet_gauge_is_not_a_frozen_exporter():
    """Power capped at an exact value on one host (its power never changes) while its temperature and the
    exporter's collection time keep changing: the exporter is alive."""
    power = _frozen(_moving(), "c", 0, N)
    assert _evaluate(power, scrape=_moving(1.0)) == []


def test_a_host_that_is_always_that_quiet_is_judged_against_its_own_noise():
    """A host whose every gauge legitimately holds still for minutes at a time (capped power, pinned clocks,
    temperature quantised to 1 °C) is quiet as often before as during a quiet stretch: no freeze."""
    power, temp = _moving(), _moving(2.0)
    for a in range(0, N, 40):
        _frozen(power, "c", a, a + 24)
        _frozen(temp, "c", a, a + 24)
    assert _evaluate(power, temp) == []


def test_an_idle_phase_of_the_whole_job_is_no_freeze():
    """Every host holds still at once (an evaluation pause on an exporter with coarse values): no peer
    moved, so no host's quiet stands out."""
    power, temp = _moving(), _moving(2.0)
    for h in HOSTS:
        _frozen(power, h, 100, 160)
        _frozen(temp, h, 100, 160)
    assert _evaluate(power, temp) == []


def test_an_exporter_that_comes_up_late_is_no_freeze():
    """A host's first windows hold one to three samples a GPU (its exporter came up late): too few to show a
    change, so they are not quiet windows."""
    power, temp = _moving(), _moving(2.0)
    samples = {h: np.full(N, 16.0) for h in HOSTS}
    for rows in (power, temp):
        _frozen(rows, "c", 0, 40)
    samples["c"][:40] = np.r_[np.full(37, np.nan), 4.0, 8.0, 12.0]
    assert _evaluate(power, temp, samples=samples) == []


def test_paired_repeats_of_a_30s_collection_are_no_freeze():
    """DCGM collecting every 30 s under a 15 s scrape repeats each value once; a window of 4 scrapes still
    holds a change, and every host shows the same pattern."""
    power = {h: np.where(np.arange(N) % 2 == 0, 4.0, 8.0) for h in HOSTS}
    temp = {h: np.where(np.arange(N) % 4 == 0, 1.0, 0.0) for h in HOSTS}
    assert _evaluate(power, temp) == []


def test_a_dead_host_reading_zero_is_not_frozen():
    """A host whose power reads 0 W from the freeze on is dead (the node playbook's), not ghost data."""
    power = _frozen(_moving(), "c", 120, N)
    temp = _frozen(_moving(2.0), "c", 120, N)
    level = {h: np.full(N, 600.0) for h in HOSTS}
    level["c"][120:] = 0.0
    assert _evaluate(power, temp, level=level) == []


def test_a_freeze_too_short_to_stand_out_is_not_called():
    """Two minutes of identical values is within what the rule's minimum duration leaves to chance."""
    power = _frozen(_moving(), "c", 120, 124)
    temp = _frozen(_moving(2.0), "c", 120, 124)
    assert _evaluate(power, temp) == []


def test_a_freeze_across_a_monitoring_outage_is_dated_at_its_start():
    """Prometheus restarts during the freeze: for three minutes every host's windows lack samples (no host
    changes or holds still there). The freeze on both sides of the outage is one freeze, dated at its start,
    not at the outage's end (the stretch after it alone would make the stretch before it look like the
    host's own habit)."""
    a = 60
    power = _frozen(_moving(), "c", a, N)
    temp = _frozen(_moving(2.0), "c", a, N)
    samples = {h: np.full(N, 16.0) for h in HOSTS}
    gap = slice(a + 40, a + 56)  # 10 min into the freeze, 4 min without data, then 31 min more of it
    for rows in (power, temp):
        for h in HOSTS:
            rows[h][gap] = np.nan
    for h in HOSTS:
        samples[h][gap] = np.nan
    [f] = _evaluate(power, temp, samples=samples)
    assert f.klass == "monitoring-ghost-data" and f.hosts == ["c"]
    assert f.onset == pytest.approx(NOW + a * STEP - WINDOW, abs=1.0)
