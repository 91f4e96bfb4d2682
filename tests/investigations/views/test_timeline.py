"""Timeline views: sign-in and CSRF, the lazy region, one JSON figure per panel, pin and unpin."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from investigations import services
from investigations.models import DataSource, Investigation, InvestigationJob, Job, PinnedChart
from playbooks import tsdb_server

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
FIGURE = {
    "data": [
        {
            "type": "scattergl",
            "name": "dgx034 (outlier)",
            "x": [1, 2],
            "y": [3, 4],
            "meta": {"host": "dgx034"},
        }
    ],
    "layout": {"meta": {"panel": "rdma_retransmits", "mode": "lines"}},
}


@pytest.fixture
def case(db):
    """An investigation whose primary job has a URL data source where nothing listens."""
    job = Job.objects.create(job_id="81234", name="llama")
    DataSource.objects.create(job=job, kind=DataSource.Kind.URL, address="http://127.0.0.1:9")
    investigation = Investigation.objects.create(title="RDMA trouble")
    InvestigationJob.objects.create(investigation=investigation, job=job, role=InvestigationJob.Role.PRIMARY)
    return investigation, job


@pytest.fixture
def served(job_factory, synth_root, settings):
    """An investigation on a registered generated thermal-straggler job (its TSDB served on demand)."""
    settings.STEPWISE_JOB_ROOTS = [synth_root]
    cache.clear()
    job_dir, truth = job_factory("thermal-straggler")
    job, _ = services.job_register(job_dir)
    investigation = Investigation.objects.create(title="slow job")
    InvestigationJob.objects.create(investigation=investigation, job=job, role=InvestigationJob.Role.PRIMARY)
    yield investigation, job, truth
    tsdb_server.reap_leftovers(settings.STEPWISE_TSDB_VIEWS)
    cache.clear()


def _chart(investigation, job=None) -> PinnedChart:
    return PinnedChart.objects.create(
        investigation=investigation, job=job, title="RDMA retransmits", view={"xmode": "step"}, figure=FIGURE
    )


def _urls(investigation, chart) -> list[tuple[str, str]]:
    pk = investigation.pk
    return [
        ("get", reverse("investigations:timeline", args=[pk])),
        ("get", reverse("investigations:timeline_region", args=[pk])),
        ("get", reverse("investigations:timeline_panel", args=[pk, "gpu_temp"])),
        ("post", reverse("investigations:timeline_pin", args=[pk])),
        ("post", reverse("investigations:timeline_unpin", args=[pk, chart.pk])),
    ]


def test_every_timeline_url_needs_a_signed_in_user(client, case) -> None:
    """Anonymous requests to the page, region, panel, pin and unpin go to the login page."""
    investigation, job = case
    chart = _chart(investigation, job)
    for method, url in _urls(investigation, chart):
        response = getattr(client, method)(url)
        assert response.status_code == 302 and "/login/" in response["Location"], url
    assert PinnedChart.objects.filter(pk=chart.pk).exists()


def test_an_unknown_investigation_is_a_404(alice_client, case) -> None:
    """Every timeline URL of an investigation that does not exist is a 404."""
    investigation, job = case
    chart = _chart(investigation, job)
    for method, url in _urls(investigation, chart):
        missing = url.replace(f"/{investigation.pk}/", "/999999/", 1)
        assert getattr(alice_client, method)(missing).status_code == 404, missing


def test_a_job_outside_the_investigation_is_a_404(alice_client, case) -> None:
    """?job= names only the investigation's own jobs."""
    investigation, _ = case
    other = Job.objects.create(job_id="999", name="someone else's")
    url = reverse("investigations:timeline_panel", args=[investigation.pk, "loss"])
    assert alice_client.get(url, {"job": other.pk}).status_code == 404
    assert alice_client.get(url, {"job": "x"}).status_code == 404


