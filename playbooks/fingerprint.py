"""The identity of what a TSDB directory holds, for caching query results computed from it.

A finished job's TSDB never changes, so anything computed from it can be kept as long as its identity
stays the same. The identity is a digest of:

- every block: its ULID and the size and modification time of its `meta.json` and `tombstones` (a
  block is immutable once written; compaction replaces it with a new ULID, a delete adds tombstones);
- the head: the name, size and modification time of every file under `wal/` and `chunks_head/` (a
  live server appending samples, or a WAL replayed and truncated, changes them).

Only file metadata is read (no file contents), so a fingerprint costs a few hundred `stat` calls.
"""

from __future__ import annotations

import hashlib
import os
import re

__all__ = ["tsdb_fingerprint"]

_ULID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
_HEAD_DIRS = ("wal", "chunks_head")
_BLOCK_FILES = ("meta.json", "tombstones")


def _stat(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:  # a live server may remove a segment under our feet: absent is a state too
        return "-"
    return f"{st.st_size}:{st.st_mtime_ns}"


def tsdb_fingerprint(tsdb_dir: str | os.PathLike[str]) -> str:
    """Return a hex digest that changes whenever the data served from `tsdb_dir` may change.

    Raises OSError when the directory cannot be listed.
    """
    root = os.fspath(tsdb_dir)
    digest = hashlib.sha256()
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if _ULID.match(name) and os.path.isdir(path):
            files = ",".join(f"{f}={_stat(os.path.join(path, f))}" for f in _BLOCK_FILES)
            digest.update(f"block {name} {files}\n".encode())
    for head in _HEAD_DIRS:
        base = os.path.join(root, head)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            rel = os.path.relpath(dirpath, base)
            for name in sorted(filenames):
                digest.update(f"{head} {rel}/{name} {_stat(os.path.join(dirpath, name))}\n".encode())
    return digest.hexdigest()[:32]
