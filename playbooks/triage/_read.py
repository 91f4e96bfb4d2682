"""Reading a log as lines: fast block decoding, binary and over-long lines skipped and reported."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from ._model import MAX_LINE, Triage

# Control bytes other than tab, newline, vertical tab, form feed and carriage return: a line with more
# than 8 of them in its first 256 bytes (or any NUL) is binary.
_CTRL = re.compile(rb"[\x00-\x08\x0e-\x1f]")
_NOT_CTRL = bytes(b for b in range(256) if not (b < 9 or 13 < b < 32))  # bytes.translate deletes these
#: Bytes read at a time; a block is decoded and split at C speed unless it holds control bytes or bad UTF-8.
BLOCK = 1 << 20


@dataclass
class _Reading:
    """What reading a log found wrong, for `Triage.unreadable`."""

    lines: int = 0
    binary: int = 0
    first_binary: int | None = None
    cut: int = 0
    bad_utf8: int = 0
    ends_with_newline: bool = True


def _blocks(fh: IO[bytes], rd: _Reading) -> Iterator[list[bytes]]:
    """Yield the log's lines (without their newline) in blocks of about BLOCK bytes.

    A line longer than MAX_LINE is cut to its first MAX_LINE + 1 bytes and the rest skipped without
    being held; a last line without a newline is yielded as it is (`rd.ends_with_newline` False).
    """
    while True:
        block = fh.read(BLOCK)
        if not block:
            return
        if not block.endswith(b"\n"):
            block += fh.readline(MAX_LINE + 1)  # finish the last line, bounded
        lines = block.split(b"\n")
        tail = lines.pop()  # b"" when the block ends with a newline
        if tail:
            if len(tail) > MAX_LINE:
                while True:  # skip the rest of this over-long line without holding it
                    more = fh.readline(MAX_LINE)
                    if not more or more.endswith(b"\n"):
                        rd.ends_with_newline = bool(more)
                        break
            else:
                rd.ends_with_newline = False  # the end of the file, in the middle of a line
            lines.append(tail)
        if any(len(line) > MAX_LINE for line in lines):
            rd.cut += sum(len(line) > MAX_LINE for line in lines)
            lines = [line[: MAX_LINE + 1] for line in lines]
        yield lines


def _is_binary(raw: bytes) -> bool:
    return b"\x00" in raw or (_CTRL.search(raw, 0, 256) is not None and len(_CTRL.findall(raw, 0, 256)) > 8)


def _iter_lines(fh: IO[bytes], out: Triage) -> Iterator[tuple[int, str]]:
    """Yield (line number, decoded line); record binary or over-long content in `out.unreadable`.

    A block without control bytes and valid as UTF-8 (nearly every block of a real log) is decoded and
    split as a whole; only other blocks are looked at line by line.
    """
    rd = _Reading()
    n = 0
    for lines in _blocks(fh, rd):
        joined = b"\n".join(lines)
        text = None
        if not joined.translate(None, _NOT_CTRL):
            try:
                text = joined.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        if text is not None:
            split = text.split("\n")
            if "\r" in text:
                split = [line.rstrip("\r") for line in split]
            yield from zip(range(n + 1, n + 1 + len(split)), split, strict=True)
            n += len(split)
            continue
        for raw in lines:
            n += 1
            if _is_binary(raw):
                rd.binary += 1
                rd.first_binary = rd.first_binary or n
                continue
            try:
                decoded = raw.decode("utf-8")
            except UnicodeDecodeError:
                rd.bad_utf8 += 1
                decoded = raw.decode("utf-8", errors="replace")
            yield n, decoded.rstrip("\r\n")
    if rd.binary:
        out.unreadable.append(f"{rd.binary} line(s) of binary data skipped (first at line {rd.first_binary})")
    if rd.cut:
        out.unreadable.append(f"{rd.cut} line(s) longer than {MAX_LINE} bytes cut")
    if rd.bad_utf8:
        out.unreadable.append(f"{rd.bad_utf8} line(s) not valid UTF-8 (decoded with replacement characters)")
    if not rd.ends_with_newline:
        out.unreadable.append(f"the log ends in the middle of line {n} (truncated file?)")
    out.details["lines"] = n
