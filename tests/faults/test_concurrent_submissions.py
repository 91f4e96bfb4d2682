"""Item 13: the URL probe holds no database lock while it waits on the network. Seven processes open
investigations at once against a Prometheus that takes 4 s to answer, on one file SQLite database (WAL,
busy timeout 20 s): before, each held the write lock through its probe (7 x 4 s > 20 s) and some got
"database is locked"; now every one is saved, and a writer meanwhile is never refused."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from tests.security.fakes import http_server, prometheus_like
from tests.test_celery_worker import REPO, _env, _manage

SLOW_S = 4.0
SUBMISSIONS = 7

_CREATE = """
from investigations.services.investigations import SourceRequest, investigation_create
inv = investigation_create(title="slow {n}", source=SourceRequest(kind="url", prometheus_url={url!r} + "/t{n}"))
print("created", inv.pk)
"""
_WRITER = """
import time
from investigations.models import Investigation
for i in range(40):
    Investigation.objects.create(title=f"writer {{i}}")
    time.sleep(0.25)
print("writer done")
"""


def _slow(method: str, path: str, headers: dict[str, str]):
    time.sleep(SLOW_S)
    return prometheus_like(method, path, headers)


def test_seven_concurrent_submissions_against_a_slow_prometheus_all_succeed(tmp_path) -> None:
    db = tmp_path / "stepwise.sqlite3"
    env = _env(STEPWISE_DATA_DIR=str(tmp_path / "data"), DATABASE_URL=f"sqlite:///{db}",
               STEPWISE_ALLOWED_PROMETHEUS="127.0.0.1")  # fmt: skip
    _manage(env, "migrate", "--noinput")
    with http_server(_slow) as (url, seen):
        procs = [
            subprocess.Popen(
                [sys.executable, "manage.py", "shell", "--no-imports", "-c", code],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for code in [_WRITER] + [_CREATE.format(n=n, url=url) for n in range(SUBMISSIONS)]
        ]
        outs = [p.communicate(timeout=300) for p in procs]
    failures = [
        (p.returncode, err[-1500:]) for p, (_out, err) in zip(procs, outs, strict=True) if p.returncode
    ]
    assert failures == []
    assert all("database is locked" not in err for _out, err in outs)
    assert "writer done" in outs[0][0]
    assert sum("created" in out for out, _err in outs[1:]) == SUBMISSIONS
    assert len([h for h in seen if h[":path"].endswith("/api/v1/status/buildinfo")]) == SUBMISSIONS
    import sqlite3

    with sqlite3.connect(db) as conn:
        titles = [r[0] for r in conn.execute("SELECT title FROM investigations_investigation")]
        jobs = conn.execute("SELECT count(*) FROM investigations_job").fetchone()[0]
    assert (
        sum(t.startswith("slow ") for t in titles) == SUBMISSIONS and jobs == SUBMISSIONS
    )  # one job per URL
    assert sum(t.startswith("writer ") for t in titles) == 40
    print(json.dumps({"submissions": SUBMISSIONS, "probe_delay_s": SLOW_S}))
