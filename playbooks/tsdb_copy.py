"""Copy a job's TSDB into a private directory without ever leaving it through a symlink.

A job directory sits inside a job root, but anything below it may be a symlink: a `prometheus/<ULID>`
block, `wal/`, `chunks_head/` or a single chunk file pointing at another job's TSDB outside the roots.
Following one would serve (and hard-link) data the user may not read. So the copy walks the source with
directory file descriptors opened `O_NOFOLLOW`, never resolves a name twice, and:

- skips every symlink below the TSDB folder (reported back, never followed);
- opens every copied file with `O_NOFOLLOW` and checks it is a regular file (fstat);
- hard-links immutable block files with `linkat(..., follow_symlinks=False)` and then checks that the new
  link is a regular file with the inode it saw, so a file swapped for a symlink meanwhile is removed and
  skipped instead of copied as a link leading out.

The TSDB folder itself (`DIR/prometheus`) is resolved and checked against the roots by the caller.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

_ULID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_META_MAX = 1 << 20
# Block files Prometheus may rewrite (always via write-to-temp + rename, which would only replace our
# link, but they are tiny, so they are copied rather than linked to leave no doubt).
COPIED_BLOCK_FILES = frozenset({"meta.json", "tombstones"})
# The in-memory head lives here; Prometheus repairs (truncates) and appends to these files in place.
HEAD_DIRS = ("wal", "chunks_head", "wbl")
# errno of an open(O_NOFOLLOW) on a symlink (ELOOP) or of O_DIRECTORY on a non-directory.
_NOT_FOLLOWED = {errno.ELOOP, errno.ENOTDIR, errno.EMLINK}


@dataclass(frozen=True)
class Inventory:
    """What a TSDB directory holds.

    Attributes:
        blocks: (ULID, minTime ms, maxTime ms) of every block with a readable meta.json.
        unreadable: ULID dirs skipped because meta.json is missing or broken.
        wal_has_data: True if wal/ holds at least one non-empty regular file.
        symlinks: Paths (relative to the TSDB folder) of symlinks found at its top level; never followed.
    """

    blocks: tuple[tuple[str, int, int], ...]
    unreadable: tuple[str, ...]
    wal_has_data: bool
    symlinks: tuple[str, ...] = ()


@dataclass
class CopyResult:
    """What copy_tsdb left out: blocks that vanished meanwhile, symlinks (and swapped files) skipped."""

    vanished: list[str] = field(default_factory=list)
    symlinks: list[str] = field(default_factory=list)


@contextlib.contextmanager
def _dir_fd(name: str | os.PathLike[str], dir_fd: int | None = None) -> Iterator[int]:
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _read_meta(block_fd: int) -> tuple[int, int]:
    fd = os.open("meta.json", _FILE_FLAGS, dir_fd=block_fd)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ValueError("meta.json is not a regular file")
        meta = json.loads(fh.read(_META_MAX))
    return int(meta["minTime"]), int(meta["maxTime"])


def _has_data(dir_fd: int, depth: int = 0) -> bool:
    """Return True if this directory (no symlink followed) holds a non-empty regular file."""
    for name in os.listdir(dir_fd):
        st = _lstat(name, dir_fd)
        if st is None:
            continue  # a live server deleted a segment under our feet (checkpointing)
        if stat.S_ISREG(st.st_mode) and st.st_size > 0:
            return True
        if stat.S_ISDIR(st.st_mode) and depth < 4:
            with contextlib.suppress(OSError), _dir_fd(name, dir_fd) as sub:
                if _has_data(sub, depth + 1):
                    return True
    return False


def inventory(src: str | os.PathLike[str]) -> Inventory:
    """Return the blocks, unreadable blocks, WAL state and top-level symlinks of the TSDB folder `src`."""
    blocks, unreadable, links = [], [], []
    wal_has_data = False
    with _dir_fd(src) as top:
        for name in sorted(os.listdir(top)):
            st = _lstat(name, top)
            if st is None:
                continue
            if stat.S_ISLNK(st.st_mode):
                links.append(name)
                continue
            if name == "wal" and stat.S_ISDIR(st.st_mode):
                with contextlib.suppress(OSError), _dir_fd(name, top) as wal:
                    wal_has_data = _has_data(wal)
            if not _ULID.match(name) or not stat.S_ISDIR(st.st_mode):
                continue
            try:
                with _dir_fd(name, top) as block:
                    blocks.append((name, *_read_meta(block)))
            except (OSError, ValueError, KeyError, TypeError):
                unreadable.append(name)
    return Inventory(tuple(blocks), tuple(unreadable), wal_has_data, tuple(links))


def _copy_file(name: str, src_fd: int, dst_fd: int, st: os.stat_result) -> bool:
    """Copy one regular file by content; False (nothing written) when it is no longer a regular file."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=src_fd)
    except OSError as exc:
        if exc.errno in _NOT_FOLLOWED:
            return False
        raise
    with os.fdopen(fd, "rb") as fsrc:
        if not stat.S_ISREG(os.fstat(fsrc.fileno()).st_mode):
            return False
        out = os.open(name, _NEW_FILE_FLAGS, 0o644, dir_fd=dst_fd)
        with os.fdopen(out, "wb") as fdst:
            while chunk := fsrc.read(1 << 20):
                fdst.write(chunk)
    os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dst_fd)
    return True


