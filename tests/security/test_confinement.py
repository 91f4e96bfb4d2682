"""Item 1: symlinks inside a job directory never lead the TSDB copy or the triage out of the job roots."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from investigations import services
from investigations.models import Job
from investigations.services import investigations as inv_services
from playbooks import tsdb_server
from playbooks.confine import OutsideRoots, open_inside
from playbooks.jobdirs import find_job_dirs
from playbooks.triage import TriageError, triage_job, triage_log
from playbooks.tsdb_copy import copy_tsdb, inventory

ULID_A = "01HZZZZZZZZZZZZZZZZZZZZZZA"
ULID_B = "01HZZZZZZZZZZZZZZZZZZZZZZB"


def _block(parent: Path, ulid: str, secret: str) -> Path:
    block = parent / ulid
    (block / "chunks").mkdir(parents=True)
    (block / "meta.json").write_text(json.dumps({"ulid": ulid, "minTime": 0, "maxTime": 1000}))
    (block / "index").write_text(f"index {secret}")
    (block / "chunks" / "000001").write_text(f"chunk {secret}")
    return block


def _inodes(tree: Path) -> set[tuple[int, int]]:
    found = set()
    for root, _dirs, files in os.walk(tree):
        for name in files:
            st = os.stat(os.path.join(root, name), follow_symlinks=False)
            found.add((st.st_dev, st.st_ino))
    return found


def _symlinks(tree: Path) -> list[str]:
    return [
        os.path.join(root, n)
        for root, dirs, files in os.walk(tree)
        for n in dirs + files
        if os.path.islink(os.path.join(root, n))
    ]


def test_the_copy_skips_symlinked_blocks_wal_and_chunk_files(tmp_path: Path) -> None:
    outside = tmp_path / "other-job" / "prometheus"
    _block(outside, ULID_B, "outside")
    (outside / "wal").mkdir()
    (outside / "wal" / "00000000").write_text("outside wal")
    src = tmp_path / "root" / "81234-x" / "prometheus"
    _block(src, ULID_A, "inside")
    (src / ULID_B).symlink_to(outside / ULID_B)  # a whole block leading out
    (src / "wal").symlink_to(outside / "wal")  # the head leading out
    (src / ULID_A / "chunks" / "000002").symlink_to(outside / ULID_B / "chunks" / "000001")  # one chunk file

    inv = inventory(src)
    assert [b[0] for b in inv.blocks] == [ULID_A]
    assert not inv.wal_has_data
    data = tmp_path / "copy" / "data"
    result = copy_tsdb(src, data, inv, include_head=True)

    assert sorted(os.listdir(data)) == [ULID_A]
    assert sorted(os.listdir(data / ULID_A / "chunks")) == ["000001"]
    assert _symlinks(data) == []
    assert not _inodes(data) & _inodes(outside), "a file outside the roots was hard-linked"
    assert (data / ULID_A / "index").read_text() == "index inside"
    assert sorted(result.symlinks) == sorted([ULID_B, "wal", f"{ULID_A}/chunks/000002"])


def test_a_file_swapped_for_a_symlink_after_the_inventory_is_not_linked(tmp_path: Path) -> None:
    outside = _block(tmp_path / "outside", ULID_B, "outside")
    src = tmp_path / "root" / "prometheus"
    _block(src, ULID_A, "inside")
    inv = inventory(src)
    index = src / ULID_A / "index"
    index.unlink()
    index.symlink_to(outside / "index")
    result = copy_tsdb(src, tmp_path / "copy", inv, include_head=True)
    assert not (tmp_path / "copy" / ULID_A / "index").exists()
    assert f"{ULID_A}/index" in result.symlinks
    assert not _inodes(tmp_path / "copy") & _inodes(outside)


def test_serving_a_tsdb_made_only_of_links_out_is_refused(job_factory, tmp_path: Path) -> None:
    """The attack of the issue: prometheus/<ULID> and wal/ point at another job's TSDB outside the roots."""
    other, _truth = job_factory("healthy", 1)
    src = tmp_path / "root" / "81234-x" / "prometheus"
    src.mkdir(parents=True)
    for entry in (other / "prometheus").iterdir():
        (src / entry.name).symlink_to(entry)
    with pytest.raises(tsdb_server.TSDBServerError, match="no TSDB data"):
        tsdb_server.serve_readonly(src, work_root=tmp_path / "views")