def test_pin_and_unpin_need_a_csrf_token(alice, case) -> None:
    """POSTs without the token are refused and change nothing."""
    investigation, job = case
    chart = _chart(investigation, job)
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert (
        client.post(
            reverse("investigations:timeline_pin", args=[investigation.pk]), {"panel": "loss"}
        ).status_code
        == 403
    )
    unpin = reverse("investigations:timeline_unpin", args=[investigation.pk, chart.pk])
    assert client.post(unpin).status_code == 403
    assert PinnedChart.objects.count() == 1


def test_the_page_shows_pinned_charts_without_a_data_source(alice_client, case) -> None:
    """Pinned charts render from their stored figure; the region itself loads lazily."""
    investigation, job = case
    chart = _chart(investigation, job)
    response = alice_client.get(reverse("investigations:timeline", args=[investigation.pk]))
    html = response.content.decode()
    assert response.status_code == 200
    assert f'id="pinned-chart-{chart.pk}"' in html and "dgx034 (outlier)" in html
    assert 'hx-trigger="intersect once"' in html
    assert "vendor/plotly-gl2d.min.js" in html and "timeline.js" in html


def test_the_region_says_when_prometheus_is_unreachable(alice_client, case) -> None:
    """A data source that does not answer: the region renders a message instead of panels."""
    investigation, _ = case
    response = alice_client.get(reverse("investigations:timeline_region", args=[investigation.pk]), **HTMX)
    assert response.status_code == 200
    assert "The timeline cannot be shown" in response.content.decode()


@pytest.mark.parametrize(
    ("panel", "params", "status"),
    [
        ("bogus", {}, 404),
        ("loss", {"x": "wall"}, 400),
        ("loss", {"start": "9", "end": "1"}, 400),
        ("loss", {}, 503),
    ],
)
def test_panel_errors_are_json_with_a_message(alice_client, case, panel, params, status) -> None:
    """Unknown panel, bad view and unreachable Prometheus each get a status and an error text."""
    investigation, _ = case
    response = alice_client.get(
        reverse("investigations:timeline_panel", args=[investigation.pk, panel]), params
    )
    assert response.status_code == status
    assert response.json()["error"]


def test_pin_with_a_bad_view_keeps_nothing_and_says_why(alice_client, case) -> None:
    """A pin the data source cannot serve renders the pinned list with the error, nothing stored."""
    investigation, _ = case
    response = alice_client.post(
        reverse("investigations:timeline_pin", args=[investigation.pk]), {"panel": "loss"}, **HTMX
    )
    assert response.status_code == 400
    assert "alert-error" in response.content.decode()
    assert not PinnedChart.objects.exists()


def test_unpin_removes_only_this_investigations_chart(alice_client, case) -> None:
    """Unpinning deletes the chart; a chart of another investigation is a 404."""
    investigation, job = case
    mine = _chart(investigation, job)
    other = _chart(Investigation.objects.create(title="other"))
    url = reverse("investigations:timeline_unpin", args=[investigation.pk, other.pk])
    assert alice_client.post(url).status_code == 404
    response = alice_client.post(
        reverse("investigations:timeline_unpin", args=[investigation.pk, mine.pk]), **HTMX
    )
    assert response.status_code == 200 and "No pinned charts yet" in response.content.decode()
    assert list(PinnedChart.objects.all()) == [other]


def test_region_and_panel_of_a_served_job(alice_client, served) -> None:
    """The region lists the profile's panels; a panel answers with a Plotly figure naming the hot GPU."""
    investigation, job, truth = served
    region = alice_client.get(reverse("investigations:timeline_region", args=[investigation.pk]), **HTMX)
    html = region.content.decode()
    assert 'id="timeline-panel-gpu_temp"' in html and 'id="timeline-panel-loss"' in html
    assert 'id="timeline-panel-rdma_transmit_wait"' not in html  # an NVIDIA extra, not on an AMD job
    url = reverse("investigations:timeline_panel", args=[investigation.pk, "gpu_temp"])
    body = alice_client.get(url, {"x": "time-utc"}).json()
    (culprit,) = truth["culprits"]
    assert body["figure"]["layout"]["xaxis"]["type"] == "date"
    assert (
        body["figure"]["layout"]["meta"]["outliers"][0]["name"] == f"{culprit['host']} GPU {culprit['gpu']}"
    )
    assert truth["data_range"][0] <= body["start"] < body["end"] <= truth["data_range"][1]


