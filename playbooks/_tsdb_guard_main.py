"""The guard of a private work root, run as its own process by `playbooks.tsdb_guard.guard` (stdlib only).

It blocks reading its stdin, the read end of a pipe whose only write end the owner holds. When the owner
is gone (its exit, whatever ended it: SIGKILL, a harness's timeout, an interpreter that never ran its
`finally` or `atexit`), the kernel closes that end and the read returns EOF. The guard then stops every
Prometheus serving a copy under the root (its command line names `--storage.tsdb.path=<root>/...`: only a
Stepwise process makes such a copy, in a root of its own), deletes the copies (folders named and marked as
Stepwise's) and their lock files, and the root once it is empty. An owner that cleaned up before exiting
leaves nothing to stop; the guard then only finds the root gone. Anything written on the pipe instead
cancels the guard: it exits and touches nothing.

Usage (by tsdb_guard only):  python -I -S _tsdb_guard_main.py WORK_ROOT   < pipe
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import sys
import time

GRACE_S = 10.0
#: as playbooks.procs.ENTRY_NAME and tsdb_launch's marker: what a served copy's folder is called and holds
_ENTRY = re.compile(r"\A[A-Za-z0-9._-]{1,60}-[0-9a-f]{12}\Z")
_MARKER = ".stepwise-tsdb-copy"


def servers_under(root: str) -> list[int]:
    """Return the pids whose command line serves a TSDB copy under `root` (a zombie's is empty)."""
    want = b"--storage.tsdb.path=" + os.fsencode(root.rstrip("/")) + b"/"
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid() and _serves(int(name), want):
            pids.append(int(name))
    return pids


def _serves(pid: int, want: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            args = fh.read().split(b"\0")
    except OSError:
        return False
    return any(a.startswith(want) for a in args)


def stop_all(root: str) -> None:
    """SIGTERM every server under `root` at once, then SIGKILL those still running after GRACE_S."""
    want = b"--storage.tsdb.path=" + os.fsencode(root.rstrip("/")) + b"/"
    pinned = []
    for pid in servers_under(root):
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        if _serves(pid, want):  # still that server once pinned: its pid cannot be reused now
            signal.pidfd_send_signal(fd, signal.SIGTERM)
            pinned.append(fd)
        else:
            os.close(fd)
    for fd in pinned:
        # a pidfd turns readable when its process exits
        if not select.select([fd], [], [], GRACE_S)[0]:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            select.select([fd], [], [], GRACE_S)
        os.close(fd)


def _copies(root: str) -> list[str]:
    """Return the paths of the copies (folders named and marked as Stepwise's) directly under `root`."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    paths = [os.path.join(root, n) for n in names if _ENTRY.match(n)]
    return [p for p in paths if os.path.isfile(os.path.join(p, _MARKER))]


def remove_root(root: str) -> None:
    """Delete the copies under `root` and their lock files, then `root` if nothing else is left in it."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    for path in _copies(root):
        shutil.rmtree(path, ignore_errors=True)
    for name in names:
        stem = name.removesuffix(".lock")
        if (
            stem != name
            and (stem == ".cap" or _ENTRY.match(stem))
            and not os.path.exists(os.path.join(root, stem))
        ):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(root, name))
    with contextlib.suppress(OSError):  # something else is in it: not ours to delete
        os.rmdir(root)


def main(argv: list[str]) -> int:
    root = os.path.realpath(argv[1])
    # Never stopped by a signal meant for the owner's terminal or process group (own session, too).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if os.read(0, 4096):
        return 0  # cancelled by the owner (the root was not its own): nothing to do
    for _ in range(3):  # again if something under the root was still writing when it was deleted
        stop_all(root)
        remove_root(root)
        if not servers_under(root) and not _copies(root):
            break
        time.sleep(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
