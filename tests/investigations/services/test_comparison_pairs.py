"""Three or more jobs are compared pair by pair (issue 13): each job with the baseline, or the primary with
each other job, so the investigated job is always compared; the page says which pairs were compared."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.urls import reverse

from investigations.models import Investigation, InvestigationJob
from investigations.services import comparison as cmp
from investigations.services import runs
from investigations.services.comparison_pairs import comparison_pairs

from .test_comparison import _job


@pytest.mark.parametrize(
    "roles, pairs",
    [
        (["baseline", "primary"], [(0, 1)]),
        (["baseline", "primary", "compare"], [(0, 1), (0, 2)]),
        (["baseline", "compare", "primary"], [(0, 2), (0, 1)]),  # the primary's pair first
        (["primary", "compare", "compare"], [(0, 1), (0, 2)]),  # no baseline: the primary with each other
        (["compare", "primary", "compare"], [(1, 0), (1, 2)]),
        (["compare", "compare"], [(0, 1)]),
        (["primary"], []),
    ],
)
def test_each_job_is_paired_with_the_baseline_else_with_the_primary(roles, pairs) -> None:
    assert comparison_pairs(roles) == pairs


@pytest.mark.django_db
def test_with_three_jobs_the_primary_is_compared_with_the_baseline_and_the_page_says_which_pairs(
    served_job, job_factory, client, django_user_model
) -> None:
    """Baseline, a restored primary that leaks, and a second fresh start: the comparison's verdict is the
    primary's pair's (the leak, not "healthy" from the last job), and each job's values and deltas are shown."""
    restored_dir, truth = job_factory("restore-resource-leak")
    baseline_dir = Path(truth["compare_with"])
    other_dir, _ = job_factory("healthy")
    restored = _job(served_job, restored_dir, "restored-3")
    baseline = _job(served_job, baseline_dir, "baseline-3")
    other = _job(served_job, other_dir, "other-3")
    investigation = Investigation.objects.create(title="three jobs")
    for position, (job, role) in enumerate(
        [(restored, "primary"), (baseline, "baseline"), (other, "compare")]
    ):
        InvestigationJob.objects.create(investigation=investigation, job=job, role=role, position=position)

    run = cmp.comparison_start(investigation)
    assert run.request == {"jobs": [baseline.pk, restored.pk, other.pk]}
    assert runs.run_claim(run.pk)
    run = cmp.comparison_execute(run.pk)
    result = run.result
    assert [p["jobs"] for p in result["pairs"]] == [[0, 1], [0, 2]]
    assert result["pairs"][0]["class"] == "restore-resource-leak"
    assert result["diagnosis"]["class"] == "restore-resource-leak"
    assert [j["id"] for j in result["jobs"]] == [
        baseline.triage["job"]["id"],
        restored.triage["job"]["id"],
        other.triage["job"]["id"],
    ]
    procs = next(m for m in result["comparison"]["metrics"] if m["name"] == "procs_running")
    assert len(procs["values"]) == 3 and procs["deltas"][0] is None
    assert procs["deltas"][1] > 50  # the restored job's leak, against the baseline
    assert procs["delta_pct"] == procs["deltas"][1]

    client.force_login(django_user_model.objects.create_user("carol", password="x"))
    body = client.get(reverse("investigations:comparison", args=[investigation.pk]), HTTP_HX_REQUEST="true")
    text = body.content.decode()
    assert 'data-testid="comparison-pairs"' in text
    assert text.count('<li><span class="mono">') >= 2
    assert "Runnable processes" in text and "Δ primary" in text
