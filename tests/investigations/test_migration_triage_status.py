"""Migration 0010 fills Job.triage_status from the state inside Job.triage, for rows in every state."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("investigations", "0009_timeline_note")]
AFTER = [("investigations", "0010_job_triage_status")]

CONTRACT = {"job": {"job_id": "1"}, "status": "failed", "class": "host-oom"}


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    if targets is None:  # every app at its newest migration, as every later test expects
        targets = executor.loader.graph.leaf_nodes()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_each_job_gets_the_status_its_triage_json_says() -> None:
    Job = _migrate(BEFORE).get_model("investigations", "Job")
    triages = {
        "never": {},
        "queued": {"state": "queued", "queued": "2026-11-20T14:05:00+00:00"},
        "running": {"state": "running", "started": "2026-11-20T14:05:00+00:00", "last_good": CONTRACT},
        "done": CONTRACT | {"state": "done", "finished": "2026-11-20T14:06:00+00:00"},
        "failed": {"state": "failed", "error": "unreadable", "last_good": CONTRACT},
        "none": {"state": "none", "error": "This job has no log: upload it to triage it."},
        "stateless": CONTRACT,  # a contract stored without a state (by hand, or before states existed)
        "garbage": {"state": "exploded"},
    }
    pks = {name: Job.objects.create(job_id=name, triage=t).pk for name, t in triages.items()}

    Job = _migrate(AFTER).get_model("investigations", "Job")
    got = {name: Job.objects.get(pk=pk).triage_status for name, pk in pks.items()}
    assert got == {
        "never": "",
        "queued": "queued",
        "running": "running",
        "done": "done",
        "failed": "failed",
        "none": "none",
        "stateless": "done",
        "garbage": "",
    }
    assert Job.objects.get(pk=pks["running"]).triage == triages["running"]  # the JSON is left as it was

    _migrate(BEFORE)  # and back: the column goes, the JSON stays
    assert (
        _migrate(BEFORE).get_model("investigations", "Job").objects.get(pk=pks["failed"]).triage
        == triages["failed"]
    )
    _migrate(None)