def test_pin_of_a_served_job_stores_the_figure(alice_client, served) -> None:
    """Pinning freezes the figure and the view (panel, range, x-axis) into the investigation."""
    investigation, job, _ = served
    url = reverse("investigations:timeline_pin", args=[investigation.pk])
    response = alice_client.post(url, {"panel": "gpu_clock", "x": "step", "job": job.pk})
    assert response.status_code == 302
    chart = PinnedChart.objects.get()
    assert chart.view["panels"] == ["gpu_clock"] and chart.view["xmode"] == "step"
    assert chart.figure["data"] and chart.job == job
    assert chart.created_by.get_username() == "alice"


# --- compare=: other jobs of the investigation over the panels ----------------------------------------


def test_compare_needs_a_signed_in_user(client, case) -> None:
    """A panel asked with compare= goes to the login page like every other timeline URL."""
    investigation, job = case
    url = reverse("investigations:timeline_panel", args=[investigation.pk, "loss"])
    response = client.get(url, {"compare": job.pk})
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_compare_names_only_other_jobs_of_the_investigation(alice_client, case) -> None:
    """Not numbers: 400; a job of no link here: 404; the job shown: 400; each with its reason, before any query."""
    investigation, job = case
    stranger = Job.objects.create(job_id="31337", name="elsewhere")
    url = reverse("investigations:timeline_panel", args=[investigation.pk, "loss"])
    for params, status, text in (
        ({"compare": "1;drop"}, 400, "compare lists job ids"),
        ({"compare": str(stranger.pk)}, 404, "not a job of this investigation"),
        ({"compare": str(job.pk)}, 400, "is the job this timeline shows"),
        ({"compare": ",".join(str(i) for i in range(1, 7))}, 400, "At most 4 jobs"),
    ):
        response = alice_client.get(url, params)
        assert response.status_code == status, params
        assert text in response.json()["error"]


def test_the_region_offers_the_other_jobs_with_their_role(alice_client, case) -> None:
    """The toolbar lists the investigation's other jobs (checkbox and role), and nothing when there are none."""
    investigation, job = case
    region_url = reverse("investigations:timeline_region", args=[investigation.pk])
    assert alice_client.get(region_url, **HTMX).context["compare_jobs"] == []
    baseline = Job.objects.create(job_id="80000", name="fresh")
    InvestigationJob.objects.create(
        investigation=investigation, job=baseline, role=InvestigationJob.Role.BASELINE
    )
    context = alice_client.get(region_url, **HTMX).context
    assert [(link.job, link.role) for link in context["compare_jobs"]] == [(baseline, "baseline")]


def test_a_served_panel_in_time_mode_says_the_overlay_needs_steps(alice_client, served) -> None:
    """On a time axis the compared job is not drawn and the panel says why; on the step axis its dead data
    source is a note next to the primary's drawn panel, never an error."""
    investigation, job, truth = served
    other = Job.objects.create(job_id="80001", name="down")
    DataSource.objects.create(job=other, kind=DataSource.Kind.URL, address="http://127.0.0.1:9")
    InvestigationJob.objects.create(
        investigation=investigation, job=other, role=InvestigationJob.Role.COMPARE
    )
    url = reverse("investigations:timeline_panel", args=[investigation.pk, "gpu_temp"])
    timed = alice_client.get(url, {"x": "time-utc", "compare": other.pk})
    assert timed.status_code == 200
    meta = timed.json()["figure"]["layout"]["meta"]
    assert "80001 (compare) needs the step axis" in " ".join(meta["notes"]).replace("overlay of ", "")
    stepped = alice_client.get(url, {"x": "step", "compare": other.pk})
    assert stepped.status_code == 200
    figure = stepped.json()["figure"]
    assert figure["data"] and all(d["meta"]["role"] != "compare" for d in figure["data"])
    assert any(n.startswith("80001 (compare)") for n in figure["layout"]["meta"]["notes"])
