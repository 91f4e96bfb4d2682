"""Serve a job's TSDB while Django starts: `manage.py diagnose --job-dir DIR`, before `django.setup()`.

Django's start-up (about 0.8 s of one core) and Prometheus's (copy, start, block and WAL loading: about
0.7 s, in a process of its own) do not wait on each other. `manage.py` calls `start(argv)` before it imports
Django (this module imports none of it): the job's TSDB starts being served, in a thread, in a work root
of its own. The command asks `work_root(tsdb)` and calls `tsdb_server.ensure_served` on that root; the
entry's lock makes it wait for the start under way and return that server, or, when the early start failed,
try again and fail exactly as it would have (the early thread keeps no error).

Nothing is left behind, whatever happens before the command takes over: the thread is not a daemon (the
interpreter joins it before exiting), an `atexit` hook then stops every server under the root and deletes
it. Until the command installs its own handlers, SIGTERM and Ctrl-C are only remembered (`received()`),
and the command exits 128 + n as it starts: raised inside the imports Django and the thread run at once, the
exception can land in an import lock's callback, be dropped, and leave the thread waiting on that lock.

The job's log is triaged meanwhile too, in a child process forked before anything else starts (a thread
would hold the interpreter's lock against Django's imports and, later, against the parsing of the query
results: 0.6-0.8 s of CPU moved to the core Django leaves idle). `triage(job_dir)` hands the command its
result as a future; the child is a daemon, ended at exit if still running.
"""

from __future__ import annotations

import argparse
import atexit
import multiprocessing
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import MutableMapping, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType
from typing import Any

#: the work roots started early, by the resolved path of the TSDB served there
_ROOTS: dict[str, str] = {}
#: the signals that arrived before the command installed its handlers
_RECEIVED: list[int] = []
#: the triages started early, by the resolved path of the job directory
_TRIAGES: dict[str, EarlyTriage] = {}
WORK_ROOT_PREFIX = "stepwise-diagnose-"


class EarlyTriage:
    """The triage of a job's log in a forked child: `result()` (the Triage, or the child's exception raised
    again) and `cancel()`, as a concurrent.futures.Future of `triage_job(job_dir)` would have them."""

    def __init__(self, job_dir: Path) -> None:
        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=_triage_child, args=(str(job_dir), child), name="early-triage", daemon=True
        )
        self._proc.start()
        child.close()
        self._answer: tuple[str, Any, float, float] | None = None

    def result(self, phases: MutableMapping[str, float] | None = None) -> Any:
        """Wait for the triage; `phases` receives its seconds and the child's CPU (`triage_s`, `triage_cpu_s`)."""
        if self._answer is None:
            try:
                self._answer = self._conn.recv()
            except EOFError:
                from playbooks.triage import TriageError

                self._answer = ("error", TriageError("the log's triage ended without an answer"), 0.0, 0.0)
            self._proc.join()
        kind, value, seconds, cpu = self._answer
        if phases is not None:
            phases.update(triage_s=round(seconds, 3), triage_cpu_s=round(cpu, 3))
        if kind == "error":
            raise value
        return value

    def cancel(self) -> bool:
        if self._proc.is_alive():
            self._proc.terminate()
        return True


def _triage_child(job_dir: str, conn: Connection) -> None:
    from playbooks.triage import TriageError, triage_job

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it ends this child
    t0, cpu0 = time.monotonic(), time.process_time()
    value: Any
    try:
        kind, value = "ok", triage_job(job_dir)
    except Exception as exc:  # noqa: BLE001 - raised again in the parent
        kind, value = "error", exc
    spent = (time.monotonic() - t0, time.process_time() - cpu0)
    try:
        conn.send((kind, value, *spent))
    except Exception as exc:  # noqa: BLE001 - an answer that does not pickle
        conn.send(("error", TriageError(f"the log's triage could not be handed over: {exc}"), *spent))


def start(argv: Sequence[str]) -> None:
    """Start triaging the log and serving the TSDB of `diagnose`'s --job-dir in the background (`argv`: the arguments after
    the command's name); do nothing when there is no job directory with a TSDB, or the arguments ask for
    help, a log or a URL (the command then refuses them or serves nothing)."""
    tsdb = _tsdb_of(argv)
    if tsdb is None:
        return
    from playbooks.triage import find_job_log

    if find_job_log(tsdb.parent) is not None:  # forked first, while this process has no other thread
        _TRIAGES[str(tsdb.parent.resolve())] = EarlyTriage(tsdb.parent)
    root = tempfile.mkdtemp(prefix=WORK_ROOT_PREFIX)
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


def triage(job_dir: Path) -> EarlyTriage | None:
    """Return the triage of `job_dir`'s log started early, or None."""
    return _TRIAGES.get(str(job_dir.resolve()))


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
    from playbooks import tsdb_server

    if Path(root).exists():
        tsdb_server.reap_leftovers(root)
        shutil.rmtree(root, ignore_errors=True)
