"""A user reads a job's timeline in a real browser: panels, named outliers, annotations, the step/time
toggle, zoom, deep links, finding selection, and a pinned chart that outlives its Prometheus."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

from playbooks import tsdb_server

from .timeline_helpers import drawn, open_case, plot, url_query


@pytest.fixture(scope="module")
def case(stepwise_app, job_factory):
    """Return make(scenario, profile="amd") -> (ids, truth): an investigation on a generated job, with a finding."""
    made: dict[tuple[str, str], tuple[dict, dict]] = {}
    # A job is keyed by its JOB_ID, which the generator derives from the seed: one seed per case, or a
    # second registration would move the first investigation's job.
    seeds = {
        ("thermal-straggler", "amd"): 1,
        ("rdma-degradation", "amd"): 2,
        ("rdma-degradation", "nvidia"): 3,
    }

    def make(scenario: str, profile: str = "amd") -> tuple[dict, dict]:
        if (scenario, profile) not in made:
            job_dir, truth = job_factory(scenario, seeds[(scenario, profile)], profile)
            made[(scenario, profile)] = (
                open_case(stepwise_app, job_dir, truth, f"{scenario} ({profile})"),
                truth,
            )
        return made[(scenario, profile)]

    return make


def _layout(page, panel: str) -> dict:
    return page.evaluate(
        "p => { const el = document.querySelector(`#timeline-panel-${p} .timeline-plot`);"
        " return {xaxis: {type: el.layout.xaxis.type}, meta: el.layout.meta}; }",
        panel,
    )


def test_thermal_straggler_panels_outliers_and_annotations(page, case, stepwise_app) -> None:
    """Training and GPU panels draw; the hot GPU is named in temperature and clock; marks are there."""
    ids, truth = case("thermal-straggler")
    culprit = truth["culprits"][0]
    name = f"{culprit['host']} GPU {culprit['gpu']}"
    page.goto(
        f"/investigations/{ids['inv']}/timeline/?panels=loss,step_time,gpu_temp,gpu_clock,rdma_retransmits"
    )
    for panel in ("loss", "step_time", "gpu_temp", "gpu_clock", "rdma_retransmits"):
        drawn(page, panel)
    expect(page.locator("#timeline-panel-gpu_power")).to_be_hidden()
    for panel in ("gpu_temp", "gpu_clock"):
        expect(page.get_by_test_id(f"outliers-{panel}")).to_contain_text(name)
        expect(
            page.locator(f"#timeline-panel-{panel} .legendtext", has_text=f"{name} (outlier)")
        ).to_have_count(1)
    marks = page.locator("#timeline-panel-gpu_temp .annotation-text")
    expect(marks.filter(has_text="ckpt 100")).to_have_count(1)
    expect(marks.filter(has_text="warm-up end")).to_have_count(1)
    expect(marks.filter(has_text="Culprit found")).to_have_count(1)
    page.screenshot(path=str(stepwise_app.log_dir / "timeline-thermal.png"), full_page=True)
    print(f"screenshot: {stepwise_app.log_dir / 'timeline-thermal.png'}")


@pytest.mark.parametrize("x", ["step", "time-utc"])
def test_hovering_one_panel_draws_the_crosshair_on_every_panel(page, case, x) -> None:
    """A shared crosshair: the pointer over the loss panel puts a line at the same x on the GPU panels."""
    ids, _ = case("thermal-straggler")
    page.goto(f"/investigations/{ids['inv']}/timeline/?panels=loss,gpu_temp,gpu_clock&x={x}")
    for panel in ("loss", "gpu_temp", "gpu_clock"):
        drawn(page, panel)
    page.locator("#timeline-panel-loss").scroll_into_view_if_needed()
    box = page.locator("#timeline-panel-loss .nsewdrag").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2)
    lines = {
        p: page.locator(f"#timeline-panel-{p} .timeline-crosshair") for p in ("loss", "gpu_temp", "gpu_clock")
    }
    for line in lines.values():
        expect(line).to_be_attached()
        expect(line).to_have_attribute("data-x", re.compile(r"\S"))
    xs = {p: line.get_attribute("data-x") for p, line in lines.items()}
    assert len(set(xs.values())) == 1, xs  # one x on every panel
    # the line sits where that x is on each panel's own axis
    for p in ("gpu_temp", "gpu_clock"):
        expected = page.evaluate(
            "([p, x]) => { const el = document.querySelector(`#timeline-panel-${p} .timeline-plot`);"
            " const xa = el._fullLayout.xaxis; return el._fullLayout._size.l + xa.l2p(xa.d2l(x)); }",
            [p, xs[p] if x == "time-utc" else float(xs[p])],
        )
        left = float(lines[p].evaluate("el => parseFloat(el.style.left)"))
        assert abs(left - expected) < 1.0
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] - 200)  # off the plots: the lines go
    for line in lines.values():
        expect(line).to_be_hidden()


def test_panels_below_the_screen_are_fetched_when_near_and_drawn_when_scrolled_to(page, case) -> None:
    """Every default panel: the first screen's are asked for first and drawn; those within 300 px below are
    fetched but not drawn ("pending"); those further down are not even asked for until scrolled to. Every
    request says the panel's width (`w`)."""
    ids, _ = case("thermal-straggler")
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/timeline/panels/" in r.url else None)
    page.goto(f"/investigations/{ids['inv']}/timeline/")
    expect(plot(page, "loss")).to_have_attribute("data-state", "drawn")
    where = """() => [...document.querySelectorAll('.timeline-panel:not([hidden])')].map(el => {
        const r = el.getBoundingClientRect();
        return {panel: el.dataset.panel, top: r.top, bottom: r.bottom, height: innerHeight,
                state: el.querySelector('.timeline-plot').dataset.state}; })"""
    panels = page.evaluate(where)
    on_screen = [p["panel"] for p in panels if p["top"] < p["height"] and p["bottom"] > 0]
    near = [p["panel"] for p in panels if p["panel"] not in on_screen and p["top"] < p["height"] + 300]
    far = [p for p in panels if p["top"] > p["height"] + 600]
    assert on_screen and near and far, panels
    for panel in on_screen:
        expect(plot(page, panel)).to_have_attribute("data-state", "drawn")
    for panel in near:
        expect(plot(page, panel)).to_have_attribute("data-state", "pending")  # fetched, not drawn
    fetched = [u.split("/timeline/panels/")[1].split("/")[0] for u in asked]
    assert set(fetched[: len(on_screen)]) == set(on_screen), fetched  # the first screen first
    assert not {p["panel"] for p in far} & set(fetched), fetched
    assert all(p["state"] == "idle" for p in far)
    drawn(page, far[-1]["panel"])  # scrolled to: fetched and drawn
    # Each panel says how wide it is drawn: the server asks Prometheus for no more points than it can show.
    width = page.evaluate("() => document.querySelector('.timeline-plot').clientWidth")
    asked_w = {parse_qs(urlsplit(u).query).get("w", [""])[0] for u in asked}
    assert asked_w == {str(width)} and width > 300, (asked_w, width)


