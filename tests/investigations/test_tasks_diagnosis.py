"""The diagnosis workflow's tasks: plan, fan out one task per playbook, decide once the last one finishes;
claims, cancellation, retries of transient Prometheus errors; and a real worker running it end to end."""

from __future__ import annotations

import importlib
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.urls import reverse
from django.utils.html import escape

from investigations.models import (
    DataSource,
    DiagnosisRun,
    Finding,
    Investigation,
    InvestigationJob,
    Job,
    PlaybookExecution,
    TaskStatus,
)
from investigations.services import diagnosis as dx
from investigations.services import diagnosis_overview as overview
from investigations.services import runs
from investigations.tasks import diagnosis as tasks
from playbooks.prometheus import PrometheusUnreachable
from playbooks.triage import triage_job
from tests.test_celery_worker import (  # noqa: F401 (migrated_db is a fixture)
    REDIS_URL,
    _env,
    _manage,
    _require,
    _start_worker,
    _stop_worker,
    migrated_db,
)

pytestmark = pytest.mark.django_db

DEAD_URL = "http://127.0.0.1:9"  # a loopback port where nothing listens


@pytest.fixture
def queue(monkeypatch) -> list[tuple]:
    """Capture what the tasks enqueue, instead of sending it to a broker; `drain(queue)` runs it."""
    sent: list[tuple] = []
    for task in (tasks.diagnosis_plan_task, tasks.playbook_execute_task, tasks.diagnosis_decide_task):
        monkeypatch.setattr(task, "delay", lambda *args, _task=task: sent.append((_task, args)))
    return sent


def drain(sent: list[tuple]) -> list[str]:
    """Run the captured tasks in order, as one worker would; return their names."""
    names = []
    while sent:
        task, args = sent.pop(0)
        names.append(task.name.rsplit(".", 1)[-1])
        task(*args)
    return names


@pytest.fixture
def diagnosable(served_job):
    """Return make(scenario) -> (investigation, job, truth): the job's data source is the URL of its served TSDB."""

    def make(scenario: str = "thermal-straggler", **kw):
        client, truth, job_dir = served_job(scenario, **kw)
        job = Job.objects.create(job_id=f"{scenario}-{Job.objects.count()}", name=scenario)
        job.triage = triage_job(job_dir).to_dict() | {"state": "done"}
        job.save()
        DataSource.objects.create(job=job, kind=DataSource.Kind.URL, address=client.base_url)
        investigation = Investigation.objects.create(title=f"{scenario} incident")
        InvestigationJob.objects.create(
            investigation=investigation, job=job, role=InvestigationJob.Role.PRIMARY
        )
        return investigation, job, truth

    return make


def test_a_thermal_straggler_diagnosis_persists_the_culprit_host(diagnosable, queue, alice_client) -> None:
    investigation, job, truth = diagnosable("thermal-straggler")
    run = dx.diagnosis_start(investigation, job)
    tasks.diagnosis_plan_task(run.pk)
    run.refresh_from_db()
    assert [name for _, (_, name) in queue] == run.playbooks, "one task per playbook, fanned out at once"
    ran = drain(queue)
    assert ran.count("diagnosis_decide_task") == 1 and ran[-1] == "diagnosis_decide_task"
    run.refresh_from_db()
    assert run.status == TaskStatus.DONE, run.error
    assert run.progress_done == run.progress_total > 0
    shown = overview.diagnosis_overview(investigation, job)["executions"]
    assert [(e.playbook, e.done) for e in shown] == [(e.playbook, e.total) for e in shown]
    culprit = truth["culprits"][0]["host"]
    assert culprit in [c["host"] for c in run.result["diagnosis"]["culprits"]]
    assert any(culprit in f.hosts for f in Finding.objects.filter(investigation=investigation, job=job))
    investigation.refresh_from_db()
    assert investigation.incident_class == "thermal-straggler"
    # The tunnel is gone: findings and their evidence still render, from the database alone.
    DataSource.objects.filter(job=job).update(address=DEAD_URL)
    region = alice_client.get(
        reverse("investigations:diagnosis", args=[investigation.pk]), HTTP_HX_REQUEST="true"
    ).content.decode()
    assert culprit in region and "thermal-straggler" in region
    finding = Finding.objects.filter(investigation=investigation, hosts__icontains=culprit).first()
    evidence = alice_client.get(
        reverse("investigations:finding_detail", args=[investigation.pk, finding.pk]), HTTP_HX_REQUEST="true"
    ).content.decode()
    assert escape(finding.evidence[0]["query"]) in evidence


