"""Read playbook results: the job's timeline, the interpretation rules, and the decision (one import place).

1. `build_context` (`playbooks.context`) turns stored query results into grids and derives the job's own
   timeline from the data, with the triage as a hint.
2. `evaluate` (`playbooks.detectors`) applies every rule of every playbook that ran and returns findings.
3. `decide_diagnosis` (`playbooks.decision`) ranks the root-cause candidates and names the class, family,
   culprits, onset, confidence, chain and summary.
"""

from __future__ import annotations

from .context import Context, Finding, Timeline, build_context
from .decision import decide_diagnosis
from .detectors import evaluate

__all__ = ["Context", "Finding", "Timeline", "build_context", "decide_diagnosis", "evaluate"]
