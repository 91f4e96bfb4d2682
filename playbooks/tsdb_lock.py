"""Who holds a TSDB: the live Prometheus (if any) that locks or serves a job's TSDB directory.

A TSDB held by a live server is never served by Stepwise as a whole (only its immutable blocks can be),
and its `lock` is never opened, test-locked or deleted: the holder is found from /proc alone.
"""

from __future__ import annotations

import contextlib
import os

from .procs import proc_args as _proc_args

__all__ = ["tsdb_lock_holder"]


def tsdb_lock_holder(tsdb_dir: str | os.PathLike[str]) -> int | None:
    """Return the pid of a running process holding `<tsdb_dir>/lock` or serving the dir, else None.

    1. Prometheus 2.x takes flock(2) (LOCK_EX|LOCK_NB) on `<dir>/lock`; /proc/locks lists it with the
       file's device and inode, so the holder is found without opening the lock file (opening or
       test-locking it could make a live Prometheus's watchdog restart fail). -1 means an OFD lock whose
       process the kernel does not name.
    2. A Prometheus may run without a lock file (Debian's build only locks with
       --storage.tsdb.use-lockfile, upstream with --storage.tsdb.no-lockfile not at all): scan
       /proc/*/cmdline for a prometheus whose --storage.tsdb.path resolves to this directory.
    """
    src = os.path.realpath(tsdb_dir)
    holder = _flock_holder(os.path.join(src, "lock"))
    if holder is not None:
        return holder
    return _prometheus_serving(src)


def _flock_holder(lock_path: str) -> int | None:
    try:
        st = os.stat(lock_path)
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    want_dev = (os.major(st.st_dev), os.minor(st.st_dev))
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 10279 fe:00:2146551 0 EOF"; waiters carry "->" and hold nothing.
        if len(parts) < 6 or parts[1] == "->":
            continue
        try:
            pid = int(parts[4])
            major, minor, inode = parts[5].split(":")
            dev, ino = (int(major, 16), int(minor, 16)), int(inode)
        except ValueError:
            continue
        if ino != st.st_ino:
            continue
        # Some filesystems (btrfs, overlay) show another device number here than stat(); then confirm
        # through the holder's open files, and if those are unreadable err on the locked side.
        if dev == want_dev or pid <= 0 or _has_open(pid, lock_path) is not False:
            return pid
    return None


def _has_open(pid: int, path: str) -> bool | None:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == path:
                return True
    return False


def _prometheus_serving(src: str) -> int | None:
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        args = _proc_args(pid)
        if not args or not os.path.basename(args[0]).startswith("prometheus"):
            continue
        path = None
        for i, arg in enumerate(args):
            if arg.startswith("--storage.tsdb.path="):
                path = arg.split("=", 1)[1]
            elif arg == "--storage.tsdb.path" and i + 1 < len(args):
                path = args[i + 1]
        if path is None:
            if os.path.basename(args[0]) != "prometheus":
                continue  # e.g. prometheus-node-exporter: not a server with a TSDB
            path = "data/"  # upstream's default --storage.tsdb.path
        if not os.path.isabs(path):
            try:
                path = os.path.join(os.readlink(f"/proc/{pid}/cwd"), path)
            except OSError:
                continue
        if os.path.realpath(path) == src:
            return pid
    return None