def test_a_rerun_gives_the_same_findings(diagnosable, queue) -> None:
    """A re-run over the same data updates the same finding rows (same rule, class, severity, where) in place."""
    investigation, job, _ = diagnosable("thermal-straggler")
    found = []
    for _ in range(2):
        run_id = dx.diagnosis_start(investigation, job).pk
        tasks.diagnosis_plan_task(run_id)
        drain(queue)
        rows = Finding.objects.filter(investigation=investigation, job=job).order_by("pk")
        assert set(rows.values_list("run_id", flat=True)) == {run_id}, (
            "every finding comes from the latest run"
        )
        found.append(
            list(
                rows.values_list(
                    "pk", "playbook", "rule", "incident_class", "severity", "hosts", "gpus", "onset"
                )
            )
        )
    assert found[0] == found[1] and found[0]
    assert DiagnosisRun.objects.filter(status=TaskStatus.DONE).count() == 2


def test_every_task_is_safe_to_run_twice(diagnosable, queue) -> None:
    investigation, job, _ = diagnosable("thermal-straggler")
    run = dx.diagnosis_start(investigation, job)
    tasks.diagnosis_plan_task(run.pk)
    tasks.diagnosis_plan_task(run.pk)  # a second delivery: the run is no longer queued
    fanned = list(queue)
    drain(queue)
    before = list(Finding.objects.values_list("pk", "rule", "updated"))
    for task, args in fanned:
        task(*args)  # every playbook again: already finished, nothing happens
    tasks.diagnosis_decide_task(run.pk)
    assert not queue
    assert list(Finding.objects.values_list("pk", "rule", "updated")) == before
    run.refresh_from_db()
    assert run.status == TaskStatus.DONE


def test_a_cancelled_run_skips_its_pending_playbooks_and_keeps_what_finished(diagnosable, queue) -> None:
    investigation, job, _ = diagnosable("thermal-straggler")
    run = dx.diagnosis_start(investigation, job)
    tasks.diagnosis_plan_task(run.pk)
    first_task, first_args = queue.pop(0)
    first_task(*first_args)
    runs.run_cancel(run)
    ran = drain(queue)
    assert "diagnosis_decide_task" not in ran
    run.refresh_from_db()
    assert run.status == TaskStatus.CANCELLED
    done = run.executions.get(playbook=first_args[1])
    assert done.status == TaskStatus.DONE and done.output["result"]["results"]
    assert set(run.executions.exclude(pk=done.pk).values_list("status", flat=True)) == {TaskStatus.CANCELLED}
    assert not Finding.objects.exists()


