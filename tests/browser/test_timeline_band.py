"""A user reads a large job's timeline in a real browser: GPU panels of more than DEFAULT_MAX_LINES series
draw a min/median/max band and name only the straggler; the local-time x-axis follows the browser's zone.

The job is a thermal straggler on 4 hosts x 8 GPUs (32 GPU series, so every GPU panel is in band mode),
on a seed of its own so that its Job row is shared with no other test module.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect

from playbooks.timeline import DEFAULT_MAX_LINES, DEFAULT_TOPK

from .timeline_helpers import drawn, open_case, plot, url_query

NODES, GPUS = 4, 8
SEED = 23
#: Asia/Tokyo has no daylight saving time: its offset is +09:00 all year.
ZONE, ZONE_OFFSET_S = "Asia/Tokyo", 9 * 3600
_HHMM = re.compile(r"^(\d{1,2}):(\d{2})")


@pytest.fixture(scope="module")
def big_case(stepwise_app, job_factory) -> tuple[dict, dict]:
    """Return (ids, truth): an investigation on a 32-GPU thermal-straggler job, with the culprit's finding."""
    job_dir, truth = job_factory("thermal-straggler", SEED, nodes=NODES, gpus=GPUS)
    return open_case(stepwise_app, job_dir, truth, f"thermal-straggler ({NODES * GPUS} GPUs)"), truth


def _figure(page, panel: str) -> dict:
    """Return what the drawn plot holds: its traces (name, meta, first x), mode, outliers, marks (ms), tick labels."""
    return page.evaluate(
        """p => {
          const el = document.querySelector(`#timeline-panel-${p} .timeline-plot`);
          const ms = x => typeof x === "number" ? x : Date.parse(String(x).replace(" ", "T") + "Z");
          return {
            traces: el.data.map(t => ({name: t.name, meta: t.meta, first: ms(t.x.find(x => x !== null))})),
            mode: el.layout.meta.mode,
            xmode: el.layout.meta.xmode,
            outliers: el.layout.meta.outliers,
            marks: Object.fromEntries((el.layout.annotations || []).map(a => [a.text, ms(a.x)])),
            ticks: Array.from(el.querySelectorAll(".xtick text")).map(t => t.textContent),
          };
        }""",
        panel,
    )


@pytest.mark.parametrize(
    ("panel", "named"),
    # Power drops only ~15 %: the straggler deviates most but under OUTLIER_FACTOR x the typical GPU's
    # deviation (lines mode, at 16 GPUs, does not name it either), so it is drawn, not called out.
    [("gpu_temp", True), ("gpu_clock", True), ("gpu_power", False)],
)
def test_many_gpus_draw_a_band_and_name_only_the_straggler(page, big_case, panel, named) -> None:
    """32 GPUs: the panel draws min/median/max and the few most deviating GPUs, never one line per GPU;
    the hot GPU (host and index from truth.json) deviates most and is the only one named as an outlier."""
    ids, truth = big_case
    culprit = truth["culprits"][0]
    hot = (culprit["host"], culprit["gpu"])
    name = f"{culprit['host']} GPU {culprit['gpu']}"
    page.goto(f"/investigations/{ids['inv']}/timeline/?panels={panel}")
    expect(page.locator(".timeline-toolbar")).to_contain_text(f"{NODES * GPUS} GPUs on {NODES} hosts")
    drawn(page, panel)
    expect(page.locator(f"#timeline-panel-{panel}")).to_have_attribute("data-mode", "band")
    fig = _figure(page, panel)
    assert fig["mode"] == "band"

    roles = [t["meta"]["role"] for t in fig["traces"]]
    assert sorted(r for r in roles if r in ("min", "median", "max")) == ["max", "median", "min"]
    legend = page.locator(f"#timeline-panel-{panel} .legendtext")
    expect(legend.filter(has_text="median (band: min..max)")).to_have_count(1)

    # Per-GPU traces: no plain line per series, only the top-k deviating GPUs, the straggler first.
    gpus = [t for t in fig["traces"] if t["meta"].get("gpu") is not None]
    assert "line" not in roles
    assert 1 <= len(gpus) <= DEFAULT_TOPK < NODES * GPUS
    # Series only: the page's helper traces (markers of spikes clipped by the steady-state y-range, the
    # step axis's invisible clock for the hover) are not lines.
    series = [t for t in fig["traces"] if t["meta"]["role"] not in ("clipped", "clock")]
    assert len(series) <= 3 + DEFAULT_TOPK <= DEFAULT_MAX_LINES
    assert (gpus[0]["meta"]["host"], gpus[0]["meta"]["gpu"]) == hot
    # Healthy GPUs among the top k are context lines, never named.
    healthy = [t for t in gpus if (t["meta"]["host"], t["meta"]["gpu"]) != hot]
    assert all(t["meta"]["role"] == "top" and t["name"].endswith("(top deviation)") for t in healthy)

    if named:
        assert [(o["host"], o["gpu"]) for o in fig["outliers"]] == [hot]
        expect(page.get_by_test_id(f"outliers-{panel}")).to_have_text(f"outliers: {name}")
        expect(legend.filter(has_text="(outlier)")).to_have_count(1)
        expect(legend.filter(has_text=f"{name} (outlier)")).to_have_count(1)
    else:
        assert fig["outliers"] == []
        expect(page.get_by_test_id(f"outliers-{panel}")).to_have_text("")
        expect(legend.filter(has_text="(outlier)")).to_have_count(0)
        expect(legend.filter(has_text=f"{name} (top deviation)")).to_have_count(1)


