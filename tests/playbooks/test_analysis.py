"""Detectors on small canned arrays: no Prometheus, no database, a fixed time origin."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from playbooks.analysis import Context, Finding, Timeline, decide_diagnosis, evaluate
from playbooks.anomaly import (
    Grid,
    background,
    change_points,
    first_sustained,
    peer_deviation,
    rate_excess,
    walk_back,
)
from playbooks.loader import load_playbooks, parse_playbook

NOW = 1_772_323_200.0
STEP = 15.0
N = 240  # one hour


def _t() -> np.ndarray:
    return NOW + STEP * np.arange(N)


def _grid(rows: dict[tuple[str, str | None], np.ndarray]) -> Grid:
    labels = [{"host": h} | ({"gpu": g} if g is not None else {}) for h, g in rows]
    return Grid(t=_t(), labels=labels, values=np.array(list(rows.values()), dtype=float))


def _ctx(results: dict, **tl) -> Context:
    t = _t()
    timeline = Timeline(
        start=float(t[0]),
        end=float(t[-1]),
        train_start=float(t[0]),
        last_advance=float(t[-1]),
        step_s=20.0,
        warm_end=float(t[10]),
        steady=(float(t[10]), float(t[80])),
    )
    for k, v in tl.items():
        setattr(timeline, k, v)
    src = SimpleNamespace(profile="amd", metric_names=(), gpus_per_host=4, gpu_model=None)
    return Context(
        results=results,
        meta={k: {"promql": k, "window_s": 60.0} for k in results},
        timeline=timeline,
        triage=None,
        source=src,
        gpu=None,
    )


def _rule(detector: str, queries: list[str], klass: str = "thermal-straggler", **params) -> tuple:
    qs = "\n".join(f'[[queries]]\nname = "{q}"\nsignal = "gpu_temp"\n' for q in queries)
    text = (
        f'name = "t"\ntrigger = ["always"]\n{qs}\n[[rules]]\nid = "r"\ndetector = "{detector}"\n'
        f'queries = {queries!r}\nclass = "{klass}"\nseverity = "warning"\n'
    ).replace("'", '"')
    pb = parse_playbook(text, source="t.toml")
    rule = pb.rules[0]
    object.__setattr__(rule, "params", params)
    return pb, rule


@pytest.mark.parametrize(
    ("mask", "length", "fraction", "expected"),
    [
        ([0, 0, 1, 1, 1, 1, 0], 3, 1.0, 2),
        ([1, 0, 1, 0, 1, 1, 1, 1], 4, 1.0, 4),
        ([1, 0, 1, 1, 0, 1, 1, 1], 4, 0.7, 0),
        ([0, 0, 0, 0], 2, 0.8, None),
        ([0, 0, 0, 1, 1], 4, 0.8, 3),  # a short run at the very end counts when it is all on
    ],
)
def test_first_sustained(mask, length, fraction, expected):
    """first_sustained finds the first run that is on for the required share of its length."""
    assert first_sustained(np.array(mask, bool), length, fraction) == expected


def test_grid_row_returns_the_first_row_with_those_labels():
    """row() by host, by host and GPU, missing labels, and the grid read from a stored result with gaps."""
    g = _grid({("a", "0"): np.full(N, 1.0), ("a", "1"): np.full(N, 2.0), ("b", None): np.full(N, 3.0)})
    assert g.row(host="a")[0] == 1.0
    assert g.row(host="a", gpu="1")[0] == 2.0
    assert g.row(gpu="1", host="a")[0] == 2.0
    assert g.row(host="b")[0] == 3.0
    assert g.row(host="b", gpu="0") is None
    assert g.row(host="c") is None
    assert g.row(host="a")[0] == 1.0  # asked again (the index is kept)
    stored = {
        "start": NOW,
        "step": STEP,
        "n": 3,
        "series": [{"labels": {"host": "a"}, "values": [1.0, None, 3]}],
    }
    row = Grid.from_result(stored).row(host="a")
    assert row is not None and row[0] == 1.0 and np.isnan(row[1]) and row[2] == 3.0


def test_walk_back_stops_at_the_baseline():
    """walk_back returns where the series left its baseline, skipping missing values."""
    x = np.array([1, 1, 1, 2, np.nan, 5, 9, 9], dtype=float)
    assert walk_back(x, 6, 1.5) == 3


def test_background_of_a_sparse_counter_is_a_tick_not_zero():
    """A counter that ticks on a few scrapes has a tick-sized background; the pack's is its lower quartile."""
    rng = np.random.default_rng(1)
    ticks = np.where(rng.random((6, 400)) < 0.08, rng.uniform(0.05, 0.6, (6, 400)), 0.0)
    ticks[2, 300:] = 200.0  # one host in trouble late in the job
    own, pack = background(ticks, np.ones(400, bool))
    assert 0.05 < pack < 1.0  # a median would say 0 and any tick would stand out
    assert own[2] > 100  # its own quantile includes its trouble; the pack's does not
    exc = rate_excess(ticks, np.full(6, pack), floor=0.5, factor=10.0)
    assert not exc[[0, 1, 3, 4, 5]].any()
    assert exc[2, 300:].all() and not exc[2, :300].any()


