"""What a served copy holds, for its record: the data's time range and what the copy lacks, in words."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from .prometheus import PrometheusClient, PrometheusError
from .tsdb_copy import CopyResult, Inventory

log = logging.getLogger("playbooks.tsdb_server")


_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _time_range(blocks: list[tuple[str, int, int]], head: Mapping[str, Any]) -> tuple[float, float] | None:
    # Block maxTime is exclusive (last sample + 1 ms for backfilled blocks, a 2 h boundary otherwise).
    spans = [(mint, maxt - 1) for _u, mint, maxt in blocks]
    try:
        if int(head.get("numSeries", 0)) > 0:
            hmin, hmax = int(head["minTime"]), int(head["maxTime"])
            # An empty head reports the int64 sentinels (or min == max == the newest block's maxTime).
            if _INT64_MIN < hmin <= hmax < _INT64_MAX:
                spans.append((hmin, hmax))
    except (KeyError, TypeError, ValueError):
        pass
    if not spans:
        return None
    return (min(s[0] for s in spans) / 1000.0, max(s[1] for s in spans) / 1000.0)


def _head_stats(url: str) -> Mapping[str, Any]:
    """The served copy's head statistics ({} if it does not say: the time range covers the blocks only)."""
    try:
        with PrometheusClient(url, timeout=10.0, retries=2, backoff=0.1) as client:
            head: Mapping[str, Any] = client.tsdb_status().get("headStats") or {}
            return head
    except PrometheusError as exc:
        log.warning("%s: no head statistics (%s); time_range covers the blocks only", url, exc)
        return {}


def _copy_notes(
    src: str, holder: int | None, kept: list[tuple[str, int, int]], inv: Inventory, copied: CopyResult
) -> list[str]:
    """What the copy of `src` lacks, in words: the live head, vanished or unreadable blocks, symlinks."""
    notes = []
    if holder is not None:
        newest = max((b[2] for b in kept), default=None)
        since = f"after {_iso(newest / 1000.0)}" if newest is not None else "of the live head"
        who = f"pid {holder}" if holder and holder > 0 else "an unknown process"
        notes.append(
            f"wal/ and chunks_head/ not copied because a live Prometheus ({who}) holds {src}: "
            f"data {since} (the live head, up to ~3 h) are missing; query the live server for them"
        )
    if copied.vanished:
        notes.append(f"{len(copied.vanished)} block(s) were compacted away by the live server while copying")
    if inv.unreadable:
        notes.append(f"skipped {len(inv.unreadable)} block(s) without a readable meta.json")
    if copied.symlinks:
        shown = ", ".join(copied.symlinks[:5]) + (" ..." if len(copied.symlinks) > 5 else "")
        notes.append(f"skipped {len(copied.symlinks)} symlink(s) inside the TSDB, never followed: {shown}")
        log.warning("%s: symlinks skipped (never followed): %s", src, shown)
    return notes
