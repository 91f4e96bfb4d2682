"""A per-source budget of concurrent queries, shared by every process on the host.

A live job's Prometheus runs on its head node and serves the training job too: however many users
open its timeline and however many workers diagnose it, at most `slots` queries run on it at a time.
The others queue, in arrival order, and learn how long they waited (the page says so).

How: each source has a folder of `slots` lock files under a shared root (the data directory, which
the web server and the workers share). A query holds an exclusive `flock` on one slot file while it
runs. A query that finds every slot taken first takes the source's `queue` lock (waiters line up on
it in the kernel), then polls the slots until one frees. flock locks are released by the kernel
when a process dies, so a crashed worker never leaks a slot.

Usage::

    budget = SourceBudget(root, "http://127.0.0.1:19190", slots=4)
    with budget.slot() as waited:   # seconds spent queued, 0.0 when a slot was free
        ...                         # send the query
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import PlaybooksError

__all__ = ["BudgetTimeout", "SourceBudget"]

#: How often a queued query looks for a free slot.
POLL_S = 0.02


class BudgetTimeout(PlaybooksError):
    """Every slot of the source stayed taken for longer than the wait allowed."""


class SourceBudget:
    """At most `slots` concurrent queries on one source, across threads and processes.

    Attributes:
        source: the source's name (its base URL).
        slots: queries allowed at a time.
        folder: where its lock files live.
        max_wait: seconds a query may queue before BudgetTimeout.
    """

    def __init__(self, root: str | os.PathLike[str], source: str, slots: int, *, max_wait: float = 300.0):
        if slots < 1:
            raise ValueError(f"a budget needs at least one slot, got {slots}")
        self.source = source
        self.slots = int(slots)
        self.max_wait = float(max_wait)
        digest = hashlib.sha256(source.encode()).hexdigest()[:24]
        self.folder = Path(root) / digest
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)

    def __repr__(self) -> str:
        return f"SourceBudget({self.source!r}, slots={self.slots})"

    def _open(self, name: str) -> int:
        return os.open(self.folder / name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def _try_slots(self) -> int | None:
        """Return the descriptor of a slot file now locked by us, or None when all are taken."""
        for i in range(self.slots):
            fd = self._open(f"slot-{i}")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return fd
        return None

    def queued(self) -> bool:
        """Return True if a query is waiting for a slot of this source right now."""
        fd = self._open("queue")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing drops our lock, if we took it
        return False

    def _wait_for_slot(self, started: float) -> int:
        queue = self._open("queue")
        try:
            deadline = started + self.max_wait
            # Line up behind earlier waiters: only the head of the queue polls the slots.
            while True:
                try:
                    fcntl.flock(queue, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise BudgetTimeout(self._timeout_message()) from None
                    time.sleep(POLL_S)
            while (fd := self._try_slots()) is None:
                if time.monotonic() > deadline:
                    raise BudgetTimeout(self._timeout_message())
                time.sleep(POLL_S)
            return fd
        finally:
            os.close(queue)

    def _timeout_message(self) -> str:
        return (
            f"{self.source} already runs {self.slots} queries (its budget) and none finished within "
            f"{self.max_wait:g} s"
        )

    @contextlib.contextmanager
    def slot(self) -> Iterator[float]:
        """Hold one slot for the duration of the block; yield the seconds spent queued for it."""
        started = time.monotonic()
        fd = self._try_slots()
        waited = 0.0
        if fd is None:
            fd = self._wait_for_slot(started)
            waited = time.monotonic() - started
        try:
            yield waited
        finally:
            os.close(fd)  # releases the flock
