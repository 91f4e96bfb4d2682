"""The TSDB fingerprint: it changes with what the data can be (blocks, their deletions, the WAL and the
head chunks) and not with a server's bookkeeping files (lock, queries.active)."""

from __future__ import annotations

import shutil

import pytest

from playbooks.fingerprint import tsdb_fingerprint

ULID_A = "01HZZZZZZZZZZZZZZZZZZZZZZA"
ULID_B = "01HZZZZZZZZZZZZZZZZZZZZZZB"


@pytest.fixture
def tsdb(tmp_path):
    root = tmp_path / "prometheus"
    (root / ULID_A / "chunks").mkdir(parents=True)
    (root / ULID_A / "meta.json").write_text('{"ulid": "A"}')
    (root / ULID_A / "tombstones").write_bytes(b"\x00" * 8)
    (root / "wal").mkdir()
    (root / "wal" / "00000000").write_bytes(b"x" * 100)
    (root / "chunks_head").mkdir()
    return root


def test_the_same_files_give_the_same_fingerprint(tsdb, tmp_path) -> None:
    """Stable for an unchanged folder, and the same for a copy with the same times (copy2)."""
    assert tsdb_fingerprint(tsdb) == tsdb_fingerprint(tsdb)
    copy = tmp_path / "copy"
    shutil.copytree(tsdb, copy, copy_function=shutil.copy2)  # copy2 keeps modification times
    assert tsdb_fingerprint(copy) == tsdb_fingerprint(tsdb)


@pytest.mark.parametrize(
    "change",
    ["new block", "block deleted", "tombstones", "wal grows", "new wal segment", "head chunk"],
)
def test_a_change_to_the_data_changes_the_fingerprint(tsdb, change) -> None:
    before = tsdb_fingerprint(tsdb)
    if change == "new block":
        (tsdb / ULID_B).mkdir()
        (tsdb / ULID_B / "meta.json").write_text('{"ulid": "B"}')
    elif change == "block deleted":
        shutil.rmtree(tsdb / ULID_A)
    elif change == "tombstones":
        (tsdb / ULID_A / "tombstones").write_bytes(b"\x00" * 40)
    elif change == "wal grows":
        with open(tsdb / "wal" / "00000000", "ab") as fh:
            fh.write(b"more samples")
    elif change == "new wal segment":
        (tsdb / "wal" / "00000001").write_bytes(b"y")
    else:
        (tsdb / "chunks_head" / "000001").write_bytes(b"z")
    assert tsdb_fingerprint(tsdb) != before


def test_a_servers_bookkeeping_files_do_not_count(tsdb) -> None:
    """A lock or the active-query log changes when a server opens the folder, not the data."""
    before = tsdb_fingerprint(tsdb)
    (tsdb / "lock").write_text("")
    (tsdb / "queries.active").write_bytes(b"\x00" * 1024)
    assert tsdb_fingerprint(tsdb) == before
