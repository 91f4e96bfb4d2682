"""Log triage of the seed system (seed-system.md §2-3): status, failure classes, progress, config.

Streams the log line by line (bounded memory for a 1 GB log), survives truncated files and binary
garbage, and never raises on bad content: what it could not read is listed in `unreadable`.

Modules: `_model` (the result and the class vocabulary), `_patterns` (signatures and line grammar),
`_read` (bytes to lines), `_scan` and `_state` (the line-by-line scan), `_events` (host events: node
failures, kills, Xids, NCCL timeouts), `_finish` (status, progress, computed classes), `_api` (the entry
points).
"""

from ._api import find_job_log, triage_job, triage_log
from ._events import DRIVER_XIDS, HW_XIDS
from ._gpu_bus import bus_key
from ._model import CLASS_ORDER, MAX_LINE, MAX_MATCHES_PER_CLASS, Match, Triage, TriageError
from ._patterns import HARMLESS, SIGNATURES, expand_nodelist
from ._read import BLOCK

__all__ = [
    "BLOCK",
    "CLASS_ORDER",
    "HARMLESS",
    "DRIVER_XIDS",
    "HW_XIDS",
    "MAX_LINE",
    "MAX_MATCHES_PER_CLASS",
    "SIGNATURES",
    "Match",
    "Triage",
    "TriageError",
    "bus_key",
    "expand_nodelist",
    "find_job_log",
    "triage_job",
    "triage_log",
]