@pytest.mark.django_db
def test_the_served_copy_of_a_job_lists_none_of_the_outside_jobs_hosts(
    job_factory, job_root: Path, tmp_path: Path
) -> None:
    """One real job inside the root, plus one block of another job linked in: only the first is served."""
    inside, inside_truth = job_factory("healthy", 1)
    other, _ = job_factory("thermal-straggler", 2)
    job_dir = job_root / "81234-x"
    (job_dir / "prometheus").mkdir(parents=True)
    for entry in (inside / "prometheus").iterdir():
        if entry.is_dir():
            os.system(f"cp -r '{entry}' '{job_dir / 'prometheus'}'")  # noqa: S605 - test setup
    blocks = sorted(p for p in (other / "prometheus").iterdir() if len(p.name) == 26)
    (job_dir / "prometheus" / "01JZZZZZZZZZZZZZZZZZZZZZZZ").symlink_to(blocks[0])
    _, source = services.job_register(job_dir)
    client = services.datasource_client(source)
    try:
        hosts = {v for name in ("host", "Hostname", "instance") for v in client.label_values(name)}
    finally:
        client.close()
    other_hosts = set(json.loads((other / "truth.json").read_text()).get("hosts") or [])
    inside_hosts = set(inside_truth.get("hosts") or [])
    assert other_hosts - inside_hosts, "the two jobs must differ in hosts for this test to mean anything"
    assert hosts and not {h for h in hosts if h.split(":")[0] in other_hosts - inside_hosts}
    source.refresh_from_db()
    assert "symlink" in source.state_detail


# --- triage ---------------------------------------------------------------------------------------


def _outside_env(tmp_path: Path) -> Path:
    secret = tmp_path / "outside" / ".env"
    secret.parent.mkdir()
    secret.write_text("JOB_ID=999\nAWS_SECRET_ACCESS_KEY=hunter2\nNNODES=4\n")
    return secret


def test_open_inside_refuses_links_out_and_dot_dot(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    secret = _outside_env(tmp_path)
    (root / "log").symlink_to(secret)
    for path in (root / "log", root / ".." / "outside" / ".env"):
        with pytest.raises(OutsideRoots):
            open_inside(path, [root.resolve()])
    (root / "ok.log").write_text("x")
    (root / "alias").symlink_to(root / "ok.log")
    with open_inside(root / "alias", [root.resolve()]) as fh:
        assert fh.read() == b"x"


def test_the_triage_never_reads_a_log_symlink_leading_out(tmp_path: Path) -> None:
    root = tmp_path / "root"
    job_dir = root / "81234-x"
    job_dir.mkdir(parents=True)
    secret = _outside_env(tmp_path)
    (job_dir / "log").symlink_to(secret)
    with pytest.raises(TriageError, match="outside the job roots"):
        triage_job(job_dir, roots=[root])
    with pytest.raises(TriageError, match="outside the job roots"):
        triage_log(job_dir / "log", roots=[root])
    # A sibling DIR.log leading out is refused the same way.
    (job_dir / "log").unlink()
    (root / "81234-x.log").symlink_to(secret)
    with pytest.raises(TriageError, match="outside the job roots"):
        triage_job(job_dir, roots=[root])


def test_a_rank_log_leading_out_is_skipped_and_reported(tmp_path: Path) -> None:
    root = tmp_path / "root"
    job_dir = root / "k8s-20260301-120000-ab12-x"
    job_dir.mkdir(parents=True)
    (job_dir / "job.log").write_text("JOB_ID=k8s-20260301-120000-ab12\n")
    (job_dir / "rank-1.log").symlink_to(_outside_env(tmp_path))
    out = triage_job(job_dir, roots=[root])
    assert any("rank-1.log" in u and "outside the job roots" in u for u in out.unreadable)
    assert "hunter2" not in json.dumps(out.to_dict())


@pytest.mark.django_db
def test_the_triage_task_refuses_the_outside_env_file(job_root: Path, tmp_path: Path) -> None:
    """Issue 12 item 1: an outside `.env` file was parsed and its header keys shown."""
    job_dir = job_root / "81234-x"
    (job_dir / "prometheus").mkdir(parents=True)
    secret = _outside_env(tmp_path)
    (job_dir / "log").symlink_to(secret)
    job = Job.objects.create(job_id="81234", job_dir=str(job_dir))
    with pytest.raises(TriageError, match="outside the job roots"):
        inv_services.job_triage(job.pk)
    job.refresh_from_db()
    assert "hunter2" not in json.dumps(job.triage or {}) + json.dumps(job.config or {})


def test_a_job_id_lookup_never_reads_a_header_leading_out(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "renamed-job" / "prometheus").mkdir(parents=True)
    (root / "renamed-job" / "log").symlink_to(_outside_env(tmp_path))
    assert find_job_dirs([root], "999") == []
