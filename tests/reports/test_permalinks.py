"""Permalinks carry the training step as well as the absolute time: a finding's link (and its preview)
names the step at its onset and opens the timeline there; a pinned chart's link names the steps of its
range and reopens the timeline on it. The step comes from the step series the real diagnosis fetched."""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.urls import reverse

from investigations.models import (
    DataSource,
    DiagnosisRun,
    Finding,
    Investigation,
    InvestigationJob,
    Job,
    PinnedChart,
    PlaybookExecution,
)
from investigations.services import diagnosis as dx
from playbooks.report import fmt_time
from playbooks.triage import triage_job
from reports.models import Membership, Restriction, Team
from reports.services import steps
from tests.investigations.services.test_diagnosis import _run_through

pytestmark = pytest.mark.django_db


@pytest.fixture
def diagnosed(served_job):
    """The thermal job diagnosed through the services, as the worker does (its executions stored)."""
    client, truth, job_dir = served_job("thermal-straggler")
    triage = triage_job(job_dir).to_dict() | {"state": "done"}
    job = Job.objects.create(job_id="perma-thermal", name="thermal", job_dir=str(job_dir), triage=triage)
    DataSource.objects.create(job=job, kind=DataSource.Kind.URL, address=client.base_url)
    investigation = Investigation.objects.create(title="Thermal straggler, linked")
    InvestigationJob.objects.create(investigation=investigation, job=job, role="primary")
    run = _run_through(dx.diagnosis_start(investigation, job))
    assert run.status == "done"
    return investigation, job, run, client


def _stored_step_query(run: DiagnosisRun) -> str:
    for output in PlaybookExecution.objects.filter(run=run).values_list("output", flat=True):
        found = ((output.get("result") or {}).get("results") or {}).get(steps.STEP_QUERY)
        if found:
            return found["promql"]
    raise AssertionError("the diagnosis stored no step series")


def test_a_findings_permalink_carries_the_step_at_its_onset_and_opens_the_timeline_there(
    diagnosed, alice_client
) -> None:
    investigation, job, run, client = diagnosed
    finding = Finding.objects.filter(investigation=investigation, onset__isnull=False).exclude(
        severity="info"
    )[0]
    step = steps.step_at(steps.step_axis(job.pk), finding.onset)
    assert step is not None
    # The step the job's own Prometheus reports at the onset (an instant query), give or take a scrape.
    samples = client.query(_stored_step_query(run), at=finding.onset)
    actual = max(s.value for s in samples)
    assert step > 0 and abs(step - actual) <= 2, (step, actual)

    page = html.unescape(alice_client.get(reverse("reports:page", args=[investigation.pk])).content.decode())
    at = fmt_time(finding.onset)
    assert f"?at={at.replace(' ', '%20').replace(':', '%3A')}&step={step}#finding-" in page
    assert f"Timeline at step {step}, {at}" in page
    timeline = re.search(rf'href="([^"]+)" data-testid="finding-timeline">Timeline at step {step},', page)
    url = urlsplit(timeline.group(1))
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert url.path == reverse("investigations:timeline", args=[investigation.pk])
    assert query["step"] == str(step) and query["x"] == "step" and query["job"] == str(job.pk)
    assert float(query["start"]) < finding.onset < float(query["end"])
    assert alice_client.get(timeline.group(1)).status_code == 200

    linked = alice_client.get(reverse("reports:page", args=[investigation.pk]), {"at": at, "step": step})
    preview = re.search(r'og:description" content="([^"]*)"', linked.content.decode()).group(1)
    assert f"at step {step}, {at}" in html.unescape(preview)

    exported = alice_client.get(reverse("reports:export", args=[investigation.pk, "json"])).json()
    row = next(f for f in exported["findings"] if f["key"].endswith(f":{finding.playbook}:{finding.rule}"))
    assert row["onset_step"] == step and row["onset_unix"] == finding.onset
    markdown = alice_client.get(reverse("reports:export", args=[investigation.pk, "md"])).content.decode()
    assert f"{finding.title} (onset step {step}, {at})" in markdown


def test_a_restricted_investigations_preview_names_no_step(diagnosed, alice, alice_client) -> None:
    investigation, *_ = diagnosed
    investigation.team = "red"
    investigation.save()
    Restriction.objects.create(investigation=investigation)
    Membership.objects.create(team=Team.objects.create(name="red"), user=alice, role="viewer")
    page = reverse("reports:page", args=[investigation.pk])
    linked = alice_client.get(page, {"at": "2026-05-13 00:30:15 UTC", "step": 1200})
    assert linked.status_code == 200
    preview = re.search(r'og:description" content="([^"]*)"', linked.content.decode()).group(1)
    assert preview == "Restricted investigation."


def test_a_pinned_charts_permalink_names_the_steps_of_its_range(diagnosed, alice_client) -> None:
    investigation, job, _run, _client = diagnosed
    axis = steps.step_axis(job.pk)
    start, end = axis.start + 600, axis.start + 1800
    chart = PinnedChart.objects.create(
        investigation=investigation,
        job=job,
        title="Training · perma-thermal",
        view={"panels": ["training"], "start": start, "end": end, "xmode": "step"},
        figure={"data": [{"type": "scatter", "x": [1, 2], "y": [1, 2]}]},
    )
    first, last = steps.step_at(axis, start), steps.step_at(axis, end)
    assert first is not None and last is not None and last > first
    page = html.unescape(alice_client.get(reverse("reports:page", args=[investigation.pk])).content.decode())
    link = re.search(r'<a class="permalink" href="([^"]+)" data-testid="chart-permalink">([^<]+)</a>', page)
    assert f"steps {first}–{last}" in link.group(2) and fmt_time(start) in link.group(2)
    url = urlsplit(link.group(1))
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert query["step"] == f"{first}-{last}" and query["panels"] == "training"
    assert float(query["start"]) == pytest.approx(start, abs=1) and url.fragment == f"pinned-chart-{chart.pk}"
