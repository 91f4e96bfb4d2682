"""Timeline service: views parsed from query strings, figures from a served generated job, pinned charts
that render after their Prometheus is stopped."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from django.core.cache import cache
from django.template.loader import render_to_string

from investigations import services
from investigations.models import DataSource, Finding, Investigation, InvestigationJob, Job, PinnedChart
from investigations.services import timeline as svc
from playbooks import timeline as tl
from playbooks import tsdb_server

pytestmark = pytest.mark.django_db


@pytest.fixture
def served_case(job_factory, synth_root, settings):
    """Return make(scenario, profile="amd") -> (investigation, job, datasource, truth) on a registered job."""
    settings.STEPWISE_JOB_ROOTS = [synth_root]
    cache.clear()

    def make(scenario: str, profile: str = "amd", **kw):
        job_dir, truth = job_factory(scenario, profile=profile, **kw)
        job, ds = services.job_register(job_dir)
        job.triage = {"state": "done", **_triage(job_dir)}
        job.save()
        investigation = Investigation.objects.create(title=f"{scenario} case")
        InvestigationJob.objects.create(
            investigation=investigation, job=job, role=InvestigationJob.Role.PRIMARY
        )
        return investigation, job, ds, truth

    yield make
    tsdb_server.reap_leftovers(settings.STEPWISE_TSDB_VIEWS)
    cache.clear()


def _triage(job_dir) -> dict:
    from playbooks.triage import triage_job

    return triage_job(job_dir).to_dict()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"x": "wall"}, "x must be one of"),
        ({"panels": "loss,bogus"}, "Unknown panel"),
        ({"start": "200", "end": "100"}, "end must be after start"),
        ({"start": "abc"}, "start must be a number"),
        ({"start": "nan"}, "finite"),
        ({"hosts": "dgx1,a\x00b"}, "Not a host name"),  # any label value is a host, but no control byte
        ({"tz": "5000"}, "offset from UTC"),
        ({"w": "-5"}, "width in pixels"),
        ({"w": "1e9"}, "width in pixels"),
    ],
)
def test_bad_views_are_refused_with_a_message(params, message) -> None:
    """Each bad query-string value gets its own readable error."""
    with pytest.raises(svc.TimelineViewError, match=message.replace("(", r"\(")):
        svc.timeline_view_parse(params)


def test_a_view_round_trips_through_its_query_string() -> None:
    """Panels, range, x-axis mode, time zone and hosts come back as given."""
    view = svc.timeline_view_parse(
        {
            "panels": "gpu_temp,loss",
            "start": "100",
            "end": "200.5",
            "x": "time-local",
            "tz": "-300",
            "hosts": "a,b",
        }
    )
    assert view.panels == ("gpu_temp", "loss")
    assert (view.start, view.end, view.xmode, view.tz_offset_min, view.hosts) == (
        100.0,
        200.5,
        "time-local",
        -300,
        ("a", "b"),
    )
    assert svc.timeline_view_parse({}) == svc.TimelineView()
    assert svc.timeline_view_parse({"w": "730"}).width == 730


def test_a_narrower_panel_is_queried_at_a_coarser_step_and_never_a_finer_one(served_case) -> None:
    """The step follows the panel width the page says it draws (2 px a point): half the width, at least
    twice the step; a wider panel than the default asks for no more points than the default. Cold views."""
    investigation, job, ds, _truth = served_case("thermal-straggler")
    steps = {}
    for width in (0, 380, 730, 4000):
        cache.clear()  # else the default width's cached panels serve the narrower views
        view = svc.TimelineView(width=width)
        built = svc.timeline_figures(investigation, job, ds, view, panels=["gpu_temp", "loss"])
        steps[width] = {k: f["layout"]["meta"]["step"] for k, f in built["figures"].items()}
        session = svc.timeline_open(ds, view)
        try:
            for key, step in steps[width].items():
                points = (session.end - session.start) / step + 1
                assert points <= (tl.points_for_width(width) if width else tl.QUERY_POINTS), (width, key)
        finally:
            session.close()
    assert steps[4000] == steps[0]
    for key in ("gpu_temp", "loss"):
        assert steps[380][key] >= steps[730][key] >= steps[0][key] and steps[380][key] >= 2 * steps[0][key]


def test_without_a_data_source_the_timeline_says_so() -> None:
    """No data source: a TimelineViewError a page can show."""
    investigation = Investigation.objects.create(title="no source")
    with pytest.raises(svc.TimelineViewError, match="no data source"):
        svc.timeline_figures(investigation, None, None, svc.TimelineView())


def test_an_unreachable_prometheus_is_reported() -> None:
    """A URL source where nothing listens: the user is told, nothing is raised past the service."""
    ds = DataSource.objects.create(kind=DataSource.Kind.URL, address="http://127.0.0.1:9")
    with pytest.raises(svc.TimelineViewError):
        svc.timeline_panels(ds)


def test_figures_of_a_served_job_name_the_hot_gpu_and_mark_findings(served_case) -> None:
    """Every default panel is built in one parallel batch; the hot GPU is named and findings are marked."""
    investigation, job, ds, truth = served_case("thermal-straggler")
    (culprit,) = truth["culprits"]
    finding = Finding.objects.create(
        investigation=investigation, job=job, playbook="gpu-health", rule="hot", incident_class="thermal-straggler",
        title="GPU runs hot", hosts=[culprit["host"]], onset=truth["onset"],
    )  # fmt: skip
    built = svc.timeline_figures(investigation, job, ds, svc.TimelineView())
    assert built["profile"] == "amd"
    assert set(built["figures"]) == set(built["panels"])
    temp = built["figures"]["gpu_temp"]["layout"]["meta"]
    assert (temp["outliers"][0]["host"], temp["outliers"][0]["gpu"]) == (culprit["host"], culprit["gpu"])
    marks = temp["marks"]
    assert {m["kind"] for m in marks} >= {"checkpoint", "warmup-end", "finding"}
    assert next(m for m in marks if m["kind"] == "finding")["finding_id"] == finding.pk
    assert built["queries"] >= len(built["panels"])


def test_a_finding_on_a_host_node_exporter_knows_by_its_fqdn_highlights_its_host_panels(served_case) -> None:
    """node_exporter scraped at `gpu-N.cluster.internal:9100`, DCGM and the log say `gpu-N`: the finding's
    host (the diagnosis's name) is what every figure's traces and outliers name, and selecting it (the link's
    `hosts`, as the scheduler's name or the FQDN) draws its host-panel and GPU-panel series in band mode."""
    from playbooks.synth import Exporters

    investigation, job, ds, truth = served_case(
        "host-oom", "nvidia", exporters=Exporters(node_domain=".cluster.internal")
    )
    (culprit,) = {c["host"] for c in truth["culprits"]}
    for typed in (culprit, culprit + ".cluster.internal"):
        view = svc.TimelineView(hosts=(typed,))
        built = svc.timeline_figures(
            investigation, job, ds, view, panels=["gpu_temp", "mem_used"], max_lines=2
        )
        for key, fig in built["figures"].items():
            hosts = {d["meta"]["host"] for d in fig["data"] if d["meta"].get("host")}
            assert hosts <= set(truth["hosts"]), (key, hosts)
            assert culprit in {
                d["meta"]["host"] for d in fig["data"] if d["meta"]["role"] in ("host", "outlier", "top")
            }
            assert {o["host"] for o in fig["layout"]["meta"]["outliers"]} <= set(truth["hosts"])


def test_switching_the_x_axis_reuses_the_cached_panel_data(served_case) -> None:
    """The same panels over the same range drawn against the time send no query; another range does."""
    investigation, job, ds, truth = served_case("thermal-straggler")
    keys = ["loss", "gpu_temp"]
    first = svc.timeline_figures(investigation, job, ds, svc.TimelineView(xmode="step"), panels=keys)
    again = svc.timeline_figures(investigation, job, ds, svc.TimelineView(xmode="time-utc"), panels=keys)
    assert first["queries"] > 0 and again["queries"] == 0
    assert again["figures"]["gpu_temp"]["layout"]["xaxis"]["type"] == "date"
    assert (
        again["figures"]["gpu_temp"]["layout"]["meta"]["outliers"]
        == first["figures"]["gpu_temp"]["layout"]["meta"]["outliers"]
    )
    zoom = svc.TimelineView(xmode="step", step_from=20, step_to=40)
    assert svc.timeline_figures(investigation, job, ds, zoom, panels=keys)["queries"] > 0


def test_a_step_range_becomes_a_time_range(served_case) -> None:
    """A zoom given in steps is converted through the step axis and clamped to the data."""
    investigation, job, ds, truth = served_case("thermal-straggler")
    view = svc.TimelineView(xmode="step", step_from=20, step_to=40)
    built = svc.timeline_figures(investigation, job, ds, view, panels=["loss"])
    xs = [x for x in built["figures"]["loss"]["data"][0]["x"] if x is not None]
    assert min(xs) >= 19 and max(xs) <= 41
    assert truth["data_range"][0] < built["start"] < built["end"] < truth["data_range"][1]
    # the axis is pinned to the zoom: the marks of the whole job would otherwise stretch its autorange
    lo, hi = built["figures"]["loss"]["layout"]["xaxis"]["range"]
    assert lo == pytest.approx(20, abs=1) and hi == pytest.approx(40, abs=1)


def test_a_time_window_pins_the_axis_to_it_and_the_whole_job_autoranges(served_case) -> None:
    """A deep link with start/end shows that window (as UTC date strings); without one, Plotly autoranges."""
    investigation, job, ds, truth = served_case("thermal-straggler")
    first, last = truth["data_range"]
    start, end = first + 1800, first + 3600
    view = svc.TimelineView(xmode="time-utc", start=start, end=end)
    built = svc.timeline_figures(investigation, job, ds, view, panels=["gpu_temp"])
    iso = [dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S") for t in (start, end)]
    assert built["figures"]["gpu_temp"]["layout"]["xaxis"]["range"] == iso
    whole = svc.timeline_figures(
        investigation, job, ds, svc.TimelineView(xmode="time-utc"), panels=["gpu_temp"]
    )
    assert "range" not in whole["figures"]["gpu_temp"]["layout"]["xaxis"]


def test_pinned_chart_renders_after_its_prometheus_is_stopped(served_case, settings) -> None:
    """A pinned figure is stored with its data: the page shows it with the TSDB server gone."""
    investigation, job, ds, truth = served_case("rdma-degradation")
    view = svc.timeline_view_parse({"x": "time-utc"})
    chart = svc.chart_pin(investigation, job, ds, view, "rdma_retransmits")
    assert chart.view["panels"] == ["rdma_retransmits"] and chart.view["xmode"] == "time-utc"
    assert chart.view["start"] >= truth["data_range"][0]
    culprit = truth["culprits"][0]["host"]
    assert any(culprit in d["name"] for d in chart.figure["data"])

    tsdb_server.reap_leftovers(settings.STEPWISE_TSDB_VIEWS)
    cache.clear()
    stored = PinnedChart.objects.get(pk=chart.pk)
    assert svc.pinned_chart_list(investigation) == [stored]
    html = render_to_string("investigations/_timeline.html", {"investigation": investigation, "job": job})
    assert f'id="pinned-chart-{chart.pk}"' in html
    assert f"{culprit} (outlier)" in html
    with pytest.raises(svc.TimelineViewError):
        svc.timeline_panels(DataSource.objects.create(kind=DataSource.Kind.URL, address="http://127.0.0.1:9"))


# --- Compared jobs drawn over the panels, by step ------------------------------------------------------


#: Long enough for checkpoints: the restored run starts past step 0 (at the one nearest a quarter in).
RESTORED = {"hours": 3.0, "gpus": 2}


@pytest.fixture
def restored_pair(job_factory, synth_root, settings):
    """Return (investigation, restored job, its ds, baseline job, its ds, truth, baseline truth), both served."""
    settings.STEPWISE_JOB_ROOTS = [synth_root]
    cache.clear()
    restored_dir, truth = job_factory("restore-resource-leak", **RESTORED)
    base_truth = json.loads((Path(truth["compare_with"]) / "truth.json").read_text())
    restored, rds = services.job_register(restored_dir)
    baseline, bds = services.job_register(Path(truth["compare_with"]))
    investigation = Investigation.objects.create(title="slower after the restore")
    InvestigationJob.objects.create(
        investigation=investigation, job=restored, role=InvestigationJob.Role.PRIMARY
    )
    InvestigationJob.objects.create(
        investigation=investigation, job=baseline, role=InvestigationJob.Role.BASELINE
    )
    yield investigation, restored, rds, baseline, bds, truth, base_truth
    tsdb_server.reap_leftovers(settings.STEPWISE_TSDB_VIEWS)
    cache.clear()


def _overlay(figure: dict) -> dict:
    (trace,) = [d for d in figure["data"] if d["meta"]["role"] == "compare"]
    return trace


def _xs(trace: dict) -> list[float]:
    return [x for x in trace["x"] if x is not None]


def _ys(trace: dict) -> list[float]:
    return [y for y in trace["y"] if y is not None]


def test_a_compared_baseline_is_drawn_by_step_next_to_the_restored_run(restored_pair) -> None:
    """On the restored run's panels the baseline lies on its own steps 0..N and the restored run on
    restored_from+1..N; a host signal is the baseline's median (one trace), a training signal its series;
    seen from the baseline, the restored run's runnable-process median is far above the baseline's."""
    investigation, restored, rds, baseline, bds, truth, base_truth = restored_pair
    assert base_truth["first_step"] == 0 and truth["first_step"] == truth["restored_from"] + 1 > 50
    keys = ["step_time", "procs_running"]
    view = svc.TimelineView(compare=(baseline.pk,))
    built = svc.timeline_figures(investigation, restored, rds, view, panels=keys)
    for key in keys:
        figure = built["figures"][key]
        own = [x for d in figure["data"] if d["meta"]["role"] != "compare" for x in _xs(d)]
        assert truth["restored_from"] < min(own) and max(own) <= truth["last_step"] + 1, key
        base = _overlay(figure)
        assert base["meta"]["job"] == baseline.job_id and base["line"]["dash"] == "dash"
        assert min(_xs(base)) < 5 and max(_xs(base)) >= base_truth["last_step"] - 5, key
        assert min(_xs(base)) < truth["restored_from"] < max(_xs(base))
    assert _overlay(built["figures"]["step_time"])["name"] == f"{baseline.job_id} (baseline)"
    assert _overlay(built["figures"]["procs_running"])["name"] == f"{baseline.job_id} (baseline) median"

    reverse = svc.timeline_figures(
        investigation, baseline, bds, svc.TimelineView(compare=(restored.pk,)), panels=["procs_running"]
    )
    leak = _overlay(reverse["figures"]["procs_running"])
    assert leak["name"] == f"{restored.job_id} (primary) median"
    assert min(_xs(leak)) >= truth["restored_from"] and max(_xs(leak)) <= truth["last_step"] + 1
    fresh = _overlay(built["figures"]["procs_running"])
    assert sum(_ys(leak)) / len(_ys(leak)) > sum(_ys(fresh)) / len(_ys(fresh)) + 10


def test_a_step_zoom_restricts_the_overlay_and_time_modes_say_it_needs_steps(restored_pair) -> None:
    """Zoomed to steps, the baseline is queried over those steps only; on a time axis it is not drawn
    and the panel says the overlay needs the step axis, without querying the baseline."""
    investigation, restored, rds, baseline, bds, truth, base_truth = restored_pair
    lo = truth["restored_from"] + 20
    hi = lo + 40
    view = svc.TimelineView(compare=(baseline.pk,), step_from=lo, step_to=hi)
    built = svc.timeline_figures(investigation, restored, rds, view, panels=["loss"])
    xs = _xs(_overlay(built["figures"]["loss"]))
    assert lo - 2 <= min(xs) and max(xs) <= hi + 2

    plain = svc.timeline_figures(
        investigation, restored, rds, svc.TimelineView(xmode="time-utc"), panels=["gpu_temp"]
    )
    timed = svc.timeline_figures(
        investigation,
        restored,
        rds,
        svc.TimelineView(xmode="time-utc", compare=(baseline.pk,)),
        panels=["gpu_temp"],
    )
    meta = timed["figures"]["gpu_temp"]["layout"]["meta"]
    assert not [d for d in timed["figures"]["gpu_temp"]["data"] if d["meta"]["role"] == "compare"]
    assert "needs the step axis" in " ".join(meta["notes"]) and baseline.job_id in " ".join(meta["notes"])
    assert (
        plain["queries"] > 0 and timed["queries"] == 0
    )  # the primary's panel from the cache, no baseline query


def test_a_compared_job_without_a_working_source_adds_a_note_not_an_error(restored_pair) -> None:
    """A compared job whose Prometheus is down: the primary's panel draws, the panel names the job in a note."""
    investigation, restored, rds, baseline, bds, truth, base_truth = restored_pair
    down = Job.objects.create(job_id="99001", name="down")
    DataSource.objects.create(job=down, kind=DataSource.Kind.URL, address="http://127.0.0.1:9")
    InvestigationJob.objects.create(investigation=investigation, job=down, role=InvestigationJob.Role.COMPARE)
    view = svc.TimelineView(compare=(down.pk, baseline.pk))
    figure = svc.timeline_figures(investigation, restored, rds, view, panels=["step_time"])["figures"][
        "step_time"
    ]
    assert [d["meta"]["job"] for d in figure["data"] if d["meta"]["role"] == "compare"] == [baseline.job_id]
    assert any(d["meta"]["role"] == "line" for d in figure["data"])
    assert any("99001 (compare)" in n for n in figure["layout"]["meta"]["notes"])


def test_only_other_jobs_of_the_investigation_can_be_compared(restored_pair) -> None:
    """A job of another investigation is a 404-kind error, the job shown itself a 400-kind one; ids must be numbers."""
    investigation, restored, rds, baseline, bds, truth, base_truth = restored_pair
    stranger = Job.objects.create(job_id="77", name="elsewhere")
    with pytest.raises(svc.TimelineCompareError, match="not a job of this investigation") as exc:
        svc.compare_links(investigation, restored, [stranger.pk])
    assert exc.value.status == 404
    with pytest.raises(svc.TimelineCompareError, match="is the job this timeline shows") as exc:
        svc.compare_links(investigation, restored, [restored.pk])
    assert exc.value.status == 400
    assert svc.compare_links(investigation, restored, [baseline.pk])[0].role == "baseline"
    assert [link.job for link in svc.compare_choices(investigation, restored)] == [baseline]
    with pytest.raises(svc.TimelineViewError, match="compare lists job ids"):
        svc.timeline_view_parse({"compare": "1,abc"})
    assert svc.timeline_view_parse({"compare": "3, 2,3"}).compare == (3, 2)
