"""Serve a finished job's TSDB with a private Prometheus that can never harm the original.

Prometheus has no read-only mode: opened on a directory it replays and rewrites the WAL, compacts the
head into new blocks, deletes blocks older than its retention and (re)creates `lock` and
`queries.active`. So Stepwise never points Prometheus at a job's TSDB. It builds a private copy under
`work_root/<slug>-<hash>/data` (immutable block files hard-linked, `wal/` and `chunks_head/` copied) and
serves that on a free loopback port, recording the server in `work_root/<slug>-<hash>/server.json` so
that the web server and the Celery workers share one server per TSDB.

Layout of one entry::

    work_root/<slug>-<hash>.lock          fcntl lock serializing start/reuse/stop of this entry
    work_root/<slug>-<hash>/.stepwise-tsdb-copy   marker: only such directories are ever deleted
    work_root/<slug>-<hash>/server.json   {pid, port, url, source_dir, copy_dir, started_at, last_used, ...}
    work_root/<slug>-<hash>/stepwise-view.yml
    work_root/<slug>-<hash>/prometheus.log
    work_root/<slug>-<hash>/data/         the copy Prometheus opens
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import logging
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import PlaybooksError
from .prometheus import PrometheusClient, PrometheusError
from .tsdb_copy import copy_tsdb, inventory

log = logging.getLogger(__name__)

_ULID = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
_ENTRY = re.compile(r"^[A-Za-z0-9._-]{1,60}-[0-9a-f]{12}$")
_MARKER = ".stepwise-tsdb-copy"
_RECORD = "server.json"
_CONFIG = "stepwise-view.yml"
_LOG = "prometheus.log"
_STOP_GRACE = 10.0
_PORT_ATTEMPTS = 5
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)

_VIEW_CONFIG = """\
# Written by Stepwise: a private, read-only view of a copied TSDB. Nothing is scraped or evaluated.
global:
  scrape_interval: 999h
  evaluation_interval: 999h
