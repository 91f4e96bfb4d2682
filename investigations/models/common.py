"""What every model module shares: the status of background work, history annotations, run progress."""

from __future__ import annotations

from typing import Any

from django.db import models


class TaskStatus(models.TextChoices):
    """The life of any background piece of work whose row a worker claims."""

    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class HistoryNote:
    """What django-simple-history reads from a model instance when it is saved: who changed it (the
    historical row's history_user) and why (history_change_reason). Set before save(); annotations only."""

    _history_user: Any
    _change_reason: str


class RunProgress:
    """Progress of a run row with `status`, `FINISHED`, `progress_done` and `progress_total`."""

    status: str
    FINISHED: tuple[str, ...]
    progress_done: int
    progress_total: int

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def progress_pct(self) -> int:
        if not self.progress_total:
            return 100 if self.is_finished else 0
        return round(100 * self.progress_done / self.progress_total)
