"""Shared by the timeline browser tests: an investigation with a culprit finding, and the drawn panels."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect

from .conftest import EXPECT_TIMEOUT_MS

_SETUP = """
import json
from investigations import services
from investigations.services.investigations import job_triage
from investigations.models import Finding, Investigation, InvestigationJob
job, ds = services.job_register({job_dir!r})
job_triage(job.pk)
inv = Investigation.objects.create(title={title!r})
InvestigationJob.objects.create(investigation=inv, job=job, role="primary")
culprit = {culprit!r}
f = Finding.objects.create(investigation=inv, job=job, playbook="gpu-health", rule="hot", severity="warning",
    incident_class={klass!r}, title="Culprit found", hosts=[culprit["host"]],
    gpus=[culprit["gpu"]] if culprit.get("gpu") else [], onset={onset!r})
print(json.dumps({{"inv": inv.pk, "job": job.pk, "finding": f.pk}}))
"""


def open_case(app: Any, job_dir: Path, truth: dict, title: str) -> dict:
    """Return the ids {inv, job, finding} of an investigation on job_dir with a finding on its first culprit."""
    code = _SETUP.format(
        job_dir=str(job_dir),
        title=title,
        culprit=truth["culprits"][0],
        klass=truth["class"],
        onset=truth["onset"],
    )
    return json.loads(app.shell(code).strip().splitlines()[-1])


PHONE = {"width": 390, "height": 844}


@contextmanager
def phone_page(browser: Any, app: Any, signed_in_state: Path, *, touch: bool = False) -> Iterator[Any]:
    """Yield a signed-in page of a 390 px phone (with `touch`, a touch screen); its context is closed afterwards."""
    from .conftest import EXPECT_TIMEOUT_MS

    context = browser.new_context(
        base_url=app.base_url,
        storage_state=str(signed_in_state),
        viewport=PHONE,
        has_touch=touch,
        is_mobile=touch,
    )
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


def plot(page, panel: str):
    return page.locator(f"#timeline-panel-{panel} .timeline-plot")


def drawn(page, panel: str) -> None:
    """Scroll the panel into view and wait until it is drawn. The timeline region loads when it comes into view;
    content loading above it (the diagnosis) can push it out again first, so scroll to it until it has loaded."""
    slot = page.locator(f"#timeline-panel-{panel}")
    deadline = time.monotonic() + EXPECT_TIMEOUT_MS / 1000
    while not slot.count():
        assert time.monotonic() < deadline, f"the timeline region never loaded panel {panel}"
        # The region is swapped out for the panels once loaded, maybe while it is being scrolled to.
        with suppress(PlaywrightError):
            page.locator("#timeline-region").scroll_into_view_if_needed(timeout=1_000)
        page.wait_for_timeout(200)
    slot.scroll_into_view_if_needed()
    expect(plot(page, panel)).to_have_attribute("data-state", "drawn")


def url_query(page) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(page.url).query).items()}


_PAIR = """
import json
from investigations import services
from investigations.models import Investigation, InvestigationJob
restored, _ = services.job_register({restored!r})
baseline, _ = services.job_register({baseline!r})
inv = Investigation.objects.create(title={title!r})
InvestigationJob.objects.create(investigation=inv, job=restored, role="primary")
InvestigationJob.objects.create(investigation=inv, job=baseline, role="baseline", position=1)
print(json.dumps({{"inv": inv.pk, "job": restored.pk, "baseline": baseline.pk, "baseline_job_id": baseline.job_id}}))
"""


def open_pair(app: Any, restored_dir: Path, baseline_dir: Path, title: str) -> dict:
    """Return the ids {inv, job, baseline, baseline_job_id} of an investigation on a restored job and its baseline."""
    code = _PAIR.format(restored=str(restored_dir), baseline=str(baseline_dir), title=title)
    return json.loads(app.shell(code).strip().splitlines()[-1])


def overlay_steps(page, panel: str) -> list[float] | None:
    """Return the x (steps) of a panel's compared-job trace as drawn, or None while it has none."""
    return page.evaluate(
        "p => { const el = document.querySelector(`#timeline-panel-${p} .timeline-plot`);"
        " const t = (el.data || []).find(d => d.meta && d.meta.role === 'compare');"
        " return t ? t.x.filter(x => x !== null) : null; }",
        panel,
    )
