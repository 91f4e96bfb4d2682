"""Serve a job's TSDB while Django starts: `manage.py diagnose --job-dir DIR`, before `django.setup()`.

Django's start-up (about 0.8 s of one core) and Prometheus's (copy, start, block and WAL loading: about
0.7 s, in a process of its own) do not wait on each other. `manage.py` calls `start(argv)` before it imports
Django (this module imports none of it): the job's TSDB starts being served, in a thread, in a work root
of its own. The command asks `work_root(tsdb)` and calls `tsdb_server.ensure_served` on that root; the
entry's lock makes it wait for the start under way and return that server, or, when the early start failed,
try again and fail exactly as it would have (the early thread keeps no error).

Nothing is left behind, whatever happens before the command takes over: the thread is not a daemon (the
interpreter joins it before exiting), an `atexit` hook then stops every server under the root and deletes
it, and the root is guarded (`playbooks.tsdb_guard`): a SIGKILL, which runs neither, stops them as well.
Until the command installs its own handlers, SIGTERM and Ctrl-C are only remembered (`received()`),
and the command exits 128 + n as it starts: raised inside the imports Django and the thread run at once, the
exception can land in an import lock's callback, be dropped, and leave the thread waiting on that lock.

The log's triage stays in the command (a thread while the TSDB is served and discovered): forked here into a
child before Django starts, it measured no faster end to end (load 2-3.5, 3 runs each) and only competed
with Django's imports and Prometheus's start-up for the two cores.
"""

from __future__ import annotations

import argparse
import atexit
import shutil
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

#: the work roots started early, by the resolved path of the TSDB served there
_ROOTS: dict[str, str] = {}
#: the signals that arrived before the command installed its handlers
_RECEIVED: list[int] = []
WORK_ROOT_PREFIX = "stepwise-diagnose-"


def start(argv: Sequence[str]) -> None:
    """Start serving the TSDB of `diagnose`'s --job-dir in the background (`argv`: the arguments after
    the command's name); do nothing when there is no job directory with a TSDB, or the arguments ask for
    help, a log or a URL (the command then refuses them or serves nothing)."""
    tsdb = _tsdb_of(argv)
    if tsdb is None:
        return
    from playbooks import tsdb_guard

    root = str(tsdb_guard.private_root(WORK_ROOT_PREFIX))
    _ROOTS[str(tsdb.resolve())] = root
    atexit.register(_clean, root)
    for sig, default in ((signal.SIGTERM, signal.SIG_DFL), (signal.SIGINT, signal.default_int_handler)):
        if signal.getsignal(sig) is default:
            signal.signal(sig, _remember)
    threading.Thread(target=_serve, args=(tsdb, root), name="early-serve").start()


def work_root(tsdb: Path) -> Path | None:
    """Return the work root where `tsdb` started being served early, or None."""
    root = _ROOTS.get(str(tsdb.resolve()))
    return Path(root) if root else None


def _tsdb_of(argv: Sequence[str]) -> Path | None:
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    parser.add_argument("--job-dir")
    for other in ("--log", "--prometheus"):
        parser.add_argument(other)
    parser.add_argument("-h", "--help", action="store_true")
    try:
        opts, _ = parser.parse_known_args(list(argv))
    except (
        argparse.ArgumentError,
        SystemExit,
    ):  # an argument without its value: the command's parser says so
        return None
    if not opts.job_dir or opts.log or opts.prometheus or opts.help:
        return None
    tsdb = Path(opts.job_dir) / "prometheus"
    try:
        return tsdb if tsdb.is_dir() and any(tsdb.iterdir()) else None
    except OSError:
        return None


def _serve(tsdb: Path, root: str) -> None:
    from playbooks import tsdb_server

    try:
        tsdb_server.ensure_served(tsdb, work_root=root)
    except BaseException:  # noqa: BLE001 - the command serves again and reports its own error
        return


def received() -> int | None:
    """Return the first SIGTERM or SIGINT that arrived before the command took over its signals, or None."""
    return _RECEIVED[0] if _RECEIVED else None


def _remember(signum: int, frame: FrameType | None) -> None:
    _RECEIVED.append(signum)


def _clean(root: str) -> None:
    from playbooks import tsdb_guard, tsdb_server

    if Path(root).exists():
        tsdb_server.reap_leftovers(root)
        shutil.rmtree(root, ignore_errors=True)
    tsdb_guard.release(root, timeout=0)  # at exit
