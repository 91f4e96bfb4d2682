"""A real Celery worker process executes query runs against a real Prometheus; PostgreSQL passes deploy checks.

The worker and the enqueuing shell are separate processes that share a file-based SQLite database and
a data directory, as the web server and the worker do in production. Rows are read back with sqlite3,
so this test process never needs the worker's database configuration. On CI (CI=true) a missing
Redis or PostgreSQL is a failure, not a skip.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from playbooks import tsdb_server

REPO = Path(__file__).resolve().parent.parent
ON_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
REDIS_URL = "redis://127.0.0.1:6379/9"  # a database number nothing else here uses; flushed per test
POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
RUN_TIMEOUT_S = 60

_SCRUB = (
    "DATABASE_URL",
    "REDIS_URL",
    "SECRET_KEY",
    "SECRET_KEY_FILE",
    "DEBUG",
    "STEPWISE_",
    "DJANGO_SETTINGS_MODULE",
)

_ENQUEUE = """
from django.db import transaction
from investigations import services
from investigations.tasks import queryrun_execute_task
_, source = services.job_register({job_dir!r})
with transaction.atomic():
    run = services.queryrun_create(source, services.SAMPLE_QUERIES)
    queryrun_execute_task.delay_on_commit(run.pk)
print(run.pk)
"""


def _require(service: str, host: str, port: int) -> None:
    """Skip when `service` is not listening, or fail on CI where it must be."""
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError as exc:
        message = f"{service} at {host}:{port} is unreachable: {exc}"
        if ON_CI:
            pytest.fail(f"{message} (CI=true: this test must run)")
        pytest.skip(message)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB)}
    env.update(extra, PYTHONUNBUFFERED="1")
    return env


def _manage(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"manage.py {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def migrated_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return a migrated SQLite file to copy for each test (migrating takes seconds)."""
    base = tmp_path_factory.mktemp("worker-db")
    path = base / "template.sqlite3"
    _manage(
        _env(STEPWISE_DATA_DIR=str(base / "data"), DATABASE_URL=f"sqlite:///{path}"), "migrate", "--noinput"
    )
    return path


@pytest.fixture
def stack(tmp_path: Path, migrated_db: Path, job_factory, synth_root: Path) -> Iterator[dict]:
    """Return the environment of a worker deployment: its own data dir, database and TSDB work root."""
    db = tmp_path / "stepwise.sqlite3"
    shutil.copy(migrated_db, db)
    views = tmp_path / "views"
    env = _env(
        STEPWISE_DATA_DIR=str(tmp_path / "data"),
        DATABASE_URL=f"sqlite:///{db}",
        STEPWISE_JOB_ROOTS=str(synth_root),
        STEPWISE_TSDB_VIEWS=str(views),
    )
    job_dir, truth = job_factory("healthy")
    yield {"env": env, "db": db, "job_dir": job_dir, "truth": truth}
    tsdb_server.reap_leftovers(views)  # the Prometheus the worker started


def _start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable, "-m", "celery", "-A", "stepwise", "worker", "--pool", "solo", "-l", "info",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _stop_worker(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait_finished(db: Path, run_id: int, worker: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    status = "?"
    while time.monotonic() < deadline:
        with sqlite3.connect(db, timeout=10) as conn:
            status = conn.execute(
                "SELECT status FROM investigations_queryrun WHERE id = ?", (run_id,)
            ).fetchone()[0]
        if status in ("done", "failed", "cancelled"):
            return status
        assert worker.poll() is None, f"the worker exited ({worker.returncode}):\n{log.read_text()[-3000:]}"
        time.sleep(0.3)
    pytest.fail(
        f"run {run_id} still {status!r} after {RUN_TIMEOUT_S} s; worker log:\n{log.read_text()[-3000:]}"
    )


def _run_through_worker(stack: dict, tmp_path: Path) -> dict[str, dict]:
    """Enqueue the sample queries from one process, let the worker run them, return the stored results."""
    log = tmp_path / "worker.log"
    worker = _start_worker(stack["env"], log)
    try:
        out = _manage(
            stack["env"], "shell", "--no-imports", "-c", _ENQUEUE.format(job_dir=str(stack["job_dir"]))
        ).stdout
        run_id = int(out.strip().splitlines()[-1])
        status = _wait_finished(stack["db"], run_id, worker, log)
    finally:
        _stop_worker(worker)
    with sqlite3.connect(stack["db"]) as conn:
        error = conn.execute("SELECT error FROM investigations_queryrun WHERE id = ?", (run_id,)).fetchone()[
            0
        ]
        assert status == "done", f"{status}: {error}\n{log.read_text()[-3000:]}"
        rows = conn.execute(
            "SELECT name, ok, error, series_count, summary FROM investigations_queryresult WHERE run_id = ?",
            (run_id,),
        ).fetchall()
    assert "investigations.tasks.queryrun_execute_task" in log.read_text()
    return {
        name: {"ok": ok, "error": err, "series": n, "summary": json.loads(s)} for name, ok, err, n, s in rows
    }


def _assert_matches_the_job(results: dict[str, dict], truth: dict) -> None:
    assert set(results) == {"buildinfo", "metric-families", "up", "training-step"}
    assert all(r["ok"] for r in results.values()), {n: r["error"] for n, r in results.items()}
    assert results["buildinfo"]["summary"]["build"]["version"].startswith("2.")
    step = results["training-step"]["summary"]
    assert (step["min"], step["max"]) == (truth["first_step"], truth["last_step"])
    hosts = {s["labels"]["instance"].split(":")[0] for s in results["up"]["summary"]["series"]}
    assert set(truth["hosts"]) <= hosts
    assert results["metric-families"]["series"] > 10


@pytest.mark.redis
def test_a_worker_on_redis_runs_the_queries(stack: dict, tmp_path: Path) -> None:
    _require("Redis", "127.0.0.1", 6379)
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()
    stack["env"]["REDIS_URL"] = REDIS_URL
    _assert_matches_the_job(_run_through_worker(stack, tmp_path), stack["truth"])


def test_a_worker_on_the_embedded_broker_runs_the_queries(stack: dict, tmp_path: Path) -> None:
    """No REDIS_URL: the filesystem transport carries the task from one process to the other."""
    _assert_matches_the_job(_run_through_worker(stack, tmp_path), stack["truth"])
    messages = Path(stack["env"]["STEPWISE_DATA_DIR"]) / "broker" / "processed"
    assert any(messages.iterdir()), "the task did not go through the filesystem broker"


@pytest.mark.postgres
def test_postgresql_migrates_and_passes_the_deploy_checks(tmp_path: Path) -> None:
    """A fresh PostgreSQL database migrates, and a TLS production configuration has no deploy warning."""
    _require("PostgreSQL", "127.0.0.1", 5432)
    import psycopg

    name = f"stepwise_test_{secrets.token_hex(4)}"
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        env = _env(
            STEPWISE_DATA_DIR=str(tmp_path / "data"),
            DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/{name}",
            STEPWISE_TLS="1",
            DEBUG="0",
            ALLOWED_HOSTS="stepwise.example.com",
            SECRET_KEY=secrets.token_urlsafe(50),
            STEPWISE_JOB_ROOTS=str(tmp_path),
        )
        _manage(env, "migrate", "--noinput")
        checked = _manage(env, "check", "--deploy", "--fail-level", "WARNING")
        assert "no issues" in checked.stdout
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/{name}") as conn:
            constraints = {row[0] for row in conn.execute("SELECT conname FROM pg_constraint")}
        assert {"queryresult_unique_run_name", "job_unique_cluster_job_id"} <= constraints
    finally:
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
