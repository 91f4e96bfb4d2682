"""Timeline service: views parsed from query strings, figures from a served generated job, pinned charts
that render after their Prometheus is stopped."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.template.loader import render_to_string

from investigations import services
from investigations.models import DataSource, Finding, Investigation, InvestigationJob, PinnedChart
from investigations.services import timeline as svc
from playbooks import tsdb_server

pytestmark = pytest.mark.django_db


@pytest.fixture
def served_case(job_factory, synth_root, settings):
    """Return make(scenario, profile="amd") -> (investigation, job, datasource, truth) on a registered job."""
    settings.STEPWISE_JOB_ROOTS = [synth_root]
    cache.clear()

    def make(scenario: str, profile: str = "amd"):
        job_dir, truth = job_factory(scenario, profile=profile)
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
        ({"hosts": "dgx1,$(rm)"}, "Not a host name"),
        ({"tz": "5000"}, "offset from UTC"),
    ],
)
def test_bad_views_are_refused_with_a_message(params, message) -> None:
    """Each bad query-string value gets its own readable error."""
    with pytest.raises(svc.TimelineError, match=message.replace("(", r"\(")):
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


def test_without_a_data_source_the_timeline_says_so() -> None:
    """No data source: a TimelineError a page can show."""
    investigation = Investigation.objects.create(title="no source")
    with pytest.raises(svc.TimelineError, match="no data source"):
        svc.timeline_figures(investigation, None, None, svc.TimelineView())


def test_an_unreachable_prometheus_is_reported() -> None:
    """A URL source where nothing listens: the user is told, nothing is raised past the service."""
    ds = DataSource.objects.create(kind=DataSource.Kind.URL, address="http://127.0.0.1:9")
    with pytest.raises(svc.TimelineError):
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
    assert 19 <= min(xs) and max(xs) <= 41
    assert truth["data_range"][0] < built["start"] < built["end"] < truth["data_range"][1]


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
    with pytest.raises(svc.TimelineError):
        svc.timeline_panels(DataSource.objects.create(kind=DataSource.Kind.URL, address="http://127.0.0.1:9"))