def test_the_step_time_toggle_switches_every_x_axis(page, case) -> None:
    """Step is the default x-axis; choosing UTC time redraws every panel on a date axis and goes into the URL."""
    ids, _ = case("thermal-straggler")
    page.goto(f"/investigations/{ids['inv']}/timeline/?panels=loss,gpu_temp")
    drawn(page, "loss")
    drawn(page, "gpu_temp")
    assert _layout(page, "loss")["xaxis"]["type"] == "linear"
    page.get_by_label("time (UTC)").check()
    for panel in ("loss", "gpu_temp"):
        expect(plot(page, panel)).to_have_attribute("data-xmode", "time-utc")
        assert _layout(page, panel)["xaxis"]["type"] == "date"
    assert url_query(page)["x"] == "time-utc"
    page.get_by_label("step", exact=True).check()
    expect(plot(page, "loss")).to_have_attribute("data-xmode", "step")


def test_zoom_requeries_and_a_deep_link_reproduces_the_view(page, case, browser, stepwise_app) -> None:
    """Zooming re-queries a narrower range at a finer step; the URL then opens the same view elsewhere."""
    ids, truth = case("thermal-straggler")
    page.goto(f"/investigations/{ids['inv']}/timeline/?panels=loss,gpu_temp&x=time-utc")
    drawn(page, "loss")
    before = _layout(page, "loss")["meta"]
    start, end = before["start"], before["end"]
    a, b = start + (end - start) * 0.4, start + (end - start) * 0.5
    page.evaluate(
        "([a, b]) => Plotly.relayout(document.querySelector('#timeline-panel-loss .timeline-plot'),"
        " {'xaxis.range[0]': a, 'xaxis.range[1]': b})",
        [a * 1000, b * 1000],
    )
    # A panel below the screen is drawn when scrolled to.
    page.locator("#timeline-panel-gpu_temp").scroll_into_view_if_needed()
    page.wait_for_function(
        "() => { const p = document.querySelector('#timeline-panel-gpu_temp .timeline-plot');"
        " const m = p.layout && p.layout.meta; return m && m.end - m.start < 0.2 * "
        + str(end - start)
        + "; }"
    )
    after = _layout(page, "gpu_temp")["meta"]
    assert after["start"] == pytest.approx(a, abs=1) and after["end"] == pytest.approx(b, abs=1)
    assert after["step"] <= before["step"]
    q = url_query(page)
    assert q["panels"] == "loss,gpu_temp" and q["x"] == "time-utc"
    assert float(q["start"]) == pytest.approx(a, abs=1)

    other = browser.new_context(base_url=stepwise_app.base_url, storage_state=page.context.storage_state())
    try:
        twin = other.new_page()
        twin.goto(page.url)
        drawn(twin, "gpu_temp")
        expect(twin.locator("#timeline-panel-step_time")).to_be_hidden()
        again = _layout(twin, "gpu_temp")
        assert again["xaxis"]["type"] == "date"
        assert again["meta"]["start"] == pytest.approx(a, abs=1) and again["meta"]["end"] == pytest.approx(
            b, abs=1
        )
        expect(twin.get_by_label("time (UTC)")).to_be_checked()
        # ... and shows that window, not the whole job that its checkpoint marks span
        shown = twin.evaluate(
            "() => document.querySelector('#timeline-panel-gpu_temp .timeline-plot')._fullLayout.xaxis.range"
        )
        seconds = [datetime.fromisoformat(s.replace(" ", "T")).replace(tzinfo=UTC).timestamp() for s in shown]
        assert seconds == [pytest.approx(a, abs=2), pytest.approx(b, abs=2)]
    finally:
        other.close()


