"""The root of every exception `playbooks/` raises on purpose.

Each module keeps its own base exception (`PrometheusError`, `DiagnosisError`, `TunnelError`, ...), named
for what failed; all of them derive from `PlaybooksError`, so a caller that only needs to tell "the
domain said no" from a bug catches this one class.
"""

from __future__ import annotations

__all__ = ["PlaybooksError"]


class PlaybooksError(Exception):
    """A failure `playbooks/` reports on purpose: bad input, a source that cannot answer, a refused action."""
