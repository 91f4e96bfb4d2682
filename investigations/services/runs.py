"""The life of a DiagnosisRun (a diagnosis or a comparison), whatever its kind."""

from __future__ import annotations

from django.utils import timezone

from ..models import DiagnosisRun, TaskStatus


def run_not_sent(run_id: int, error: str) -> None:
    """Mark a queued run failed because its first task could not be sent (the page shows `error`)."""
    DiagnosisRun.objects.filter(pk=run_id, status=TaskStatus.QUEUED).update(
        status=TaskStatus.FAILED, error=error[:10_000], finished=timezone.now()
    )