def test_rate_excess_needs_floor_and_the_reference():
    """A rate counts only above the floor and `factor` x its own reference."""
    rates = np.array([np.full(10, 5.0), np.r_[np.zeros(5), np.full(5, 50.0)]])
    exc = rate_excess(rates, np.array([5.0, 1.0]), floor=1.0, factor=10.0)
    assert not exc[0].any()
    assert exc[1, 5:].all() and not exc[1, :5].any()


def test_peer_deviation_removes_each_rows_usual_offset():
    """A GPU that always runs 5 degrees warmer is not an outlier; one that heats up later is."""
    t = np.arange(50)
    rows = np.array(
        [60 + 0 * t, 61 + 0 * t, 60 + 0 * t, 61 + 0 * t, 65 + 0 * t, 60 + np.where(t > 30, 20, 0)],
        dtype=float,
    )
    base = t < 20
    dev, spread, _ = peer_deviation(rows, base)
    assert abs(dev[4, 40]) < 1
    assert dev[5, 40] > 15


def test_change_points_flag_jumps_not_decreasing_trends():
    """A loss that falls (warm-up) is not anomalous; a jump far above its own recent level is."""
    t = NOW + STEP * np.arange(200)
    rng = np.random.default_rng(0)
    x = 8 * np.exp(-np.arange(200) / 300) + 2 + rng.normal(0, 0.01, 200)
    valid = np.ones(200, bool)
    assert change_points(x, t, valid, window=1200, z=10, min_rel=0.1) == []
    x[150:160] += 1.5
    assert change_points(x, t, valid, window=1200, z=10, min_rel=0.1)[0] == 150


def test_peer_outlier_finds_the_hot_gpu_and_its_onset():
    """One GPU of eight leaves the pack at a known instant; the detector names it and that instant."""
    rng = np.random.default_rng(1)
    rows = {}
    for h in ("a", "b"):
        for g in range(4):
            rows[(h, str(g))] = 70 + rng.normal(0, 0.5, N) + (3 if g == 2 else 0)
    rows[("b", "1")] = rows[("b", "1")] + np.clip((np.arange(N) - 120) * 0.5, 0, 25)
    pb, rule = _rule("peer_outlier", ["temp"], direction="up", z=6.0, min_rel=0.08, min_duration="5m")
    f = evaluate(_ctx({"temp": _grid(rows)}), [_with_rules(pb, rule)])[0]
    assert f.hosts == ["b"] and f.gpus == ["1"]
    # a ramp of 0.5 degC per sample against 0.5 degC noise is distinguishable ~2 sigma in: a few samples late
    assert 0 <= f.onset - (NOW + 120 * STEP) <= 6 * STEP


