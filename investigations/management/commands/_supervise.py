"""Keep `rundemo`'s Celery worker running: restart it when it dies, at most a few times a minute.

Only the worker is supervised; a dead web server still stops `rundemo` (see its `_serve`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0


def describe_exit(returncode: int) -> str:
    """Return 'exited with status N' or 'was killed by SIGNAME' for a Popen return code."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with status {returncode}"


def _group_alive(pgid: int) -> bool:
    """Return True if a running (not zombie) process is in process group `pgid`, from /proc."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def kill_orphans(pgid: int) -> None:
    """SIGKILL what is left of a dead worker's process group (its pool processes), if anything.

    The group was created by `rundemo` (the worker led its own session). While any member lives, the
    kernel keeps the number `pgid` allocated, so it cannot name another process's group.
    """
    if _group_alive(pgid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


class WorkerSupervisor:
    """Start the worker with `spawn`; `check()` restarts it when it has died, with a rate limit.

    At most `max_restarts` restarts happen in any `window_s` seconds; beyond that the worker stays
    down (pages are still served, tasks wait in the broker) until the oldest restart leaves the window.
    """

    def __init__(
        self,
        spawn: Callable[[], subprocess.Popen[bytes]],
        write: Callable[[str], None],
        *,
        max_restarts: int = MAX_RESTARTS,
        window_s: float = RESTART_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._spawn = spawn
        self._write = write
        self._max = max_restarts
        self._window = window_s
        self._clock = clock
        self._restarts: deque[float] = deque()
        self._down_reported = False
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = self._spawn()

    def check(self) -> None:
        """Notice a dead worker and restart it, unless it has been restarted too often lately."""
        if self.proc is not None:
            if self.proc.poll() is None:
                return
            dead, self.proc = self.proc, None
            self._write(f"The Celery worker (pid {dead.pid}) {describe_exit(dead.returncode)}.")
            kill_orphans(dead.pid)
        now = self._clock()
        while self._restarts and now - self._restarts[0] >= self._window:
            self._restarts.popleft()
        if len(self._restarts) >= self._max:
            if not self._down_reported:
                retry = self._window - (now - self._restarts[0])
                self._write(
                    f"The Celery worker died {len(self._restarts)} times within {self._window:.0f} s: "
                    f"it is down, pages are still served; next restart in {retry:.0f} s."
                )
                self._down_reported = True
            return
        self.proc = self._spawn()
        self._restarts.append(now)
        self._down_reported = False
        self._write(f"Restarted the Celery worker (pid {self.proc.pid}).")
