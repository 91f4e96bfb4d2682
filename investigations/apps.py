from __future__ import annotations

from django.apps import AppConfig


class InvestigationsConfig(AppConfig):
    name = "investigations"
    verbose_name = "Investigations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from stepwise import checks

        checks.register()
        _install_source_budget()


def _install_source_budget() -> None:
    """Route every Prometheus query of this process through its source's budget (`playbooks.budget`)."""
    from django.conf import settings

    from playbooks import prometheus
    from playbooks.budget import SourceBudget

    def gate(base_url: str):
        budget = SourceBudget(
            settings.STEPWISE_BUDGET_DIR,
            base_url,
            settings.STEPWISE_SOURCE_MAX_QUERIES,
            max_wait=float(settings.STEPWISE_SOURCE_QUEUE_SECONDS),
        )
        return budget.slot

    prometheus.set_gate_factory(gate)
