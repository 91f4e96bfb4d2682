"""Timeline panels: which queries a panel runs (lines or band), and which hosts or GPUs its outliers name."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from playbooks import timeline as tl
from playbooks.profiles import PROFILES
from playbooks.prometheus import InstantSample
from playbooks.timeline import traces as tl_traces

from .timeline_support import END, START, CannedClient, make_ctx, make_gpu, make_pack, make_series

# --- queries, band and outliers --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("panel", "gpus", "hosts", "unique", "mode", "roles"),
    [
        ("loss", 32, 4, (), "single", {"line"}),
        ("gpu_temp", 16, 4, (), "lines", {"line"}),
        ("gpu_temp", 1024, 128, ("gpu_temp",), "band", {"band", "score", "hosts"}),
        ("gpu_temp", 1024, 128, (), "band", {"band", "score", "hosts"}),  # 246,000 samples: too many to split
        ("procs_running", 1024, 128, ("procs_running",), "band", {"band", "score", "hosts"}),
        ("procs_running", 1024, 128, (), "band", {"devices", "hosts"}),
        ("gpu_temp", 17, 4, (), "band", {"devices", "hosts"}),
        ("rdma_retransmits", 1024, 128, (), "band", {"devices", "hosts"}),
        ("procs_running", 1024, 8, (), "lines", {"line"}),
    ],
)
def test_panel_queries_choose_lines_or_band(panel, gpus, hosts, unique, mode, roles) -> None:
    """Few series are drawn one line each; many get a band plus top-k outliers: aggregated in PromQL when the
    series are read raw, else (rated or aggregated per device, and few enough samples) every device's series
    in one query, split on the server, so that Prometheus evaluates the expression once."""
    ctx = make_ctx(gpus=gpus, hosts=hosts, unique=frozenset(unique))
    plan = tl.panel_queries(tl.PANELS[panel], ctx, START, END, hosts=["h1"])
    assert plan.mode == mode
    assert set(plan.queries) == roles
    assert plan.step >= 15.0
    if "band" in roles:
        assert '"min"' in plan.queries["band"] and '"max"' in plan.queries["band"]
        assert (
            "quantile" not in plan.queries["band"] and plan.queries["score"] == plan.expr
        )  # median: score grid
        assert plan.score_step > plan.step  # every device raw on a coarser grid; scores taken in Python
    if "devices" in roles:
        assert plan.queries["devices"] == plan.expr and "quantile" not in plan.expr
    if mode == "band":
        assert 'label_replace(vector(1), "host", "h1"' in plan.queries["hosts"]


def test_band_edges_keep_spikes_between_steps() -> None:
    """With a step coarser than the scrape interval, the band's min and max come from *_over_time."""
    plan = tl.panel_queries(tl.PANELS["gpu_temp"], make_ctx(gpus=1024), START, START + 86400)
    assert plan.step > 15.0
    assert "min_over_time(" in plan.queries["band"] and "max_over_time(" in plan.queries["band"]


def test_counters_are_rated() -> None:
    """A counter panel queries a rate, never the raw counter."""
    plan = tl.panel_queries(tl.PANELS["rdma_retransmits"], make_ctx(hosts=4), START, END)
    assert plan.queries["line"].count("rate(") == 1


