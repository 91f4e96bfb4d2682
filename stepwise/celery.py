"""The Celery application: configured from Django settings (CELERY_* names), tasks from each app."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepwise.settings")

app = Celery("stepwise")
# With Django installed, Celery's Django fix-up makes DjangoTask the base class, which gives every
# task delay_on_commit().
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
