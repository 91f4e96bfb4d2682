"""docker-compose.yml describes a production deployment that is safe by default (Docker cannot run here)."""

from __future__ import annotations

import http.server
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
_VAR = re.compile(r"\$\{(\w+)(?::?[-?]([^}]*))?\}")


def _default(text: str) -> str:
    """Return `text` with ${VAR:-default} replaced by its default, as compose does with an empty .env."""
    return _VAR.sub(lambda m: m.group(2) or "", text)


def _command(service: str) -> str:
    command = SERVICES[service]["command"]
    return " ".join(command) if isinstance(command, list) else command


def test_it_has_the_production_services() -> None:
    assert set(SERVICES) == {"migrate", "web", "worker", "redis", "postgres", "prometheus"}


def test_web_runs_gunicorn_inside_and_publishes_on_loopback_only() -> None:
    web = SERVICES["web"]
    assert "gunicorn stepwise.wsgi:application --bind 0.0.0.0:8000" in _command("web")
    published = [_default(p) for p in web["ports"]]
    assert published == ["127.0.0.1:8000:8000"]


def test_the_worker_can_scale() -> None:
    """`--scale worker=N` needs no fixed name and no host port."""
    worker = SERVICES["worker"]
    assert "container_name" not in worker
    assert "ports" not in worker
    assert _command("worker").startswith("celery -A stepwise worker")


@pytest.mark.parametrize("service", ["web", "worker", "redis", "postgres", "prometheus"])
def test_long_running_services_have_healthchecks(service: str) -> None:
    check = SERVICES[service]["healthcheck"]
    assert check["test"][0] in ("CMD", "CMD-SHELL")
    assert check.get("retries", 0) >= 3


@pytest.mark.parametrize("service", ["web", "worker"])
def test_the_app_waits_for_its_dependencies(service: str) -> None:
    depends = SERVICES[service]["depends_on"]
    assert depends["postgres"]["condition"] == "service_healthy"
    assert depends["redis"]["condition"] == "service_healthy"
    assert depends["migrate"]["condition"] == "service_completed_successfully"
    assert SERVICES["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"


@pytest.mark.parametrize("service", ["migrate", "web", "worker"])
def test_the_app_uses_postgres_redis_and_env_file(service: str) -> None:
    spec = SERVICES[service]
    env = {k: _default(str(v)) for k, v in spec["environment"].items()}
    assert spec["env_file"] == ".env"
    assert (
        env["DATABASE_URL"].startswith("postgres://stepwise:")
        and "@postgres:5432/stepwise" in env["DATABASE_URL"]
    )
    assert env["REDIS_URL"] == "redis://redis:6379/0"
    assert env["STEPWISE_JOB_ROOTS"] == "/jobs"
    assert "prometheus:9090" in env["STEPWISE_ALLOWED_PROMETHEUS"].split(",")
    assert not env["STEPWISE_TSDB_VIEWS"].startswith("/data")  # per container, never on the shared volume
    assert any(v.endswith(":/jobs:ro") for v in spec["volumes"])


def test_postgres_keeps_its_data_in_a_volume() -> None:
    assert "postgres-data:/var/lib/postgresql/data" in SERVICES["postgres"]["volumes"]
    assert "postgres-data" in COMPOSE["volumes"]


def test_prometheus_serves_a_copy_of_a_read_only_tsdb() -> None:
    prometheus = SERVICES["prometheus"]
    assert any(_default(v).endswith(":/tsdb-source:ro") for v in prometheus["volumes"])
    command = _command("prometheus")
    assert "cp -a /tsdb-source/. /prometheus/" in command
    assert "--storage.tsdb.retention.time=100y" in command  # demo data is old: keep it
    assert "ports" not in prometheus


def test_env_example_lists_every_setting() -> None:
    """Every variable settings.py reads, and every one compose interpolates, is documented."""
    settings_py = (REPO / "stepwise" / "settings.py").read_text()
    read = set(re.findall(r'(?:env\w+|_bind)\("([A-Z][A-Z0-9_]+)"', settings_py))
    interpolated = {m.group(1) for m in _VAR.finditer((REPO / "docker-compose.yml").read_text())}
    example = (REPO / ".env.example").read_text()
    listed = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", example, re.MULTILINE))
    assert len(read) > 20
    assert read | interpolated <= listed, sorted((read | interpolated) - listed)


def test_the_web_healthcheck_command_accepts_an_http_answer(tmp_path: Path) -> None:
    """Run the healthcheck's own Python against a local HTTP server that refuses the Host (400)."""

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_error(400)

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code = SERVICES["web"]["healthcheck"]["test"][-1].replace("8000", str(server.server_port))
        assert subprocess.run([sys.executable, "-c", code], timeout=10).returncode == 0
        server.shutdown()
        server.server_close()
        assert subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=10).returncode != 0
    finally:
        server.server_close()


def test_the_dockerfile_copies_only_the_app_and_runs_unprivileged() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "COPY . ." not in dockerfile  # would ship .venv and data/
    assert re.search(r"^USER stepwise$", dockerfile, re.MULTILINE)
    assert "apt-get install -y --no-install-recommends prometheus" in dockerfile
    # The worker opens SSH tunnels to live jobs' Prometheus with the system ssh.
    assert re.search(r"apt-get install[^\n]*\bopenssh-client\b", dockerfile)