def test_band_mode_names_the_outliers_the_score_selected() -> None:
    """Band traces come from the stat label; the top-k are fetched by label, those above the bar named."""

    def answer(promql: str):
        if '"stat"' in promql:
            return [
                make_series({"stat": "min"}, [60] * 241),
                make_series({"stat": "median"}, [65] * 241),
                make_series({"stat": "max"}, [65] * 150 + [95] * 91),
            ]
        every = [make_gpu("n07", 3, 66), make_gpu("n12", 5, 65, bump=30), make_gpu("n01", 0, 64)]
        return [s for s in every if f'"{s.labels["host"]}"' in promql]

    client = CannedClient(answer)
    client.scores = [
        InstantSample({"host": "n12", "gpu": "5"}, END, 30.0),
        InstantSample({"host": "n07", "gpu": "3"}, END, 9.0),
        InstantSample({"host": "n01", "gpu": "0"}, END, 1.5),
        *make_pack(1.0),  # the typical score is the median of every series' score: 1.0
    ]
    (panel,) = tl.panels_fetch(client, make_ctx(gpus=1024, hosts=128), ["gpu_temp"], START, END)
    assert panel.mode == "band"
    assert [o["name"] for o in panel.outliers] == ["n12 GPU 5", "n07 GPU 3"]  # n01 is within 3x the typical
    assert panel.outliers[0]["score"] == pytest.approx(30.0)
    assert [t.role for t in panel.traces] == ["min", "median", "max", "outlier", "outlier", "top"]
    assert len(client.asked) == 3  # band, score, then the top-k in one query by label
    (fetch,) = [q for q in client.asked if "vector(1)" in q]
    assert client.asked.index(fetch) > client.asked.index(tl.panel_queries(
        tl.PANELS["gpu_temp"], make_ctx(gpus=1024, hosts=128), START, END).queries["score"])  # fmt: skip
    assert 'label_replace(label_replace(vector(1), "host", "n12", "", ""), "gpu", "5", "", "")' in fetch
    names = [d["name"] for d in tl.figure_build(panel, make_ctx(gpus=1024))["data"]]
    assert "n12 GPU 5 (outlier)" in names and "n01 GPU 0 (top deviation)" in names


def test_a_band_panels_top_k_are_fetched_while_its_band_is_still_running() -> None:
    """The top-k by label follow the panel's scores at once: the band query answers only after they were asked,
    which a second round waiting for every first-round query would never reach."""
    asked_top = threading.Event()
    waited: list[bool] = []

    def answer(promql: str):
        if '"stat"' in promql:
            waited.append(asked_top.wait(30))
            return [make_series({"stat": "median"}, [65] * 241)]
        asked_top.set()
        return [make_gpu("n12", 5, 65, bump=30)]

    client = CannedClient(answer)
    client.scores = [InstantSample({"host": "n12", "gpu": "5"}, END, 30.0), *make_pack(1.0)]
    (panel,) = tl.panels_fetch(client, make_ctx(gpus=1024, hosts=128), ["gpu_temp"], START, END)
    assert waited == [True]
    assert [o["name"] for o in panel.outliers] == ["n12 GPU 5"]


def test_the_costliest_queries_are_sent_first() -> None:
    """Every panel's queries start costliest first: the 1,024-GPU band before the 128-host band before the
    job's one-series line, whatever the panels' order."""
    asked: list[str] = []
    client = CannedClient(lambda q: [])
    client.instant = []
    client.query_range = lambda promql, *a, **k: asked.append(promql) or []  # type: ignore[method-assign]
    tl.panels_fetch(client, make_ctx(gpus=1024, hosts=128), ["loss", "procs_running", "gpu_temp"], START, END,
                    max_concurrency=1)  # fmt: skip
    firsts = [
        next(i for i, q in enumerate(asked) if name in q) for name in ("gpu_temp", "procs_running", "loss")
    ]
    assert firsts == sorted(firsts) and '"stat"' in asked[0] and "loss" in asked[-1], asked


def test_band_mode_names_no_outlier_when_nothing_deviates() -> None:
    """Every series equal (an idle counter): the score is 0 everywhere and no outlier is fetched."""
    client = CannedClient(lambda q: [make_series({"stat": "median"}, [0] * 241)])
    client.scores = [InstantSample({"host": "n1"}, END, 0.0), *make_pack(0.0)]
    (panel,) = tl.panels_fetch(client, make_ctx(gpus=1024, hosts=128), ["gpu_temp"], START, END)
    assert panel.outliers == [] and len(client.asked) == 2


