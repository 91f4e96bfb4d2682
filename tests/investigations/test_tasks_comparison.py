"""The comparison task: claims its run, compares the jobs' served TSDBs to done, is safe to run twice, retries
transient Prometheus errors and records every failure on the run; on a real worker, a comparison cancelled
while it queries stops at its next query and leaves the run as the cancel wrote it."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings as django_settings

from investigations import services
from investigations.models import (
    DataSource,
    DiagnosisRun,
    Finding,
    Investigation,
    InvestigationJob,
    Job,
    TaskStatus,
)
from investigations.services import comparison as cmp
from investigations.tasks import comparison_execute_task
from playbooks.prometheus import PrometheusUnreachable
from playbooks.triage import triage_job
from tests.test_celery_worker import (  # noqa: F401 (migrated_db and stack are fixtures)
    _manage,
    _start_worker,
    _stop_worker,
    migrated_db,
    stack,
)

pytestmark = pytest.mark.django_db

DEAD_URL = "http://127.0.0.1:9"  # a loopback port where nothing listens


@pytest.fixture
def registered_pair(job_factory, synth_root: Path, view_root: Path, settings):
    """Return (investigation, restored, baseline): both registered from their job dirs (kind job_tsdb)."""
    settings.STEPWISE_JOB_ROOTS = [synth_root]
    settings.STEPWISE_TSDB_VIEWS = view_root
    restored_dir, truth = job_factory("restore-resource-leak")
    jobs = []
    for job_dir in (restored_dir, Path(truth["compare_with"])):
        job, source = services.job_register(job_dir)
        assert source.kind == DataSource.Kind.JOB_TSDB
        job.triage = triage_job(job_dir).to_dict() | {"state": "done"}
        job.save()
        jobs.append(job)
    restored, baseline = jobs
    investigation = Investigation.objects.create(title="slower after restore")
    InvestigationJob.objects.create(
        investigation=investigation, job=restored, role=InvestigationJob.Role.PRIMARY
    )
    InvestigationJob.objects.create(
        investigation=investigation, job=baseline, role=InvestigationJob.Role.BASELINE, position=1
    )
    return investigation, restored, baseline


def _dead_pair() -> DiagnosisRun:
    investigation = Investigation.objects.create(title="t")
    for i, role in enumerate((InvestigationJob.Role.PRIMARY, InvestigationJob.Role.BASELINE)):
        job = Job.objects.create(job_id=f"8123{i}")
        DataSource.objects.create(job=job, kind=DataSource.Kind.URL, address=DEAD_URL)
        InvestigationJob.objects.create(investigation=investigation, job=job, role=role, position=i)
    return cmp.comparison_start(investigation)


def test_it_compares_a_restored_job_with_its_baseline_to_done(registered_pair) -> None:
    investigation, restored, _ = registered_pair
    run = cmp.comparison_start(investigation)
    comparison_execute_task(run.pk)
    run.refresh_from_db()
    assert run.status == TaskStatus.DONE, run.error
    assert run.started is not None and run.finished is not None
    assert run.result["diagnosis"]["class"] == "restore-resource-leak"
    procs = next(m for m in run.result["comparison"]["metrics"] if m["name"] == "procs_running")
    assert procs["delta_pct"] > 5
    assert Finding.objects.filter(
        investigation=investigation,
        job=restored,
        playbook="comparison",
        incident_class="restore-resource-leak",
    ).exists()
    investigation.refresh_from_db()
    assert investigation.incident_class == "restore-resource-leak"

    # A second delivery of the same message (acks_late) leaves the finished run alone.
    finished = run.finished
    comparison_execute_task(run.pk)
    run.refresh_from_db()
    assert run.status == TaskStatus.DONE and run.finished == finished


def test_it_requeues_then_fails_the_run_when_prometheus_stays_unreachable(db) -> None:
    run = _dead_pair()
    # Called directly, Task.retry() re-raises the error instead of scheduling the retry.
    with pytest.raises(PrometheusUnreachable):
        comparison_execute_task(run.pk)
    run.refresh_from_db()
    assert run.status == TaskStatus.QUEUED
    assert run.error.startswith("Attempt 1 failed: ") and run.error.endswith("(retrying in 2 s)")
    retries = django_settings.STEPWISE_TASK_MAX_RETRIES
    comparison_execute_task.apply(args=[run.pk], retries=retries)
    run.refresh_from_db()
    assert run.status == TaskStatus.FAILED
    assert run.error.startswith(f"Gave up after {retries + 1} attempts: ") and "127.0.0.1:9" in run.error
    assert run.result == {} and not Finding.objects.exists()


def test_a_job_that_lost_its_data_source_fails_the_run_without_retrying(db) -> None:
    run = _dead_pair()
    DataSource.objects.filter(job__job_id="81231").delete()
    comparison_execute_task(run.pk)
    run.refresh_from_db()
    assert run.status == TaskStatus.FAILED
    assert run.error == "Job 81231 has no data source any more; add it again and re-run."


def test_a_cancelled_comparison_is_left_alone(db) -> None:
    run = _dead_pair()
    DiagnosisRun.objects.filter(pk=run.pk).update(status=TaskStatus.CANCELLED)
    comparison_execute_task(run.pk)
    run.refresh_from_db()
    assert run.status == TaskStatus.CANCELLED and run.started is None


# --- A real worker ---------------------------------------------------------------------------------


class HeldLink:
    """A loopback TCP link to a real Prometheus that holds each new connection until `release()`: a slow network.

    Attributes:
        url: the link's own end, for a URL data source (loopback, so the allow-list takes it).
        held: set once a connection waits at the link.
    """

    def __init__(self, target_url: str) -> None:
        parts = urlsplit(target_url)
        self._target = (parts.hostname, parts.port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self.held = threading.Event()
        self._open = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def release(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._open.set()
        self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._forward, args=(conn,), daemon=True).start()

    def _forward(self, conn: socket.socket) -> None:
        self.held.set()
        self._open.wait(timeout=120)
        with conn, socket.create_connection(self._target, timeout=60) as upstream:
            back = threading.Thread(target=_pump, args=(upstream, conn), daemon=True)
            back.start()
            _pump(conn, upstream)
            back.join(timeout=60)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


#: `manage.py shell` code that leaves `inv`: an investigation of `jobs`, each (Prometheus URL, triage, role).
SETUP = """
from investigations.models import DataSource, Investigation, InvestigationJob, Job
inv = Investigation.objects.create(title="Cancel a comparison")
for i, (url, triage, role) in enumerate({jobs!r}):
    job = Job.objects.create(job_id=f"held-{{i}}", cluster="held-link", triage=triage)
    DataSource.objects.create(job=job, kind="url", address=url)
    InvestigationJob.objects.create(investigation=inv, job=job, role=role, position=i)
