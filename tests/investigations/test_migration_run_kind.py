"""Migration 0006 gives every run its kind and takes the request and the working state out of `result`."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("investigations", "0005_run_heartbeat")]
AFTER = [("investigations", "0006_diagnosisrun_kind_request_stage_planned")]

SOURCE = {"url": "http://127.0.0.1:9090", "profile": "amd", "hosts": ["a"], "gpu_model": "MI300X"}


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_old_runs_are_split_into_kind_request_progress_and_output() -> None:
    old = _migrate(BEFORE)
    Investigation, Job = (
        old.get_model("investigations", "Investigation"),
        old.get_model("investigations", "Job"),
    )
    Run = old.get_model("investigations", "DiagnosisRun")
    investigation = Investigation.objects.create(title="old runs")
    job = Job.objects.create(job_id="1")
    common = {"investigation": investigation, "job": job}
    comparison = Run.objects.create(
        **common,
        playbooks=["comparison"],
        window={"jobs": [3, 1]},
        status="done",
        result={"comparison": {"metrics": []}},
    )
    queued = Run.objects.create(**common, result={"requested": None, "profile": "amd", "gpu_model": "auto"})
    working = Run.objects.create(
        **common,
        status="running",
        playbooks=["gpu_health"],
        window={"start": 1.0, "end": 2.0},
        result={
            "stage": "executing",
            "requested": ["gpu_health"],
            "profile": "auto",
            "gpu_model": "H100",
            "source": SOURCE,
            "triage": None,
        },
    )
    done = Run.objects.create(
        **common,
        status="done",
        playbooks=["gpu_health"],
        result={"diagnosis": {"class": "healthy"}, "gpu_model": {"name": "H100", "set_by_user": True}},
    )

    new = _migrate(AFTER)
    Run = new.get_model("investigations", "DiagnosisRun")
    c = Run.objects.get(pk=comparison.pk)
    assert (c.kind, c.request, c.window, c.playbooks) == ("comparison", {"jobs": [3, 1]}, {}, [])
    assert c.result == {"comparison": {"metrics": []}}
    q = Run.objects.get(pk=queued.pk)
    assert (q.kind, q.request, q.stage, q.result) == (
        "diagnosis",
        {"playbooks": None, "profile": "amd", "gpu_model": "auto"},
        "",
        {},
    )
    w = Run.objects.get(pk=working.pk)
    assert w.request == {"playbooks": ["gpu_health"], "profile": "auto", "gpu_model": "H100"}
    assert (w.stage, w.planned, w.result, w.window) == (
        "executing",
        {"source": SOURCE, "triage": None},
        {},
        {"start": 1.0, "end": 2.0},
    )
    d = Run.objects.get(pk=done.pk)
    assert d.kind == "diagnosis" and d.result["diagnosis"] == {"class": "healthy"}
    assert d.request == {"playbooks": None, "profile": "auto", "gpu_model": "H100"}

    # and back: the old shapes return
    old = _migrate(BEFORE)
    Run = old.get_model("investigations", "DiagnosisRun")
    assert Run.objects.get(pk=comparison.pk).playbooks == ["comparison"]
    assert Run.objects.get(pk=comparison.pk).window == {"jobs": [3, 1]}
    assert Run.objects.get(pk=working.pk).result == {
        "stage": "executing",
        "requested": ["gpu_health"],
        "profile": "auto",
        "gpu_model": "H100",
        "source": SOURCE,
        "triage": None,
    }
    _migrate_latest()


def _migrate_latest() -> None:
    """Leave the database as every later test expects it: every app at its newest migration (not at
    AFTER, which would drop the columns later migrations add, e.g. the runs' attempt count)."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
