"""A first-time user reads the timeline (issue 13): onset labels never overlap and each is clickable, the
step-time panel follows the steady state (checkpoint spikes clipped and marked, the full range one click
away), selecting a finding fades only host/GPU series, the step axis hovers whole steps, the range label
uses the chosen zone, and a panel's data downloads as CSV."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

import pytest
from playwright.sync_api import expect

from .conftest import EXPECT_TIMEOUT_MS
from .timeline_helpers import drawn, open_case, phone_page, plot

# Three more findings whose onsets sit within a minute of the culprit's: their labels would be drawn on
# top of each other.
_CLUSTER = """
import json
from investigations.models import Finding, Investigation
inv = Investigation.objects.get(pk={inv})
f0 = Finding.objects.get(pk={finding})
ids = []
for k, title in enumerate(["Step time +12% above the steady state", "GPU clock down on the same GPU",
                           "Power drops with the clock"]):
    f = Finding.objects.create(investigation=inv, job=f0.job, playbook="gpu-health", rule=f"near-{{k}}",
        severity="info", incident_class="healthy", title=title, hosts=f0.hosts, gpus=f0.gpus,
        onset=f0.onset + 20 * (k + 1))
    ids.append(f.pk)
print(json.dumps(ids))
"""


@pytest.fixture(scope="module")
def cluster(stepwise_app, job_factory):
    job_dir, truth = job_factory("thermal-straggler", 21)
    ids = open_case(stepwise_app, job_dir, truth, "labels in a cluster")
    near = (
        stepwise_app.shell(_CLUSTER.format(inv=ids["inv"], finding=ids["finding"])).strip().splitlines()[-1]
    )
    return ids, truth, near


def _boxes(page, panel: str) -> list[dict]:
    return page.evaluate(
        """p => [...document.querySelectorAll(`#timeline-panel-${p} .annotation`)].map(g => {
             const r = g.getBoundingClientRect();
             return {text: g.textContent, x: r.x, y: r.y, w: r.width, h: r.height};
           })""",
        panel,
    )


def _overlap(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


def test_onset_labels_never_overlap_and_the_first_onset_opens_its_finding(page, cluster) -> None:
    ids, _, _ = cluster
    page.goto(f"/investigations/{ids['inv']}/?panels=gpu_temp")
    page.locator("#timeline").scroll_into_view_if_needed()
    drawn(page, "gpu_temp")
    boxes = [b for b in _boxes(page, "gpu_temp") if b["w"]]
    assert len(boxes) >= 4, boxes
    clashes = [(a["text"], b["text"]) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if _overlap(a, b)]
    assert not clashes, clashes
    assert int(plot(page, "gpu_temp").get_attribute("data-label-rows")) >= 2  # the cluster was stacked
    # The culprit's onset is the first of the cluster: a plain click (no force) reaches it and opens it.
    page.locator("#timeline-panel-gpu_temp .annotation-text", has_text="Culprit found").click()
    row = page.locator(f"#finding-{ids['finding']}")
    expect(row).to_have_class(re.compile("finding-highlight"))
    expect(page.locator(f"#finding-{ids['finding']}-evidence")).not_to_be_empty()


def test_step_time_follows_the_steady_state_and_the_full_range_is_a_click_away(page, cluster) -> None:
    ids, _, _ = cluster
    page.goto(f"/investigations/{ids['inv']}/timeline/?panels=step_time")
    drawn(page, "step_time")
    figure = """() => { const el = document.querySelector('#timeline-panel-step_time .timeline-plot');
        const ys = el.data.filter(t => (t.meta || {}).role !== 'clipped').flatMap(t => t.y.filter(Number.isFinite));
        return {range: el._fullLayout.yaxis.range, max: Math.max(...ys),
                clipped: el.data.filter(t => (t.meta || {}).role === 'clipped').map(t => t.y.length)}; }"""
    steady = page.evaluate(figure)
    assert steady["range"][1] < steady["max"] / 2, steady  # checkpoint spikes do not set the scale
    assert steady["clipped"] and steady["clipped"][0] > 0  # and the clipped points are marked
    expect(page.get_by_test_id("clipped-step_time")).to_contain_text("beyond the steady range clipped")
    page.get_by_test_id("yrange-step_time").click()
    expect(page.get_by_test_id("yrange-step_time")).to_have_text("Steady range")
    full = page.evaluate(figure)
    assert full["range"][1] >= full["max"] and not full["clipped"], full
    assert (
        page.evaluate(
            "() => document.querySelector('#timeline-panel-step_time .timeline-plot').layout.xaxis.hoverformat"
        )
        == ",.0f"
    )  # whole steps on the step axis


def test_the_step_axis_hover_names_the_whole_step_and_when_it_was_reached(page, cluster) -> None:
    ids, _, _ = cluster
    page.goto(f"/investigations/{ids['inv']}/timeline/?panels=step_time")
    drawn(page, "step_time")
    box = page.locator("#timeline-panel-step_time .nsewdrag").bounding_box()
    page.mouse.move(0, 0)
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    hover = page.locator("#timeline-panel-step_time .hoverlayer")
    expect(hover.locator(".legendtitletext")).to_have_text(re.compile(r"^step [\d,]+$"))
    expect(hover).to_contain_text(re.compile(r"reached \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"))
    step = int(hover.locator(".legendtitletext").text_content().removeprefix("step ").replace(",", ""))
    shown = re.search(r"reached (\S+ \S+) UTC", hover.text_content())[1]
    # The time is the step axis's own for that whole step (the server's clock), not a neighbour's.
    clock = page.evaluate(
        "() => document.querySelector('#timeline-panel-step_time .timeline-plot').layout.meta.clock"
    )
    times = {
        datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")
        for x, t in zip(clock["x"], clock["t"], strict=True)
        if math.floor(x + 0.5) == step
    }
    assert shown in times, (step, shown, sorted(times)[:3])


def test_a_selected_finding_fades_only_host_series_and_a_panel_downloads_as_csv(page, cluster) -> None:
    ids, truth, _ = cluster
    host = truth["culprits"][0]["host"]
    page.goto(f"/investigations/{ids['inv']}/timeline/?panels=step_time,gpu_temp&hosts={host}")
    drawn(page, "step_time")
    drawn(page, "gpu_temp")
    opacities = page.evaluate(
        """() => Object.fromEntries(['step_time', 'gpu_temp'].map(p => [p,
             document.querySelector(`#timeline-panel-${p} .timeline-plot`).data
               .filter(t => (t.meta || {}).role !== 'clipped').map(t => [t.meta.host || null, t.opacity])]))"""
    )
    assert all(o == 1 for _, o in opacities["step_time"]), opacities["step_time"]  # no host: never faded
    assert any(h == host and o == 1 for h, o in opacities["gpu_temp"])
    assert any(h and h != host and o < 1 for h, o in opacities["gpu_temp"])
    with page.expect_download() as info:
        page.get_by_test_id("csv-step_time").click()
    download = info.value
    assert download.suggested_filename == "step_time.csv"
    lines = open(download.path()).read().splitlines()
    assert lines[0] == "series,x,y" and len(lines) > 20


def test_the_range_label_uses_the_chosen_zone(browser, stepwise_app, cluster, _signed_in_state) -> None:
    ids, _, _ = cluster
    context = browser.new_context(
        base_url=stepwise_app.base_url, storage_state=str(_signed_in_state), timezone_id="Asia/Tokyo"
    )
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    try:
        page = context.new_page()
        # 2026-05-09 20:00:00 UTC to 20:30:00 UTC, shown on a local time axis in Tokyo (UTC+09:00)
        page.goto(
            f"/investigations/{ids['inv']}/timeline/?panels=step_time&x=time-local&start=1778356800&end=1778358600"
        )
        expect(page.locator(".timeline-range")).to_have_text(
            "2026-05-10 05:00:00 – 2026-05-10 05:30:00 UTC+09:00"
        )
        page.goto(
            f"/investigations/{ids['inv']}/timeline/?panels=step_time&x=time-utc&start=1778356800&end=1778358600"
        )
        expect(page.locator(".timeline-range")).to_have_text("2026-05-09 20:00:00 – 2026-05-09 20:30:00 UTC")
    finally:
        context.close()


def test_on_a_phone_the_onset_labels_stay_a_short_block_and_never_overlap(
    browser, stepwise_app, cluster, _signed_in_state
) -> None:
    """At 390 px the marks' labels (a cluster of onsets, checkpoints, warm-up end) keep to three rows above
    the chart; the labels past them fold into their neighbour ("+N", listed on hover); the culprit's still
    opens its finding."""
    ids, _, _ = cluster
    with phone_page(browser, stepwise_app, _signed_in_state) as page:
        page.goto(f"/investigations/{ids['inv']}/?panels=gpu_temp")
        page.locator("#timeline").scroll_into_view_if_needed()
        drawn(page, "gpu_temp")
        boxes = [b for b in _boxes(page, "gpu_temp") if b["w"]]
        assert len(boxes) >= 4, boxes
        clashes = [
            (a["text"], b["text"]) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if _overlap(a, b)
        ]
        assert not clashes, clashes
        assert int(plot(page, "gpu_temp").get_attribute("data-label-rows")) <= 3
        block = max(b["y"] + b["h"] for b in boxes) - min(b["y"] for b in boxes)
        assert block <= 3 * 16, (block, boxes)  # three rows of 9 px text (was about 200 px)
        notes = page.evaluate(
            "() => document.querySelector('#timeline-panel-gpu_temp .timeline-plot').layout.annotations"
        )
        # the labels past the third row are folded into a neighbour: "+N", their texts on its hover
        folded = [n for n in notes if n.get("visible") is False]
        carriers = [n for n in notes if re.search(r" \+\d+$", n["text"])]
        assert folded and carriers, notes
        hover = " ".join(n["hovertext"] for n in carriers)
        assert all(n["text"] in hover for n in folded)
        assert sum(int(n["text"].rsplit("+", 1)[1]) for n in carriers) == len(folded)
        page.locator("#timeline-panel-gpu_temp .annotation-text", has_text="Culprit found").click()
        expect(page.locator(f"#finding-{ids['finding']}")).to_have_class(re.compile("finding-highlight"))
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390


def test_on_a_phone_the_toolbar_scrolls_away_and_never_covers_a_chart(
    browser, stepwise_app, cluster, _signed_in_state
) -> None:
    """At 390 px the toolbar (x-axis, range, panels, the job's profile) wraps to a fifth of the screen: it
    stays at the top of the timeline instead of following the reader over every chart below it."""
    ids, _, _ = cluster
    with phone_page(browser, stepwise_app, _signed_in_state) as page:
        page.goto(f"/investigations/{ids['inv']}/timeline/")
        drawn(page, "step_time")
        page.evaluate(
            "() => scrollBy(0, document.querySelector('#timeline-panel-step_time .timeline-plot')"
            ".getBoundingClientRect().top - 20)"
        )
        top = page.evaluate(
            """() => { const p = document.querySelector('#timeline-panel-step_time .timeline-plot');
                       const r = p.getBoundingClientRect();
                       return p.contains(document.elementFromPoint(r.left + r.width / 2, r.top + 40)); }"""
        )
        assert top, page.locator(".timeline-toolbar").bounding_box()


def test_a_flat_panel_claims_no_clipped_points(page, cluster) -> None:
    """OOM kills are zero all along a thermal job: no "0 points beyond the steady range clipped", no
    "Full range" button; the chart keeps Plotly's own range."""
    ids, _, _ = cluster
    page.goto(f"/investigations/{ids['inv']}/timeline/?panels=oom_kills,step_time")
    drawn(page, "oom_kills")
    panel = page.locator("#timeline-panel-oom_kills")
    expect(panel).to_have_attribute("data-yrange", "auto")
    expect(panel.locator(".timeline-clipped")).to_have_text("")
    expect(panel.locator(".timeline-yrange")).to_be_hidden()
    drawn(page, "step_time")  # a panel with checkpoint spikes still clips them
    expect(page.locator("#timeline-panel-step_time")).to_have_attribute("data-yrange", "steady")


def test_on_a_phone_a_panel_s_outliers_read_on_one_line(
    browser, stepwise_app, cluster, _signed_in_state
) -> None:
    """At 390 px the outlier names ("outliers: <host> GPU 3") take a line of their own under the panel's
    title instead of a column of a few letters squeezed between the title and the buttons."""
    ids, _, _ = cluster
    with phone_page(browser, stepwise_app, _signed_in_state) as page:
        page.goto(f"/investigations/{ids['inv']}/timeline/?panels=gpu_temp")
        drawn(page, "gpu_temp")
        names = page.get_by_test_id("outliers-gpu_temp")
        expect(names).to_contain_text("outliers: ")
        box = names.bounding_box()
        line = page.evaluate("(e) => parseFloat(getComputedStyle(e).lineHeight)", names.element_handle())
        assert box["height"] <= 1.5 * line, (box, line, names.inner_text())