def _hhmm(labels: list[str]) -> list[int]:
    """Return the minute of the day of each tick label that starts with HH:MM."""
    found = [_HHMM.match(text) for text in labels]
    return [int(m[1]) * 60 + int(m[2]) for m in found if m]


def _hover_time(tab, panel: str, zone: str) -> datetime:
    """Return the time the unified hover label shows with the pointer at the middle of the panel's plot;
    the label names its zone ("UTC", "UTC+09:00")."""
    box = tab.locator(f"#timeline-panel-{panel} .nsewdrag").bounding_box()
    tab.mouse.move(0, 0)
    tab.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    title = tab.locator(f"#timeline-panel-{panel} .hoverlayer .legendtitletext")
    expect(title).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d " + re.escape(zone) + "$"))
    return datetime.strptime(title.text_content().strip()[:19], "%Y-%m-%d %H:%M:%S")


def test_local_time_axis_follows_the_browser_zone_and_survives_a_reload(
    page, browser, stepwise_app, big_case
) -> None:
    """In a Tokyo browser, "time (local)" draws every point, mark, tick label and hover label 9 h later
    than "time (UTC)" does; the URL holds the mode and a reload keeps it."""
    ids, truth = big_case
    onset_ms = truth["onset"] * 1000
    tokyo = browser.new_context(
        base_url=stepwise_app.base_url,
        storage_state=page.context.storage_state(),
        timezone_id=ZONE,
        viewport={"width": 1360, "height": 900},
    )
    try:
        tab = tokyo.new_page()
        assert tab.evaluate("() => new Date().getTimezoneOffset()") == -ZONE_OFFSET_S // 60
        tab.goto(f"/investigations/{ids['inv']}/timeline/?panels=loss,gpu_temp&x=time-utc")
        for panel in ("loss", "gpu_temp"):
            drawn(tab, panel)
        utc = {panel: _figure(tab, panel) for panel in ("loss", "gpu_temp")}
        # UTC mode ignores the browser's zone: the finding's mark sits at its onset.
        assert utc["gpu_temp"]["marks"]["Culprit found"] == pytest.approx(onset_ms, abs=1)
        hover_utc = _hover_time(tab, "loss", "UTC")
        # ... and so does what the user reads: the hover label's UTC time lies inside the job's data (Plotly
        # would show epoch numbers in the browser's zone, 9 h off; the figure carries date strings).
        first, last = truth["data_range"]
        assert first <= hover_utc.replace(tzinfo=UTC).timestamp() <= last

        expect(tab.get_by_test_id("timeline-zone")).to_have_text("UTC+09:00")  # the toolbar names the zone
        tab.get_by_label("time (local)").check()
        for panel in ("loss", "gpu_temp"):
            expect(plot(tab, panel)).to_have_attribute("data-xmode", "time-local")
        assert url_query(tab)["x"] == "time-local"
        local = {panel: _figure(tab, panel) for panel in ("loss", "gpu_temp")}
        _assert_shifted(utc, local, onset_ms)
        # The same point under the pointer reads 9 h later.
        assert _hover_time(tab, "loss", "UTC+09:00") - hover_utc == timedelta(seconds=ZONE_OFFSET_S)

        tab.reload()
        for panel in ("loss", "gpu_temp"):
            drawn(tab, panel)
            expect(plot(tab, panel)).to_have_attribute("data-xmode", "time-local")
        expect(tab.get_by_label("time (local)")).to_be_checked()
        assert url_query(tab)["x"] == "time-local"
        _assert_shifted(utc, {panel: _figure(tab, panel) for panel in ("loss", "gpu_temp")}, onset_ms)
        assert _hover_time(tab, "loss", "UTC+09:00") - hover_utc == timedelta(seconds=ZONE_OFFSET_S)
    finally:
        tokyo.close()


def _assert_shifted(utc: dict, local: dict, onset_ms: float) -> None:
    shift_ms = ZONE_OFFSET_S * 1000
    for panel in ("loss", "gpu_temp"):
        before, after = utc[panel], local[panel]
        assert after["xmode"] == "time-local"
        assert [t["name"] for t in after["traces"]] == [t["name"] for t in before["traces"]]
        for a, b in zip(before["traces"], after["traces"], strict=True):
            assert b["first"] - a["first"] == pytest.approx(shift_ms, abs=1), a["name"]
        assert after["marks"]["Culprit found"] == pytest.approx(onset_ms + shift_ms, abs=1)
        assert set(after["marks"]) == set(before["marks"])
        for label, x in before["marks"].items():
            assert after["marks"][label] - x == pytest.approx(shift_ms, abs=1), label
        # The labels the user reads: each local tick is a UTC tick read 9 h later.
        ticks_utc, ticks_local = _hhmm(before["ticks"]), _hhmm(after["ticks"])
        assert len(ticks_utc) >= 2 and len(ticks_local) >= 2, (before["ticks"], after["ticks"])
        assert sorted((m + ZONE_OFFSET_S // 60) % 1440 for m in ticks_utc) == sorted(ticks_local)
