"""No Prometheus outlives what started it: a command or a bench SIGKILLed at any point of its start, pytest
itself killed, Django failing after manage.py's early start, a Celery worker killed while it starts a copy.

Real commands, real Prometheus servers, real signals. Each test waits (bounded) for the server it kills
around to appear, and then for the leftovers to go: the guard that stops them runs in its own process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from playbooks import tsdb_server
from tests.support.processes import private_work_roots, prometheus_pids_under, signal_and_wait

REPO = Path(__file__).resolve().parents[2]


def _until(cond: Callable[[], object], within: float = 60.0) -> object:
    """Return cond() once it is truthy, or its last value after `within` seconds."""
    deadline = time.monotonic() + within
    while not (got := cond()) and time.monotonic() < deadline:
        time.sleep(0.005)
    return got


def _roots(prefix: str) -> list[Path]:
    return sorted(Path(prefix).parent.glob(Path(prefix).name + "*"))


def _kill_when(
    proc: subprocess.Popen, cond: Callable[[], object], sig: int = signal.SIGKILL, within: float = 60.0
) -> None:
    started = _until(lambda: cond() or proc.poll() is not None, within)
    if proc.poll() is not None:
        pytest.fail(f"it ended first: {proc.communicate()[1][-2000:]!r}")
    signal_and_wait(proc, sig)
    assert started, f"nothing started within {within:g} s"


def _gone(prefix: str) -> tuple[list[int], list[Path]]:
    """Return the servers and work roots still there under `prefix` once they are gone or 60 s passed."""
    _until(lambda: not prometheus_pids_under(prefix) and not _roots(prefix))
    return prometheus_pids_under(prefix), _roots(prefix)


def _diagnose(job_dir: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", "diagnose", "--job-dir", str(job_dir)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _record_written(prefix: str) -> bool:
    return any(root.glob("*/server.json") for root in _roots(prefix))


@pytest.mark.parametrize(
    "when",
    ["work-root-made", "prometheus-started", "serving"],
    ids=["mid-copy", "mid-start", "while-diagnosing"],
)
def test_a_sigkilled_diagnose_leaves_no_server_and_no_work_root(served_job, when):
    """SIGKILL (no finally, no atexit) while manage.py's early start copies the TSDB, while its Prometheus
    starts, or while the command diagnoses: the server stops and the work root goes; a server of the same
    TSDB that another process serves from its own root is left alone."""
    other, _, job_dir = served_job("healthy")
    env, prefix = private_work_roots("stepwise-diagnose-")
    cond = {
        "work-root-made": lambda: _roots(prefix),
        "prometheus-started": lambda: prometheus_pids_under(prefix),
        "serving": lambda: _record_written(prefix),
    }[when]
    _kill_when(_diagnose(job_dir, env), cond)
    assert _gone(prefix) == ([], [])
    assert other.ready()


def test_django_failing_after_the_early_start_leaves_nothing(job_factory):
    """manage.py starts serving --job-dir before Django; Django then fails to start (its settings do not
    import): the command exits 1 and the copy it started is stopped, its work root removed."""
    job_dir, _ = job_factory("healthy")
    env, prefix = private_work_roots("stepwise-diagnose-")
    env = env | {"DJANGO_SETTINGS_MODULE": "stepwise.no_such_settings"}
    proc = _diagnose(job_dir, env)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "no_such_settings" in err
    assert _gone(prefix) == ([], [])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_an_interrupted_bench_leaves_no_server(job_factory, sig):
    """bench/diagnosis_speed.py ended by a signal its Python does not turn into an exception."""
    job_dir, _ = job_factory("healthy")
    env, prefix = private_work_roots("stepwise-bench-diagnose-")
    proc = subprocess.Popen(
        [sys.executable, "bench/diagnosis_speed.py", "--job-dir", str(job_dir), "--runs", "50", "--command-runs", "0"],
        cwd=REPO, env=env | {"PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _kill_when(proc, lambda: _record_written(prefix), sig)
    assert _gone(prefix) == ([], [])


_SERVING_TEST = """
import time

