"""Investigations, the jobs they look at, where each job's metrics live, and the runs against them.

One module per concern; every model is importable from here (`investigations.models.X`), which is where
Django and the rest of the code look for them.

- `common`: the status of background work, history annotations, run progress.
- `jobs`: Investigation, Job (and its TriageStatus), InvestigationJob.
- `sources`: DataSource, DataSourceCredential.
- `runs`: QueryRun, QueryResult, DiagnosisRun, PlaybookExecution, RunHeartbeat.
- `evidence`: Finding, PinnedChart, TimelineNote.

Times are stored as aware UTC datetimes; query windows inside JSON are unix seconds (float), as in
the diagnosis contract.
"""

from .common import HistoryNote, RunProgress, TaskStatus
from .evidence import Finding, PinnedChart, TimelineNote
from .jobs import TRIAGE_FINISHED, TRIAGE_PENDING, Investigation, InvestigationJob, Job, TriageStatus
from .runs import DiagnosisRun, PlaybookExecution, QueryResult, QueryRun, RunHeartbeat
from .sources import DataSource, DataSourceCredential

__all__ = [
    "TRIAGE_FINISHED",
    "TRIAGE_PENDING",
    "DataSource",
    "DataSourceCredential",
    "DiagnosisRun",
    "Finding",
    "HistoryNote",
    "Investigation",
    "InvestigationJob",
    "Job",
    "PinnedChart",
    "PlaybookExecution",
    "QueryResult",
    "QueryRun",
    "RunHeartbeat",
    "RunProgress",
    "TaskStatus",
    "TimelineNote",
    "TriageStatus",
]
