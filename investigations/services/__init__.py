"""Glue between the database and playbooks/, one module per thing it does.

- `datasources`: job directories, the Prometheus allow-list, serving a job TSDB, clients, checks.
- `queryruns`: query runs ("Run sample queries"): validate, execute, record, finish, cancel.
- `runs`: the life of a diagnosis or comparison run (claim, requeue, finish, cancel, watch).
- `diagnosis`, `playbook_runs`, `decision`, `diagnosis_overview`, `query_slots`: a diagnosis, from its
  start to the region that shows it.
- `comparison`, `discovery`, `investigations`, `sources`, `tunnels`, `timeline*`, `panel_cache`,
  `deadruns`: what their names say.

The names below are re-exported so that `services.datasource_client` and the like keep one import.
"""

from __future__ import annotations

from .datasources import (
    TRANSIENT_ERRORS,
    DataSourceError,
    SourceBusy,
    _datasource_connect,
    _datasource_mark,
    _inside_job_roots,
    _job_roots,
    datasource_check,
    datasource_client,
    datasource_create,
    job_dir_validate,
    job_register,
    prometheus_url_check,
    served_copy_live,
    tsdb_views_prune,
)
from .queryruns import (
    QUERY_KINDS,
    SAMPLE_QUERIES,
    queries_validate,
    queryresults_record,
    queryrun_cancel,
    queryrun_claim,
    queryrun_create,
    queryrun_execute,
    queryrun_finish,
    queryrun_not_sent,
    queryrun_requeue,
)

__all__ = [
    "DataSourceError",
    "QUERY_KINDS",
    "SAMPLE_QUERIES",
    "SourceBusy",
    "TRANSIENT_ERRORS",
    "_datasource_connect",
    "_datasource_mark",
    "_inside_job_roots",
    "_job_roots",
    "datasource_check",
    "datasource_client",
    "datasource_create",
    "job_dir_validate",
    "job_register",
    "prometheus_url_check",
    "queries_validate",
    "queryresults_record",
    "queryrun_cancel",
    "queryrun_claim",
    "queryrun_create",
    "queryrun_execute",
    "queryrun_finish",
    "queryrun_not_sent",
    "queryrun_requeue",
    "served_copy_live",
    "tsdb_views_prune",
]