def test_selecting_a_finding_highlights_its_hosts_and_its_onset_opens_it(page, case) -> None:
    """On the investigation page, a finding row highlights its hosts; its onset mark opens the finding."""
    ids, truth = case("thermal-straggler")
    host = truth["culprits"][0]["host"]
    page.goto(f"/investigations/{ids['inv']}/?panels=gpu_temp")
    page.locator("#timeline").scroll_into_view_if_needed()
    drawn(page, "gpu_temp")
    row = page.locator(f"#finding-{ids['finding']}")
    row.locator("td").nth(1).click()
    expect(page.locator(".timeline-selection")).to_contain_text(host)
    expect(row).to_have_class(re.compile("finding-highlight"))
    page.wait_for_function("h => new URLSearchParams(location.search).get('hosts') === h", arg=host)
    page.wait_for_function(
        "h => { const d = document.querySelector('#timeline-panel-gpu_temp .timeline-plot').data || [];"
        " return d.some(t => t.meta.host === h && t.opacity === 1) && d.some(t => t.meta.host !== h && t.opacity < 1); }",
        arg=host,
    )
    row.locator("td").nth(1).click()  # selecting it again clears the selection
    expect(page.locator(".timeline-selection")).to_be_hidden()
    expect(row).not_to_have_class(re.compile("finding-highlight"))
    # the panels reload without the selection: the mark is clicked on the redrawn figure, not on one being replaced
    page.wait_for_function(
        "() => { const el = document.querySelector('#timeline-panel-gpu_temp');"
        " const p = el.querySelector('.timeline-plot'); const d = p.data || [];"
        " return !el.dataset.loading && p.dataset.state === 'drawn' && d.length > 0"
        " && d.every(t => !(t.opacity < 1)); }"
    )
    page.locator("#timeline-panel-gpu_temp .annotation-text", has_text="Culprit found").click(force=True)
    expect(row).to_have_class(re.compile("finding-highlight"))
    expect(page.locator(f"#finding-{ids['finding']}-evidence")).not_to_be_empty()


@pytest.mark.parametrize(
    ("profile", "panel"), [("amd", "rdma_retransmits"), ("nvidia", "rdma_transmit_wait")]
)
def test_rdma_degraded_host_is_named(page, case, profile, panel) -> None:
    """The degraded host is named in the RDMA panel (AMD) or the InfiniBand panel (NVIDIA)."""
    ids, truth = case("rdma-degradation", profile)
    page.goto(f"/investigations/{ids['inv']}/timeline/?panels=tcp_retransmits,rdma_retransmits,{panel}")
    drawn(page, panel)
    expect(page.get_by_test_id(f"outliers-{panel}")).to_contain_text(truth["culprits"][0]["host"])
    if profile == "nvidia":
        # The NVIDIA profile declares node_exporter's RDMA counters (>= 1.11); this job's exporter has none,
        # so the panel draws nothing and says so (unavailable signal, or no series in the range).
        expect(plot(page, "rdma_retransmits")).to_contain_text(
            re.compile("Not available|no data in this range")
        )


def test_a_pinned_chart_renders_after_its_prometheus_is_stopped(page, case, stepwise_app) -> None:
    """Pin a panel, stop every TSDB server the app started, reload: the pinned chart still draws."""
    ids, truth = case("thermal-straggler")
    page.goto(f"/investigations/{ids['inv']}/timeline/?panels=gpu_clock&x=time-utc")
    drawn(page, "gpu_clock")
    page.locator("#timeline-panel-gpu_clock .timeline-pin").click()
    pinned = page.locator("#pinned-charts .timeline-pinned")
    expect(pinned).to_have_count(1)
    expect(pinned.locator(".timeline-pinned-plot")).to_have_attribute("data-state", "drawn")

    tsdb_server.reap_leftovers(stepwise_app.data_dir.parent / "tsdb-views")
    page.route("**/timeline/region/**", lambda route: route.abort())  # nor can the page reach it again
    page.goto(f"/investigations/{ids['inv']}/")
    chart = page.locator("#pinned-charts .timeline-pinned")
    expect(chart).to_have_count(1)
    expect(chart.locator(".timeline-pinned-plot")).to_have_attribute("data-state", "drawn")
    culprit = truth["culprits"][0]
    expect(
        chart.locator(".legendtext", has_text=f"{culprit['host']} GPU {culprit['gpu']} (outlier)")
    ).to_have_count(1)
    page.screenshot(path=str(stepwise_app.log_dir / "timeline-pinned.png"), full_page=True)
