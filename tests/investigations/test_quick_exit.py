"""`exit_now`: the process ends after what a normal exit does that matters, without the interpreter's teardown."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_SCRIPT = """
import atexit, sys, threading, time
from pathlib import Path
from investigations.management.quick_exit import exit_now

out = Path(sys.argv[1])

class Torn:
    def __del__(self):
        out.with_suffix(".teardown").write_text("freed")

kept = Torn()  # held to the end: the interpreter's teardown would free it
atexit.register(lambda: out.with_suffix(".atexit").write_text("ran"))

def late():
    time.sleep(0.3)
    out.with_suffix(".thread").write_text("done")

threading.Thread(target=late).start()
sys.stdout.write("x" * 100_000)  # buffered, no newline
exit_now(0)
"""


def test_it_joins_threads_runs_atexit_flushes_and_skips_the_teardown(tmp_path):
    out = tmp_path / "marks"
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(out)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "x" * 100_000
    assert out.with_suffix(".thread").read_text() == "done"
    assert out.with_suffix(".atexit").read_text() == "ran"
    assert not out.with_suffix(".teardown").exists()
