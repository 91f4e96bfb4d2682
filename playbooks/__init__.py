"""Stepwise's domain logic in plain Python: Prometheus access, log triage, metric profiles, playbooks, diagnosis.

The public names below are imported lazily (on first use), so that `import playbooks.prometheus` in a web
request does not load numpy and the playbook definitions.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "DiagnosisError": "diagnose",
    "PlannedQuery": "diagnose",
    "PlaybookOutput": "diagnose",
    "PlaybookPlan": "diagnose",
    "SourceInfo": "diagnose",
    "decide": "diagnose",
    "discover_source": "diagnose",
    "execute": "diagnose",
    "plan": "diagnose",
    "run_diagnosis": "diagnose",
    "PlaybookError": "loader",
    "load_playbooks": "loader",
    "GPU_MODELS": "gpus",
    "choose_gpu_model": "gpus",
    "PROFILES": "profiles",
    "detect_profile": "profiles",
    "resolve_profile": "profiles",
    "PrometheusClient": "prometheus",
    "PrometheusError": "prometheus",
    "triage_job": "triage",
    "triage_log": "triage",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'playbooks' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
