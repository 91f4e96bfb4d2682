"""Shared set-up for the investigation views' tests: rows made directly, without a worker."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from investigations.models import DataSource, Investigation, InvestigationJob, Job

HTMX = {"HTTP_HX_REQUEST": "true"}


def make_investigation(
    title: str = "GPU hang",
    *,
    job_id: str = "81234",
    cluster: str = "",
    triage: dict[str, Any] | None = None,
    source: dict[str, Any] | None = None,
    **fields: Any,
) -> Investigation:
    """Return an investigation with a primary job (and a data source when `source` is given)."""
    investigation = Investigation.objects.create(title=title, **fields)
    job = Job.objects.create(job_id=job_id, cluster=cluster, name=f"{title} job", triage=triage or {})
    InvestigationJob.objects.create(investigation=investigation, job=job, role="primary")
    if source is not None:
        DataSource.objects.create(job=job, **source)
    return investigation


@pytest.fixture
def roots(settings, synth_root: Path, tmp_path: Path) -> Path:
    """Allow the generated jobs' folder as the only job root; uploads go to a private media root."""
    settings.STEPWISE_JOB_ROOTS = [synth_root]
    settings.MEDIA_ROOT = tmp_path / "media"
    return synth_root


def assert_login_required(client: Any, url: str, method: str = "get") -> None:
    response = getattr(client, method)(url)
    assert response.status_code == 302 and response["Location"].startswith("/login/"), response


def closed_port_url() -> str:
    """Return a loopback URL where nothing listens: a port the kernel just handed out and took back.

    Not a port of the TSDB servers' range: tests running alongside start Prometheus servers there.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def job_alone_in(root: Path, job_dir: Path) -> Path:
    """Return a copy of a generated job (folder and sibling log) in `root`, where its JOB_ID is found once.

    The shared folder of generated jobs may hold the same JOB_ID twice (one scenario and seed generated
    with other sizes), which a lookup by job id rightly calls ambiguous.
    """
    copy = root / job_dir.name
    shutil.copytree(job_dir, copy)
    for log in job_dir.parent.glob(f"{job_dir.name}.*"):
        if log.is_file():
            shutil.copy(log, root / log.name)
    return copy
