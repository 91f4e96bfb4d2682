"""The PDF export through a real Celery worker (prefork, as deployed) on the embedded broker and a file SQLite
database shared with this process: the worker builds the PDF (text and the pinned chart as an image), a
second request of the same revision builds nothing, and a worker SIGKILLed mid-build leaves the export
failed with the reason once its time limit has passed, not "building" forever."""

from __future__ import annotations

import io
import json
import os
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pypdf import PdfReader

from tests.faults.test_worker_killed import _shell, _wait, _worker
from tests.test_celery_worker import _env, _manage

from .test_exports import FIGURE

TIME_LIMIT_S = 120

_SETUP = """
from investigations.models import Investigation, PinnedChart
inv = Investigation.objects.create(title="PDF through the worker")
PinnedChart.objects.create(investigation=inv, title="GPU temperature, tx-hpc-0003", figure={figure!r})
print(inv.pk)
"""
_REQUEST = """
import json
from django.db import transaction
from investigations.models import Investigation
from reports.services import pdf, sections
from reports.tasks import report_pdf_task
with transaction.atomic():
    report = sections.report_for(Investigation.objects.get(pk={inv}))
    export, needed = pdf.pdf_request(report, user=None, base_url="http://testserver")
    if needed:
        report_pdf_task.delay_on_commit(export.pk)
print(json.dumps({{"id": export.pk, "needed": needed}}))
"""
_POLL = """
from reports.models import PdfExport
from reports.services import pdf
export = pdf.pdf_expire(PdfExport.objects.defer("pdf").get(pk={export}))
print(export.status)
"""


def _row(db: Path, sql: str, *params) -> tuple:
    with sqlite3.connect(db, timeout=20) as conn:
        return conn.execute(sql, params).fetchone()


def _status(db: Path, export: int) -> str:
    return _row(db, "SELECT status FROM reports_pdfexport WHERE id = ?", export)[0]


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[dict]:
    db = tmp_path / "stepwise.sqlite3"
    env = _env(
        STEPWISE_DATA_DIR=str(tmp_path / "data"),
        DATABASE_URL=f"sqlite:///{db}",
        STEPWISE_REPORT_PDF_TIME_LIMIT=str(TIME_LIMIT_S),
    )
    _manage(env, "migrate", "--noinput")
    workers: list[subprocess.Popen[bytes]] = []
    try:
        yield {"env": env, "db": db, "workers": workers, "log": tmp_path / "worker.log"}
    finally:
        for w in workers:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGKILL)
                w.wait()


def _request(env: dict[str, str], inv: int) -> dict:
    return json.loads(_shell(env, _REQUEST.format(inv=inv)))


def test_the_worker_builds_the_pdf_once_per_revision(deployment: dict) -> None:
    env, db, log = deployment["env"], deployment["db"], deployment["log"]
    inv = int(_shell(env, _SETUP.format(figure=FIGURE)))
    deployment["workers"].append(_worker(env, log))
    first = _request(env, inv)
    assert first["needed"]
    _wait("the PDF built", lambda: _status(db, first["id"]) in ("done", "failed"), 180, log)
    status, error, blob = _row(
        db, "SELECT status, error, pdf FROM reports_pdfexport WHERE id = ?", first["id"]
    )
    assert status == "done", error
    assert "reports.tasks.report_pdf_task" in log.read_text(errors="replace")
    document = PdfReader(io.BytesIO(blob))
    text = "".join(page.extract_text() for page in document.pages)
    assert "PDF through the worker" in text and "GPU temperature, tx-hpc-0003" in text
    images = {image.name: image for page in document.pages for image in page.images}
    assert len(images) == 1 and len(set(next(iter(images.values())).image.convert("L").getdata())) > 10

    again = _request(env, inv)  # the same revision: the same export, nothing queued
    assert again == {"id": first["id"], "needed": False}
    assert _row(db, "SELECT count(*) FROM reports_pdfexport")[0] == 1


def test_a_worker_killed_mid_build_leaves_the_export_failed_with_the_reason(deployment: dict) -> None:
    env, db, log = deployment["env"], deployment["db"], deployment["log"]
    inv = int(_shell(env, _SETUP.format(figure=FIGURE)))
    export = _request(env, inv)["id"]
    deployment["workers"].append(worker := _worker(env, log))
    _wait("the build started", lambda: _status(db, export) != "queued", 120, log)
    os.killpg(worker.pid, signal.SIGKILL)  # the whole worker, Chromium included, mid-build
    worker.wait()
    assert _status(db, export) == "building", "the build ended before the kill; nothing was tested"
    assert _shell(env, _POLL.format(export=export)) == "building"  # within its time limit

    # As if the time limit and its grace had passed since the build began (the poll then fails it).
    with sqlite3.connect(db, timeout=20) as conn:
        conn.execute(
            "UPDATE reports_pdfexport SET started = datetime(started, ?) WHERE id = ?",
            (f"-{TIME_LIMIT_S + 60} seconds", export),
        )
    assert _shell(env, _POLL.format(export=export)) == "failed"
    error = _row(db, "SELECT error FROM reports_pdfexport WHERE id = ?", export)[0]
    assert "The worker stopped building this PDF" in error and f"time limit of {TIME_LIMIT_S} s" in error
