"""`manage.py diagnose`: the contract's JSON on stdout, its exit codes, and no Prometheus left behind."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.processes import private_work_roots, prometheus_pids_under

REPO = Path(__file__).resolve().parents[2]
OWN_ENV, WORK_ROOT_PREFIX = private_work_roots("stepwise-diagnose-")
ENV = OWN_ENV | {"STEPWISE_ALLOWED_PROMETHEUS": "127.0.0.1,localhost,::1"}
CLASSES = {
    "healthy",
    "collective-hang",
    "network-hang",
    "node-death",
    "heartbeat-false-positive",
    "host-oom",
    "thermal-straggler",
    "rdma-degradation",
    "restore-resource-leak",
    "monitoring-ghost-data",
    "gpu-driver-fault",
    "gpu-hardware-fault",
    "training-instability",
}


def _servers() -> list[int]:
    return prometheus_pids_under(WORK_ROOT_PREFIX)


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "manage.py", "diagnose", *args]


def _run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_cmd(*args), cwd=REPO, capture_output=True, text=True, timeout=timeout, env=ENV)


def test_it_prints_the_contract_json_alone_and_exits_0(job_factory):
    """stdout is exactly one JSON object of the contract's shape; the served copy is stopped."""
    job_dir, truth = job_factory("gpu-hardware-fault")
    proc = _run("--job-dir", str(job_dir))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) == {"job", "source", "diagnosis", "findings", "timings"}
    assert set(result["job"]) == {"id", "status", "triage_class", "first_step", "last_step", "crash_time"}
    assert set(result["source"]) == {"url", "profile", "hosts", "gpus_per_host", "time_range"}
    d = result["diagnosis"]
    assert set(d) == {"class", "root_cause_family", "culprits", "onset", "confidence", "summary", "chain"}
    assert d["class"] in CLASSES and d["class"] == truth["class"]
    assert all(set(c) == {"host", "gpu"} for c in d["culprits"])
    for f in result["findings"]:
        assert set(f) == {"playbook", "class", "severity", "hosts", "gpus", "onset", "title", "evidence"}
        assert f["severity"] in ("info", "warning", "critical") and f["class"] in CLASSES
        for e in f["evidence"]:
            assert set(e) == {"query", "labels", "value", "interpretation"}
    assert set(result["timings"]) == {"total_s", "queries", "prometheus_s"}
    assert _servers() == []


def test_a_forced_profile_the_tsdb_lacks_exits_2_and_stops_its_server(job_factory):
    """--profile nvidia on the seed system's TSDB would read nothing and say healthy: exit 2 with the reason."""
    job_dir, _ = job_factory("healthy")
    proc = _run("--job-dir", str(job_dir), "--profile", "nvidia")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "holds none of the nvidia profile's metrics" in proc.stderr and "use auto" in proc.stderr
    assert _servers() == []


def test_verbosity_2_says_where_the_time_went_on_stderr(job_factory):
    """-v 2 adds one line of phase timings to stderr (the log is triaged while the TSDB is served and
    discovered); stdout is still the contract's JSON alone, its request count covering the discovery."""
    job_dir, truth = job_factory("healthy")
    quiet_proc = _run("--job-dir", str(job_dir))
    quiet = json.loads(quiet_proc.stdout)
    assert "diagnose: timings" not in quiet_proc.stderr
    proc = _run("--job-dir", str(job_dir), "-v", "2")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["diagnosis"]["class"] == quiet["diagnosis"]["class"] == truth["class"]
    assert result["timings"]["queries"] == quiet["timings"]["queries"]
    line = next(x for x in proc.stderr.splitlines() if x.startswith("diagnose: timings "))
    phases = dict(kv.split("=") for kv in line.split()[2:])
    assert {"triage_s", "serve_s", "discovery_s", "triage_wait_s", "queries_s", "decision_s"} <= set(phases)
    assert {"command_s", "cpu_s", "start_cpu_s", "triage_cpu_s"} <= set(phases)
    assert all(float(v) >= 0 for v in phases.values())
    assert float(phases["start_cpu_s"]) + float(phases["triage_cpu_s"]) <= float(phases["cpu_s"])
    assert _servers() == []