def test_a_split_band_is_one_query_and_names_the_outliers_as_the_score_would() -> None:
    """A counter band at 128 hosts: one range query of every host's rate; min, median and max at each step,
    each host's largest deviation from the median, the top-k drawn and those above the bar named."""
    hosts = [make_series({"host": f"n{i:03d}"}, [10.0 + (i % 5) * 0.1] * 241) for i in range(128)]
    hot = np.full(241, 10.2)
    hot[150:] = 40.0
    hosts[12] = make_series({"host": "n012"}, hot)
    hosts[7] = make_series({"host": "n007"}, [10.0] * 240 + [float("nan")])  # a NaN sample is no sample
    client = CannedClient(lambda q: hosts)
    client.instant = []
    (panel,) = tl.panels_fetch(client, make_ctx(gpus=1024, hosts=128), ["rdma_retransmits"], START, END)
    assert len(client.asked) == 1 and "rate(" in client.asked[0] and '"stat"' not in client.asked[0]
    assert panel.mode == "band" and panel.queries == client.asked
    band = {t.role: t for t in panel.traces[:3]}
    assert list(band) == ["min", "median", "max"] and all(len(t.t) == 241 for t in band.values())
    assert band["min"].v[0] == 10.0 and band["median"].v[0] == 10.2 and band["max"].v[-1] == 40.0
    assert panel.outliers == [{"host": "n012", "name": "n012", "score": pytest.approx(29.8)}]
    assert [t.role for t in panel.traces[3:]] == ["outlier", "top", "top"]  # typical 0.1: 0.2 is within 3x


def test_a_split_band_of_an_idle_counter_names_no_outlier() -> None:
    """Every host's rate 0: the band is flat at 0, nothing deviates, nothing is drawn or named."""
    client = CannedClient(lambda q: [make_series({"host": f"n{i}"}, [0] * 241) for i in range(128)])
    (panel,) = tl.panels_fetch(client, make_ctx(hosts=128), ["oom_kills"], START, END)
    assert panel.outliers == [] and len(client.asked) == 1
    assert [t.role for t in panel.traces] == ["min", "median", "max"]
    assert all(not t.v.any() for t in panel.traces)


def test_lines_mode_ranks_outliers_from_the_lines() -> None:
    """With few series, only one deviating well beyond the typical series is named."""
    series = [make_gpu(f"h{i}", g, 60 + g) for i in range(2) for g in range(4)]
    series.append(make_gpu("h2", 1, 61, bump=25))
    (panel,) = tl.panels_fetch(CannedClient(lambda q: series), make_ctx(gpus=9), ["gpu_temp"], START, END)
    assert panel.mode == "lines"
    assert len(panel.traces) == 9
    assert [(o["host"], o["gpu"]) for o in panel.outliers] == [("h2", "1")]  # the others differ by noise


def test_a_panel_whose_signal_the_profile_lacks_says_so() -> None:
    """A node_exporter-only TSDB has no GPU power: the panel is unavailable and sends no query."""
    client = CannedClient(lambda q: [])
    (panel,) = tl.panels_fetch(client, make_ctx("node"), ["gpu_power"], START, END)
    assert panel.mode == "unavailable"
    assert "node profile has no gpu_power" in panel.message
    assert client.asked == []
    fig = tl.figure_build(panel, make_ctx("node"))
    assert fig["layout"]["meta"]["message"].startswith("Not available")


@pytest.mark.parametrize(
    ("profile", "present", "absent"),
    [
        ("amd", {"rdma_retransmits", "gpu_temp"}, {"rdma_transmit_wait"}),
        ("nvidia", {"rdma_transmit_wait"}, set()),
    ],
)
def test_default_panels_add_vendor_extras_only_when_exported(profile, present, absent) -> None:
    """Core panels are always listed; InfiniBand extras only for a profile that has them."""
    panels = set(tl.default_panels(PROFILES[profile]))
    assert present <= panels and not (absent & panels)
    assert "rdma_retransmits" in panels  # core: node_exporter >= 1.11 exports it on NVIDIA clusters


@pytest.mark.parametrize(
    ("text", "expected"),
    [("gpu_temp,loss", ["loss", "gpu_temp"]), ("", None), (None, None), (" loss ,", ["loss"])],
)
def test_parse_panels_orders_and_defaults(text, expected) -> None:
    """Panels come back in stacking order; nothing asked means the defaults."""
    got = tl.parse_panels(text, PROFILES["amd"])
    assert got == (expected or tl.default_panels(PROFILES["amd"]))


def test_parse_panels_refuses_unknown_names() -> None:
    """An unknown panel is an error naming it."""
    with pytest.raises(tl.TimelineError, match="bogus"):
        tl.parse_panels("loss,bogus", PROFILES["amd"])


