"""The served-copy types: `ServedTSDB` (a server.json record) and the errors of serving a TSDB."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import PlaybooksError


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


class TSDBBusy(TSDBServerError):
    """The machine already serves its cap of TSDB copies and every one is in use: try again shortly.

    Attributes:
        serving: how many copies are serving.
    """

    def __init__(self, message: str, *, serving: int) -> None:
        super().__init__(message)
        self.serving = serving


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
