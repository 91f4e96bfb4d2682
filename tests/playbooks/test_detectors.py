"""One unit test per detector that had none: rate_outlier, threshold_prior, level_shift, near_limit and
uniform_elevation, each on small canned arrays (what it finds, where it starts, and what it leaves alone)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from playbooks.analysis import evaluate
from playbooks.detectors._base import finding_title
from tests.playbooks.test_analysis import NOW, STEP, N, _ctx, _grid, _rule, _with_rules

HOSTS = tuple("abcdefgh")


def _run(detector: str, grids: dict, klass: str = "thermal-straggler", tl: dict | None = None, **params):
    pb, rule = _rule(detector, list(grids), klass=klass, **params)
    return evaluate(_ctx(grids, **(tl or {})), [_with_rules(pb, rule)])


# --- rate_outlier ------------------------------------------------------------------------------------


def _trickle(seed: int) -> dict:
    """Eight hosts whose counter rate ticks now and then (0 or 0.2/s), as a healthy RDMA link's does."""
    rng = np.random.default_rng(seed)
    return {(h, None): 0.2 * (rng.random(N) < 0.3) for h in HOSTS}


def test_rate_outlier_names_the_host_whose_rate_leaves_its_own_history_and_the_pack():
    rows = _trickle(1)
    rows[("c", None)] = rows[("c", None)].copy()
    rows[("c", None)][150:] = 20.0
    found = _run(
        "rate_outlier", {"retx": _grid(rows)}, "rdma-degradation", floor=0.5, factor=10.0, min_duration="5m"
    )
    assert [f.hosts for f in found] == [["c"]]
    assert abs(found[0].onset - (NOW + 150 * STEP)) <= STEP


def test_rate_outlier_leaves_a_trickle_and_a_short_burst_alone():
    rows = _trickle(2)
    rows[("d", None)] = rows[("d", None)].copy()
    rows[("d", None)][150:154] = 20.0  # one minute: shorter than min_duration
    assert _run("rate_outlier", {"retx": _grid(rows)}, "rdma-degradation", floor=0.5, min_duration="5m") == []


def test_rate_outlier_before_a_stall_needs_a_stalled_job():
    rows = _trickle(3)
    rows[("c", None)] = rows[("c", None)].copy()
    rows[("c", None)][200:] = 20.0
    grids = {"retx": _grid(rows)}
    params = {"floor": 0.5, "min_duration": "1m", "before_stall": "30m"}
    assert _run("rate_outlier", grids, "network-hang", **params) == []
    stalled = {"stalled": True, "last_advance": NOW + 210 * STEP}
    found = _run("rate_outlier", grids, "network-hang", tl=stalled, **params)
    assert [f.hosts for f in found] == [["c"]]


# --- threshold_prior ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("points", "ack_host", "named"),
    [
        (4, None, []),  # one increment, which rate() lifts for its window (60 s, 4 points) and no longer
        (4, "c", ["c"]),  # the same tick with ACK timeouts on the host at the time
        (4, "d", []),  # ACK timeouts on another host corroborate nothing on this one
        (8, None, ["c"]),  # increments on several scrapes outlast the window: a burst by itself
    ],
)
def test_rate_outlier_holds_a_lone_tick_before_a_stall_only_where_the_link_corroborates_it(
    points, ack_host, named
):
    """A hang trigger's excess no longer than one increment's lift stands only with another counter of the
    link rising on the same host at the time; an excess that outlasts the rate window stands alone."""
    retx = {(h, None): np.zeros(N) for h in HOSTS}
    retx[("c", None)][195 : 195 + points] = 0.63
    ack = {(h, None): np.zeros(N) for h in HOSTS}
    if ack_host:
        ack[(ack_host, None)][196:200] = 0.033
    grids = {"retx": _grid(retx), "tx": _grid({(h, None): np.ones(N) for h in HOSTS}), "ack": _grid(ack)}
    params = {"floor": 0.5, "min_duration": "1m", "before_stall": "30m"}
    stalled = {"stalled": True, "last_advance": NOW + 210 * STEP}
    found = _run("rate_outlier", grids, "network-hang", tl=stalled, **params)
    assert [f.hosts for f in found] == ([named] if named else [])
    if ack_host == "c":
        assert "one tick, but" in found[0].evidence[0]["interpretation"]


