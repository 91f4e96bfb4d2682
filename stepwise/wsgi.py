"""WSGI entry point (gunicorn stepwise.wsgi)."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepwise.settings")

application = get_wsgi_application()
