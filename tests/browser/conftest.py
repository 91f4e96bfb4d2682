"""Browser tests: headless Chromium (Debian's) drives the app served by gunicorn, with a real Celery worker.

The app runs as a deployment does, in its own processes: gunicorn and a Celery worker on the embedded
(filesystem) broker, sharing a file SQLite database and a data directory under a session temp folder.
The test process never opens that database through Django (its own test database is a different
one): set rows up with `stepwise_app.shell(code)` and read them back with `stepwise_app.rows(sql)`.

Fixtures:
- `stepwise_app` (session): the running app. `.url(path)`, `.shell(code)`, `.rows(sql, params)`,
  `.username` / `.password`, `.job_root` (the allowed job root: every `job_factory` job is inside it),
  `.home` (the service user's HOME: an empty folder where a test may write `.ssh/config`, which the
  tunnels' ssh reads), `.logs()` (the tails of the web and worker logs, for failure messages).
- `browser` (session): a Playwright Chromium browser.
- `page` (function): a fresh browser context already signed in, with `base_url` set, so
  `page.goto("/")` works. A failing test leaves a screenshot under the session temp folder.
- `anon_page` (function): the same without a session.

The app is shared by every browser test of the session. Jobs are keyed by (cluster, JOB_ID), and
`job_factory` builds each (scenario, seed) once, so several tests may open the same job: a test that
must not share a Job row with another test opens it under a cluster of its own (the "Job id and
cluster" fields of the new-investigation form) or uses another seed.

Every test in this folder is marked `browser`. Without /usr/bin/chromium they are skipped, except on
CI (CI=true), where that is a failure.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from playbooks import tsdb_server
from tests.conftest import TEST_MAX_COPIES

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("STEPWISE_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ON_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
STARTUP_TIMEOUT_S = 60.0
#: Default wait of Playwright actions and `expect` assertions. Generous on purpose: on a loaded
#: two-CPU machine a diagnosis queued behind discoveries can take most of a minute; a passing
#: assertion returns as soon as it holds, so only failures wait this long.
EXPECT_TIMEOUT_MS = 90_000
USERNAME = "browser"
PASSWORD = "browser-correct-horse-42"

# Environment variables of the developer's shell that must not leak into the app under test.
_SCRUB = ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG", "STEPWISE_", "DJANGO_SETTINGS_MODULE")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.browser)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    # Record the outcome of the call phase for the `page` fixture's teardown (screenshot on failure).
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


def _free_port() -> int:
    """Return a port the kernel just handed out (outside the ranges Stepwise's own servers pick from)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class StepwiseApp:
    """The app under test.

    Attributes:
        base_url: http://127.0.0.1:<port>, no trailing slash.
        env: the environment the web server and the worker run with.
        db: the SQLite database file they share.
        data_dir: STEPWISE_DATA_DIR (broker, media, secret key).
        job_root: the only allowed job root (STEPWISE_JOB_ROOTS).
        log_dir: where web.log and worker.log are written.
        home: HOME of both processes. Each tunnel's ssh_config includes ~/.ssh/config, and ssh expands
            that ~ from $HOME (its own default config comes from the passwd entry, but -F replaces it).
    """

    base_url: str
    env: dict[str, str]
    db: Path
    data_dir: Path
    job_root: Path
    log_dir: Path
    home: Path
    username: str = USERNAME
    password: str = PASSWORD
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def url(self, path: str = "/") -> str:
        return self.base_url + path

    def shell(self, code: str, timeout: float = 120) -> str:
        """Return the stdout of `code` run by `manage.py shell` in the app's environment."""
        return _manage(self.env, "shell", "--no-imports", "-c", code, timeout=timeout).stdout

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Return the rows of a read-only SQL query on the app's database."""
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10) as conn:
            return conn.execute(sql, params).fetchall()

    def logs(self, chars: int = 3000) -> str:
        parts = []
        for name in ("web.log", "worker.log"):
            path = self.log_dir / name
            text = path.read_text(errors="replace") if path.exists() else "(none)"
            parts.append(f"--- {name} (tail) ---\n{text[-chars:]}")
        return "\n".join(parts)

    def assert_running(self) -> None:
        for proc in self.procs:
            assert proc.poll() is None, f"{proc.args[3:5]} exited ({proc.returncode})\n{self.logs()}"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB)}
    env.update(extra, PYTHONUNBUFFERED="1", DJANGO_SETTINGS_MODULE="stepwise.settings")
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
    assert proc.returncode == 0, f"manage.py {' '.join(args[:2])} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _spawn(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        # A session of its own: teardown signals exactly this group (gunicorn's or Celery's own workers).
        return subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _start_web(app: StepwiseApp, log: Path, attempts: int = 3) -> None:
    """Start gunicorn on a free port; another process may take the port first, so try a few."""
    for attempt in range(attempts):
        port = _free_port()
        app.base_url = f"http://127.0.0.1:{port}"
        web = [
            sys.executable, "-m", "gunicorn", "stepwise.wsgi:application", "--bind", f"127.0.0.1:{port}",
            "--workers", "1", "--threads", "8", "--graceful-timeout", "5", "--access-logfile", "-",
        ]  # fmt: skip
        proc = _spawn(web, app.env, log)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(app.url("/login/"), timeout=2) as response:
                    if response.status == 200:
                        app.procs.append(proc)
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        _stop(proc)
        if attempt == attempts - 1:
            pytest.fail(f"the web server did not start\n{app.logs()}")