def test_cancelling_stops_a_running_playbook_between_queries(
    diagnosable, queue, monkeypatch, settings
) -> None:
    settings.STEPWISE_QUERY_CONCURRENCY = 1
    monkeypatch.setattr(runs, "POLL_S", 0.02)
    investigation, job, _ = diagnosable("thermal-straggler")
    run = dx.diagnosis_start(investigation, job)
    tasks.diagnosis_plan_task(run.pk)
    run.refresh_from_db()
    playbook = max(run.executions.all(), key=lambda e: len(e.queries)).playbook
    planned = len(run.executions.get(playbook=playbook).queries)
    assert planned >= 3
    engine = importlib.import_module("playbooks.diagnose")
    real_execute, real_is_running = engine.execute, runs.run_is_running
    first_done = threading.Event()

    def is_running(run_id: int) -> bool:
        if first_done.is_set():
            # A user presses Cancel once the first query is done (written from the task's own thread,
            # as the test database cannot take two writers).
            runs.run_cancel(DiagnosisRun.objects.get(pk=run_id))
        return real_is_running(run_id)

    def execute_then_cancel(client, plan, *, on_query_done, should_cancel, **kw):
        def done(*args):
            on_query_done(*args)
            if not first_done.is_set():
                first_done.set()
                deadline = time.monotonic() + 10
                while not should_cancel() and time.monotonic() < deadline:  # the worker sees the cancel
                    time.sleep(0.01)

        return real_execute(client, plan, on_query_done=done, should_cancel=should_cancel, **kw)

    monkeypatch.setattr(runs, "run_is_running", is_running)
    monkeypatch.setattr(engine, "execute", execute_then_cancel)
    tasks.playbook_execute_task(run.pk, playbook)
    execution = PlaybookExecution.objects.get(run=run, playbook=playbook)
    run.refresh_from_db()
    assert run.status == TaskStatus.CANCELLED
    assert execution.status == TaskStatus.CANCELLED
    assert execution.error.startswith("Cancelled after 1 of")
    assert sum(1 for q in execution.queries if q["ok"]) == 1
    assert execution.output["result"]["results"], "the query that ran is kept"
    assert 1 <= run.progress_done < run.progress_total


def test_prometheus_down_while_planning_is_retried_then_fails_the_run(db, queue) -> None:
    job = Job.objects.create(job_id="81234")
    DataSource.objects.create(job=job, kind=DataSource.Kind.URL, address=DEAD_URL)
    investigation = Investigation.objects.create(title="t")
    InvestigationJob.objects.create(investigation=investigation, job=job)
    run = dx.diagnosis_start(investigation, job)
    # Called directly, Task.retry() re-raises the error instead of scheduling the retry.
    with pytest.raises(PrometheusUnreachable):
        tasks.diagnosis_plan_task(run.pk)
    run.refresh_from_db()
    assert run.status == TaskStatus.QUEUED
    assert run.error.startswith("Attempt 1 failed: ") and run.error.endswith("(retrying in 2 s)")
    retries = django_settings.STEPWISE_TASK_MAX_RETRIES
    tasks.diagnosis_plan_task.apply(args=[run.pk], retries=retries)
    run.refresh_from_db()
    assert run.status == TaskStatus.FAILED
    assert run.error.startswith(f"Gave up after {retries + 1} attempts: ")
    assert "127.0.0.1:9" in run.error
    assert not queue


def test_prometheus_down_while_executing_retries_the_playbook_then_fails_the_run(diagnosable, queue) -> None:
    investigation, job, _ = diagnosable("thermal-straggler")
    run = dx.diagnosis_start(investigation, job)
    tasks.diagnosis_plan_task(run.pk)
    DataSource.objects.filter(job=job).update(address=DEAD_URL)  # the tunnel dropped after planning
    task, (run_id, playbook) = queue.pop(0)
    with pytest.raises(PrometheusUnreachable):
        task(run_id, playbook)
    execution = PlaybookExecution.objects.get(run=run, playbook=playbook)
    assert execution.status == TaskStatus.QUEUED
    assert execution.error.startswith("Attempt 1 failed: ") and execution.error.endswith("(retrying in 2 s)")
    run.refresh_from_db()
    assert run.progress_done == 0, "a retry counts its queries again, so the failed attempt's are taken back"
    retries = django_settings.STEPWISE_TASK_MAX_RETRIES
    for name in [playbook, *(args[1] for _, args in queue)]:
        tasks.playbook_execute_task.apply(args=[run.pk, name], retries=retries)
    queue[:] = [item for item in queue if item[0] is not tasks.playbook_execute_task]
    drain(queue)
    run.refresh_from_db()
    assert run.status == TaskStatus.FAILED
    assert run.error.startswith("Every playbook failed")
    assert f"Gave up after {retries + 1} attempts" in run.error


# --- A real worker ---------------------------------------------------------------------------------

