"""Starting and stopping one private Prometheus on a copy of a TSDB (the entry layout is in tsdb_server).

`_serve_locked` copies the TSDB and starts a server on it; `_stop_locked` stops one we started. Both
run under the entry's lock, which the public API in `tsdb_server` takes.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import subprocess
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from . import procs
from ._tsdb_notes import _copy_notes, _head_stats, _time_range
from ._tsdb_types import (
    PrometheusNotInstalled,
    ServedTSDB,
    TSDBLocked,
    TSDBServerError,
    _served_from,
)
from .fingerprint import tsdb_fingerprint
from .prometheus import PrometheusClient, PrometheusError
from .tsdb_copy import Inventory, copy_tsdb, inventory
from .tsdb_lock import tsdb_lock_holder

log = logging.getLogger("playbooks.tsdb_server")

_ULID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
_ENTRY = procs.ENTRY_NAME
_MARKER = ".stepwise-tsdb-copy"
_RECORD = "server.json"
_CONFIG = "stepwise-view.yml"
_LOG = "prometheus.log"
_STOP_GRACE = 10.0
_PORT_ATTEMPTS = 5
#: Go's GC target of a served copy (Go's default 100) unless the environment sets GOGC: Prometheus's query
#: engine allocates per sample and step, and collecting half as often cut its CPU for a cold timeline view
#: of 1,024 GPUs by 14-17% (bench/timeline_speed.py); its peak memory on that job 218 -> 322 MB.
GOGC = "200"

_VIEW_CONFIG = """\
# Written by Stepwise: a private, read-only view of a copied TSDB. Nothing is scraped or evaluated.
global:
  scrape_interval: 999h
  evaluation_interval: 999h
