"""Stepwise project package.

The Celery app (`stepwise.celery`) is loaded by the modules that define tasks (`investigations.tasks`,
`reports.tasks`) before their first `shared_task`, and by `celery -A stepwise`, which finds
`stepwise.celery.app`: so every task binds to it, while a command that sends no task (`manage.py
diagnose`) does not import Celery, kombu and their dependencies (about 0.12 s of CPU at each start).
`stepwise.celery_app` still names it, loaded on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["celery_app"]


def __getattr__(name: str) -> Any:
    if name == "celery_app":
        from .celery import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
