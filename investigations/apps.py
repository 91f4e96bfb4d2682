from __future__ import annotations

from django.apps import AppConfig


class InvestigationsConfig(AppConfig):
    name = "investigations"
    verbose_name = "Investigations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from stepwise import checks

        checks.register()