"""

_START = """
from django.db import transaction
from investigations.services import comparison as cmp
from investigations.tasks import comparison_execute_task
with transaction.atomic():
    run = cmp.comparison_start(inv)
    comparison_execute_task.delay_on_commit(run.pk)
print(run.pk)
"""


def held_pair(served_job) -> tuple[list[HeldLink], list[tuple]]:
    """Return a restored job and its baseline, each served behind a HeldLink: (links, jobs for SETUP)."""
    _, truth, restored_dir = served_job("restore-resource-leak")
    dirs = (restored_dir, Path(truth["compare_with"]))
    links = [HeldLink(served_job.dir(d).base_url) for d in dirs]
    jobs = [
        (link.url, triage_job(d).to_dict() | {"state": "done"}, role)
        for link, d, role in zip(links, dirs, ("primary", "baseline"), strict=True)
    ]
    return links, jobs


_CANCEL = """
from investigations.models import DiagnosisRun
from investigations.services import runs
print(runs.run_cancel(DiagnosisRun.objects.get(pk={run_id})))
"""


def _row(db: Path, run_id: int) -> tuple:
    with sqlite3.connect(db, timeout=10) as conn:
        return conn.execute(
            "SELECT status, error, finished, result, progress_done FROM investigations_diagnosisrun WHERE id = ?",
            (run_id,),
        ).fetchone()


def wait_for_log(log: Path, text: str, worker, timeout: float = 120) -> None:
    """Return once `text` is in the worker's log; fail if the worker exits or `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        assert worker.poll() is None, f"the worker exited ({worker.returncode}):\n{log.read_text()[-3000:]}"
        time.sleep(0.2)
    pytest.fail(f"{text!r} not in the worker log after {timeout} s:\n{log.read_text()[-3000:]}")


@pytest.mark.django_db(False)
def test_a_real_worker_stops_a_cancelled_comparison_at_its_next_query(
    served_job,
    stack: dict,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The worker's queries wait at a slow link; the user cancels; the worker stops before its next query."""
    links, jobs = held_pair(served_job)
    db = stack["db"]
    # The held query must outlast the cancel's `manage.py shell`; the held links listen on any loopback port.
    env = stack["env"] | {"STEPWISE_PROMETHEUS_TIMEOUT": "120", "STEPWISE_ALLOWED_PROMETHEUS": "127.0.0.1"}
    log = tmp_path / "worker.log"
    worker = _start_worker(env, log)
    try:
        run_id = int(
            _manage(env, "shell", "--no-imports", "-c", SETUP.format(jobs=jobs) + _START).stdout.split()[-1]
        )
        # The worker claimed the run, connected both jobs and sent its first query: it waits at the link.
        assert any(link.held.wait(timeout=120) for link in links), log.read_text()[-3000:]
        assert _row(db, run_id)[0] == "running"
        assert _manage(env, "shell", "--no-imports", "-c", _CANCEL.format(run_id=run_id)).stdout.split() == [
            "True"
        ]
        cancelled = _row(db, run_id)
        # The worker sees the cancel while its query still waits; only then does the query go through.
        wait_for_log(log, f"comparison {run_id} is no longer running", worker)
        for link in links:
            link.release()
        wait_for_log(log, f"comparison {run_id} was cancelled: stopped between queries", worker)
        assert worker.poll() is None
    finally:
        _stop_worker(worker)
        for link in links:
            link.close()
    assert cancelled[:2] == ("cancelled", "Cancelled by a user.")
    assert _row(db, run_id) == cancelled, "the task left the run as the cancel wrote it"
    assert cancelled[3] == "{}" and cancelled[4] == 2, "no result stored; both jobs had been connected"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM investigations_finding").fetchone() == (0,)
        assert conn.execute("SELECT incident_class FROM investigations_investigation").fetchone() == ("",)
    assert "Traceback" not in log.read_text()
