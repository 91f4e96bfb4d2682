"""Tie the Prometheus servers of a private work root to the process that owns the root, even on SIGKILL.

A command (`manage.py diagnose`, `compare`), a bench or a test serves its TSDB copies in a work root of its
own and stops them in `finally`/`atexit`. Nothing of the process runs when it is SIGKILLed (a harness's
timeout, an OOM kill, `kill -9`), and its servers would serve on for ever. `guard(root)` starts a small
watcher process (`_tsdb_guard_main.py`, in a session of its own) reading the end of a pipe whose only
write end this process holds, close-on-exec, so no child it starts holds it too. The kernel closes it when
this process ends, however it ends; the watcher then stops the Prometheus servers under the root and
deletes the root. A guard is per process, not per thread: a server started from a thread that has
since ended (manage.py's early start) stays tied to the process, which PR_SET_PDEATHSIG would not do.

Only for roots no other process serves from: the web app's shared root (`STEPWISE_TSDB_VIEWS`) outlives
any one process by design (its idle copies are stopped by the tasks, its leftovers at start-up).

Usage::

    root = private_root("stepwise-diagnose-")     # a new folder in the temporary folder, guarded first
    try:
        ... tsdb_server.ensure_served(tsdb, work_root=root) ...
    finally:
        tsdb_server.reap_leftovers(root); shutil.rmtree(root, ignore_errors=True); release(root)
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from . import procs

_MAIN = str(Path(__file__).with_name("_tsdb_guard_main.py"))
#: the guards of this process: {resolved root: (watcher, write end of its pipe)}
_GUARDS: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
_LOCK = threading.Lock()


def guard(work_root: str | os.PathLike[str]) -> None:
    """Make the servers under `work_root` (and the root) go away when this process ends; idempotent."""
    root = os.path.realpath(work_root)
    with _LOCK:
        if root in _GUARDS and _GUARDS[root][0].poll() is None:
            return
        read_end, write_end = os.pipe()  # both close-on-exec: only the watcher gets the read end
        try:
            watcher = subprocess.Popen(
                [sys.executable, "-I", "-S", _MAIN, root],
                stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True,
            )  # fmt: skip
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        procs.child_add(watcher)
        _GUARDS[root] = (watcher, write_end)


def release(work_root: str | os.PathLike[str], timeout: float = 30.0) -> None:
    """End the guard of `work_root` once this process has stopped its servers: its watcher stops what is
    left and deletes the root, and is waited for (up to `timeout` s; 0 for a process about to exit, which
    need not reap it)."""
    root = os.path.realpath(work_root)
    with _LOCK:
        entry = _GUARDS.pop(root, None)
    if entry is None:
        return
    watcher, write_end = entry
    os.close(write_end)
    if timeout > 0:
        with contextlib.suppress(subprocess.TimeoutExpired):
            watcher.wait(timeout)
    procs.reap_children()


def guarded(work_root: str | os.PathLike[str]) -> bool:
    """Return True while `work_root` has a live guard of this process."""
    with _LOCK:
        entry = _GUARDS.get(os.path.realpath(work_root))
    return entry is not None and entry[0].poll() is None


def private_root(prefix: str, dir: str | os.PathLike[str] | None = None) -> Path:
    """Return a new work root (mode 0700, a random name after `prefix` in `dir` or the temporary folder),
    guarded (see `guard`) from before it exists: a kill right after it is made leaves nothing either."""
    base = os.path.realpath(dir if dir is not None else tempfile.gettempdir())
    while True:
        root = os.path.join(base, prefix + secrets.token_hex(6))
        guard(root)
        try:
            os.mkdir(root, 0o700)
        except FileExistsError:
            _cancel(root)  # someone else's: its watcher must leave it alone
            continue
        return Path(root)


def _cancel(work_root: str) -> None:
    """End the guard of `work_root` without touching anything under it (any byte on the pipe says so)."""
    with _LOCK:
        watcher, write_end = _GUARDS.pop(os.path.realpath(work_root))
    os.write(write_end, b"cancel")
    os.close(write_end)
    with contextlib.suppress(subprocess.TimeoutExpired):
        watcher.wait(30.0)
    procs.reap_children()
