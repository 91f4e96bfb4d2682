"""playbooks.tsdb_guard: a private work root and its watcher (the kills themselves:
tests/investigations/test_leftover_servers.py)."""

from __future__ import annotations

from pathlib import Path

from playbooks import tsdb_guard


def _marked_copy(root: Path) -> Path:
    copy = root / "job-prometheus-0123456789ab"
    (copy / "data").mkdir(parents=True)
    (copy / ".stepwise-tsdb-copy").write_text("x")
    (root / "job-prometheus-0123456789ab.lock").write_text("")
    return copy


def test_a_released_root_is_deleted_with_its_copies(tmp_path):
    """release() after the owner's own cleanup: the watcher deletes what is left of the root."""
    root = tsdb_guard.private_root("stepwise-test-", dir=tmp_path)
    assert root.is_dir() and oct(root.stat().st_mode & 0o777) == "0o700" and tsdb_guard.guarded(root)
    _marked_copy(root)
    tsdb_guard.release(root)
    assert not root.exists() and not tsdb_guard.guarded(root)


def test_a_name_already_taken_is_left_alone(tmp_path, monkeypatch):
    """A folder of that name made by someone else meanwhile is not the root: its guard is cancelled and
    touches nothing there; the root gets another name."""
    names = iter(["aaaa", "bbbb"])
    monkeypatch.setattr(tsdb_guard.secrets, "token_hex", lambda _n: next(names))
    foreign = tmp_path / "stepwise-test-aaaa"
    foreign.mkdir()
    theirs = _marked_copy(foreign)
    root = tsdb_guard.private_root("stepwise-test-", dir=tmp_path)
    assert root == tmp_path / "stepwise-test-bbbb"
    assert theirs.is_dir() and not tsdb_guard.guarded(foreign)
    tsdb_guard.release(root)
    assert theirs.is_dir() and not root.exists()


def test_a_root_with_other_files_keeps_them(tmp_path):
    """Only Stepwise's marked copies and their lock files are deleted: the root stays with anything else."""
    root = tsdb_guard.private_root("stepwise-test-", dir=tmp_path)
    copy = _marked_copy(root)
    (root / "notes.txt").write_text("mine")
    tsdb_guard.release(root)
    assert not copy.exists() and (root / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in root.iterdir()) == ["notes.txt"]
