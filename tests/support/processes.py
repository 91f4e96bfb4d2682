"""Find the Prometheus servers a command started, by the work-root prefix in their command line."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from pathlib import Path


def prometheus_pids_under(work_root_prefix: str) -> list[int]:
    """Return the pids of Prometheus processes serving a copy under a work root named with that prefix."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"prometheus") and any(work_root_prefix.encode() in a for a in cmd):
            pids.append(int(entry.name))
    return pids


def private_work_roots(work_root_prefix: str) -> tuple[dict[str, str], str]:
    """An environment whose TMPDIR is a fresh folder, and the prefix its command's work roots will carry.

    A command run with that environment makes its work roots (`tempfile.mkdtemp`) in that folder, so a test
    counts only the servers its own commands started, not those of a `diagnose` someone else runs meanwhile.
    The folder is deleted when the test process exits.
    """
    folder = tempfile.mkdtemp(prefix="stepwise-cmdtest-")
    atexit.register(shutil.rmtree, folder, True)  # the commands remove their work roots in it; then it goes
    return os.environ | {"TMPDIR": folder}, f"{folder}/{work_root_prefix}"


def signal_and_wait(proc: subprocess.Popen, sig: int, timeout: float = 60.0) -> None:
    """Send `sig` to `proc` and wait for it to end; SIGKILL it if it has not within `timeout` s."""
    try:
        os.kill(proc.pid, sig)
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
