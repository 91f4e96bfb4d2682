"""Over the source's query budget, a timeline panel's queries queue behind the other users' and workers'
queries, and the panel says so. A real served job; the other user is a thread holding the only slot."""

from __future__ import annotations

import threading
import time

import pytest
from django.core.cache import cache
from django.urls import reverse

from investigations import services
from investigations.models import Investigation, InvestigationJob
from playbooks import tsdb_server
from playbooks.budget import SourceBudget

pytestmark = pytest.mark.django_db


@pytest.fixture
def served(job_factory, synth_root, settings, tmp_path):
    settings.STEPWISE_JOB_ROOTS = [synth_root]
    settings.STEPWISE_BUDGET_DIR = tmp_path / "budget"
    settings.STEPWISE_SOURCE_MAX_QUERIES = 1
    cache.clear()
    job_dir, _truth = job_factory("thermal-straggler")
    job, ds = services.job_register(job_dir)
    investigation = Investigation.objects.create(title="busy head node")
    InvestigationJob.objects.create(investigation=investigation, job=job, role=InvestigationJob.Role.PRIMARY)
    yield investigation, ds
    tsdb_server.reap_leftovers(settings.STEPWISE_TSDB_VIEWS)
    cache.clear()


def test_a_panel_queued_behind_another_users_query_says_so(alice_client, served, settings) -> None:
    """The only slot is taken (another user's query): the panel's queries wait in line until it is
    released, then the panel is drawn and its notes say it queued and why."""
    investigation, ds = served
    with services.datasource_client(ds) as client:  # serve the job, learn the URL its queries go to
        url = client.base_url
    budget = SourceBudget(settings.STEPWISE_BUDGET_DIR, url, 1)
    taken, saw_queue = threading.Event(), []

    def other_user() -> None:
        with budget.slot():
            taken.set()
            deadline = time.monotonic() + 60
            while not budget.queued() and time.monotonic() < deadline:
                time.sleep(0.01)
            saw_queue.append(budget.queued())

    holder = threading.Thread(target=other_user)
    holder.start()
    taken.wait(30)
    resp = alice_client.get(reverse("investigations:timeline_panel", args=[investigation.pk, "gpu_temp"]))
    holder.join(30)
    assert saw_queue == [True]  # the page's query was waiting in line while the other held the slot
    assert resp.status_code == 200
    figure = resp.json()["figure"]
    assert figure["data"]
    notes = " ".join(figure["layout"]["meta"]["notes"])
    assert "Queued" in notes and "at most 1 queries at a time" in notes

    again = alice_client.get(reverse("investigations:timeline_panel", args=[investigation.pk, "gpu_temp"]))
    assert again.json()["queries"] == 0 and not again.json()["figure"]["layout"]["meta"]["notes"]


def test_a_user_alone_never_queues_behind_their_own_queries(alice_client, served) -> None:
    """One slot and nobody else: the view's own queries (the context's, the panel's) run one at a time
    instead of queueing for the slot, so the panel does not say it queued."""
    investigation, _ = served
    resp = alice_client.get(reverse("investigations:timeline_panel", args=[investigation.pk, "gpu_temp"]))
    assert resp.status_code == 200 and resp.json()["queries"] > 1
    figure = resp.json()["figure"]
    assert figure["data"] and not any("Queued" in n for n in figure["layout"]["meta"]["notes"])
