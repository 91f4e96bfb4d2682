"""The Content-Security-Policy holds in Chromium: an injected inline script is blocked and reported to the
server, pages (the timeline with Plotly and htmx included) load without a single violation, and Plotly
draws an escaped hostile label as text, not as a link."""

from __future__ import annotations

import json
import time

import pytest
from playwright.sync_api import expect

from playbooks.plotly_text import plotly_text

from .timeline_helpers import drawn, open_case

#: Collects every securitypolicyviolation event of the page (init scripts run outside the page's policy).
_LISTEN = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", e => window.__csp.push(
    {directive: e.effectiveDirective, blocked: e.blockedURI, source: e.sourceFile, line: e.lineNumber}));
"""
HOSTILE = '<a href="https://evil.example/">click me</a> <b>bold</b>'


def _violations(page) -> list[dict]:
    return page.evaluate("window.__csp")


def test_an_injected_inline_script_is_blocked_and_reported(page, stepwise_app) -> None:
    page.add_init_script(_LISTEN)
    page.goto("/")
    page.evaluate(
        "() => { const s = document.createElement('script'); s.textContent = 'window.__ran = 1';"
        " document.body.appendChild(s); }"
    )
    page.wait_for_function("window.__csp.length > 0")
    assert page.evaluate("window.__ran") is None
    assert _violations(page)[0]["directive"] == "script-src-elem"
    deadline = time.monotonic() + 20
    while "CSP violation" not in stepwise_app.logs(20000) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "CSP violation" in stepwise_app.logs(20000) and "script-src-elem" in stepwise_app.logs(20000)


@pytest.fixture(scope="module")
def timeline_case(stepwise_app, job_factory) -> dict:
    job_dir, truth = job_factory("thermal-straggler", 17)
    return open_case(stepwise_app, job_dir, truth, "csp timeline")


def test_the_timeline_draws_with_no_violation_and_labels_stay_text(page, timeline_case) -> None:
    page.add_init_script(_LISTEN)
    page.goto(f"/investigations/{timeline_case['inv']}/timeline/?panels=step_time,gpu_temp")
    for panel in ("step_time", "gpu_temp"):
        drawn(page, panel)
    # Plotly (already loaded from self) draws an escaped hostile name as text, under the same policy.
    counts = page.evaluate(
        """([escaped, raw]) => {
            const draw = name => { const d = document.createElement('div'); document.body.appendChild(d);
                return Plotly.newPlot(d, [{x: [1, 2], y: [1, 2], type: 'scatter', name: name, showlegend: true}],
                                      {showlegend: true}).then(() => d); };
            return Promise.all([draw(escaped), draw(raw)]).then(([e, r]) => ({
                escapedLinks: e.querySelectorAll('.legend a').length,
                escapedText: e.querySelector('.legendtext').textContent,
                rawLinks: r.querySelectorAll('.legend a').length}));
        }""",
        [plotly_text(HOSTILE), HOSTILE],
    )
    assert counts["rawLinks"] == 1, "unescaped, Plotly makes a link (what the attack did)"
    assert counts["escapedLinks"] == 0 and counts["escapedText"] == HOSTILE
    expect(page.locator("#timeline-panel-gpu_temp .legend a")).to_have_count(0)
    assert _violations(page) == [], json.dumps(_violations(page))
