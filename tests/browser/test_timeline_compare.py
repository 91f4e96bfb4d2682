"""A user overlays the baseline on a restored job's timeline in a real browser: ticking the baseline draws it
by step on the step time and runnable-process panels (switching a time axis to step, and saying so), the URL
keeps compare=, and a reload reproduces the view."""

from __future__ import annotations

import json
from pathlib import Path

from playwright.sync_api import expect

from .timeline_helpers import drawn, open_pair, overlay_steps, plot, url_query

PANELS = ("step_time", "procs_running")


def test_ticking_the_baseline_overlays_it_by_step_and_a_reload_keeps_it(
    page, job_factory, stepwise_app
) -> None:
    # Seed 4: a JOB_ID no other browser test registers; 3 h so the restore starts past step 0 (at a checkpoint).
    restored_dir, truth = job_factory("restore-resource-leak", 4, hours=3.0, gpus=2)
    baseline_dir = Path(truth["compare_with"])
    base_truth = json.loads((baseline_dir / "truth.json").read_text())
    assert truth["restored_from"] > 0 and base_truth["first_step"] == 0
    ids = open_pair(stepwise_app, restored_dir, baseline_dir, "slower after the restore")

    page.goto(f"/investigations/{ids['inv']}/timeline/?panels={','.join(PANELS)}&x=time-utc")
    for panel in PANELS:
        drawn(page, panel)
        assert overlay_steps(page, panel) is None
    choice = page.get_by_label(f"{ids['baseline_job_id']} (baseline)")
    expect(choice).not_to_be_checked()

    choice.check()
    expect(page.get_by_test_id("timeline-compare-note")).to_contain_text("switched to step")
    expect(page.get_by_label("step", exact=True)).to_be_checked()
    for panel in PANELS:
        page.locator(f"#timeline-panel-{panel}").scroll_into_view_if_needed()
        page.wait_for_function(
            "p => { const el = document.querySelector(`#timeline-panel-${p} .timeline-plot`);"
            " return el.dataset.xmode === 'step' && (el.data || []).some(d => d.meta && d.meta.role === 'compare'); }",
            arg=panel,
        )
        steps = overlay_steps(page, panel)
        # The baseline lies on its own steps, from 0, under the restored run's (which start past the restore).
        assert min(steps) < 5 and max(steps) >= base_truth["last_step"] - 5, panel
        expect(
            plot(page, panel).locator(".legendtext", has_text=f"{ids['baseline_job_id']} (baseline)")
        ).to_have_count(1)
    expect(
        plot(page, "procs_running").locator(
            ".legendtext", has_text=f"{ids['baseline_job_id']} (baseline) median"
        )
    ).to_have_count(1)
    q = url_query(page)
    assert q["compare"] == str(ids["baseline"]) and q["x"] == "step"
    page.screenshot(path=str(stepwise_app.log_dir / "timeline-compare.png"), full_page=True)

    page.reload()
    expect(page.get_by_label(f"{ids['baseline_job_id']} (baseline)")).to_be_checked()
    for panel in PANELS:
        drawn(page, panel)
        page.wait_for_function(
            "p => (document.querySelector(`#timeline-panel-${p} .timeline-plot`).data || [])"
            ".some(d => d.meta && d.meta.role === 'compare')",
            arg=panel,
        )
    assert url_query(page)["compare"] == str(ids["baseline"])
