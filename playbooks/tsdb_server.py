"""Serve a finished job's TSDB with a private Prometheus that can never harm the original.

Prometheus has no read-only mode: opened on a directory it replays and rewrites the WAL, compacts the
head into new blocks, deletes blocks older than its retention and (re)creates `lock` and
`queries.active`. So Stepwise never points Prometheus at a job's TSDB. It builds a private copy under
`work_root/<slug>-<hash>/data` (immutable block files hard-linked, `wal/` and `chunks_head/` copied) and
serves that on a free loopback port, recording the server in `work_root/<slug>-<hash>/server.json`.

One served copy per TSDB per machine: the work root is the registry every process of the machine (the
web server, the Celery workers, the commands) reads, so all of them share the live copy of a TSDB.
`ensure_served` reuses it, refreshes it (a new copy) when the source changed and nobody is querying
it, and starts one only within the machine's cap (`max_copies`): past the cap the least recently used
idle copy is stopped first, and when none is idle it raises TSDBBusy.

Layout of one entry::

    work_root/.cap.lock                   fcntl lock serializing starts under the cap
    work_root/<slug>-<hash>.lock          fcntl lock serializing start/reuse/stop of this entry
    work_root/<slug>-<hash>/.stepwise-tsdb-copy   marker: only such directories are ever deleted
    work_root/<slug>-<hash>/server.json   {pid, port, url, source_dir, copy_dir, started_at, last_used,
                                           source_state, ...}
    work_root/<slug>-<hash>/stepwise-view.yml
    work_root/<slug>-<hash>/prometheus.log
    work_root/<slug>-<hash>/data/         the copy Prometheus opens

Modules: `procs` (entries, locks, children, ports; shared with the SSH tunnels), `tsdb_lock` (who holds
a TSDB), `tsdb_launch` (copy, start and stop one server; `_tsdb_types`, `_tsdb_notes`), `tsdb_guard` (the
servers of a private work root stop when the process owning it ends, even SIGKILLed); this module is the
public API.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from . import procs
from ._tsdb_types import (
    PrometheusNotInstalled,
    ServedTSDB,
    TSDBBusy,
    TSDBLocked,
    TSDBServerError,
    _served_from,
)

# Kept importable from here for the SSH tunnels (playbooks/tunnel.py) and the tests.
from .procs import CHILDREN as _CHILDREN  # noqa: F401
from .procs import CHILDREN_LOCK as _CHILDREN_LOCK  # noqa: F401
from .procs import EntryStore, find_executable
from .procs import alive as _alive  # noqa: F401
from .procs import can_bind as _can_bind  # noqa: F401
from .procs import entry_lock as _entry_lock
from .procs import listening_ports as _listening_ports  # noqa: F401
from .procs import proc_args as _proc_args  # noqa: F401
from .procs import reap_children as _reap_children
from .procs import wait_exit as _wait_exit  # noqa: F401
from .tsdb_launch import (
    _answers_ready,
    _entries,
    _entry_dir,
    _is_ours,
    _read_record,
    _record_of,
    _remove_entry,
    _serve_locked,
    _source_dir,
    _stop_locked,
    _stop_unrecorded,
    _terminate,  # noqa: F401
    _write_record,
    find_free_port,
    source_state,
)
from .tsdb_lock import tsdb_lock_holder

__all__ = [
    "EntryStore",
    "PrometheusNotInstalled",
    "ServedTSDB",
    "TSDBBusy",
    "TSDBLocked",
    "TSDBServerError",
    "ensure_served",
    "find_executable",
    "find_free_port",
    "list_served",
    "reap_leftovers",
    "serve_readonly",
    "stop",
    "stop_idle",
    "tsdb_lock_holder",
]

log = logging.getLogger(__name__)

#: A copy used (served to anyone) less than this long ago is not stopped to make room under the cap.
IDLE_AFTER_S = 60.0


# -- public API -------------------------------------------------------------------------------------


def serve_readonly(
    tsdb_dir: str | os.PathLike[str],
    *,
    work_root: str | os.PathLike[str],
    prometheus_bin: str = "prometheus",
    allow_blocks_only: bool = False,
    ready_timeout: float = 90.0,
    port: int | None = None,
) -> ServedTSDB:
    """Return a new Prometheus serving a private copy of `tsdb_dir`; the caller must stop() it.

    1. Refuse a TSDB locked by a live Prometheus (TSDBLocked) unless allow_blocks_only, then copy the
       immutable blocks only; refuse a directory without data.
    2. Copy into work_root/<slug>-<hash>/data: block files hard-linked (copied across filesystems),
       wal/ and chunks_head/ copied; never `lock` or `queries.active`. The source is only read.
    3. Start Prometheus on a free loopback port (another one if the port is taken meanwhile), wait for
       /-/ready, record it in server.json.
    Raises TSDBServerError if this directory is already served from work_root (use ensure_served).
    """
    src = _source_dir(tsdb_dir)
    entry = _entry_dir(work_root, src)
    _reap_children()
    with _entry_lock(entry):
        rec = _read_record(entry)
        if rec and _is_ours(int(rec.get("pid") or 0), entry):
            raise TSDBServerError(
                f"{src} is already served at {rec.get('url')} (pid {rec.get('pid')}); use ensure_served to share it"
            )
        return _serve_locked(
            src, entry, prometheus_bin=prometheus_bin, allow_blocks_only=allow_blocks_only,
            ready_timeout=ready_timeout, port=port,
        )  # fmt: skip


def ensure_served(
    tsdb_dir: str | os.PathLike[str],
    *,
    work_root: str | os.PathLike[str],
    prometheus_bin: str = "prometheus",
    allow_blocks_only: bool = False,
    ready_timeout: float = 90.0,
    port: int | None = None,
    max_copies: int | None = None,
    idle_after: float = IDLE_AFTER_S,
) -> ServedTSDB:
    """Return the server recorded for `tsdb_dir` in work_root if it is alive, ready and current, else start one.

    Safe across processes (web server and Celery workers): the entry's fcntl lock serializes the
    check-and-start, so two callers never start two servers for one TSDB. Touches last_used, which
    stop_idle() and the cap read.

    - Refresh: a copy whose source changed since it was made (a new block, WAL or head chunks growing; a
      blocks-only copy once the live server's lock is gone) is replaced by a new copy, unless a client
      is connected to it right now: then it keeps serving until the next call finds it free.
    - Cap: with `max_copies`, a new server starts only while fewer copies serve in work_root; otherwise
      the least recently used copy idle for `idle_after` s (and with no client connected) is stopped
      first, and if there is none TSDBBusy is raised. Starts under a cap are serialized machine-wide.
    """
    src = _source_dir(tsdb_dir)
    entry = _entry_dir(work_root, src)
    _reap_children()
    with _entry_lock(entry):
        rec = _read_record(entry)
        if rec and _is_ours(int(rec.get("pid") or 0), entry):
            changed = _changed(rec, src)
            if (not changed or _in_use(rec)) and _answers_ready(str(rec["url"]), within=2.0):
                rec["last_used"] = time.time()
                _write_record(entry, rec)
                return _served_from(rec)
            if changed:
                log.info("%s changed since it was copied (%s): serving a new copy", src, changed)
            _stop_locked(rec)
        elif rec:
            _remove_entry(entry)  # the recorded server died (or its pid was reused)
        with _cap(work_root, entry, max_copies, idle_after):
            return _serve_locked(
                src, entry, prometheus_bin=prometheus_bin, allow_blocks_only=allow_blocks_only,
                ready_timeout=ready_timeout, port=port,
            )  # fmt: skip


def _changed(rec: Mapping[str, Any], src: str) -> str:
    """Return why the copy recorded in `rec` no longer matches its source, "" when it does."""
    blocks_only = bool(rec.get("blocks_only"))
    if blocks_only and tsdb_lock_holder(src) is None:
        return "the live server that held it stopped"
    try:
        state = source_state(src, blocks_only=blocks_only)
    except OSError:
        return ""  # unreadable now: keep what is served; serving again would fail the same way
    return "" if state == rec.get("source_state") else "its files changed"


def _in_use(rec: Mapping[str, Any]) -> bool:
    """Return True while a client holds a connection to the server (a query in the last few seconds)."""
    return procs.connections_to(int(rec.get("port") or 0)) > 0


@contextlib.contextmanager
def _cap(
    work_root: str | os.PathLike[str], entry: Path, max_copies: int | None, idle_after: float
) -> Iterator[None]:
    """Hold the machine-wide start lock and make room for one more copy under `max_copies` (None: no cap)."""
    if max_copies is None:
        yield
        return
    with _entry_lock(Path(work_root).resolve() / ".cap"):
        _make_room(work_root, entry, max_copies, idle_after)
        yield


def _make_room(work_root: str | os.PathLike[str], entry: Path, max_copies: int, idle_after: float) -> None:
    """Stop the least recently used idle copies until fewer than `max_copies` serve; raise TSDBBusy if
    that is not possible. Copies whose lock is held (being reused or stopped right now) are skipped."""
    serving = [
        (e, rec) for e in _entries(work_root)
        if e != entry and (rec := _read_record(e)) and _is_ours(int(rec.get("pid") or 0), e)
    ]  # fmt: skip
    count = len(serving)
    now = time.time()
    for other, rec in sorted(serving, key=lambda item: float(item[1].get("last_used", 0))):
        if count < max_copies:
            return
        if now - float(rec.get("last_used", 0)) < idle_after or _in_use(rec):
            continue
        try:
            with _entry_lock(other, blocking=False):
                current = _read_record(other)
                if current and current.get("pid") == rec.get("pid") and _stop_locked(current):
                    log.info(
                        "stopped the idle copy of %s to make room (cap %d)", rec.get("source_dir"), max_copies
                    )
                    count -= 1
        except BlockingIOError:
            continue
    if count >= max_copies:
        raise TSDBBusy(
            f"Busy: {count} {'copy' if count == 1 else 'copies'} of job TSDBs serving on this machine (its cap, "
            f"STEPWISE_TSDB_MAX_COPIES) and each was used in the last {idle_after:g} s; try again in a moment.",
            serving=count,
        )


def stop(served_or_pid_record: ServedTSDB | Mapping[str, Any] | str | os.PathLike[str]) -> None:
    """Stop a server we started and remove its copy; wait until it has exited.

    Accepts a ServedTSDB, a server.json record (dict), or the path of an entry / its server.json.
    Only a pid whose /proc/<pid>/cmdline still names our copy directory is signalled (SIGTERM, then
    SIGKILL after a grace period); any other pid is left alone and the stale record is removed.
    """
    rec = _record_of(served_or_pid_record)
    copy_dir = str(rec.get("copy_dir") or "")
    if not copy_dir:
        raise TSDBServerError("record has no copy_dir")
    _reap_children()
    entry = Path(os.path.realpath(copy_dir))
    with _entry_lock(entry):
        _stop_locked(rec)


def stop_idle(work_root: str | os.PathLike[str], idle_seconds: float) -> list[int]:
    """Return the pids of the servers stopped because ensure_served() last used them idle_seconds ago, and
    of those no record names (their starter, e.g. a Celery worker, was killed before recording them); the
    copies such a starter left without a record are deleted.

    An entry whose lock is held (someone is starting or reusing it right now) is skipped.
    """
    _reap_children()
    stopped = []
    now = time.time()
    for entry in _entries(work_root):
        try:
            with _entry_lock(entry, blocking=False):
                rec = _read_record(entry)
                if rec is None:
                    # a copy whose starter was killed before it recorded a server (no start holds the lock)
                    stopped += _stop_unrecorded(work_root, entry)
                    _remove_entry(entry)
                    continue
                if now - float(rec.get("last_used", 0)) < idle_seconds:
                    continue
                if _stop_locked(rec):
                    stopped.append(int(rec["pid"]))
        except BlockingIOError:
            continue
    return stopped + _stop_unrecorded(work_root)  # a process killed while it started one left it serving


def reap_leftovers(work_root: str | os.PathLike[str]) -> list[int]:
    """Return the pids stopped while clearing every server and copy recorded in work_root.

    Meant for Stepwise's start-up, before anything serves: each recorded server is stopped if its
    cmdline still names its copy (never another pid), and so is a server on a copy under work_root that no
    record names (its starter was killed before recording it); then every entry directory is deleted.
    """
    _reap_children()
    stopped = []
    for entry in _entries(work_root):
        with _entry_lock(entry):
            rec = _read_record(entry)
            if rec is not None and _stop_locked(rec):
                stopped.append(int(rec["pid"]))
            stopped += _stop_unrecorded(work_root, entry)
            _remove_entry(entry)
    return stopped + _stop_unrecorded(work_root)  # and those whose copy is gone


def list_served(work_root: str | os.PathLike[str]) -> list[ServedTSDB]:
    """Return the servers recorded in work_root whose process is alive and still serves its copy."""
    _reap_children()
    out = []
    for entry in _entries(work_root):
        rec = _read_record(entry)
        if rec is not None and _is_ours(int(rec.get("pid") or 0), entry):
            out.append(_served_from(rec))
    return out