"""


class TSDBServerError(PlaybooksError):
    """Serving a TSDB failed; str() is one line a user can read.

    Attributes:
        log_tail: The last lines of prometheus.log when the server failed to start, else "".
    """

    def __init__(self, message: str, *, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep the attributes when pickled (Celery results, multiprocessing).
        return (_rebuild_error, (type(self), str(self), dict(self.__dict__)))


def _rebuild_error(cls: type[TSDBServerError], message: str, attrs: dict[str, Any]) -> TSDBServerError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(attrs)
    return err


class TSDBLocked(TSDBServerError):
    """The TSDB's `lock` is held by a running Prometheus: the job is live.

    Attributes:
        pid: The process holding the lock (-1 when the kernel does not say which).
    """

    def __init__(self, message: str, *, pid: int) -> None:
        super().__init__(message)
        self.pid = pid


class PrometheusNotInstalled(TSDBServerError):
    """The Prometheus binary cannot be found or executed."""


@dataclass(frozen=True)
class ServedTSDB:
    """A private Prometheus serving a copy of one TSDB.

    Attributes:
        source_dir: The job's TSDB directory (never modified).
        copy_dir: The entry directory holding the copy (`data/`), config, log and server.json.
        url: Base URL of the server, http://127.0.0.1:<port>.
        port: The loopback port it listens on.
        pid: The Prometheus process id.
        started_at: Unix seconds when it became ready.
        blocks_only: True if only the immutable blocks were served (the TSDB was locked by a live server).
        note: What is missing from the copy, for the user ("" when nothing is).
        time_range: (first, last) sample time in unix seconds: block meta.json ranges united with the
            head's range after WAL replay; None if the server holds no samples.
    """

    source_dir: str
    copy_dir: str
    url: str
    port: int
    pid: int
    started_at: float
    blocks_only: bool
    note: str
    time_range: tuple[float, float] | None


# Popen objects of the servers this process started, so that stop() can reap them (no zombies).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
_CHILDREN_LOCK = threading.Lock()


# -- lock holder and ports --------------------------------------------------------------------------


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


def _proc_args(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


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


def _listening_ports() -> set[int]:
    """Return the ports with a TCP listener on any address (IPv4 or IPv6) in this network namespace."""
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _can_bind(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # No SO_REUSEADDR: the bind must fail if anything (even a TIME_WAIT socket) uses the port.
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def find_free_port(start: int = 19190, end: int = 19990, host: str = "127.0.0.1") -> int:
    """Return the first port in [start, end) that is free on `host` and has no listener on any address.

    The /proc/net check matters: an SSH tunnel on [::1]:p or 127.0.0.2:p, or a server on another
    interface, does not stop a bind on 127.0.0.1:p, but a user reaching "localhost:p" would hit the
    wrong server.
    """
    busy = _listening_ports()
    for port in range(start, end):
        if port not in busy and _can_bind(host, port):
            return port
    raise TSDBServerError(f"no free TCP port in {start}-{end - 1} on {host}")


# -- records and entries ----------------------------------------------------------------------------


def _entry_dir(work_root: str | os.PathLike[str], src: str) -> Path:
    parts = [p for p in Path(src).parts[-2:] if p not in ("/", "")]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", "-".join(parts)).strip("-.")[:48] or "tsdb"
    digest = hashlib.sha256(src.encode()).hexdigest()[:12]
    return Path(work_root).resolve() / f"{slug}-{digest}"


@contextlib.contextmanager
def _entry_lock(entry: Path, *, blocking: bool = True) -> Iterator[None]:
    """Hold the entry's fcntl lock; flock conflicts across processes and across threads alike.

    The lock file sits next to the entry directory, so removing the entry never drops a held lock.
    """
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.parent / f"{entry.name}.lock", "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@dataclass(frozen=True)
class EntryStore:
    """Folders of one kind under a work root, one per process Stepwise started, each with a JSON record.

    Shared by the TSDB servers here and the SSH tunnels of `tunnel.py`.

    Attributes:
        pattern: what an entry folder's name must match.
        marker: a file every entry holds; with the name pattern, the proof that we created the folder.
        record: the JSON record's file name.
        what: the kind of entry in words, for log messages.
    """

    pattern: re.Pattern[str]
    marker: str
    record: str
    what: str

    def entries(self, work_root: str | os.PathLike[str]) -> list[Path]:
        """Return the entry folders under `work_root`, sorted."""
        root = Path(work_root)
        if not root.is_dir():
            return []
        return [
            p for p in sorted(root.iterdir())
            if self.pattern.match(p.name) and p.is_dir() and (p / self.marker).exists()
        ]  # fmt: skip

    def read(self, entry: Path) -> dict[str, Any] | None:
        """Return the entry's record, None when it is missing or not a JSON object."""
        try:
            rec = json.loads((entry / self.record).read_text())
        except (OSError, ValueError):
            return None
        return rec if isinstance(rec, dict) else None

    def write(self, entry: Path, rec: Mapping[str, Any]) -> None:
        """Replace the entry's record atomically."""
        # Readers in other processes must never see a half-written record: write, then rename.
        tmp = entry / f".{self.record}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(rec, indent=2, sort_keys=True))
        os.replace(tmp, entry / self.record)

    def remove(self, entry: str | os.PathLike[str]) -> None:
        """Delete the entry folder, only if its name and marker say we created it."""
        path = Path(os.path.realpath(entry))
        # Never delete anything we did not create: the name pattern AND our marker file must both match.
        if not (self.pattern.match(path.name) and (path / self.marker).exists()):
            if path.exists():
                log.warning("not deleting %s: it is not a Stepwise %s", path, self.what)
            return
        shutil.rmtree(path, ignore_errors=True)


_STORE = EntryStore(_ENTRY, _MARKER, _RECORD, "TSDB copy")
_entries, _read_record, _write_record, _remove_entry = (
    _STORE.entries,
    _STORE.read,
    _STORE.write,
    _STORE.remove,
)


def _served_from(rec: Mapping[str, Any]) -> ServedTSDB:
    tr = rec.get("time_range")
    return ServedTSDB(
        source_dir=str(rec["source_dir"]),
        copy_dir=str(rec["copy_dir"]),
        url=str(rec["url"]),
        port=int(rec["port"]),
        pid=int(rec["pid"]),
        started_at=float(rec["started_at"]),
        blocks_only=bool(rec.get("blocks_only", False)),
        note=str(rec.get("note", "")),
        time_range=(float(tr[0]), float(tr[1])) if tr else None,
    )


# -- processes --------------------------------------------------------------------------------------


def _reap_children() -> None:
    with _CHILDREN_LOCK:
        for pid, proc in list(_CHILDREN.items()):
            if proc.poll() is not None:
                del _CHILDREN[pid]


