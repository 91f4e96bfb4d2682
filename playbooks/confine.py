"""Open files only inside a set of root folders, checked on what was actually opened (plain Python).

Checking `Path.resolve()` and then opening the path leaves a window in which a component can be swapped
for a symlink. `open_inside` opens first and then asks the kernel which file the descriptor refers to
(`/proc/self/fd/N`), so the check holds for the file that is read, whatever happened to the names.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO

from .errors import PlaybooksError

_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK


class OutsideRoots(PlaybooksError, PermissionError):
    """The path leads (through a symlink or `..`) outside every allowed root."""


def resolved_roots(roots: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Return the roots with their own symlinks resolved (roots themselves are trusted configuration)."""
    return [Path(os.path.realpath(r)) for r in roots]


def is_inside(path: str | os.PathLike[str], roots: Sequence[Path]) -> bool:
    """Return True if `path`, with every symlink and `..` resolved, lies strictly inside one of `roots`."""
    real = Path(os.path.realpath(path))
    return any(real != root and real.is_relative_to(root) for root in roots)


def _fd_path(fd: int) -> Path:
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:  # no /proc: fall back to the resolved name (still refused when it leads out)
        return Path("")


def open_inside(path: str | os.PathLike[str], roots: Sequence[Path]) -> BinaryIO:
    """Return `path` opened for binary reading if the opened regular file lies inside one of `roots`.

    Raises OutsideRoots when it does not (a symlink or `..` leading out), IsADirectoryError for a folder,
    and the usual OSError (FileNotFoundError, PermissionError...) when it cannot be opened.
    """
    roots = list(roots)
    if not is_inside(path, roots):
        raise OutsideRoots(errno.EACCES, f"{path} leads outside the job roots", str(path))
    fd = os.open(path, _FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(21, "Is a directory", str(path))
        if not stat.S_ISREG(mode):
            raise OutsideRoots(errno.EACCES, f"{path} is not a regular file", str(path))
        opened = _fd_path(fd)
        if opened != Path("") and not any(opened != r and opened.is_relative_to(r) for r in roots):
            raise OutsideRoots(errno.EACCES, f"{path} leads outside the job roots", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
