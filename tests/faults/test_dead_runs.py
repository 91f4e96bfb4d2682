"""Dead-run detection decides on stale heartbeats only: a run whose tasks wait in the queue or in a retry
countdown (no heartbeat row) is left alone; a row left behind by a task that never ended fails its run."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from investigations.models import (
    DataSource,
    DiagnosisRun,
    Investigation,
    InvestigationJob,
    Job,
    PlaybookExecution,
    QueryRun,
    RunHeartbeat,
    TaskStatus,
)
from investigations.services import deadruns
from investigations.services import diagnosis as dx

pytestmark = pytest.mark.django_db


@pytest.fixture
def running(db) -> DiagnosisRun:
    job = Job.objects.create(job_id="81234")
    DataSource.objects.create(job=job, kind="url", address="http://127.0.0.1:9090")
    inv = Investigation.objects.create(title="t")
    InvestigationJob.objects.create(investigation=inv, job=job, role="primary")
    run = DiagnosisRun.objects.create(
        investigation=inv, job=job, status=TaskStatus.RUNNING, started=timezone.now()
    )
    PlaybookExecution.objects.create(run=run, playbook="hang", status=TaskStatus.RUNNING)
    PlaybookExecution.objects.create(run=run, playbook="gpu-health", status=TaskStatus.DONE)
    return run


def _beat(run_id: int, age_s: float, kind: str = RunHeartbeat.Kind.DIAGNOSIS, task: str = "t1") -> None:
    RunHeartbeat.objects.create(kind=kind, run_id=run_id, task_id=task, pid=4242, worker="w1",
                                task_name="investigations.tasks.playbook_execute_task",
                                beat=timezone.now() - dt.timedelta(seconds=age_s))  # fmt: skip


@pytest.fixture
def sent(monkeypatch) -> list[tuple[str, tuple]]:
    """The tasks the reaper sends, recorded instead of queued."""
    from investigations import tasks

    out: list[tuple[str, tuple]] = []
    for task in (tasks.diagnosis_plan_task, tasks.comparison_execute_task, tasks.queryrun_execute_task):
        monkeypatch.setattr(task, "delay", lambda *args, _name=task.name: out.append((_name, args)))
    return out


def test_a_first_death_runs_the_run_again_from_its_first_task(
    running: DiagnosisRun, settings, sent, django_capture_on_commit_callbacks
) -> None:
    settings.STEPWISE_RUN_DEAD_AFTER_SECONDS = 60
    _beat(running.pk, 120)
    with django_capture_on_commit_callbacks(execute=True):
        assert deadruns.dead_runs_reap() == [("diagnosis", running.pk, "rerun")]
    running.refresh_from_db()
    assert running.status == TaskStatus.QUEUED and running.attempt == 2 and running.finished is None
    assert "The worker running it stopped: playbook_execute_task on w1 (pid 4242)" in running.error
    assert "Running it again (attempt 2 of 2)" in running.error
    assert not running.executions.exists()  # the plan makes them again
    assert sent == [("investigations.tasks.diagnosis_plan_task", (running.pk,))]
    assert not RunHeartbeat.objects.exists()
    assert deadruns.dead_runs_reap() == []  # handled once


def test_a_second_death_fails_the_run_and_its_running_playbooks(
    running: DiagnosisRun, settings, sent, django_capture_on_commit_callbacks
) -> None:
    settings.STEPWISE_RUN_DEAD_AFTER_SECONDS = 60
    DiagnosisRun.objects.filter(pk=running.pk).update(attempt=2)
    _beat(running.pk, 120)
    with django_capture_on_commit_callbacks(execute=True):
        assert deadruns.dead_runs_reap() == [("diagnosis", running.pk, "failed")]
    running.refresh_from_db()
    assert running.status == TaskStatus.FAILED and running.finished is not None and running.attempt == 2
    assert "The worker running it stopped: playbook_execute_task on w1 (pid 4242)" in running.error
    assert "already been run again once" in running.error
    statuses = dict(running.executions.values_list("playbook", "status"))
    assert statuses == {"hang": TaskStatus.FAILED, "gpu-health": TaskStatus.DONE}
    assert sent == [] and not RunHeartbeat.objects.exists()


def test_a_dead_comparison_is_run_again_as_a_comparison(
    running: DiagnosisRun, settings, sent, django_capture_on_commit_callbacks
) -> None:
    settings.STEPWISE_RUN_DEAD_AFTER_SECONDS = 60
    DiagnosisRun.objects.filter(pk=running.pk).update(kind=DiagnosisRun.Kind.COMPARISON)
    _beat(running.pk, 120)
    with django_capture_on_commit_callbacks(execute=True):
        deadruns.dead_runs_reap()
    assert sent == [("investigations.tasks.comparison_execute_task", (running.pk,))]


def test_a_dead_task_waits_while_other_tasks_of_its_run_live(running: DiagnosisRun, settings, sent) -> None:
    settings.STEPWISE_RUN_DEAD_AFTER_SECONDS = 60
    _beat(running.pk, 120, task="dead")
    _beat(running.pk, 5, task="alive")
    assert deadruns.dead_runs_reap() == []
    assert RunHeartbeat.objects.filter(task_id="dead").exists()  # looked at again once the other ends
    RunHeartbeat.objects.filter(task_id="alive").delete()
    assert deadruns.dead_runs_reap() == [("diagnosis", running.pk, "rerun")]


def test_fresh_beats_and_runs_without_a_beat_are_left_alone(running: DiagnosisRun, settings) -> None:
    settings.STEPWISE_RUN_DEAD_AFTER_SECONDS = 60
    _beat(running.pk, 5)
    assert deadruns.dead_runs_reap() == []
    RunHeartbeat.objects.all().delete()
    assert deadruns.dead_runs_reap() == []  # tasks waiting in the queue or a retry countdown beat nothing
    running.refresh_from_db()
    assert running.status == TaskStatus.RUNNING


def test_a_dead_query_run_is_run_again_then_failed(
    db, settings, sent, django_capture_on_commit_callbacks
) -> None:
    source = DataSource.objects.create(kind="url", address="http://127.0.0.1:9090")
    run = QueryRun.objects.create(datasource=source, status=QueryRun.Status.RUNNING, queries=[])
    _beat(run.pk, 600, kind=RunHeartbeat.Kind.QUERY)
    with django_capture_on_commit_callbacks(execute=True):
        assert deadruns.dead_runs_reap() == [("query", run.pk, "rerun")]
    run.refresh_from_db()
    assert run.status == QueryRun.Status.QUEUED and run.attempt == 2
    assert sent == [("investigations.tasks.queryrun_execute_task", (run.pk,))]
    QueryRun.objects.filter(pk=run.pk).update(status=QueryRun.Status.RUNNING)  # the new attempt claimed it
    _beat(run.pk, 600, kind=RunHeartbeat.Kind.QUERY, task="t2")
    assert deadruns.dead_runs_reap() == [("query", run.pk, "failed")]
    run.refresh_from_db()
    assert run.status == QueryRun.Status.FAILED and "stopped" in run.error


def test_a_rerun_that_cannot_be_sent_fails_instead_of_waiting(
    running: DiagnosisRun, settings, monkeypatch, django_capture_on_commit_callbacks
) -> None:
    from kombu.exceptions import OperationalError

    from investigations import tasks

    def broker_down(*_args):
        raise OperationalError("connection refused")

    monkeypatch.setattr(tasks.diagnosis_plan_task, "delay", broker_down)
    settings.STEPWISE_RUN_DEAD_AFTER_SECONDS = 60
    _beat(running.pk, 120)
    with django_capture_on_commit_callbacks(execute=True):
        deadruns.dead_runs_reap()
    running.refresh_from_db()
    assert running.status == TaskStatus.FAILED and "Could not reach the task broker" in running.error


def test_a_new_diagnosis_is_accepted_once_the_dead_one_is_reaped(
    running: DiagnosisRun, settings, sent
) -> None:
    """Issue 12 item 11: new diagnoses of the job were refused until someone pressed Cancel."""
    settings.STEPWISE_RUN_DEAD_AFTER_SECONDS = 60
    DiagnosisRun.objects.filter(pk=running.pk).update(attempt=2)  # a first death re-runs it instead
    _beat(running.pk, 120)
    new = dx.diagnosis_start(running.investigation, running.job)
    assert new.pk != running.pk and new.status == TaskStatus.QUEUED


def test_the_heartbeat_lives_exactly_as_long_as_the_task(running: DiagnosisRun, settings) -> None:
    settings.STEPWISE_RUN_HEARTBEAT_SECONDS = 1
    assert deadruns.heartbeat_start(
        "task-1", "investigations.tasks.playbook_execute_task", (running.pk, "hang"), {}
    )
    assert RunHeartbeat.objects.get(task_id="task-1").run_id == running.pk
    deadruns.heartbeat_stop("task-1")
    assert not RunHeartbeat.objects.exists()
    assert not deadruns.heartbeat_start("task-2", "investigations.tasks.job_triage_task", (1,), {})


def test_redis_redelivers_a_dead_workers_task_soon_after_the_hard_limit(settings) -> None:
    from django.conf import settings as live

    assert live.CELERY_TASK_ACKS_LATE is True
    # Only set with REDIS_URL; its formula is checked in tests/test_settings.py's subprocess style here.
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", "import stepwise.settings as s; print(s.CELERY_BROKER_TRANSPORT_OPTIONS"
         "['visibility_timeout'], s.CELERY_TASK_TIME_LIMIT)"],
        env={"REDIS_URL": "redis://127.0.0.1:6379/9", "STEPWISE_TASK_SOFT_TIME_LIMIT": "100",
             "PATH": "/usr/bin:/bin", "STEPWISE_DATA_DIR": str(settings.STEPWISE_TUNNELS_DIR.parent)},
        capture_output=True, text=True, check=True, cwd=str(live.BASE_DIR),
    )  # fmt: skip
    visibility, hard = map(int, out.stdout.split())
    assert hard == 160 and visibility == hard + 60
