"""promtool helpers for the outside-corpus tests (#10): list a TSDB's blocks, dump its samples."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path


def blocks(tsdb: Path) -> list[list[str]]:
    """`promtool tsdb list` rows (ULID, min ms, max ms, duration, samples, chunks, series, size)."""
    out = subprocess.run(["promtool", "tsdb", "list", str(tsdb)], capture_output=True, text=True, check=True)
    rows = [line.split() for line in out.stdout.splitlines()[1:] if line.strip()]
    assert rows, f"no block in {tsdb}"
    return rows


def dump(tsdb: Path, match: str, tmp: Path) -> str:
    """promtool's dump of a copy (dump wants a wal directory, the generators write blocks only)."""
    copy = Path(tempfile.mkdtemp(dir=tmp)) / "tsdb"
    shutil.copytree(tsdb, copy)
    (copy / "wal").mkdir()
    return subprocess.run(
        ["promtool", "tsdb", "dump", "--match", match, str(copy)], capture_output=True, text=True, check=True
    ).stdout
