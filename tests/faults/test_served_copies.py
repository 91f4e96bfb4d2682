"""Item 14: one served copy per TSDB per machine, a cap on copies, a refresh when the source changes.

Real Prometheus servers on real TSDB copies. The work root is the registry every process shares (that
a second process reuses the live copy is tests/playbooks/test_tsdb_server.py's). Here: past the cap the
least recently used idle copy is stopped first; with every copy in use a new one is refused as busy
(a page answers 503 with the message, never a 500); a copy with a client connected counts as in use;
only copies Stepwise started are counted or signalled; a changed source is copied again once nobody
queries the old copy; and a repeat view of a cached timeline starts no Prometheus.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from django.core.cache import cache
from django.urls import reverse

from investigations import services
from investigations.models import DataSource, Investigation, InvestigationJob
from playbooks import tsdb_launch
from playbooks.procs import alive as _alive
from playbooks.prometheus import PrometheusClient
from playbooks.tsdb_server import TSDBBusy, ensure_served, list_served, reap_leftovers, stop
from tests.support.prometheus import (
    WAL_TAIL_METRIC,
    Family,
    build_tsdb,
    make_wal_tsdb,
    points,
    write_openmetrics,
)

T0 = 1772323200.0  # 2026-03-01 00:00:00 UTC


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("blocks")
    fam = Family("tb_step", series=[({"host": "node-0"}, points(T0, T0 + 3600, 30, lambda t: (t - T0) / 30))])
    return build_tsdb(write_openmetrics(base / "job.om", [fam]), base / "prometheus")


@pytest.fixture
def tsdbs(template: Path, tmp_path: Path):
    """Three job TSDBs and a work root; every copy served from it is stopped at the end."""
    dirs = [Path(shutil.copytree(template, tmp_path / f"job-{i}" / "prometheus")) for i in range(3)]
    work = tmp_path / "views"
    yield dirs, work
    reap_leftovers(work)


def _last_used(served, ago: float) -> None:
    record = Path(served.copy_dir) / "server.json"
    rec = json.loads(record.read_text())
    rec["last_used"] = time.time() - ago
    record.write_text(json.dumps(rec))


def test_past_the_cap_the_least_recently_used_idle_copy_is_stopped(tsdbs) -> None:
    (a_dir, b_dir, c_dir), work = tsdbs
    a = ensure_served(a_dir, work_root=work, max_copies=2, idle_after=30)
    b = ensure_served(b_dir, work_root=work, max_copies=2, idle_after=30)
    assert (
        ensure_served(a_dir, work_root=work, max_copies=2, idle_after=30).pid == a.pid
    )  # reuse needs no room
    _last_used(a, 120)
    _last_used(b, 60)
    c = ensure_served(c_dir, work_root=work, max_copies=2, idle_after=30)
    assert not _alive(a.pid) and _alive(b.pid) and _alive(c.pid)
    assert sorted(s.pid for s in list_served(work)) == sorted([b.pid, c.pid])


def test_with_every_copy_in_use_a_new_one_is_busy_and_a_connected_client_means_in_use(tsdbs) -> None:
    (a_dir, b_dir, c_dir), work = tsdbs
    a = ensure_served(a_dir, work_root=work, max_copies=2, idle_after=30)
    b = ensure_served(b_dir, work_root=work, max_copies=2, idle_after=30)
    with pytest.raises(TSDBBusy, match=r"Busy: 2 copies of job TSDBs serving on this machine") as busy:
        ensure_served(c_dir, work_root=work, max_copies=2, idle_after=30)
    assert busy.value.serving == 2 and _alive(a.pid) and _alive(b.pid) and len(list_served(work)) == 2

    _last_used(a, 120)
    _last_used(b, 120)
    with socket.create_connection(("127.0.0.1", a.port)):  # a client mid-query on a: in use
        c = ensure_served(c_dir, work_root=work, max_copies=2, idle_after=30)
    assert _alive(a.pid) and not _alive(b.pid) and _alive(c.pid)


def test_the_cap_counts_and_signals_only_copies_stepwise_started(tsdbs) -> None:
    """A record whose pid is not our Prometheus (reused by another program) is neither counted nor signalled."""
    (a_dir, b_dir, _c), work = tsdbs
    a = ensure_served(a_dir, work_root=work, max_copies=1, idle_after=0)
    stop(a)
    entry = Path(a.copy_dir)
    entry.mkdir()
    (entry / tsdb_launch._MARKER).write_text("x")
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        tsdb_launch._write_record(entry, {"pid": sleeper.pid, "port": a.port, "url": a.url, "copy_dir": str(entry),
                                          "source_dir": a.source_dir, "started_at": 0, "last_used": 0})  # fmt: skip
        b = ensure_served(b_dir, work_root=work, max_copies=1, idle_after=0)
        assert _alive(b.pid) and sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def _tail_samples(url: str) -> int:
    with PrometheusClient(url, timeout=10.0) as client:
        return len(client.query(f"{WAL_TAIL_METRIC}[1d]"))


def test_a_changed_source_is_copied_again_once_nobody_queries_the_old_copy(tsdbs) -> None:
    (src, _b, _c), work = tsdbs
    old = ensure_served(src, work_root=work)
    assert _tail_samples(old.url) == 0
    make_wal_tsdb(src, samples=2, crash=False)  # the job wrote more: a WAL appears

    with socket.create_connection(("127.0.0.1", old.port)):  # someone is querying: keep serving it
        assert ensure_served(src, work_root=work).pid == old.pid
    new = ensure_served(src, work_root=work)
    assert new.pid != old.pid and not _alive(old.pid)
    assert _tail_samples(new.url) >= 2
    assert ensure_served(src, work_root=work).pid == new.pid  # unchanged since: reused


# --- The web app -----------------------------------------------------------------------------------


@pytest.fixture
def timeline_case(job_factory, tmp_path: Path, settings, db):
    """An investigation on a registered generated job under a private job root; its TSDB served on demand."""
    src, _truth = job_factory("thermal-straggler")
    root = tmp_path / "jobs"
    job_dir = Path(shutil.copytree(src, root / src.name, symlinks=False))
    settings.STEPWISE_JOB_ROOTS = [root]
    cache.clear()
    job, ds = services.job_register(job_dir)
    investigation = Investigation.objects.create(title="busy case")
    InvestigationJob.objects.create(investigation=investigation, job=job, role=InvestigationJob.Role.PRIMARY)
    yield investigation, job, ds
    reap_leftovers(settings.STEPWISE_TSDB_VIEWS)
    cache.clear()


def test_at_the_cap_the_timeline_answers_busy_503_never_500(
    timeline_case, template, alice_client, settings, tmp_path
):
    investigation, job, ds = timeline_case
    settings.STEPWISE_TSDB_MAX_COPIES = 1
    other = Path(shutil.copytree(template, tmp_path / "other" / "prometheus"))
    ensure_served(other, work_root=settings.STEPWISE_TSDB_VIEWS)  # another user's copy, in use just now
    pk = investigation.pk

    panel = alice_client.get(
        reverse("investigations:timeline_panel", args=[pk, "gpu_temp"]), {"job": job.pk},
        HTTP_ACCEPT="application/json",
    )  # fmt: skip
    assert panel.status_code == 503 and panel["Retry-After"] == "5"
    assert panel.json()["error"].startswith("Busy: 1 copy of job TSDBs serving on this machine")

    region_url = reverse("investigations:timeline_region", args=[pk])
    fragment = alice_client.get(region_url, {"job": job.pk}, HTTP_HX_REQUEST="true")
    body = fragment.content.decode()
    assert fragment.status_code == 503 and 'data-testid="busy"' in body and "try again in a moment" in body
    assert "<html" not in body

    page = alice_client.get(region_url, {"job": job.pk})
    body = page.content.decode()
    assert page.status_code == 503 and "<html" in body and "Busy, try again in a moment" in body

    ds.refresh_from_db()
    assert ds.state != DataSource.State.ERROR  # busy is not the source's fault
    assert len(list_served(settings.STEPWISE_TSDB_VIEWS)) == 1


def test_a_task_that_finds_the_machine_busy_retries(timeline_case, template, settings, tmp_path) -> None:
    _investigation, _job, ds = timeline_case
    settings.STEPWISE_TSDB_MAX_COPIES = 1
    ensure_served(
        Path(shutil.copytree(template, tmp_path / "other" / "prometheus")),
        work_root=settings.STEPWISE_TSDB_VIEWS,
    )
    with pytest.raises(services.TRANSIENT_ERRORS):  # the task shell retries these with backoff
        services.datasource_client(ds)


def test_a_repeat_view_of_a_cached_timeline_starts_no_prometheus(
    timeline_case, alice_client, settings
) -> None:
    investigation, job, _ds = timeline_case
    url = reverse("investigations:timeline_panel", args=[investigation.pk, "gpu_temp"])
    first = alice_client.get(url, {"job": job.pk}, HTTP_ACCEPT="application/json")
    assert first.status_code == 200 and first.json()["queries"] > 0
    reap_leftovers(settings.STEPWISE_TSDB_VIEWS)
    again = alice_client.get(url, {"job": job.pk}, HTTP_ACCEPT="application/json")
    assert again.status_code == 200 and again.json()["queries"] == 0
    assert again.json()["figure"] == first.json()["figure"]
    assert list_served(settings.STEPWISE_TSDB_VIEWS) == []