def test_threshold_prior_flags_listed_codes_only():
    rows = {(h, None): np.zeros(N) for h in HOSTS}
    rows[("b", None)] = np.r_[np.zeros(100), np.full(N - 100, 79.0)]
    rows[("e", None)] = np.r_[np.zeros(50), np.full(N - 50, 13.0)]  # an application Xid: not a hardware fault
    found = _run("threshold_prior", {"xid": _grid(rows)}, "gpu-hardware-fault", codes=[48, 79])
    assert [f.hosts for f in found] == [["b"]]
    assert found[0].onset == pytest.approx(NOW + 100 * STEP - STEP / 2, abs=1.0)


def test_threshold_prior_needs_the_level_to_last_and_a_prior_for_the_model():
    rows = {(h, str(g)): np.full(N, 70.0) for h in HOSTS[:2] for g in range(2)}
    rows[("a", "1")] = rows[("a", "1")].copy()
    rows[("a", "1")][100] = 95.0  # one sample above: no finding
    grids = {"temp": _grid(rows)}
    assert _run("threshold_prior", grids, above=90.0, min_duration="2m") == []
    rows[("a", "1")][100:130] = 95.0
    found = _run("threshold_prior", {"temp": _grid(rows)}, above=90.0, min_duration="2m")
    assert [(f.hosts, f.gpus) for f in found] == [(["a"], ["1"])]
    # above_prior without a known GPU model: the prior is unknown, so the rule says nothing
    assert _run("threshold_prior", {"temp": _grid(rows)}, above_prior="slowdown_c") == []


def test_threshold_prior_reads_the_gpu_models_prior():
    rows = {(h, None): np.full(N, 70.0) for h in HOSTS[:3]}
    rows[("c", None)] = np.r_[np.full(120, 70.0), np.full(N - 120, 88.0)]
    pb, rule = _rule("threshold_prior", ["temp"], above_prior="slowdown_c", min_duration="2m")
    ctx = _ctx({"temp": _grid(rows)})
    ctx.gpu = SimpleNamespace(name="MI300X", slowdown_c=85.0)
    assert [f.hosts for f in evaluate(ctx, [_with_rules(pb, rule)])] == [["c"]]
    ctx.gpu = SimpleNamespace(name="H100", slowdown_c=90.0)
    assert evaluate(ctx, [_with_rules(pb, rule)]) == []


# --- level_shift -------------------------------------------------------------------------------------


def _step_time(after: float, seed: int = 4) -> dict:
    rng = np.random.default_rng(seed)
    x = 1.0 + rng.normal(0, 0.005, N)
    x[150:] *= after
    return {"step_time": _grid({("", None): x})}


def test_level_shift_finds_a_lasting_rise_of_the_step_time_and_its_start():
    found = _run("level_shift", _step_time(1.2), "healthy", min_rel=0.08, min_duration="10m")
    assert len(found) == 1 and "+20%" in found[0].evidence[0]["interpretation"]
    # the rolling median (min_duration wide) confirms the shift; the onset is taken from the start of the
    # window that confirmed it: never after the change, at most one window before it
    window = 600.0
    assert NOW + 150 * STEP - window <= found[0].onset <= NOW + 150 * STEP


def test_level_shift_ignores_a_rise_below_its_threshold():
    assert _run("level_shift", _step_time(1.04), "healthy", min_rel=0.08, min_duration="10m") == []


# --- near_limit --------------------------------------------------------------------------------------


def test_near_limit_names_the_host_that_climbs_to_the_limit_from_its_own_level():
    rows = {(h, None): np.full(N, 0.5) for h in HOSTS[:4]}
    rows[("b", None)] = np.r_[np.full(150, 0.5), np.linspace(0.5, 0.97, 50), np.full(N - 200, 0.97)]
    found = _run("near_limit", {"mem_frac": _grid(rows)}, "host-oom", limit=0.95)
    assert [f.hosts for f in found] == [["b"]]
    # the onset is where the climb left the host's usual level, not where it crossed the limit
    assert abs(found[0].onset - (NOW + 150 * STEP)) <= 3 * STEP


def test_near_limit_leaves_hosts_below_the_limit_alone():
    rows = {(h, None): np.full(N, 0.9) for h in HOSTS[:4]}
    assert _run("near_limit", {"mem_frac": _grid(rows)}, "host-oom", limit=0.95) == []


# --- uniform_elevation -------------------------------------------------------------------------------

# 4 GPUs per host (the test context): the prior is 8 + 0.5 x 4 = 10 runnable processes, 1.5x is 15.
PRIOR = {"base": 8.0, "per_gpu": 0.5, "factor": 1.5, "min_share": 0.8, "requires": "restored"}


def _procs(levels: dict[str, float]) -> dict:
    return {"procs_running": _grid({(h, None): np.full(N, v) for h, v in levels.items()})}