def _is_ours(pid: int, copy_dir: str | os.PathLike[str]) -> bool:
    """Return True if `pid` runs and is the Prometheus serving `copy_dir`/data (pid-reuse safe)."""
    if pid <= 0:
        return False
    want = f"--storage.tsdb.path={os.path.join(os.path.realpath(copy_dir), 'data')}"
    # A zombie has an empty cmdline, so an exited server never matches.
    return want in _proc_args(pid)


def _alive(pid: int) -> bool:
    with _CHILDREN_LOCK:
        proc = _CHILDREN.get(pid)
    if proc is not None:
        return proc.poll() is None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait_exit(pid: int, pidfd: int | None, timeout: float) -> bool:
    if pidfd is not None:
        # A pidfd becomes readable when the process exits, child or not.
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        exited = bool(poller.poll(timeout * 1000))
    else:
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        exited = not _alive(pid)
    if exited:
        with _CHILDREN_LOCK:
            proc = _CHILDREN.pop(pid, None)
        if proc is not None:
            proc.wait()
    return exited


def _terminate(pid: int, copy_dir: str, grace: float) -> bool:
    """Return True after stopping `pid`, if and only if it is the Prometheus serving `copy_dir`.

    The pid is pinned with pidfd_open() before its cmdline is checked, so it cannot be recycled for an
    unrelated process between the check and the signal.
    """
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except (OSError, AttributeError):
        pidfd = None
    try:
        if not _is_ours(pid, copy_dir):
            return False

        def send(sig: int) -> None:
            with contextlib.suppress(ProcessLookupError):
                if pidfd is not None:
                    signal.pidfd_send_signal(pidfd, sig)
                else:
                    os.kill(pid, sig)

        send(signal.SIGTERM)
        if not _wait_exit(pid, pidfd, grace):
            log.warning("Prometheus pid %s ignored SIGTERM for %.0f s; sending SIGKILL", pid, grace)
            send(signal.SIGKILL)
            _wait_exit(pid, pidfd, 10.0)
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _stop_locked(rec: Mapping[str, Any], grace: float = _STOP_GRACE) -> bool:
    pid = int(rec.get("pid") or 0)
    copy_dir = str(rec.get("copy_dir") or "")
    if not copy_dir:
        return False
    stopped = _terminate(pid, copy_dir, grace) if pid > 0 else False
    if not stopped and pid > 0 and _alive(pid):
        # The pid was recycled (or the record was edited): that process is not ours to signal.
        log.warning(
            "not signalling pid %s: it is not the Prometheus serving %s (cmdline: %s); removing the record",
            pid, copy_dir, " ".join(_proc_args(pid))[:200] or "unreadable",
        )  # fmt: skip
    _remove_entry(copy_dir)
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


def find_executable(name: str) -> str | None:
    """Return the absolute path of `name` (a path, or a command looked up on PATH) if it can be run."""
    if os.sep in name:
        path = os.path.abspath(name)
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which(name)


