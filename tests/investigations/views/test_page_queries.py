"""Database queries per page: the list, an investigation's page and its report cost the same number of
queries whether they show one row of each kind or many (no query per row: the load test's pages)."""

from __future__ import annotations

import itertools

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from investigations.models import (
    DiagnosisRun,
    Finding,
    InvestigationJob,
    Job,
    PinnedChart,
    TaskStatus,
)

from .investigation_helpers import HTMX, make_investigation

pytestmark = pytest.mark.django_db

TRIAGE = {"state": "done", "crash": None}
_IDS = itertools.count(1000)


def _investigations(count: int, rows: int) -> list[int]:
    """Return `count` investigations, each with `rows` findings, pinned charts, compared jobs and runs."""
    pks = []
    for i in range(count):
        inv = make_investigation(f"incident {i}", job_id=str(next(_IDS)), cluster="c", triage=TRIAGE)
        job = inv.jobs.get()
        for r in range(rows):
            other = Job.objects.create(job_id=str(next(_IDS)), cluster="c", triage=TRIAGE)
            InvestigationJob.objects.create(investigation=inv, job=other, role="compare")
            culprits = [{"host": f"h{r}", "gpu": str(r)}]
            run = DiagnosisRun.objects.create(
                investigation=inv, job=job, status=TaskStatus.DONE, finished=timezone.now(),
                result={"diagnosis": {"class": "thermal-straggler", "culprits": culprits}},
            )  # fmt: skip
            finding = Finding.objects.create(
                investigation=inv, job=job, run=run, playbook="gpu-health", rule=f"hot-{r}",
                incident_class="thermal-straggler", severity="warning", title=f"GPU {r} hot", hosts=[f"h{r}"],
                gpus=[str(r)], onset=1_773_000_000.0 + r,
            )  # fmt: skip
            PinnedChart.objects.create(
                investigation=inv,
                job=job,
                finding=finding,
                title=f"chart {r}",
                figure={"data": [], "layout": {}},
            )
        pks.append(inv.pk)
    return pks


def _queries(client, url: str) -> int:
    # The diagnosis region is an htmx region of the investigation's page (a plain GET is sent to the page).
    headers = HTMX if url.endswith("/diagnosis/") else {}
    client.get(
        url, **headers
    )  # the first visit may create rows (a report); the next ones are what users wait for
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, **headers)
    assert response.status_code == 200, url
    return len(captured.captured_queries)


@pytest.mark.parametrize(
    "page", ["/", "/investigations/{pk}/", "/investigations/{pk}/report/", "/investigations/{pk}/diagnosis/"]
)
def test_a_page_costs_the_same_queries_for_one_row_or_many(alice_client, page) -> None:
    """One row of each kind or six (and 2 or 8 investigations listed): the page sends as many queries."""
    few = _investigations(1, rows=1)[0]
    many = _investigations(7, rows=6)[0]
    cost_few = _queries(alice_client, page.format(pk=few))
    cost_many = _queries(alice_client, page.format(pk=many))
    assert cost_many == cost_few, (page, cost_few, cost_many)


def test_the_report_page_reads_the_diagnosis_once_per_purpose(alice_client) -> None:
    """The ticket block reads the verdict, not every input of the machine's text a second time."""
    (pk,) = _investigations(1, rows=2)
    alice_client.get(f"/investigations/{pk}/report/")
    with CaptureQueriesContext(connection) as captured:
        alice_client.get(f"/investigations/{pk}/report/")
    runs = [q for q in captured.captured_queries if 'FROM "investigations_diagnosisrun"' in q["sql"]]
    assert len(runs) <= 8, len(runs)


#: What each page sends at most, with many rows of each kind (the load test's pages, bench/load_test.py):
#: the session and user, the investigation and its access, then a fixed number of reads per region.
PAGE_QUERIES = {
    "/": 6,
    "/investigations/{pk}/": 14,
    "/investigations/{pk}/report/": 30,
    # The report's live poll, every few seconds per reader: who is here, nothing changed.
    "/investigations/{pk}/report/live/": 16,
}


@pytest.mark.parametrize("page", PAGE_QUERIES)
def test_a_page_stays_within_its_queries(alice_client, django_assert_max_num_queries, page) -> None:
    """The report reads what changed in one query (the live tokens and the PDF's revision share it), the
    machine text's inputs only when they changed, and the step series alone (not every playbook's output)."""
    pk = _investigations(7, rows=6)[0]
    url = page.format(pk=pk)
    alice_client.get(url)  # the first visit fills the report
    with django_assert_max_num_queries(PAGE_QUERIES[page]):
        assert alice_client.get(url).status_code == 200