@pytest.fixture(scope="session")
def stepwise_app(tmp_path_factory: pytest.TempPathFactory, synth_root: Path) -> Iterator[StepwiseApp]:
    """Return the app served by gunicorn with a Celery worker, on a private data dir and database."""
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: apt-get install chromium"
        if ON_CI:
            pytest.fail(f"{message} (CI=true: browser tests must run)")
        pytest.skip(message)
    base = tmp_path_factory.mktemp("browser-app")
    data_dir, db, views = base / "data", base / "stepwise.sqlite3", base / "tsdb-views"
    home = base / "home"  # as a service user's: not the developer's ~/.ssh (tunnel tests write one)
    home.mkdir(mode=0o700)
    env = _env(
        STEPWISE_DATA_DIR=str(data_dir),
        DATABASE_URL=f"sqlite:///{db}",
        STEPWISE_JOB_ROOTS=str(synth_root),
        STEPWISE_TSDB_VIEWS=str(views),
        ALLOWED_HOSTS="127.0.0.1,localhost",
        DEBUG="0",
        STEPWISE_LOG_LEVEL="INFO",
        HOME=str(home),
        # The tunnel tests reach the throwaway sshd through ~/.ssh/config aliases (gpu-*) on loopback.
        STEPWISE_TUNNEL_HOSTS="gpu-*,127.0.0.1,localhost",
        STEPWISE_TUNNEL_SSH_PORTS="22,22200-22999",
        STEPWISE_TUNNEL_PROMETHEUS_PORTS="1024-65535",
        # The comparison-cancel test holds its queries at links listening on any loopback port.
        STEPWISE_ALLOWED_PROMETHEUS="127.0.0.1,localhost",
        # Many jobs are opened within a minute (see tests/conftest.py TEST_MAX_COPIES).
        STEPWISE_TSDB_MAX_COPIES=str(TEST_MAX_COPIES),
    )
    app = StepwiseApp(
        base_url="",
        env=env,
        db=db,
        data_dir=data_dir,
        job_root=synth_root,
        log_dir=base,
        home=home,
    )
    _manage(env, "migrate", "--noinput")
    app.shell(
        "from django.contrib.auth import get_user_model\n"
        f"get_user_model().objects.create_user({USERNAME!r}, password={PASSWORD!r}, is_staff=True)\n"
    )
    worker = [
        sys.executable, "-m", "celery", "-A", "stepwise", "worker", "-l", "info", "--concurrency", "2",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip
    try:
        app.procs.append(_spawn(worker, env, base / "worker.log"))
        _start_web(app, base / "web.log")
        yield app
    finally:
        for proc in reversed(app.procs):
            _stop(proc)
        tsdb_server.reap_leftovers(views)  # the Prometheus copies the worker started


@pytest.fixture(scope="session")
def browser(stepwise_app: StepwiseApp) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def _signed_in_state(
    browser: Any, stepwise_app: StepwiseApp, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """Sign in once through the login page and keep the session cookie for every `page`."""
    state = tmp_path_factory.mktemp("browser-state") / "state.json"
    context = browser.new_context(base_url=stepwise_app.base_url)
    try:
        page = context.new_page()
        page.goto("/login/")
        page.get_by_label("Username").fill(stepwise_app.username)
        page.get_by_label("Password").fill(stepwise_app.password)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(lambda url: "/login/" not in url)
        context.storage_state(path=str(state))
    finally:
        context.close()
    return state


def _context_page(
    request: pytest.FixtureRequest, browser: Any, app: StepwiseApp, state: Path | None
) -> Iterator[Any]:
    from playwright.sync_api import expect

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    context = browser.new_context(
        base_url=app.base_url,
        storage_state=str(state) if state else None,
        viewport={"width": 1360, "height": 900},
    )
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    page = context.new_page()
    try:
        yield page
    finally:
        if request.node.stash.get(_FAILED, False):
            shots = app.log_dir / "failures"
            shots.mkdir(exist_ok=True)
            page.screenshot(path=str(shots / f"{request.node.name}.png"), full_page=True)
            print(f"screenshot: {shots / request.node.name}.png\n{app.logs()}")
        context.close()


@pytest.fixture
def page(request: pytest.FixtureRequest, browser: Any, stepwise_app: StepwiseApp, _signed_in_state: Path):
    """Return a signed-in Playwright page on a fresh context (base_url set)."""
    yield from _context_page(request, browser, stepwise_app, _signed_in_state)


@pytest.fixture
def anon_page(request: pytest.FixtureRequest, browser: Any, stepwise_app: StepwiseApp):
    """Return a Playwright page with no session."""
    yield from _context_page(request, browser, stepwise_app, None)