"""


# -- records and entries ----------------------------------------------------------------------------


def _entry_dir(work_root: str | os.PathLike[str], src: str) -> Path:
    parts = [p for p in Path(src).parts[-2:] if p not in ("/", "")]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", "-".join(parts)).strip("-.")[:48] or "tsdb"
    digest = hashlib.sha256(src.encode()).hexdigest()[:12]
    return Path(work_root).resolve() / f"{slug}-{digest}"


_STORE = procs.EntryStore(_ENTRY, _MARKER, _RECORD, "TSDB copy")
_entries, _read_record, _write_record, _remove_entry = (
    _STORE.entries,
    _STORE.read,
    _STORE.write,
    _STORE.remove,
)


# -- processes --------------------------------------------------------------------------------------


def _is_ours(pid: int, copy_dir: str | os.PathLike[str]) -> bool:
    """Return True if `pid` runs and is the Prometheus serving `copy_dir`/data (pid-reuse safe)."""
    if pid <= 0:
        return False
    want = f"--storage.tsdb.path={os.path.join(os.path.realpath(copy_dir), 'data')}"
    # A zombie has an empty cmdline, so an exited server never matches.
    return want in procs.proc_args(pid)


def _terminate(pid: int, copy_dir: str, grace: float) -> bool:
    """Return True after stopping `pid`, if and only if it is the Prometheus serving `copy_dir`."""
    return procs.terminate(pid, lambda p: _is_ours(p, copy_dir), grace, "Prometheus")


def _stop_locked(rec: Mapping[str, Any], grace: float = _STOP_GRACE) -> bool:
    pid = int(rec.get("pid") or 0)
    copy_dir = str(rec.get("copy_dir") or "")
    if not copy_dir:
        return False
    stopped = _terminate(pid, copy_dir, grace) if pid > 0 else False
    if not stopped and pid > 0 and procs.alive(pid):
        # The pid was recycled (or the record was edited): that process is not ours to signal.
        log.warning(
            "not signalling pid %s: it is not the Prometheus serving %s (cmdline: %s); removing the record",
            pid, copy_dir, " ".join(procs.proc_args(pid))[:200] or "unreadable",
        )  # fmt: skip
    _remove_entry(copy_dir)
    return stopped


def _stop_unrecorded(work_root: str | os.PathLike[str], entry: Path | None = None) -> list[int]:
    """Return the pids stopped among the servers on a copy under `work_root` (or `entry` only) that were
    started by a process killed before it recorded them, so that nobody would ever stop them.

    With `entry`, the caller holds its lock and has stopped its recorded server: no start is under way, and
    a process serving `<entry>/data` with the command line Stepwise gives its servers is such a leftover.
    Without, each copy's lock is tried (one held is being started or stopped: skipped). A server its copy's
    record names is never one. Each pid is checked again once pinned (`_terminate`).
    """
    root = os.path.realpath(work_root)
    stopped = []
    for pid in procs.pids_with_arg_prefix(f"--storage.tsdb.path={root}/"):
        data = next(
            (a.split("=", 1)[1] for a in procs.proc_args(pid) if a.startswith("--storage.tsdb.path=")), ""
        )
        copy = Path(data).parent
        if copy.parent != Path(root) or not _ENTRY.match(copy.name) or (entry is not None and copy != entry):
            continue
        try:
            # with one entry the caller holds its lock; otherwise skip a copy being started or stopped now
            with contextlib.nullcontext() if entry is not None else procs.entry_lock(copy, blocking=False):
                rec = _read_record(copy)
                if rec is not None and int(rec.get("pid") or 0) == pid:
                    continue  # recorded: stop_idle, stop or reap_leftovers stop it
                if _terminate(pid, str(copy), 5.0):
                    log.warning(
                        "stopped pid %s serving %s: no record names it (its starter was killed)", pid, copy
                    )
                    stopped.append(pid)
        except BlockingIOError:
            continue
    return stopped


def _record_of(obj: ServedTSDB | Mapping[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
    if isinstance(obj, ServedTSDB):
        return asdict(obj)
    if isinstance(obj, Mapping):
        return dict(obj)
    path = Path(obj)
    rec = _read_record(path if path.is_dir() else path.parent)
    if rec is None:
        raise TSDBServerError(f"no readable {_RECORD} at {path}")
    return rec


# -- starting ---------------------------------------------------------------------------------------


def find_free_port(start: int = 19190, end: int = 19990, host: str = "127.0.0.1") -> int:
    """Return the first port in [start, end) free on `host` with no listener on any address (procs.free_port).

    Raises TSDBServerError when there is none.
    """
    try:
        return procs.free_port(start, end, host)
    except procs.NoFreePort as exc:
        raise TSDBServerError(str(exc)) from None


def _find_prometheus(prometheus_bin: str) -> str:
    found = procs.find_executable(prometheus_bin)
    if not found:
        raise PrometheusNotInstalled(
            f"Prometheus binary {prometheus_bin!r} not found: install Prometheus "
            "(Debian: apt install prometheus) or pass prometheus_bin"
        )
    return found


def _command(binary: str, entry: Path, port: int) -> list[str]:
    return [
        binary,
        f"--config.file={entry / _CONFIG}",
        f"--storage.tsdb.path={entry / 'data'}",
        # Retention far beyond any job: nothing old is deleted (the default 15d would drop a job's blocks).
        "--storage.tsdb.retention.time=100y",
        # Hidden flags: a 100y head chunk range makes the head never "compactable" (span > 1.5 x range),
        # and equal min/max leaves one range, so no level compaction of the copied blocks either.
        "--storage.tsdb.min-block-duration=100y",
        "--storage.tsdb.max-block-duration=100y",
        f"--web.listen-address=127.0.0.1:{port}",
        # As the seed system's `prometheus.sh view`: scrapes of a finished job stay visible 15 min.
        "--query.lookback-delta=15m",
        "--log.level=info",
    ]


def _log_tail(entry: Path, lines: int = 15) -> str:
    try:
        text = (entry / _LOG).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _log_reason(tail: str) -> str:
    for line in reversed(tail.splitlines()):
        if "level=error" in line or "err=" in line:
            return " ".join(line.split())[:300]
    last = tail.splitlines()[-1:] or ["(empty log)"]
    return " ".join(last[0].split())[:300]


def _wait_ready(proc: subprocess.Popen[bytes], url: str, timeout: float, data_dir: Path) -> bool:
    """Return True once `url` answers /-/ready *from a server on `data_dir`*, False if the process exits or
    `timeout` passes.

    Another process may take the port between our check and Prometheus's bind and answer the probe
    itself; queries would then read someone else's TSDB. Its flags tell whose data it serves, and ours
    exits with "address already in use", which `_start` turns into another try.
    """
    deadline = time.monotonic() + timeout
    delay = 0.02
    with PrometheusClient(url, timeout=1.0, retries=1) as client:
        while proc.poll() is None and time.monotonic() < deadline:
            if client.ready() and _serves_dir(client, data_dir):
                return True
            # a probe on the loopback is cheap; a long pause is a wait on a server already up (0.5 s lost 0.2-0.5 s)
            time.sleep(delay)
            delay = min(delay * 1.5, 0.1)
    return False


def _serves_dir(client: PrometheusClient, data_dir: Path) -> bool:
    try:
        path = str(client.flags().get("storage.tsdb.path", ""))
    except PrometheusError:
        return False
    return bool(path) and Path(path).resolve() == data_dir.resolve()


def _start(
    binary: str, entry: Path, src: str, port: int | None, ready_timeout: float
) -> tuple[int, int, list[str]]:
    """Return (pid, port, cmdline) of a Prometheus on the copy that answers /-/ready."""
    for attempt in range(1 if port is not None else _PORT_ATTEMPTS):
        # After a lost race the winner now listens on that port, so the next search skips it.
        chosen = port if port is not None else find_free_port()
        cmd = _command(binary, entry, chosen)
        with open(entry / _LOG, "wb") as logf:
            # Own session: a Ctrl-C on the caller's terminal does not reach the server mid-query, and
            # stop() remains the one way to end it.
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                cwd=entry, start_new_session=True, close_fds=True, env={"GOGC": GOGC, **os.environ},
            )  # fmt: skip
        procs.child_add(proc)
        try:
            if _wait_ready(proc, f"http://127.0.0.1:{chosen}", ready_timeout, entry / "data"):
                return proc.pid, chosen, cmd
        except BaseException:
            # Ctrl-C while waiting: the server is not recorded yet, so nobody else could stop it.
            _terminate(proc.pid, str(entry), 5.0)
            raise
        if proc.poll() is None:
            _terminate(proc.pid, str(entry), 5.0)
            tail = _log_tail(entry)
            raise TSDBServerError(
                f"Prometheus for {src} was not ready within {ready_timeout:g} s (replaying a large WAL "
                f"can take minutes; raise ready_timeout): {_log_reason(tail)}",
                log_tail=tail,
            )
        procs.reap_children()
        tail = _log_tail(entry)
        # Port race: another program bound the port between our check and Prometheus's bind.
        if "address already in use" in tail and port is None:
            log.info(
                "port %s was taken before Prometheus bound it (attempt %d); trying another",
                chosen,
                attempt + 1,
            )
            continue
        raise TSDBServerError(
            f"Prometheus exited with status {proc.returncode} while opening the copy of {src}: "
            f"{_log_reason(tail)}",
            log_tail=tail,
        )
    raise TSDBServerError(f"could not start Prometheus for {src}: {_PORT_ATTEMPTS} ports were taken in a row")


def _answers_ready(url: str, *, within: float) -> bool:
    deadline = time.monotonic() + within
    with PrometheusClient(url, timeout=5.0, retries=1) as client:
        while True:
            if client.ready():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)


def source_state(src: str, *, blocks_only: bool) -> str:
    """Return a digest that changes when what a copy of `src` would serve changes.

    A full copy serves the blocks and the head (`tsdb_fingerprint`: block ULIDs, every wal/ and
    chunks_head/ file's size and time); a blocks-only copy of a live TSDB only the blocks, so the live
    server's WAL appends do not count.
    """
    if not blocks_only:
        return tsdb_fingerprint(src)
    blocks = sorted(n for n in os.listdir(src) if _ULID.match(n))
    return hashlib.sha256(" ".join(blocks).encode()).hexdigest()[:32]


def _source_dir(tsdb_dir: str | os.PathLike[str]) -> str:
    src = os.path.realpath(tsdb_dir)
    if not os.path.isdir(src):
        raise TSDBServerError(f"no TSDB directory at {tsdb_dir}")
    return src


def _serve_locked(
    src: str,
    entry: Path,
    *,
    prometheus_bin: str,
    allow_blocks_only: bool,
    ready_timeout: float,
    port: int | None,
) -> ServedTSDB:
    """Return a new server on a fresh copy of `src`; the caller holds the entry lock."""
    binary = _find_prometheus(prometheus_bin)
    holder, inv = _servable(src, allow_blocks_only)
    blocks_only = holder is not None
    state = source_state(src, blocks_only=blocks_only)  # before copying: a change meanwhile shows next time
    _stop_unrecorded(entry.parent, entry)  # a server whose starter was killed before recording it
    _remove_entry(entry)  # a stale copy of a dead server
    entry.mkdir(parents=True)
    (entry / _MARKER).write_text(f"Stepwise private copy of {src}; deleted when its server stops.\n")
    pid = 0
    try:
        copied = copy_tsdb(src, entry / "data", inv, include_head=not blocks_only)
        (entry / _CONFIG).write_text(_VIEW_CONFIG)
        pid, port, cmd = _start(binary, entry, src, port, ready_timeout)
        url = f"http://127.0.0.1:{port}"
        kept = [b for b in inv.blocks if b[0] not in copied.vanished]
        now = time.time()
        rec = {
            "pid": pid,
            "port": port,
            "url": url,
            "source_dir": src,
            "copy_dir": str(entry),
            "started_at": now,
            "last_used": now,
            "cmdline": cmd,
            "blocks_only": blocks_only,
            "note": "; ".join(_copy_notes(src, holder, kept, inv, copied)),
            "time_range": _time_range(kept, _head_stats(url)),
            "source_state": state,
        }
        _write_record(entry, rec)
    except BaseException:
        # Includes KeyboardInterrupt: never leave an unrecorded server or a half copy behind.
        if pid:
            _terminate(pid, str(entry), 5.0)
        _remove_entry(entry)
        raise
    log.info("serving a copy of %s at %s (pid %s)", src, url, pid)
    return _served_from(rec)


def _servable(src: str, allow_blocks_only: bool) -> tuple[int | None, Inventory]:
    """Return the pid holding `src` (None if no live server does; <= 0 if unknown) and its inventory.

    Raises TSDBLocked if a live server holds it and only a full copy would do, TSDBServerError if there
    is nothing to serve.
    """
    holder = tsdb_lock_holder(src)
    if holder is not None and not allow_blocks_only:
        who = f"pid {holder}" if holder > 0 else "an unknown process"
        raise TSDBLocked(
            f"{src} belongs to a live Prometheus ({who} holds its lock or serves it): query that server "
            "instead, or serve the immutable blocks only",
            pid=holder,
        )
    blocks_only = holder is not None
    inv = inventory(src)
    if not inv.blocks and (blocks_only or not inv.wal_has_data):
        what = "no complete blocks yet" if blocks_only else "no blocks and an empty or missing wal/"
        raise TSDBServerError(f"no TSDB data in {src}: {what}")
    return holder, inv
