"""`manage.py compare`: the contract's JSON on stdout, its exit codes, and no Prometheus left behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.processes import private_work_roots, prometheus_pids_under, signal_and_wait

REPO = Path(__file__).resolve().parents[2]
ENV, WORK_ROOT_PREFIX = private_work_roots("stepwise-compare-")


def _compare_servers() -> list[int]:
    return prometheus_pids_under(WORK_ROOT_PREFIX)


def _run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "compare", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
    )


@pytest.fixture
def pair(job_factory) -> tuple[Path, Path]:
    restored, truth = job_factory("restore-resource-leak")
    return restored, Path(truth["compare_with"])


def test_it_prints_the_comparison_json_alone_and_exits_0(pair):
    """stdout is exactly one JSON object of the contract's compare shape; nothing stays running."""
    restored, baseline = pair
    proc = _run("--job-dir", str(baseline), "--job-dir", str(restored))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) >= {"jobs", "source", "diagnosis", "findings", "timings", "comparison"}
    assert [j["first_step"] for j in result["jobs"]] == [0, 1]
    assert result["diagnosis"]["class"] == "restore-resource-leak"
    assert set(result["comparison"]) >= {"overlap_steps", "config_diff", "metrics"}
    assert _compare_servers() == []


def test_it_renders_markdown(pair):
    """--format markdown prints the comparison report with its metric table."""
    restored, baseline = pair
    proc = _run("--job-dir", str(baseline), "--job-dir", str(restored), "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("## Multi-Job Comparison:")
    assert "| procs_running |" in proc.stdout


def test_a_missing_job_dir_exits_2_with_a_reason(pair, tmp_path):
    """One directory that does not exist: exit 2, one line on stderr, nothing on stdout, nothing started."""
    restored, _ = pair
    proc = _run("--job-dir", str(restored), "--job-dir", str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "job directory not found" in proc.stderr.strip().splitlines()[-1]
    assert _compare_servers() == []


def test_one_job_dir_is_a_bad_argument(pair):
    """A comparison needs two jobs: exit 2."""
    proc = _run("--job-dir", str(pair[0]))
    assert proc.returncode == 2
    assert proc.stdout == ""


def test_a_dir_without_tsdb_exits_2(pair, tmp_path):
    """A job directory without prometheus/ is unreadable input: exit 2."""
    empty = tmp_path / "job"
    empty.mkdir()
    (tmp_path / "job.log").write_text("JOB_ID=1\n")
    proc = _run("--job-dir", str(pair[0]), "--job-dir", str(empty))
    assert proc.returncode == 2
    assert "no TSDB" in proc.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_signal_stops_every_server_it_started(pair, sig):
    """SIGTERM or SIGINT (Ctrl-C) while serving: servers stopped, exit 128+signal, nothing on stdout, no traceback."""
    restored, baseline = pair
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "compare", "--job-dir", str(baseline), "--job-dir", str(restored)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    deadline = time.monotonic() + 60
    while not _compare_servers() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if proc.poll() is not None:
        pytest.skip("the comparison finished before a server could be seen")
    signal_and_wait(proc, sig)
    assert proc.returncode == 128 + sig
    assert proc.stdout.read() == b""
    # No traceback, neither the command's nor Python's report of a signal landing in a weakref callback
    # ("Exception ignored in: ..."; tests/investigations/test_command_signals.py fires that case).
    err = proc.stderr.read()
    assert b"Traceback" not in err and b"Exception ignored" not in err, err.decode(errors="replace")
    assert _compare_servers() == []