def test_peer_outlier_dates_a_ramp_where_it_left_its_own_level():
    """With a ramp window, the start of a gradual ramp is where the GPU's deviation from the pack left its
    own level (the break of a baseline-then-rise fit), not where it crossed the pack's spread."""
    rng = np.random.default_rng(2)
    rows = {(h, str(g)): 70 + rng.normal(0, 0.5, N) for h in ("a", "b") for g in range(4)}
    rows[("a", "3")] = rows[("a", "3")] + np.clip((np.arange(N) - 100) * 0.4, 0, 25)
    pb, rule = _rule(
        "peer_outlier", ["temp"], direction="up", z=6.0, min_rel=0.08, min_duration="5m", ramp_window="60m"
    )
    f = evaluate(_ctx({"temp": _grid(rows)}), [_with_rules(pb, rule)])[0]
    assert f.hosts == ["a"] and f.gpus == ["3"]
    assert abs(f.onset - (NOW + 100 * STEP)) <= 1.5 * STEP


def test_counter_increase_ignores_static_lifetime_counters():
    """A counter that is large but does not grow gives a zero increase and no finding."""
    static = {("a", None): np.zeros(N), ("b", None): np.zeros(N)}
    pb, rule = _rule("counter_increase", ["inc"], klass="host-oom", min=0.5)
    assert evaluate(_ctx({"inc": _grid(static)}), [_with_rules(pb, rule)]) == []
    grows = dict(static)
    grows[("b", None)] = np.r_[np.zeros(100), np.ones(4), np.zeros(N - 104)]
    f = evaluate(_ctx({"inc": _grid(grows)}), [_with_rules(pb, rule)])[0]
    assert f.hosts == ["b"] and abs(f.onset - (NOW + 100 * STEP)) <= STEP


def test_no_findings_decide_healthy():
    """Without any warning or critical finding the job is healthy, with no culprit."""
    info = Finding("network", "tcp_only", "healthy", "info", "context", ["a"], [], NOW, "TCP", [])
    d = decide_diagnosis(_ctx({}), [info])
    assert d["class"] == "healthy" and d["culprits"] == [] and d["root_cause_family"] == "none"


def test_earliest_critical_cause_wins_and_the_stall_becomes_its_effect():
    """A network burst before a stall makes a network hang; the stall finding is re-classed as its effect."""
    ctx = _ctx({}, stalled=True, last_advance=NOW + 3000)
    stall = Finding(
        "hang", "step_stall", "collective-hang", "critical", "cause", [], [], NOW + 3000, "stop", []
    )
    net = Finding(
        "hang", "network_trigger_retx", "network-hang", "critical", "cause", ["b"], [], NOW + 2800, "net", []
    )
    d = decide_diagnosis(ctx, [stall, net])
    assert d["class"] == "network-hang" and d["root_cause_family"] == "network-rdma"
    assert d["culprits"] == [{"host": "b", "gpu": None}]
    assert d["onset"] == NOW + 2800
    assert stall.klass == "network-hang"


def _with_rules(pb, rule):
    from dataclasses import replace

    return replace(pb, rules=(rule,))


def _heartbeat_ctx(power: dict, util: dict, **tl) -> Context:
    ctx = _ctx({"power_by_host": _grid(power), "util_by_host": _grid(util)}, **tl)
    ctx.triage = {
        "heartbeat_accused": ["b"],
        "job": {"crash_time": NOW + 180 * STEP},
        "config": {"jax_distributed_heartbeat_timeout_seconds": str(int(60 * STEP))},
    }
    return ctx


def _heartbeat_rule():
    pb = load_playbooks()["heartbeat"]
    return _with_rules(pb, next(r for r in pb.rules if r.id == "accused_alive"))


def test_accused_alive_ignores_a_job_wide_checkpoint_pause_at_the_heartbeat_stop():
    """Every host pausing for a checkpoint save just before the heartbeats stopped does not hide that the
    accused host trained like its peers around that time and until the kill."""
    power = {(h, None): np.full(N, 700.0) for h in "abcde"}
    util = {(h, None): np.full(N, 95.0) for h in "abcde"}
    for h in "abcde":  # the heartbeat-stop time is index 120; the save fills the two minutes before it
        power[(h, None)][112:120] = 200.0
        util[(h, None)][112:120] = 60.0
    ctx = _heartbeat_ctx(power, util, last_advance=NOW + 180 * STEP)
    found = evaluate(ctx, [_heartbeat_rule()])
    assert [(f.klass, f.hosts) for f in found] == [("heartbeat-false-positive", ["b"])]
    assert found[0].onset == pytest.approx(NOW + 120 * STEP, abs=1.0)
    d = decide_diagnosis(ctx, found)
    assert d["class"] == "heartbeat-false-positive" and d["culprits"] == []