def _link_file(name: str, src_fd: int, dst_fd: int, st: os.stat_result) -> bool:
    """Hard-link one regular file (copy across filesystems); False when it turned into something else."""
    try:
        os.link(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
    except OSError:
        # EXDEV (other filesystem), EPERM (fs.protected_hardlinks on another user's file), ...
        return _copy_file(name, src_fd, dst_fd, st)
    made = os.stat(name, dir_fd=dst_fd, follow_symlinks=False)
    if stat.S_ISREG(made.st_mode) and (made.st_dev, made.st_ino) == (st.st_dev, st.st_ino):
        return True
    os.unlink(name, dir_fd=dst_fd)  # swapped for a symlink (or another file) between lstat and link
    return False


def _copy_dir(src_fd: int, dst_fd: int, rel: str, *, link: bool, top: bool, skipped: list[str]) -> None:
    for name in sorted(os.listdir(src_fd)):
        st = _lstat(name, src_fd)
        if st is None or name.endswith(".tmp"):
            continue
        path = f"{rel}/{name}"
        if stat.S_ISDIR(st.st_mode):
            os.mkdir(name, 0o755, dir_fd=dst_fd)
            try:
                with _dir_fd(name, src_fd) as sub_src, _dir_fd(name, dst_fd) as sub_dst:
                    _copy_dir(sub_src, sub_dst, path, link=link, top=False, skipped=skipped)
            except OSError as exc:
                if exc.errno not in _NOT_FOLLOWED:
                    raise
                skipped.append(path)
        elif stat.S_ISREG(st.st_mode):
            by_link = link and not (top and name in COPIED_BLOCK_FILES)
            done = _link_file(name, src_fd, dst_fd, st) if by_link else _copy_file(name, src_fd, dst_fd, st)
            if not done:
                skipped.append(path)
        elif stat.S_ISLNK(st.st_mode):
            skipped.append(path)
        # sockets, fifos and devices are no part of a TSDB: ignored


def _copy_top(src_top: int, dst_top: int, name: str, *, link: bool, out: CopyResult) -> None:
    os.mkdir(name, 0o755, dir_fd=dst_top)
    try:
        with _dir_fd(name, src_top) as s, _dir_fd(name, dst_top) as d:
            _copy_dir(s, d, name, link=link, top=True, skipped=out.symlinks)
    except OSError as exc:
        if exc.errno not in _NOT_FOLLOWED:
            raise
        out.symlinks.append(name)  # swapped for a symlink after the inventory


def copy_tsdb(src: str | os.PathLike[str], data: Path, inv: Inventory, *, include_head: bool) -> CopyResult:
    """Copy the blocks of `inv` (hard links) and, if include_head, wal/chunks_head/wbl (copies) into `data`.

    Raises OSError for failures other than a block vanishing (a live server compacted it away) or a
    symlink, which are returned.
    """
    data.mkdir(parents=True)
    out = CopyResult(symlinks=list(inv.symlinks))
    with _dir_fd(src) as src_top, _dir_fd(data) as dst_top:
        for ulid, _mint, _maxt in inv.blocks:
            try:
                _copy_top(src_top, dst_top, ulid, link=True, out=out)
            except FileNotFoundError:
                shutil.rmtree(data / ulid, ignore_errors=True)
                out.vanished.append(ulid)
        if include_head:
            for name in HEAD_DIRS:
                st = _lstat(name, src_top)
                if st is not None and stat.S_ISDIR(st.st_mode):
                    _copy_top(src_top, dst_top, name, link=False, out=out)
    return out
