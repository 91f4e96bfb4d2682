"""Celery tasks, one module per noun. Celery's autodiscovery imports this package, so every task module is
imported here."""

from __future__ import annotations

import stepwise.celery  # noqa: F401 (the app every shared_task below binds to; see stepwise/__init__.py)

from .comparison import comparison_execute_task  # noqa: F401 (registers it)
from .diagnosis import diagnosis_decide_task, diagnosis_plan_task, playbook_execute_task  # noqa: F401
from .discovery import datasource_discover_task  # noqa: F401 (registers it)
from .queryruns import queryrun_execute_task
from .timeline import timeline_warm_task  # noqa: F401 (registers it)
from .triage import job_triage_task
from .tunnels import tunnel_check_task, tunnel_open_task, tunnels_prune_task  # noqa: F401 (registers them)
from .watchdog import dead_runs_watchdog_task  # noqa: F401 (registers it and the heartbeat signals)

__all__ = ["job_triage_task", "queryrun_execute_task"]
