"""End a command-line process once its result is written, without the interpreter's teardown.

At exit the interpreter frees every object the process still holds, one by one: after `manage.py diagnose`
(the queries' series, the grids, the triage) that is 0.1-0.2 s of CPU on the command's critical path,
spent on memory the kernel takes back at once anyway. `exit_now` does what a normal exit does that matters,
in the same order (the threads that are not daemons are joined, the `atexit` handlers run: the early-served
TSDB copies are stopped and deleted, the logs flushed), flushes the standard streams and ends the process
with `os._exit`.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

#: seconds to wait for each thread still running (the interpreter would wait for ever); an idle thread-pool
#: worker left by a pool nobody shut down would never end by itself
JOIN_TIMEOUT = 10.0


def exit_now(status: int = 0) -> NoReturn:
    """Join the non-daemon threads, run the atexit handlers, flush stdout and stderr, end with `status`."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(JOIN_TIMEOUT)
    atexit._run_exitfuncs()  # what the interpreter runs at exit (stdlib, undocumented but stable)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said
            status = status or 1
    os._exit(status)
