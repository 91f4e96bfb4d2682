"""Item 11: a worker SIGKILLed mid-diagnosis does not leave the run "running" forever: it runs again.

Real parts only: a Celery worker (prefork, as deployed) on the embedded broker and a file SQLite database
shared with this process, and a real Prometheus serving a generated job's TSDB copy, stopped with SIGSTOP
so the diagnosis is caught mid-query. The worker's whole process group is then SIGKILLed and a new worker
started: within a bound the new worker notices the stale heartbeat and runs the run again (attempt 2),
which finishes there; a new diagnosis of the job is then accepted and leaves the same findings (no
duplicates). A second death of the same run fails it with the reason (tests/faults/test_dead_runs.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from playbooks import tsdb_server
from tests.test_celery_worker import REPO, _env, _manage

HEARTBEAT_S, DEAD_AFTER_S = 1, 4
#: The new worker notices within DEAD_AFTER + one heartbeat of its start; the rest is slack for 2 cores.
BOUND_S = 60

_SETUP = """
import json
from django.db import transaction
from investigations.models import DataSource, Investigation, InvestigationJob, Job
job = Job.objects.create(job_id="81234", name="killed")
DataSource.objects.create(job=job, kind="url", address={url!r})
inv = Investigation.objects.create(title="worker killed")
InvestigationJob.objects.create(investigation=inv, job=job, role="primary")
print(json.dumps({{"inv": inv.pk, "job": job.pk}}))
"""
_START = """
from django.db import transaction
from investigations.models import Investigation, Job
from investigations.services import diagnosis as dx
from investigations.tasks import diagnosis_plan_task
with transaction.atomic():
    run = dx.diagnosis_start(Investigation.objects.get(pk={inv}), Job.objects.get(pk={job}))
    diagnosis_plan_task.delay_on_commit(run.pk)
print(run.pk)
"""


def _shell(env: dict[str, str], code: str) -> str:
    return _manage(env, "shell", "--no-imports", "-c", code).stdout.strip().splitlines()[-1]


def _worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "celery", "-A", "stepwise", "worker", "--concurrency", "1", "-l", "info",
           "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _row(db: Path, sql: str, *params) -> tuple:
    with sqlite3.connect(db, timeout=20) as conn:
        return conn.execute(sql, params).fetchone()


def _wait(what: str, check, timeout: float, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.3)
    pytest.fail(f"{what} not seen within {timeout} s; worker log:\n{log.read_text(errors='replace')[-4000:]}")


@pytest.fixture
def deployment(tmp_path: Path, job_factory) -> Iterator[dict]:
    job_dir, _truth = job_factory("thermal-straggler", 5)
    served = tsdb_server.serve_readonly(job_dir / "prometheus", work_root=tmp_path / "own-views")
    db = tmp_path / "stepwise.sqlite3"
    env = _env(
        STEPWISE_DATA_DIR=str(tmp_path / "data"), DATABASE_URL=f"sqlite:///{db}",
        STEPWISE_TSDB_VIEWS=str(tmp_path / "views"), STEPWISE_ALLOWED_PROMETHEUS="127.0.0.1",
        STEPWISE_PROMETHEUS_TIMEOUT="300", STEPWISE_RUN_HEARTBEAT_SECONDS=str(HEARTBEAT_S),
        STEPWISE_RUN_DEAD_AFTER_SECONDS=str(DEAD_AFTER_S),
    )  # fmt: skip
    _manage(env, "migrate", "--noinput")
    workers: list[subprocess.Popen[bytes]] = []
    try:
        yield {"env": env, "db": db, "served": served, "workers": workers, "log": tmp_path / "worker.log"}
    finally:
        os.kill(served.pid, signal.SIGCONT)
        for w in workers:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGKILL)
                w.wait()
        tsdb_server.stop(served)
        shutil.rmtree(tmp_path / "data", ignore_errors=True)


def _finished(db: Path, run_id: int) -> tuple | None:
    row = _row(db, "SELECT status, error, attempt FROM investigations_diagnosisrun WHERE id = ?", run_id)
    return row if row[0] in ("done", "failed") else None


def _findings(db: Path, inv: int) -> int:
    return _row(db, "SELECT count(*) FROM investigations_finding WHERE investigation_id = ?", inv)[0]


def test_a_run_whose_worker_is_killed_runs_again_on_the_new_worker_and_finishes(deployment: dict) -> None:
    env, db, log, served = deployment["env"], deployment["db"], deployment["log"], deployment["served"]
    ids = json.loads(_shell(env, _SETUP.format(url=served.url)))
    os.kill(served.pid, signal.SIGSTOP)  # the diagnosis will hang on its first query
    deployment["workers"].append(first := _worker(env, log))
    run = int(_shell(env, _START.format(**ids)))
    _wait(
        "the plan task's heartbeat",
        lambda: _row(db, "SELECT count(*) FROM investigations_runheartbeat WHERE run_id = ?", run)[0],
        60,
        log,
    )
    assert _row(db, "SELECT status, attempt FROM investigations_diagnosisrun WHERE id = ?", run) == (
        "running",
        1,
    )

    os.killpg(first.pid, signal.SIGKILL)  # the whole worker, children included, mid-query
    first.wait()
    os.kill(served.pid, signal.SIGCONT)
    killed_at = time.monotonic()
    deployment["workers"].append(_worker(env, log))
    requeued = _wait(
        "the dead run sent again",
        lambda: _row(db, "SELECT attempt FROM investigations_diagnosisrun WHERE id = ?", run)[0] == 2,
        BOUND_S,
        log,
    )
    print(f"dead run noticed and sent again {time.monotonic() - killed_at:.1f} s after the kill")
    assert requeued
    status, error, attempt = _wait("the re-run finished", partial(_finished, db, run), 180, log)
    assert (status, attempt) == ("done", 2), error
    # The decision marks the run done inside its task; the task's heartbeat row goes when the task returns
    # (Celery's task_postrun), a moment later: nothing is left behind once it has.
    _wait(
        "no heartbeat row left",
        lambda: _row(db, "SELECT count(*) FROM investigations_runheartbeat")[0] == 0,
        30,
        log,
    )
    rerun_findings = _findings(db, ids["inv"])
    assert rerun_findings > 0

    # A new diagnosis is accepted and finishes on its first attempt; it leaves the same findings (no duplicates).
    again = int(_shell(env, _START.format(**ids)))
    status, error, attempt = _wait("the new run finished", partial(_finished, db, again), 180, log)
    assert (status, attempt) == ("done", 1), error
    assert _findings(db, ids["inv"]) == rerun_findings