def test_uniform_elevation_flags_every_host_carrying_the_same_excess_after_a_restore():
    found = _run(
        "uniform_elevation",
        _procs(dict.fromkeys(HOSTS, 30.0)),
        "restore-resource-leak",
        tl={"restored": True},
        **PRIOR,
    )
    assert len(found) == 1 and found[0].evidence[0]["value"] == pytest.approx(30.0)
    assert found[0].onset == NOW  # from the training start on


@pytest.mark.parametrize(
    ("levels", "restored"),
    [
        (dict.fromkeys(HOSTS, 30.0), False),  # no restore: the rule does not apply
        (dict.fromkeys(HOSTS, 12.0), True),  # within the prior
        ({h: 30.0 if h == "a" else 10.0 for h in HOSTS}, True),  # one host: not uniform
        ({h: 20.0 if i % 2 else 40.0 for i, h in enumerate(HOSTS)}, True),  # high but uneven
    ],
)
def test_uniform_elevation_needs_a_restore_and_a_uniform_excess_over_the_prior(levels, restored):
    assert (
        _run("uniform_elevation", _procs(levels), "restore-resource-leak", tl={"restored": restored}, **PRIOR)
        == []
    )


@pytest.mark.parametrize(
    ("template", "gpus", "expected"),
    [
        ("Xid {value} on {hosts} GPU {gpus}", ["3"], "Xid 79 on node-a GPU 3"),
        ("Xid {value} on {hosts} GPU {gpus}", [], "Xid 79 on node-a"),
        (
            "GPU {gpus} on {hosts} runs hot against its peers",
            [],
            "A GPU on node-a runs hot against its peers",
        ),
        (
            "GPU {gpus} on {hosts} runs hot against its peers",
            ["0", "5"],
            "GPU 0, 5 on node-a runs hot against its peers",
        ),
    ],
)
def test_a_title_without_a_known_gpu_index_leaves_the_gpu_out(template, gpus, expected) -> None:
    """An Xid read without a GPU index (a log line, an exporter without `gpu`) is titled without "GPU ?"."""
    assert finding_title(template, ["node-a"], gpus, "79") == expected


def _errors(changes_at: list[int], n: int = 240, step: float = 15.0):
    from playbooks.anomaly import Grid

    v = np.full((1, n), np.nan)
    v[0, changes_at] = 1.0
    return [("correctable_errors", Grid(np.arange(n) * step, [{"host": "h"}], v))]


@pytest.mark.parametrize(
    ("n", "changes_at", "dated"),
    [
        (240, [200, 201, 202], 200),  # news: still for 50 min, then a burst 10 min before the silence
        (240, [40, 80, 120, 160, 200], None),  # a trickle all along (every 10 min): no date
        (240, [60, 130, 200], None),  # each change follows one 17 min earlier: a trickle
        (240, [140, 200], 140),  # the first change in the lookback after 50 min of quiet dates it
        (240, [20, 200], 200),  # 45 min of quiet before it: news again
        (150, [100], None),  # 25 min into the data: too little quiet seen before it to call it news
    ],
)
def test_a_silent_hosts_error_change_dates_it_only_when_it_is_news(n, changes_at, dated):
    """A hardware-error change within the lookback (30 min) before the silence (the data's last point, at
    15 s) dates a node death when the data shows the host's counters still for a lookback-long stretch
    before it."""
    from playbooks.detectors._silent import _errors_changed

    got = _errors_changed(_errors(changes_at, n), "h", n * 15.0, 1800.0)
    assert (got[0] if got else None) == (None if dated is None else dated * 15.0 - 7.5)


@pytest.mark.parametrize(("others_changing", "dated"), [(0, True), (1, False), (5, False)])
def test_a_silent_hosts_error_change_that_other_hosts_show_alike_does_not_date_it(others_changing, dated):
    """One correctable change on the dying host 10 min before its silence dates its death only while the
    other hosts' counters held still in that lookback: where the fleet ticks alike (one host in twenty or
    more of 19 others; here one already), the dying host's tick is the fleet's background."""
    from playbooks.anomaly import Grid
    from playbooks.detectors._silent import _errors_changed

    n, hosts = 240, ["h"] + [f"o{i:02d}" for i in range(19)]
    v = np.full((len(hosts), n), np.nan)
    v[0, 200] = 1.0
    for k in range(others_changing):
        v[1 + k, 150 + 10 * k] = 1.0
    grids = [("correctable_errors", Grid(np.arange(n) * 15.0, [{"host": h} for h in hosts], v))]
    got = _errors_changed(grids, "h", n * 15.0, 1800.0)
    assert (got is not None) == dated