def test_band_mode_groups_by_the_exporters_labels_and_renames_the_outliers() -> None:
    """At scale no label_replace runs per series: DCGM's Hostname and Ray's instance become host in Python."""
    client = CannedClient(
        lambda q: (
            [make_series({"stat": "median"}, [50] * 241)]
            if '"stat"' in q
            else [make_series({"Hostname": "n12", "gpu": "5"}, [90] * 241)]
        )
    )
    client.scores = [
        InstantSample({"Hostname": "n12", "gpu": "5"}, END, 40.0),
        *make_pack(0.0, {"Hostname": "n01"}),
    ]
    (panel,) = tl.panels_fetch(client, make_ctx("nvidia", gpus=1024), ["gpu_temp"], START, END)
    assert "by (Hostname, gpu)" in client.asked[0] and '"host"' not in client.asked[0]
    assert panel.outliers == [{"host": "n12", "gpu": "5", "name": "n12 GPU 5", "score": 40.0}]

    plan = tl.panel_queries(tl.PANELS["gpu_util"], make_ctx("amd", gpus=1024), START, END)
    assert plan.labels == ("instance", "GpuIndex") and "label_replace(ray" not in plan.queries["band"]
    assert tl_traces._normalise({"instance": "dgx031:55080", "GpuIndex": "3"}, plan.rename) == {
        "host": "dgx031",
        "gpu": "3",
    }


def test_a_context_without_series_counts_is_an_error() -> None:
    """If Prometheus cannot count the GPUs, the timeline fails instead of drawing 1,024 lines per panel: by
    a count query, or by the series list of a signal read raw."""
    from playbooks.prometheus import PrometheusUnreachable

    def answer(promql: str):
        if promql.startswith("count("):
            raise PrometheusUnreachable("connection refused")
        return [make_series({}, range(241))]

    class Unlisted(CannedClient):
        def series(self, matchers, start=None, end=None):
            raise PrometheusUnreachable("connection refused")

    # nvidia-smi's exporter names its GPUs by a join (counted by a query), the amd profile's by labels
    for client, profile in ((CannedClient(answer), "nvidia-smi"), (Unlisted(answer), "amd")):
        client.instant = []
        with pytest.raises(PrometheusUnreachable):
            tl.context_build(client, PROFILES[profile], START, END)


def test_the_context_counts_the_devices_of_a_signal_read_raw_from_the_index() -> None:
    """A signal with one series per device is counted from its series list (no sample decoded): every device
    over the range, as lines mode would draw them, a GPU whose exporter restarted counted once."""

    class Indexed(CannedClient):
        def series(self, matchers, start=None, end=None):
            if matchers[0].startswith("hw_gpu_temperature"):
                gpus = [
                    {"host": f"n{h}", "gpu": str(g), "instance": f"n{h}:1"}
                    for h in range(3)
                    for g in range(8)
                ]
                return [*gpus, {"host": "n0", "gpu": "0", "instance": "n0:2"}]
            if matchers[0].startswith("hw_procs_running"):
                return [{"host": f"n{h}", "instance": f"n{h}:1"} for h in range(3)]
            return []

    client = Indexed(lambda q: [make_series({}, range(241))])
    client.instant = []
    ctx = tl.context_build(client, PROFILES["amd"], START, END)
    assert (ctx.gpu_series, ctx.host_series) == (24, 3)
    assert not any(q.startswith("count(") for q in client.asked), client.asked
    assert tl.panel_queries(tl.PANELS["gpu_temp"], ctx, START, END).mode == "band"