_START = """
from django.db import transaction
from investigations.models import DataSource, Investigation, InvestigationJob, Job
from investigations.services import diagnosis as dx
from investigations.tasks import diagnosis_plan_task
job = Job.objects.create(job_id="worker-1", triage={triage!r})
DataSource.objects.create(job=job, kind="url", address={url!r})
inv = Investigation.objects.create(title="worker")
InvestigationJob.objects.create(investigation=inv, job=job, role="primary")
with transaction.atomic():
    run = dx.diagnosis_start(inv, job)
    diagnosis_plan_task.delay_on_commit(run.pk)
print(run.pk)
"""


@pytest.mark.django_db(False)
@pytest.mark.parametrize("broker", [pytest.param("redis", marks=pytest.mark.redis), "embedded"])
def test_real_workers_run_a_whole_diagnosis(
    served_job,
    migrated_db: Path,  # noqa: F811
    tmp_path: Path,
    broker: str,
) -> None:
    """Two worker processes share the playbooks; the findings rows land in the shared database.

    On Redis (database 9, flushed), and on the embedded filesystem broker `make demo` uses.
    """
    extra = {}
    if broker == "redis":
        _require("Redis", "127.0.0.1", 6379)
        import redis

        redis.Redis.from_url(REDIS_URL).flushdb()
        extra["REDIS_URL"] = REDIS_URL
    client, truth, job_dir = served_job("thermal-straggler")
    db = tmp_path / "stepwise.sqlite3"
    db.write_bytes(migrated_db.read_bytes())
    env = _env(
        STEPWISE_DATA_DIR=str(tmp_path / "data"),
        DATABASE_URL=f"sqlite:///{db}",
        STEPWISE_TSDB_VIEWS=str(tmp_path / "views"),
        **extra,
    )
    triage = triage_job(job_dir).to_dict() | {"state": "done"}
    logs = [tmp_path / "worker-1.log", tmp_path / "worker-2.log"]
    workers = [_start_worker(env, log) for log in logs]
    try:
        script = _START.format(triage=triage, url=client.base_url)
        run_id = int(_manage(env, "shell", "--no-imports", "-c", script).stdout.strip().splitlines()[-1])
        status, error = _wait(db, run_id, workers, logs)
    finally:
        threads = [threading.Thread(target=_stop_worker, args=(w,)) for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert status == "done", f"{error}\n{logs[0].read_text()[-3000:]}"
    with sqlite3.connect(db) as conn:
        executions = conn.execute(
            "SELECT playbook, status FROM investigations_playbookexecution WHERE run_id = ?", (run_id,)
        ).fetchall()
        findings = conn.execute(
            "SELECT playbook, rule, hosts FROM investigations_finding WHERE run_id = ?", (run_id,)
        ).fetchall()
        klass = conn.execute("SELECT incident_class FROM investigations_investigation").fetchone()[0]
    assert executions and {s for _, s in executions} == {"done"}
    assert len({(p, r) for p, r, _ in findings}) == len(findings) > 0
    assert any(truth["culprits"][0]["host"] in hosts for _, _, hosts in findings)
    assert klass == "thermal-straggler"
    text = "".join(log.read_text() for log in logs)
    for name in ("diagnosis_plan_task", "playbook_execute_task", "diagnosis_decide_task"):
        assert f"investigations.tasks.{name}" in text


def _wait(db: Path, run_id: int, workers: list, logs: list[Path], timeout: float = 120) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    status, error = "?", ""
    while time.monotonic() < deadline:
        with sqlite3.connect(db, timeout=10) as conn:
            status, error = conn.execute(
                "SELECT status, error FROM investigations_diagnosisrun WHERE id = ?", (run_id,)
            ).fetchone()
        if status in ("done", "failed", "cancelled"):
            return status, error
        for worker, log in zip(workers, logs, strict=True):
            assert worker.poll() is None, f"a worker exited ({worker.returncode}):\n{log.read_text()[-3000:]}"
        time.sleep(0.3)
    pytest.fail(
        f"diagnosis {run_id} still {status!r} after {timeout} s; worker log:\n{logs[0].read_text()[-3000:]}"
    )
