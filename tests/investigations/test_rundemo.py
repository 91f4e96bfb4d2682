"""`manage.py rundemo` serves the app with a worker, runs queries end to end, and leaves nothing behind.

Few tests, because starting the whole stack costs seconds: build a one-job demo, sign in as the demo
user, run the sample queries through the page (web server -> broker -> worker -> served TSDB), then
Ctrl-C, and check that every process the command started, and every Prometheus, is gone. Another kills
the worker's process group and checks that a new worker starts while the login page still answers.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from investigations.management.commands._supervise import WorkerSupervisor
from playbooks import tsdb_server

REPO = Path(__file__).resolve().parents[2]
_SCRUB = ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG", "STEPWISE_", "DJANGO_SETTINGS_MODULE")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _proc_table() -> dict[int, tuple[int, str]]:
    """Return {pid: (ppid, state)} from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        table[int(entry)] = (int(fields[1]), fields[0])
    return table


def _descendants(root: int) -> set[int]:
    table = _proc_table()
    found, frontier = set(), {root}
    while frontier:
        children = {pid for pid, (ppid, _) in table.items() if ppid in frontier} - found
        found |= children
        frontier = children
    return found


def _alive(pid: int) -> bool:
    """Return True if `pid` runs (a zombie has exited: only its parent has not collected it)."""
    state = _proc_table().get(pid)
    return state is not None and state[1] != "Z"


def _wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, (
            f"rundemo exited ({proc.returncode}) before {what}:\n{log.read_text()[-4000:]}"
        )
        result = predicate()
        if result:
            return result
        time.sleep(0.3)
    pytest.fail(f"no {what} within {timeout} s:\n{log.read_text()[-4000:]}")


def _get(client: httpx.Client, path: str, **kw) -> httpx.Response | None:
    try:
        return client.get(path, **kw)
    except httpx.TransportError:
        return None


def _start_rundemo(tmp_path: Path) -> tuple[int, Path, Path, subprocess.Popen]:
    """Start `manage.py rundemo` (one small job) on a free port with its data under `tmp_path`."""
    port = _free_port()
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB)}
    env.update(STEPWISE_DATA_DIR=str(data), PYTHONUNBUFFERED="1")
    log = tmp_path / "rundemo.log"
    cmd = [
        sys.executable, "manage.py", "rundemo", "--scenarios", "healthy", "--nodes", "2", "--hours", "1",
        "--bind", f"127.0.0.1:{port}", "--web-workers", "1", "--concurrency", "1",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return port, data, log, proc


def _worker_leader(rundemo: subprocess.Popen) -> int | None:
    """Return the pid of the running Celery worker rundemo started (it leads its own process group)."""
    for pid in _descendants(rundemo.pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            leader = os.getpgid(pid) == pid
        except OSError:
            continue
        if b"celery" in cmdline and leader and _alive(pid):
            return pid
    return None


def test_rundemo_serves_runs_queries_and_stops_cleanly(tmp_path: Path) -> None:
    port, data, log, proc = _start_rundemo(tmp_path)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    try:
        login = _wait_for(
            lambda: (r := _get(client, "/login/")) is not None and r.status_code == 200 and r,
            90, "login page", proc, log,
        )  # fmt: skip
        _wait_for(lambda: "Stepwise is running at" in log.read_text(), 10, "banner", proc, log)
        password = (data / "demo_password").read_text().strip()
        assert f"password: {password}" in log.read_text()

        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
        signed_in = client.post(
            "/login/", data={"username": "demo", "password": password, "csrfmiddlewaretoken": token}
        )
        assert signed_in.status_code == 302, signed_in.text[:500]
        home = client.get("/")
        assert "Healthy on job" in home.text  # the demo job's investigation
        # ... opened with its diagnosis started: the demo shows a verdict without a click
        inv_url = re.search(r'href="(/investigations/\d+/)"[^>]*>\s*Healthy on job', home.text).group(1)

        def verdict() -> str | None:
            body = client.get(inv_url + "diagnosis/", headers={"HX-Request": "true"}).text
            return body if 'class="diagnosis-class' in body else None

        region = _wait_for(verdict, 90, "the demo diagnosis", proc, log)
        assert re.search(r'class="diagnosis-class[^"]*"[^>]*>\s*healthy\s*<', region), region[:3000]
        sources = client.get("/sources/")
        start = re.search(r'action="(/sources/\d+/sample-run/)"', sources.text).group(1)
        started = client.post(start, headers={"X-CSRFToken": client.cookies["csrftoken"]})
        assert started.status_code == 302
        run_url = started.headers["location"]

        def finished() -> str | None:
            body = client.get(run_url, headers={"HX-Request": "true"}).text
            return None if "hx-trigger" in body else body

        status = _wait_for(finished, 60, "finished run", proc, log)
        assert 'class="badge badge-done"' in status, status[:2000]
        assert "Prometheus 2." in status
        views = data / "tsdb-views"
        assert len(tsdb_server.list_served(views)) == 1

        started_pids = _descendants(proc.pid)
        assert len(started_pids) >= 5  # worker, its pool process, gunicorn, its worker, Prometheus
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=40) == 0, log.read_text()[-4000:]
    finally:
        client.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            tsdb_server.reap_leftovers(data / "tsdb-views")

    left = sorted(pid for pid in started_pids if _alive(pid))
    assert not left, f"still running after rundemo exited: {left}"
    assert tsdb_server.list_served(views) == []
    assert "Stopped 1 TSDB server(s)." in log.read_text()


def test_rundemo_restarts_a_killed_worker_and_keeps_serving(tmp_path: Path) -> None:
    port, data, log, proc = _start_rundemo(tmp_path)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    started_pids: set[int] = set()
    try:
        _wait_for(
            lambda: (r := _get(client, "/login/")) is not None and r.status_code == 200,
            90, "login page", proc, log,
        )  # fmt: skip
        # The worker is up once it has said so (and has taken the demo's queued tasks).
        _wait_for(lambda: log.read_text().count(" ready.") >= 1, 60, "worker ready", proc, log)
        old = _wait_for(lambda: _worker_leader(proc), 10, "worker process", proc, log)
        old_group = {old} | _descendants(old)
        started_pids |= _descendants(proc.pid)
        os.killpg(old, signal.SIGKILL)

        new = _wait_for(
            lambda: (pid := _worker_leader(proc)) not in (None, old) and pid, 30, "new worker", proc, log
        )
        text = log.read_text()
        assert f"The Celery worker (pid {old}) was killed by SIGKILL." in text
        assert f"Restarted the Celery worker (pid {new})." in text
        _wait_for(lambda: log.read_text().count(" ready.") >= 2, 60, "restarted worker ready", proc, log)
        assert _get(client, "/login/").status_code == 200  # pages were served throughout
        assert not [pid for pid in old_group if _alive(pid)]
        started_pids |= _descendants(proc.pid)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=40) == 0, log.read_text()[-4000:]
    finally:
        client.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            tsdb_server.reap_leftovers(data / "tsdb-views")

    left = sorted(pid for pid in started_pids if _alive(pid))
    assert not left, f"still running after rundemo exited: {left}"


