"""Item 10: control characters read from a log (or a TSDB) are never stored: a NUL inside a log header's
job id was stored as the job id (PostgreSQL refuses it outright). Checked on SQLite and on PostgreSQL;
property tests run the triage and the cleaning on arbitrary text."""

from __future__ import annotations

import json
import secrets
import socket
import textwrap
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from investigations.models import Job
from investigations.services.investigations import SourceRequest, investigation_create, job_triage
from playbooks.textclean import printable, scrub
from playbooks.triage import triage_log
from tests.test_celery_worker import ON_CI, _env, _manage

LOG = b"JOB_ID=81\x0034\nJOB_NAME=llama\x1b[31m-70b\x00\n0: completed step: 1 loss 2.0\x00\x07\nNCCL timeout \x00\n"
_CONTROLS = {chr(c) for c in (*range(0, 9), *range(11, 32), 127)}

_ON_POSTGRES = """
import json
from django.core.files.uploadedfile import SimpleUploadedFile
from investigations.models import Job
from investigations.services.investigations import SourceRequest, investigation_create, job_triage
log = SimpleUploadedFile("x.log", {log!r})
inv = investigation_create(title="nul", source=SourceRequest(kind="upload", log=log))
job = Job.objects.get()
job_triage(job.pk)
job.refresh_from_db()
print(json.dumps({{"job_id": job.job_id, "name": job.name, "triage": job.triage}}))
"""


def _assert_clean(job_id: str, name: str, triage: dict) -> None:
    assert job_id == "8134" and name == "llama[31m-70b"
    text = json.dumps(triage, ensure_ascii=False)
    assert not _CONTROLS & set(text) and "\\u0000" not in json.dumps(triage)


@pytest.mark.django_db
def test_a_nul_in_an_uploaded_logs_header_is_not_stored(settings_media) -> None:
    investigation_create(
        title="nul", source=SourceRequest(kind="upload", log=SimpleUploadedFile("x.log", LOG))
    )
    job = Job.objects.get()
    job = job_triage(job.pk)
    _assert_clean(job.job_id, job.name, job.triage)


@pytest.fixture
def settings_media(settings, tmp_path: Path) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"


@pytest.mark.postgres
def test_on_postgresql_too(tmp_path: Path) -> None:
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=2).close()
    except OSError as exc:
        if ON_CI:
            pytest.fail(f"PostgreSQL unreachable: {exc} (CI=true: this test must run)")
        pytest.skip(f"PostgreSQL unreachable: {exc}")
    import psycopg

    name = f"stepwise_test_{secrets.token_hex(4)}"
    admin_url = "postgresql://postgres@127.0.0.1:5432/postgres"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        env = _env(
            STEPWISE_DATA_DIR=str(tmp_path / "data"),
            DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/{name}",
        )
        _manage(env, "migrate", "--noinput")
        out = _manage(
            env, "shell", "--no-imports", "-c", textwrap.dedent(_ON_POSTGRES.format(log=LOG))
        ).stdout
        stored = json.loads(out.strip().splitlines()[-1])
        _assert_clean(stored["job_id"], stored["name"], stored["triage"])
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@given(st.text())
def test_printable_leaves_no_control_character(text: str) -> None:
    out = printable(text)
    assert not any(ord(c) < 32 or 127 <= ord(c) < 160 or 0xD800 <= ord(c) < 0xE000 for c in out)
    out.encode("utf-8")  # storable as UTF-8 (no lone surrogate)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(max_size=300), max_size=40))
def test_the_triage_of_any_text_is_storable(lines: list[str]) -> None:
    """Whatever a log holds, the triage finishes and its scrubbed result is JSON a database stores."""
    result = scrub(triage_log(lines).to_dict())
    text = json.dumps(result, ensure_ascii=False)
    assert "\x00" not in text
    text.encode("utf-8")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=30))
def test_the_triage_of_any_bytes_in_a_file_never_crashes(tmp_path_factory, chunks: list[bytes]) -> None:
    path = tmp_path_factory.mktemp("logs") / "x.log"
    path.write_bytes(b"\n".join(chunks))
    assert "\x00" not in json.dumps(scrub(triage_log(path).to_dict()), ensure_ascii=False)
