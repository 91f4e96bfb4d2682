from __future__ import annotations

from django import forms

from . import services


class DataSourceURLForm(forms.Form):
    """Add a running Prometheus by URL; only hosts in STEPWISE_ALLOWED_PROMETHEUS are accepted."""

    address = forms.CharField(
        label="Prometheus URL",
        max_length=1024,
        widget=forms.TextInput(attrs={"placeholder": "http://127.0.0.1:9090", "autocomplete": "off"}),
    )

    def clean_address(self) -> str:
        try:
            return services.prometheus_url_check(self.cleaned_data["address"])
        except services.DataSourceError as exc:
            raise forms.ValidationError(str(exc)) from exc
