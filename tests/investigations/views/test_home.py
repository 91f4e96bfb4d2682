"""The home page lists investigations newest first, filters and searches them, in place with htmx or without JS."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from django.utils import timezone

from investigations.models import DiagnosisRun, Investigation, TaskStatus
from investigations.views.investigations import culprits_text

from .investigation_helpers import HTMX, assert_login_required, make_investigation

pytestmark = pytest.mark.django_db


def test_it_needs_a_login(client) -> None:
    assert_login_required(client, reverse("investigations:home"))


def test_it_lists_newest_first_with_the_primary_job(alice_client) -> None:
    make_investigation("Older one", job_id="100")
    make_investigation("Newer one", job_id="200", cluster="mi355", incident_class="hang")
    body = alice_client.get(reverse("investigations:home")).content.decode()
    assert body.index("Newer one") < body.index("Older one")
    assert "mi355" in body and ">hang<" in body and ">200<" in body


@pytest.mark.parametrize(
    "query, shown, hidden",
    [
        ({"status": "resolved"}, "Beta", "Alpha"),
        ({"cluster": "east"}, "Alpha", "Beta"),
        ({"class": "hang"}, "Beta", "Alpha"),
        ({"q": "alph"}, "Alpha", "Beta"),
        ({"q": "7777"}, "Beta", "Alpha"),  # a job id
        ({"q": "gpu-b12"}, "Beta", "Alpha"),  # a host of the triage's node list
    ],
)
def test_it_filters_and_searches(alice_client, query, shown: str, hidden: str) -> None:
    make_investigation("Alpha straggler", job_id="5555", cluster="east", incident_class="tgs-degradation")
    make_investigation(
        "Beta hang",
        job_id="7777",
        cluster="west",
        status="resolved",
        incident_class="hang",
        triage={"state": "done", "nodes": ["gpu-b11", "gpu-b12"]},
    )
    body = alice_client.get(reverse("investigations:home"), query).content.decode()
    assert shown in body and hidden not in body


def test_htmx_gets_only_the_table(alice_client) -> None:
    make_investigation("Alpha")
    body = alice_client.get(reverse("investigations:home"), {"q": "alp"}, **HTMX).content.decode()
    assert body.lstrip().startswith('<section id="investigation-table"')
    assert "<html" not in body


def test_it_paginates_by_25(alice_client) -> None:
    Investigation.objects.bulk_create(Investigation(title=f"inv {i:02d}") for i in range(30))
    first = alice_client.get(reverse("investigations:home")).content.decode()
    second = alice_client.get(reverse("investigations:home"), {"page": 2}).content.decode()
    assert first.count('href="/investigations/') - first.count("/investigations/new/") == 25
    assert "Page 2 of 2" in second and "Older" not in second


def test_an_empty_list_says_how_to_start(alice_client) -> None:
    body = alice_client.get(reverse("investigations:home")).content.decode()
    assert "No investigations yet" in body and reverse("investigations:new") in body


def test_a_history_restore_gets_the_whole_page(alice_client) -> None:
    body = alice_client.get(
        reverse("investigations:home"), {"q": "x"}, HTTP_HX_HISTORY_RESTORE_REQUEST="true", **HTMX
    ).content.decode()
    assert "<html" in body and 'id="investigation-table"' in body


def test_search_finds_a_host_that_only_discovery_saw(alice_client) -> None:
    make_investigation(
        "Live job",
        source={"kind": "url", "address": "http://127.0.0.1:9090", "discovery": {"hosts": ["gpu-z77"]}},
    )
    make_investigation("Other job", job_id="2")
    body = alice_client.get(reverse("investigations:home"), {"q": "z77"}).content.decode()
    assert "Live job" in body and "Other job" not in body


def test_each_row_names_the_culprits_of_its_latest_diagnosis(alice_client) -> None:
    """The list says who did it: the primary job's latest finished diagnosis, not a comparison or older run."""
    hot = make_investigation("Slow steps", job_id="300")
    job = hot.jobs.get()
    culprits = [{"host": "tx-hpc-0242", "gpu": "3"}, {"host": "tx-hpc-0243", "gpu": None}]

    def run(found: list, **fields) -> DiagnosisRun:
        return DiagnosisRun.objects.create(
            investigation=hot, job=job, status=TaskStatus.DONE, finished=timezone.now(),
            result={"diagnosis": {"class": "thermal-straggler", "culprits": found}}, **fields,
        )  # fmt: skip

    run(
        [{"host": "old-host", "gpu": None}],
    )
    run(culprits)
    run([{"host": "compared", "gpu": None}], kind=DiagnosisRun.Kind.COMPARISON)
    DiagnosisRun.objects.create(investigation=hot, job=job, status=TaskStatus.RUNNING)  # not finished
    make_investigation("Nothing yet", job_id="301")
    body = alice_client.get(reverse("investigations:home")).content.decode()
    cells = re.findall(r'data-testid="culprits">([^<]*)<', body)
    assert cells == ["—", "tx-hpc-0242 GPU 3, tx-hpc-0243"]  # newest first


def test_culprits_text_caps_the_list() -> None:
    many = [{"host": f"h{i}", "gpu": None} for i in range(5)]
    assert culprits_text(many) == "h0, h1, h2 +2"
    assert culprits_text(None) == "" and culprits_text([{"gpu": "1"}]) == ""