def _find_prometheus(prometheus_bin: str) -> str:
    found = find_executable(prometheus_bin)
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
    delay = 0.05
    with PrometheusClient(url, timeout=1.0, retries=1) as client:
        while proc.poll() is None and time.monotonic() < deadline:
            if client.ready() and _serves_dir(client, data_dir):
                return True
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)
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
                cwd=entry, start_new_session=True, close_fds=True,
            )  # fmt: skip
        with _CHILDREN_LOCK:
            _CHILDREN[proc.pid] = proc
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
        _reap_children()
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


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _time_range(blocks: list[tuple[str, int, int]], head: Mapping[str, Any]) -> tuple[float, float] | None:
    # Block maxTime is exclusive (last sample + 1 ms for backfilled blocks, a 2 h boundary otherwise).
    spans = [(mint, maxt - 1) for _u, mint, maxt in blocks]
    try:
        if int(head.get("numSeries", 0)) > 0:
            hmin, hmax = int(head["minTime"]), int(head["maxTime"])
            # An empty head reports the int64 sentinels (or min == max == the newest block's maxTime).
            if _INT64_MIN < hmin <= hmax < _INT64_MAX:
                spans.append((hmin, hmax))
    except (KeyError, TypeError, ValueError):
        pass
    if not spans:
        return None
    return (min(s[0] for s in spans) / 1000.0, max(s[1] for s in spans) / 1000.0)


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

    _remove_entry(entry)  # a stale copy of a dead server
    entry.mkdir(parents=True)
    (entry / _MARKER).write_text(f"Stepwise private copy of {src}; deleted when its server stops.\n")
    pid = 0
    try:
        copied = copy_tsdb(src, entry / "data", inv, include_head=not blocks_only)
        vanished = copied.vanished
        (entry / _CONFIG).write_text(_VIEW_CONFIG)
        pid, port, cmd = _start(binary, entry, src, port, ready_timeout)
        url = f"http://127.0.0.1:{port}"
        try:
            with PrometheusClient(url, timeout=10.0, retries=2, backoff=0.1) as client:
                head = client.tsdb_status().get("headStats") or {}
        except PrometheusError as exc:
            log.warning("%s: no head statistics (%s); time_range covers the blocks only", url, exc)
            head = {}
        kept = [b for b in inv.blocks if b[0] not in vanished]
        notes = []
        if blocks_only:
            newest = max((b[2] for b in kept), default=None)
            since = f"after {_iso(newest / 1000.0)}" if newest is not None else "of the live head"
            who = f"pid {holder}" if holder and holder > 0 else "an unknown process"
            notes.append(
                f"wal/ and chunks_head/ not copied because a live Prometheus ({who}) holds {src}: "
                f"data {since} (the live head, up to ~3 h) are missing; query the live server for them"
            )
        if vanished:
            notes.append(f"{len(vanished)} block(s) were compacted away by the live server while copying")
        if inv.unreadable:
            notes.append(f"skipped {len(inv.unreadable)} block(s) without a readable meta.json")
        if copied.symlinks:
            shown = ", ".join(copied.symlinks[:5]) + (" ..." if len(copied.symlinks) > 5 else "")
            notes.append(
                f"skipped {len(copied.symlinks)} symlink(s) inside the TSDB, never followed: {shown}"
            )
            log.warning("%s: symlinks skipped (never followed): %s", src, shown)
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
            "note": "; ".join(notes),
            "time_range": _time_range(kept, head),
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
) -> ServedTSDB:
    """Return the server recorded for `tsdb_dir` in work_root if it is alive and ready, else start one.

    Safe across processes (web server and Celery workers): the entry's fcntl lock serializes the
    check-and-start, so two callers never start two servers for one TSDB. Touches last_used, which
    stop_idle() reads. A blocks-only server is replaced by a full one once the job's lock is gone.
    """
    src = _source_dir(tsdb_dir)
    entry = _entry_dir(work_root, src)
    _reap_children()
    with _entry_lock(entry):
        rec = _read_record(entry)
        if rec and _is_ours(int(rec.get("pid") or 0), entry):
            stale_view = bool(rec.get("blocks_only")) and tsdb_lock_holder(src) is None
            if _answers_ready(str(rec["url"]), within=2.0) and not stale_view:
                rec["last_used"] = time.time()
                _write_record(entry, rec)
                return _served_from(rec)
            _stop_locked(rec)
        elif rec:
            _remove_entry(entry)  # the recorded server died (or its pid was reused)
        return _serve_locked(
            src, entry, prometheus_bin=prometheus_bin, allow_blocks_only=allow_blocks_only,
            ready_timeout=ready_timeout, port=port,
        )  # fmt: skip


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
    """Return the pids of the servers stopped because ensure_served() last used them idle_seconds ago.

    An entry whose lock is held (someone is starting or reusing it right now) is skipped.
    """
    _reap_children()
    stopped = []
    now = time.time()
    for entry in _entries(work_root):
        try:
            with _entry_lock(entry, blocking=False):
                rec = _read_record(entry)
                if rec is None or now - float(rec.get("last_used", 0)) < idle_seconds:
                    continue
                if _stop_locked(rec):
                    stopped.append(int(rec["pid"]))
        except BlockingIOError:
            continue
    return stopped


def reap_leftovers(work_root: str | os.PathLike[str]) -> list[int]:
    """Return the pids stopped while clearing every server and copy recorded in work_root.

    Meant for Stepwise's start-up, before anything serves: each recorded server is stopped if its
    cmdline still names its copy (never another pid), then every entry directory is deleted.
    """
    _reap_children()
    stopped = []
    for entry in _entries(work_root):
        with _entry_lock(entry):
            rec = _read_record(entry)
            if rec is not None and _stop_locked(rec):
                stopped.append(int(rec["pid"]))
            _remove_entry(entry)
    return stopped


def list_served(work_root: str | os.PathLike[str]) -> list[ServedTSDB]:
    """Return the servers recorded in work_root whose process is alive and still serves its copy."""
    _reap_children()
    out = []
    for entry in _entries(work_root):
        rec = _read_record(entry)
        if rec is not None and _is_ours(int(rec.get("pid") or 0), entry):
            out.append(_served_from(rec))
    return out