def test_it_renders_markdown(job_factory):
    """--format markdown prints the seeds' TSDB Diagnosis report."""
    job_dir, _ = job_factory("healthy")
    proc = _run("--job-dir", str(job_dir), "--format", "markdown", "--profile", "amd")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("## TSDB Diagnosis:")
    for heading in ("### Findings", "### Metric evidence", "### Anomalies detected"):
        assert heading in proc.stdout
    assert _servers() == []


_STARTS_WITHOUT_CELERY = """
import os, sys
os.environ["DJANGO_SETTINGS_MODULE"] = "stepwise.settings"
import django
django.setup()
import investigations.management.commands.diagnose
print(sorted({m.split(".")[0] for m in sys.modules} & {"celery", "kombu"}))
from investigations.tasks import job_triage_task
from reports.tasks import report_pdf_task
import stepwise
print(job_triage_task.app is stepwise.celery_app, report_pdf_task.app is stepwise.celery_app)
print(stepwise.celery_app.conf.task_acks_late)
"""


def test_the_command_starts_without_celery_and_tasks_still_bind_to_the_app():
    """The command sends no task: Django and the command load without Celery (the task modules load the app),
    and every task still binds to the configured app."""
    proc = subprocess.run(
        [sys.executable, "-c", _STARTS_WITHOUT_CELERY], cwd=REPO, capture_output=True, text=True, env=ENV
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["[]", "True True", "True"]


def test_a_bad_job_dir_exits_2_with_one_line(tmp_path):
    """A directory that does not exist, or has no TSDB, is bad input: exit 2 and a one-line reason."""
    proc = _run("--job-dir", str(tmp_path / "missing"))
    assert proc.returncode == 2
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1
    assert "job directory not found" in proc.stderr
    empty = tmp_path / "job"
    (empty / "prometheus").mkdir(parents=True)
    proc = _run("--job-dir", str(empty))
    assert proc.returncode == 2 and "no TSDB" in proc.stderr


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("--start", "yesterday"), "neither unix seconds nor ISO 8601"),
        (("--start", "2026-03-02T00:00:00Z", "--end", "2026-03-01T00:00:00Z"), "--end must be after --start"),
        (("--profile", "intel"), "unknown profile"),
        (("--gpu-model", "GTX1080"), "unknown GPU model 'GTX1080'; use auto or one of MI355X"),
    ],
)
def test_bad_arguments_exit_2(args, reason):
    """Bad times or profiles exit 2 before anything is served."""
    proc = _run("--prometheus", "http://127.0.0.1:9", *args)
    assert proc.returncode == 2 and reason in proc.stderr


def test_a_host_outside_the_allow_list_exits_2():
    """--prometheus to a host the allow-list does not name is refused without a request."""
    proc = _run("--prometheus", "http://203.0.113.7:9090")
    assert proc.returncode == 2 and "not allowed" in proc.stderr


def test_a_closed_port_exits_3():
    """A Prometheus that cannot be reached is exit 3."""
    # a bound socket that never listens: connections are refused, and no one else can take the port meanwhile
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        proc = _run("--prometheus", f"http://127.0.0.1:{sock.getsockname()[1]}")
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "" and "cannot reach Prometheus" in proc.stderr


def test_a_served_url_with_the_log_diagnoses(served_job):
    """--prometheus with --log diagnoses a server that is already up (and leaves it alone)."""
    client, truth, job_dir = served_job("rdma-degradation")
    proc = _run("--prometheus", client.base_url, "--log", str(job_dir / "log"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["diagnosis"]["class"] == truth["class"]
    assert client.ready()


def test_a_copy_served_while_django_starts_is_stopped_when_the_command_refuses(job_factory):
    """manage.py starts serving --job-dir before Django; arguments the command then refuses (exit 2 before
    it serves anything) leave no server and no work root behind."""
    job_dir, _ = job_factory("healthy")
    proc = _run("--job-dir", str(job_dir), "--profile", "intel")
    assert proc.returncode == 2 and "unknown profile" in proc.stderr
    assert _servers() == []
    assert list(Path(WORK_ROOT_PREFIX).parent.glob("stepwise-diagnose-*")) == []


def test_sigterm_stops_the_served_copy(job_factory):
    """SIGTERM while diagnosing still stops the Prometheus the command started."""
    job_dir, _ = job_factory("healthy")
    proc = subprocess.Popen(
        _cmd("--job-dir", str(job_dir)),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _servers() and proc.poll() is None:
        time.sleep(0.05)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode in (0, 128 + signal.SIGTERM)
    assert _servers() == []
