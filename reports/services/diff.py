"""Line diffs for people: a section's history and the machine's newer text."""

from __future__ import annotations

import difflib


def line_diff(old: str, new: str) -> list[tuple[str, str]]:
    """Return [(kind, line)] with kind "+", "-" or " " (context), from a unified diff of the two texts."""
    rows = []
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=2):
        if line.startswith(("---", "+++", "@@")):
            continue
        rows.append((line[:1] or " ", line[1:]))
    return rows
