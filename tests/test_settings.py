"""Settings come from the environment with safe defaults; bad values stop start-up with a clear message.

Each case imports stepwise.settings in a fresh interpreter with a controlled environment, because
settings are read once per process.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

_DUMP = """
import json, stepwise.settings as s
print(json.dumps({
    "bind": s.STEPWISE_BIND,
    "allowed_prometheus": s.STEPWISE_ALLOWED_PROMETHEUS,
    "debug": s.DEBUG,
    "allowed_hosts": s.ALLOWED_HOSTS,
    "secret_key": s.SECRET_KEY,
    "broker": s.CELERY_BROKER_URL,
    "broker_options": s.CELERY_BROKER_TRANSPORT_OPTIONS,
    "db": s.DATABASES["default"]["ENGINE"],
    "db_name": str(s.DATABASES["default"]["NAME"]),
    "job_roots": [str(p) for p in s.STEPWISE_JOB_ROOTS],
    "tsdb_views": str(s.STEPWISE_TSDB_VIEWS),
    "prometheus_bin": s.STEPWISE_PROMETHEUS_BIN,
    "session_cookie_secure": s.SESSION_COOKIE_SECURE,
    "session_engine": s.SESSION_ENGINE,
    "eager": s.CELERY_TASK_ALWAYS_EAGER,
    "acks_late": s.CELERY_TASK_ACKS_LATE,
    "prefetch": s.CELERY_WORKER_PREFETCH_MULTIPLIER,
    "middleware": s.MIDDLEWARE,
    "static_storage": getattr(s, "STORAGES", {}).get("staticfiles", {}).get("BACKEND", ""),
    "static_finders": s.WHITENOISE_USE_FINDERS,
    "static_refresh": (s.WHITENOISE_AUTOREFRESH, getattr(s, "WHITENOISE_MAX_AGE", None)),
}))
"""

# Variables that would leak the developer's configuration into the "defaults" cases.
_SCRUB = (
    "DATABASE_URL", "REDIS_URL", "SECRET_KEY", "SECRET_KEY_FILE", "DEBUG", "ALLOWED_HOSTS",
    "STEPWISE_BIND", "STEPWISE_ALLOWED_PROMETHEUS", "STEPWISE_JOB_ROOTS", "STEPWISE_PROMETHEUS_BIN",
    "STEPWISE_TSDB_VIEWS", "STEPWISE_TLS", "STEPWISE_STATIC_COLLECTED", "DJANGO_SETTINGS_MODULE",
)  # fmt: skip


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB and not k.endswith("_FILE")}
    env["STEPWISE_DATA_DIR"] = str(data_dir)
    env.update(extra)
    return env


def _settings(data_dir: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _DUMP],
        cwd=REPO,
        env=_env(data_dir, **extra),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _load(data_dir: Path, **extra: str) -> dict:
    proc = _settings(data_dir, **extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_defaults_are_safe(tmp_path: Path) -> None:
    """With no configuration: loopback only, DEBUG off, login everywhere, embedded broker, SQLite."""
    s = _load(tmp_path)
    assert s["bind"] == "127.0.0.1:8000"
    assert s["allowed_prometheus"] == [
        f"{host}:{ports}"
        for host in ("127.0.0.1", "localhost", "[::1]")
        for ports in ("9090-9199", "19190-19989", "20190-20989")
    ]
    assert s["debug"] is False
    assert s["allowed_hosts"] == ["localhost", "127.0.0.1"]
    assert s["broker"].startswith("filesystem://")
    assert s["broker_options"]["data_folder_in"] == s["broker_options"]["data_folder_out"]
    assert s["broker_options"]["data_folder_in"].startswith(str(tmp_path / "broker"))
    assert s["db"] == "django.db.backends.sqlite3"
    assert s["db_name"] == str(tmp_path / "stepwise.sqlite3")
    assert s["job_roots"] == [str(tmp_path / "demo-jobs")]
    assert s["tsdb_views"] == str(tmp_path / "tsdb-views")
    assert s["prometheus_bin"] == "prometheus"
    assert s["session_cookie_secure"] is False
    assert (s["eager"], s["acks_late"], s["prefetch"]) == (False, True, 1)
    assert "django.contrib.auth.middleware.LoginRequiredMiddleware" in s["middleware"]
    assert "django.middleware.csrf.CsrfViewMiddleware" in s["middleware"]


def test_it_generates_the_secret_key_once_and_reuses_it(tmp_path: Path) -> None:
    """The generated key is written 0600 and the next process reads the same one."""
    first = _load(tmp_path)["secret_key"]
    key_file = tmp_path / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert len(first) >= 50
    assert _load(tmp_path)["secret_key"] == first
    assert _load(tmp_path / "other")["secret_key"] != first


def test_it_reads_secrets_from_name_file(tmp_path: Path) -> None:
    """SECRET_KEY_FILE (a Docker secret) is read instead of generating a key."""
    secret = tmp_path / "key.txt"
    secret.write_text("k" * 40 + "\n")
    assert _load(tmp_path, SECRET_KEY_FILE=str(secret))["secret_key"] == "k" * 40
    assert not (tmp_path / "secret_key").exists()


def test_collected_static_files_are_served_hashed_and_compressed(tmp_path: Path) -> None:
    """Where collectstatic ran (the Docker image), hashed names and compressed copies, read once and cached
    (WhiteNoise's default max-age); else the finders, each file looked up again on each request (an edit made
    while the demo runs is served whole) and revalidated by the browser on each page."""
    plain = _load(tmp_path)
    assert (plain["static_storage"], plain["static_finders"], plain["static_refresh"]) == (
        "",
        True,
        [True, 0],
    )
    collected = _load(tmp_path, STEPWISE_STATIC_COLLECTED="1")
    assert collected["static_storage"] == "whitenoise.storage.CompressedManifestStaticFilesStorage"
    assert collected["static_finders"] is False
    assert collected["static_refresh"] == [False, None]


def test_it_uses_redis_and_tls_settings_from_the_environment(tmp_path: Path) -> None:
    """REDIS_URL switches the broker and reads sessions from Redis first; STEPWISE_TLS turns on secure
    cookies."""
    assert _load(tmp_path)["session_engine"] == "django.contrib.sessions.backends.db"
    s = _load(tmp_path, REDIS_URL="redis://127.0.0.1:6379/3", STEPWISE_TLS="1", DEBUG="true")
    assert s["broker"] == "redis://127.0.0.1:6379/3"
    assert s["session_engine"] == "django.contrib.sessions.backends.cached_db"
    assert s["session_cookie_secure"] is True
    assert s["debug"] is True


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEBUG": "maybe"}, "DEBUG='maybe' is not a boolean"),
        ({"STEPWISE_BIND": "localhost"}, "STEPWISE_BIND='localhost' is not HOST:PORT"),
        ({"STEPWISE_BIND": "127.0.0.1:99999"}, "is not HOST:PORT"),
        ({"STEPWISE_PROMETHEUS_TIMEOUT": "soon"}, "STEPWISE_PROMETHEUS_TIMEOUT='soon' is not an integer"),
        ({"STEPWISE_QUERY_CONCURRENCY": "0"}, "STEPWISE_QUERY_CONCURRENCY=0 is below the minimum of 1"),
        ({"DATABASE_URL": "mongo://x/y"}, "DATABASE_URL is not a database URL"),
        ({"SECRET_KEY": "short"}, "SECRET_KEY is too short"),
        ({"SECRET_KEY_FILE": "/nonexistent/key"}, "SECRET_KEY_FILE='/nonexistent/key' cannot be read"),
        ({"STEPWISE_LOG_LEVEL": "loud"}, "STEPWISE_LOG_LEVEL='LOUD' is not one of"),
    ],
)
def test_bad_values_raise_improperly_configured(tmp_path: Path, env: dict[str, str], message: str) -> None:
    """A wrong value stops start-up with ImproperlyConfigured naming the variable."""
    proc = _settings(tmp_path, **env)
    assert proc.returncode != 0
    assert "django.core.exceptions.ImproperlyConfigured" in proc.stderr
    assert message in proc.stderr


def test_system_checks_report_bad_broker_allow_list_and_job_roots(tmp_path: Path) -> None:
    """manage.py check names stepwise.E001, E002 and W003, and fails on the errors."""
    env = _env(
        tmp_path,
        REDIS_URL="amqp://guest@127.0.0.1//",
        STEPWISE_ALLOWED_PROMETHEUS="127.0.0.1,http://prom:9090/,10.0.0.0/33,host:port",
        STEPWISE_JOB_ROOTS=str(tmp_path / "missing"),
    )
    proc = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "stepwise.E001" in out and "'amqp'" in out
    assert out.count("stepwise.E002") == 3
    assert "stepwise.W003" in out and str(tmp_path / "missing") in out


def test_system_checks_pass_with_defaults(tmp_path: Path) -> None:
    """The default configuration raises no Stepwise error."""
    (tmp_path / "demo-jobs").mkdir()
    proc = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=REPO,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "stepwise." not in proc.stdout + proc.stderr
