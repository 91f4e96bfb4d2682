"""Browse the job roots: the folders under STEPWISE_JOB_ROOTS that the directory picker lists, each marked
as a job directory when it holds a TSDB (`prometheus/`) or a log. Never lists anything outside the roots.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from .datasources import _job_roots

logger = logging.getLogger(__name__)

#: A folder listing shows at most this many entries (a root with 10,000 jobs stays a usable page).
BROWSE_MAX_ENTRIES = 500


@dataclass(frozen=True)
class FolderEntry:
    """One folder of a listing.

    Attributes:
        name: its name in the listed folder.
        path: its resolved absolute path (inside a root).
        has_tsdb: it holds a prometheus/ folder.
        has_log: it has a log (job.log, the log link, or a sibling NAME.log / NAME.out).
    """

    name: str
    path: str
    has_tsdb: bool = False
    has_log: bool = False

    @property
    def is_job(self) -> bool:
        return self.has_tsdb or self.has_log


@dataclass(frozen=True)
class FolderListing:
    """What the directory browser shows.

    Attributes:
        path: the listed folder, or "" for the list of roots.
        parent: the folder one level up while still inside a root, else "" (back to the roots).
        entries: sub-folders, sorted by name.
        truncated: more entries exist than BROWSE_MAX_ENTRIES.
        error: why the asked-for path was refused ("" when it was not); the roots are listed instead.
        current: the listed folder's own entry (is it a job directory?), None for the roots.
    """

    path: str
    parent: str
    entries: list[FolderEntry] = field(default_factory=list)
    truncated: bool = False
    error: str = ""
    current: FolderEntry | None = None


def job_root_of(path: str) -> Path | None:
    """Return the job root that `path` is itself (symlinks resolved), or None: typing the root where a
    job directory belongs is a common slip, answered with the browser open on that root."""
    text = path.strip()
    if not text.startswith("/") or ".." in Path(text).parts:
        return None
    resolved = Path(text).resolve()
    return next((root for root in _job_roots() if resolved == root), None)


def job_dir_browse(path: str = "") -> FolderListing:
    """Return the sub-folders of `path` (or the job roots when empty), never anything outside the roots.

    Paths with `..` are refused outright; symlinks are resolved and a folder leading outside the
    roots is refused (when asked for) or left out (when listed).
    """
    roots = _job_roots()
    path = path.strip()
    if not path:
        return FolderListing(path="", parent="", entries=[_entry(r, str(r)) for r in roots if r.is_dir()])
    if ".." in Path(path).parts:
        return _refused(roots, f"{path} contains '..': give a path inside a job root.")
    candidate = Path(path)
    if not candidate.is_absolute():
        return _refused(roots, f"{path} is not an absolute path.")
    resolved = candidate.resolve()
    if not any(resolved == r or resolved.is_relative_to(r) for r in roots):
        return _refused(roots, f"{path} is outside the allowed job roots.")
    if not resolved.is_dir():
        return _refused(roots, f"{path} is not a folder.")
    parent = "" if resolved in roots else str(resolved.parent)
    entries, truncated = _children(resolved, roots)
    current = None
    if resolved not in roots:
        logs = {f"{resolved.name}{ext}" for ext in (".log", ".out")}
        siblings = {name for name in logs if (resolved.parent / name).is_file()}
        current = _entry(resolved, resolved.name, siblings)
    return FolderListing(
        path=str(resolved), parent=parent, entries=entries, truncated=truncated, current=current
    )


def _refused(roots: list[Path], error: str) -> FolderListing:
    return FolderListing(
        path="", parent="", entries=[_entry(r, str(r)) for r in roots if r.is_dir()], error=error
    )


def _children(folder: Path, roots: list[Path]) -> tuple[list[FolderEntry], bool]:
    try:
        names = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    except OSError as exc:
        logger.warning("cannot list %s: %s", folder, exc)
        return [], False
    logs = {n for n in names if n.endswith((".log", ".out"))}
    entries: list[FolderEntry] = []
    for name in names:
        child = folder / name
        try:
            if not child.is_dir():
                continue
            resolved = child.resolve()
        except OSError:
            continue
        if not any(resolved == r or resolved.is_relative_to(r) for r in roots):
            continue  # a symlink leading out of the roots is not shown
        entries.append(_entry(child, name, logs))
        if len(entries) >= BROWSE_MAX_ENTRIES:
            return entries, True
    return entries, False


def _entry(folder: Path, name: str, sibling_logs: set[str] | None = None) -> FolderEntry:
    resolved = folder.resolve()
    try:
        has_tsdb = (resolved / "prometheus").is_dir()
        has_log = (
            (resolved / "job.log").is_file()
            or (resolved / "log").is_file()
            or bool(sibling_logs and ({f"{folder.name}.log", f"{folder.name}.out"} & sibling_logs))
        )
    except OSError:
        has_tsdb = has_log = False
    return FolderEntry(name=name, path=str(resolved), has_tsdb=has_tsdb, has_log=has_log)