def test_serves_then_waits(served_job):
    served_job("healthy")
    print("SERVING", flush=True)
    time.sleep(600)
"""


def test_a_killed_pytest_leaves_no_server(tmp_path):
    """pytest killed while a session fixture serves a copy (no teardown runs): the copy stops all the same."""
    test_file = REPO / "tests" / "support" / f"serving_session_{os.getpid()}.py"  # under tests/: its conftest
    test_file.write_text(_SERVING_TEST)
    basetemp = tmp_path / "inner"
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", f"--basetemp={basetemp}",
             str(test_file)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        _kill_when(
            proc, lambda: prometheus_pids_under(str(basetemp)) and _record_written(f"{basetemp}/views")
        )
    finally:
        test_file.unlink()
    assert _until(lambda: not prometheus_pids_under(str(basetemp))) is True


_WORKER = """
import sys
from playbooks import tsdb_server
tsdb_server.ensure_served(sys.argv[1], work_root=sys.argv[2])
"""


@pytest.mark.parametrize("next_run", ["served-again", "pruned"])
@pytest.mark.parametrize("when", ["copy-made", "prometheus-started"], ids=["mid-copy", "mid-start"])
def test_a_worker_killed_while_starting_a_shared_copy_leaves_nothing_after_the_next_run(
    job_factory, tmp_path, next_run, when
):
    """A Celery worker serving a copy in the shared root is SIGKILLed while it copies the TSDB or while its
    Prometheus starts (before the server is recorded): the next run stops that server and deletes that copy,
    whether it serves the same TSDB again or only prunes idle copies (as every task does); a recorded
    server in use is not pruned."""
    job_dir, _ = job_factory("healthy")
    busy, _ = job_factory("node-death")
    shared = tmp_path / "tsdb-views"
    kept = tsdb_server.ensure_served(busy / "prometheus", work_root=shared)
    worker = subprocess.Popen(
        [sys.executable, "-c", _WORKER, str(job_dir / "prometheus"), str(shared)],
        cwd=REPO, env=os.environ | {"PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    kept_entry = Path(kept.copy_dir)
    cond = {
        "copy-made": lambda: [p for p in shared.iterdir() if p.is_dir() and p != kept_entry],
        "prometheus-started": lambda: set(prometheus_pids_under(str(shared))) - {kept.pid},
    }[when]
    _kill_when(worker, cond)
    assert cond(), "the worker left a copy or a server"
    # on a loaded machine the kill may land once the worker has recorded its server: that one is in use
    recorded = {s.pid: Path(s.copy_dir) for s in tsdb_server.list_served(shared)}
    try:
        if next_run == "served-again":
            served = tsdb_server.ensure_served(job_dir / "prometheus", work_root=shared)
            assert sorted(prometheus_pids_under(str(shared))) == sorted(set(recorded) | {served.pid})
        else:
            tsdb_server.stop_idle(shared, idle_seconds=3600.0)
            assert sorted(prometheus_pids_under(str(shared))) == sorted(recorded)
            assert sorted(p for p in shared.iterdir() if p.is_dir()) == sorted(recorded.values())
    finally:
        tsdb_server.reap_leftovers(shared)
    assert prometheus_pids_under(str(shared)) == []


_GENERATOR = """
import sys
from playbooks.synth import generate_job
generate_job("healthy", 1, 4, sys.argv[1], gpus=4, hours=1.3, wal_tail_minutes=20)
"""


def test_a_generator_killed_while_it_writes_the_wal_tail_leaves_no_prometheus(tmp_path):
    """The generator pushes a job's last minutes through a short-lived Prometheus on the job's TSDB: killed
    meanwhile (a bench interrupted while it builds its job), that server stops, and the TSDB is not left
    locked by it."""
    out = tmp_path / "job"
    gen = subprocess.Popen(
        [sys.executable, "-c", _GENERATOR, str(out)],
        cwd=REPO, env=os.environ | {"PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    _kill_when(gen, lambda: prometheus_pids_under(str(out)), within=180.0)
    assert _until(lambda: not prometheus_pids_under(str(out))) is True