def test_accused_alive_is_silent_when_the_job_stopped_with_the_heartbeats():
    """An accused host that went idle when its heartbeats stopped, the others then busy-waiting and no step
    after it, is no false positive: judging only the instants its peers trained would see it alive."""
    power = {(h, None): np.full(N, 700.0) for h in "abcde"}
    util = {(h, None): np.full(N, 95.0) for h in "abcde"}
    for h in "acde":
        power[(h, None)][121:] = 250.0
    power[("b", None)][120:] = 180.0
    util[("b", None)][120:] = 0.0
    ctx = _heartbeat_ctx(power, util, last_advance=NOW + 120 * STEP, stalled=True)
    assert evaluate(ctx, [_heartbeat_rule()]) == []


def _unnamed_heartbeat_ctx(idle_after_stop: bool) -> Context:
    """The GPU exporter names its hosts by pod IP (`--no-hostname` DCGM): the accused `b` is none of them."""
    ips = [f"10.244.0.{i}" for i in range(5)]
    power = {(h, None): np.full(N, 700.0) for h in ips}
    util = {(h, None): np.full(N, 95.0) for h in ips}
    if idle_after_stop:  # one of them (the accused, really dead) idles from the heartbeat-stop time on
        power[(ips[1], None)][120:] = 90.0
        util[(ips[1], None)][120:] = 0.0
    ctx = _heartbeat_ctx(power, util, last_advance=NOW + 180 * STEP)
    ctx.triage = {**ctx.triage, "nodes": list("abcde")}
    return ctx


def test_accused_alive_judges_every_gpu_host_when_the_exporter_names_none_as_the_log_does():
    """Every one of the job's five GPU hosts trained up to the kill: the accused, whichever they are, did."""
    found = evaluate(_unnamed_heartbeat_ctx(idle_after_stop=False), [_heartbeat_rule()])
    assert [(f.klass, f.hosts) for f in found] == [("heartbeat-false-positive", ["b"])]
    assert "all 5 GPU hosts" in found[0].evidence[0]["interpretation"]


def test_accused_alive_says_nothing_when_an_unnamed_gpu_host_stopped_with_the_heartbeats():
    found = evaluate(_unnamed_heartbeat_ctx(idle_after_stop=True), [_heartbeat_rule()])
    assert found == []


def test_missing_signals_tell_an_absent_exporter_from_what_the_family_never_has() -> None:
    """The title names the signals this TSDB lacks; Xid and friends on AMD are listed apart, not blamed."""
    from playbooks.detectors.trends import _det_series_absent
    from playbooks.profiles import PROFILES

    amd = PROFILES["amd"]
    pb = load_playbooks()["exporter_health"]
    rule = next(r for r in pb.rules if r.id == "families_missing")
    everything = tuple(m for s in amd.signals.values() for m in s.metrics)
    ctx = _ctx({})
    ctx.source.metric_names = tuple(m for m in everything if not m.startswith("hw_rdma"))
    found = _det_series_absent(ctx, pb, rule, (0.0, 1.0))
    assert found is not None
    assert found.title.startswith("Signals not collected: rdma_retransmits")
    assert "that the amd exporters never have" in found.title and "gpu_xid" in found.title
    absent, never = found.evidence
    assert "rdma_retransmits" in absent["value"] and "hw_rdma" in absent["interpretation"]
    assert "gpu_xid" in never["value"] and "rdma_retransmits" not in never["value"]

    ctx.source.metric_names = everything
    found = _det_series_absent(ctx, pb, rule, (0.0, 1.0))
    assert found.title.startswith("Signals not collected: only last_step_timestamp, gpu_xid")
    assert len(found.evidence) == 1