class _FakeProc:
    _next_pid = 1000

    def __init__(self) -> None:
        _FakeProc._next_pid += 1
        self.pid, self.returncode = _FakeProc._next_pid, None

    def poll(self) -> int | None:
        return self.returncode


def test_worker_supervisor_backs_off_when_the_worker_keeps_dying(monkeypatch) -> None:
    monkeypatch.setattr("investigations.management.commands._supervise.kill_orphans", lambda pgid: None)
    now, lines, spawned = [0.0], [], []

    def spawn() -> _FakeProc:
        spawned.append(_FakeProc())
        return spawned[-1]

    sup = WorkerSupervisor(spawn, lines.append, max_restarts=2, window_s=60, clock=lambda: now[0])
    sup.start()
    sup.check()
    assert len(spawned) == 1 and not lines  # alive: nothing to do
    for _ in range(2):
        sup.proc.returncode = 1
        sup.check()
    assert len(spawned) == 3
    assert lines[0] == f"The Celery worker (pid {spawned[0].pid}) exited with status 1."
    assert lines[1] == f"Restarted the Celery worker (pid {spawned[1].pid})."
    sup.proc.returncode = -9
    now[0] = 10.0
    sup.check()
    sup.check()
    assert len(spawned) == 3 and sup.proc is None  # a third death within a minute: it stays down
    assert lines[-2].endswith("was killed by SIGKILL.")
    assert lines[-1].startswith("The Celery worker died 2 times within 60 s: it is down")
    assert sum("it is down" in line for line in lines) == 1  # said once
    now[0] = 60.0
    sup.check()
    assert len(spawned) == 4 and sup.proc is spawned[-1]  # the oldest restart left the window


def test_the_demo_lets_every_job_be_served_at_once_unless_the_cap_is_set(monkeypatch, settings) -> None:
    """Six demo jobs diagnosed as the worker starts would wait on a cap of 4 served copies: the demo raises
    the cap to the job count plus two for itself and the processes it starts; a cap the user set stays."""
    from io import StringIO

    from investigations.management.commands.rundemo import Command

    monkeypatch.delenv("STEPWISE_TSDB_MAX_COPIES", raising=False)
    settings.STEPWISE_TSDB_MAX_COPIES = 4
    Command(stdout=StringIO())._copies_cap(6)
    assert os.environ["STEPWISE_TSDB_MAX_COPIES"] == "8" and settings.STEPWISE_TSDB_MAX_COPIES == 8

    monkeypatch.setenv("STEPWISE_TSDB_MAX_COPIES", "3")
    settings.STEPWISE_TSDB_MAX_COPIES = 3
    Command(stdout=StringIO())._copies_cap(6)
    assert os.environ["STEPWISE_TSDB_MAX_COPIES"] == "3" and settings.STEPWISE_TSDB_MAX_COPIES == 3
