"""Find a job's directory under the job roots from its JOB_ID (plain Python, no Django).

The seed system keys jobs by JOB_ID, never by path: a job directory is named `<JOB_ID>-<JOB_NAME>` when the
job starts, and `tgs_tagger.py` renames finished jobs (directory and log) to a longer stem. The user woken
by an alert knows the job id, not the folder. So a job id is looked up two ways, directly under each root:

1. a directory named `<JOB_ID>` or `<JOB_ID>-...` (the JOB_ID prefix, whatever the renamer appended);
2. a job directory whose log (`DIR.log` / `DIR.out` beside it, `DIR/job.log` or `DIR/log` inside) has the
   header line `JOB_ID=<id>` (or legacy `SLURM_JOB_ID=<id>`) within its first bytes: directories named
   otherwise (a test harness, a copied job) are still found.

Only directories that hold a `prometheus/` TSDB count, and only logs that resolve inside their root are
read (a `log` symlink pointing elsewhere is skipped). Listing is bounded: each root is listed once and at
most `max_logs` log headers are read, so a root with thousands of jobs answers in well under a second.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from .confine import open_inside
from .errors import PlaybooksError

#: JOB_ID forms: Slurm numeric, Kubernetes `k8s-YYYYMMDD-HHMMSS-<4hex>`, local `local_YYYYMMDD_HHMMSS_<4hex>`,
#: and whatever else a scheduler uses, limited to characters that are safe in a path.
JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")
HEADER_BYTES = 16384
_LOG_EXTS = (".log", ".out")


class JobIdError(PlaybooksError, ValueError):
    """The text is not a job id (empty, too long, or characters a JOB_ID never has)."""


def looks_like_job_id(text: str) -> bool:
    """Return True if `text` is a job id rather than a path (no slash, only JOB_ID characters)."""
    return bool(JOB_ID_RE.match(text.strip()))


def find_job_dirs(
    roots: Iterable[str | os.PathLike[str]], job_id: str, *, max_logs: int = 5000
) -> list[Path]:
    """Return the job directories (with a prometheus/ folder) under `roots` that belong to `job_id`.

    Directories named by the JOB_ID prefix come first, then those whose log header names it; each list is
    sorted by name, without duplicates. Raises JobIdError for text that cannot be a job id.
    """
    job_id = job_id.strip()
    if not JOB_ID_RE.match(job_id):
        raise JobIdError(
            f"{job_id!r} is not a job id: use the JOB_ID of the log header (81234, k8s-20260301-120000-ab12, ...)"
            " or an absolute path"
        )
    by_name: list[Path] = []
    by_header: list[Path] = []
    budget = [max_logs]
    for root in roots:
        entries = _listing(Path(root))
        if entries is None:
            continue
        dirs, files = entries
        for d in dirs:
            if (d.name == job_id or d.name.startswith(job_id + "-")) and _has_tsdb(d):
                by_name.append(d)
        named = set(by_name)
        real_root = Path(root).resolve()
        for d in dirs:
            if d in named or not _has_tsdb(d):
                continue
            if any(_header_names(log, job_id, budget, real_root) for log in _logs_of(d, files)):
                by_header.append(d)
    return list(dict.fromkeys(sorted(by_name) + sorted(by_header)))  # in order, each once


def _listing(root: Path) -> tuple[list[Path], dict[str, Path]] | None:
    try:
        with os.scandir(root) as it:
            dirs, files = [], {}
            for e in it:
                if e.name.startswith("."):
                    continue
                if e.is_dir(follow_symlinks=False):
                    dirs.append(Path(e.path))
                elif e.is_file() and e.name.endswith(_LOG_EXTS):
                    files[e.name] = Path(e.path)
            return sorted(dirs), files
    except OSError:
        return None


def _has_tsdb(d: Path) -> bool:
    return (d / "prometheus").is_dir()


def _logs_of(d: Path, siblings: dict[str, Path]) -> Sequence[Path]:
    found = [siblings[d.name + ext] for ext in _LOG_EXTS if d.name + ext in siblings]
    found += [p for p in (d / "job.log", d / "log") if p.is_file()]
    return found


def _header_names(log: Path, job_id: str, budget: list[int], root: Path) -> bool:
    if budget[0] <= 0:
        return False
    budget[0] -= 1
    try:
        # A log symlink leading out of the job root is never read (checked on the file opened).
        with open_inside(log, [root]) as fh:
            head = fh.read(HEADER_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return False
    pattern = re.compile(rf"^(?:[^\n]*\s)?(?:SLURM_)?JOB_ID={re.escape(job_id)}\s*$", re.MULTILINE)
    return bool(pattern.search(head))