def test_band_mode_skips_the_per_device_aggregation_when_series_are_unique() -> None:
    """One series per GPU: band and score run on the raw selector; the top-k are fetched by exact matchers."""
    ctx = make_ctx("nvidia", gpus=1024, unique=frozenset({"gpu_temp"}))
    client = CannedClient(
        lambda q: (
            [make_series({"stat": "median"}, [50] * 241)]
            if '"stat"' in q
            else [make_series({"Hostname": "n12", "gpu": "5", "instance": "n12:9400"}, [90] * 241)]
        )
    )
    client.scores = [
        InstantSample({"Hostname": "n12", "gpu": "5", "instance": "n12:9400"}, END, 40.0),
        *make_pack(0.0, {"Hostname": "n01", "instance": "n01:9400"}),
    ]
    (panel,) = tl.panels_fetch(client, ctx, ["gpu_temp"], START, END)
    assert all(" by (" not in q for q in client.asked), client.asked
    assert client.asked[-1] == 'DCGM_FI_DEV_GPU_TEMP{Hostname="n12", gpu="5"}'
    assert panel.outliers == [{"host": "n12", "gpu": "5", "name": "n12 GPU 5", "score": 40.0}]
    # A counter with one series per host is rated per series, not summed.
    plan = tl.panel_queries(
        tl.PANELS["tcp_retransmits"], make_ctx(hosts=128, unique=frozenset({"tcp_retransmits"})), START, END
    )
    assert (
        plan.bare
        and "sum by" not in plan.queries["devices"]
        and "rate(hw_tcp_retransmits_total[" in plan.expr
    )


def test_a_signal_with_two_series_on_one_device_keeps_its_aggregation() -> None:
    """The series index over the range decides: a GPU whose exporter restarted under another instance has two
    series, so that signal is not read raw; one series a device is."""
    from playbooks.timeline import context as tl_context

    one = [{"host": "n1", "gpu": "0", "instance": "n1:1"}, {"host": "n1", "gpu": "1", "instance": "n1:1"}]
    restarted = [*one, {"host": "n1", "gpu": "0", "instance": "n1:2"}]
    assert tl_context._is_unique(one, ("host", "gpu"))
    assert not tl_context._is_unique(restarted, ("host", "gpu"))
    assert not tl_context._is_unique([], ("host", "gpu"))

    class Indexed(CannedClient):
        def series(self, matchers, start=None, end=None):
            self.asked.append(f"series {matchers[0]}")
            return restarted if matchers[0].startswith("hw_gpu_temperature") else one

    client = Indexed(lambda q: [make_series({}, range(241))])
    client.instant = []
    ctx = tl.context_build(client, PROFILES["amd"], START, END)
    assert "gpu_temp" not in ctx.unique and "gpu_power" in ctx.unique, ctx.unique
    assert not any("present_over_time" in q for q in client.asked)  # no sample decoded to count series


def _counts(values_by_host: dict[str, list[float]]) -> list[tl.Trace]:
    t = np.arange(len(next(iter(values_by_host.values()))), dtype=float) * 15.0
    return [
        tl.Trace(h, "line", {"host": h}, t, np.asarray(v, dtype=float)) for h, v in values_by_host.items()
    ]


def test_one_blocked_process_more_than_the_pack_names_no_host():
    """Whole-number counts tie at the median: a host with one blocked process more is noise, not an outlier."""
    spec = tl.PANELS["procs_blocked"]
    assert spec.min_outlier >= 2
    hosts = {f"h{i}": [0.0] * 40 for i in range(20)}
    hosts["h3"][10] = hosts["h7"][25] = hosts["h9"][30] = 1.0
    assert tl_traces._rank_outliers(_counts(hosts), 3, spec.min_outlier) == []
    # without the panel's floor, the typical score is 0 and the three blips would be named
    assert len(tl_traces._rank_outliers(_counts(hosts), 3)) == 3


def test_a_host_stuck_in_io_with_many_blocked_processes_is_named():
    """A host far above the pack (12 blocked processes for minutes) clears the floor and is named."""
    hosts = {f"h{i}": [0.0] * 40 for i in range(20)}
    hosts["h3"][10] = 1.0
    hosts["h12"][20:30] = [12.0] * 10
    named = tl_traces._rank_outliers(_counts(hosts), 3, tl.PANELS["procs_blocked"].min_outlier)
    assert [tr.labels["host"] for tr in named] == ["h12"]
    assert named[0].score == 12.0


def test_the_score_query_bar_keeps_the_panel_floor():
    """_scored (the band path, from every series' score) applies the same floor."""
    _, bar = tl_traces._scored(make_pack(0.0), tl.PANELS["procs_running"].min_outlier)
    assert bar == 2.0
