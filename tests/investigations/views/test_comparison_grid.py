"""The small multiples page of an investigation's jobs (issue 13): one column per job (the primary first, or
the jobs asked for, in that order), one row per panel; jobs of another investigation are a 404."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from investigations.models import Investigation, InvestigationJob, Job

from .test_comparison import case as case  # noqa: F401 (the fixture: a restored job and its baseline)

pytestmark = pytest.mark.django_db


def _columns(body: str) -> list[str]:
    return re.findall(r'<figure class="sm-cell" data-job="(\d+)">', body)


def test_one_column_per_job_and_one_row_per_panel(alice_client, case) -> None:
    investigation, restored, baseline = case
    url = reverse("investigations:comparison_grid", args=[investigation.pk])
    body = alice_client.get(url, {"panels": "procs_running,step_time"}).content.decode()
    # Rows in stacking order, each with one cell per job, the primary first.
    assert re.findall(r'data-testid="sm-row-(\w+)"', body) == ["step_time", "procs_running"]
    assert _columns(body) == [str(restored.pk), str(baseline.pk)] * 2
    assert body.count('data-testid="sm-column"') == 2 and "--sm-cols: 2" in body
    asked = alice_client.get(url, {"jobs": f"{baseline.pk},{restored.pk}"}).content.decode()
    assert _columns(asked)[:2] == [str(baseline.pk), str(restored.pk)]  # default panels: step time first


def test_a_job_of_another_investigation_or_a_bad_list_is_refused(alice_client, case) -> None:
    investigation, restored, _ = case
    other = Job.objects.create(job_id="99999")
    elsewhere = Investigation.objects.create(title="other")
    InvestigationJob.objects.create(investigation=elsewhere, job=other)
    url = reverse("investigations:comparison_grid", args=[investigation.pk])
    assert alice_client.get(url, {"jobs": f"{restored.pk},{other.pk}"}).status_code == 404
    assert alice_client.get(url, {"jobs": "1;2"}).status_code == 400
    assert alice_client.get(url, {"panels": "nope"}).status_code == 400
