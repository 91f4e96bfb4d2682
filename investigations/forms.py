from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model

from playbooks.gpus import GPU_MODELS
from playbooks.profiles import PROFILES
from playbooks.tunnel import TunnelError, TunnelSpec, parse_tunnel_command

from . import services
from .models import Investigation, InvestigationJob
from .services.diagnosis import window_validate
from .services.investigations import SOURCE_KINDS, SourceRequest
from .services.sources import url_source_probe
from .services.tunnels import tunnel_allowed
from .times import parse_time


class DataSourceURLForm(forms.Form):
    """Add a running Prometheus by URL; only hosts in STEPWISE_ALLOWED_PROMETHEUS are accepted."""

    address = forms.CharField(
        label="Prometheus URL",
        max_length=1024,
        widget=forms.TextInput(attrs={"placeholder": "http://127.0.0.1:9090", "autocomplete": "off"}),
    )

    def clean_address(self) -> str:
        """Return the URL without credentials once a Prometheus answers there (probed, never stored before)."""
        try:
            self.source = url_source_probe(self.cleaned_data["address"])
        except services.DataSourceError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return self.source.url


SOURCE_CHOICES = [
    ("job_dir", "Job directory"),
    ("upload", "Upload a log"),
    ("url", "Prometheus URL"),
    ("tunnel", "SSH tunnel"),
]
assert [value for value, _ in SOURCE_CHOICES] == list(SOURCE_KINDS)


def _text(placeholder: str = "", mono: bool = False, **attrs: Any) -> forms.TextInput:
    attrs = {"placeholder": placeholder, "autocomplete": "off", **attrs}
    if mono:
        attrs["class"] = "mono"
    return forms.TextInput(attrs=attrs)


class InvestigationForm(forms.Form):
    """Open an investigation: what it is about, and where the job's log and metrics come from.

    `clean()` checks only the fields of the chosen source; the service checks the rest (the path on
    disk, the URL answering) and reports to the same fields.
    """

    title = forms.CharField(max_length=200, widget=_text("GPU hang on llama-70b, job 81234"))
    severity = forms.ChoiceField(choices=Investigation.Severity.choices, initial=Investigation.Severity.SEV3)
    team = forms.CharField(max_length=100, required=False, widget=_text("training-infra"))
    source = forms.ChoiceField(choices=SOURCE_CHOICES, initial="job_dir", widget=forms.RadioSelect)
    # (a) job directory
    job_dir = forms.CharField(
        label="Job directory or job id",
        max_length=1024,
        required=False,
        widget=_text("/jobs/81234-llama  or  81234", mono=True),
    )
    # (b) upload, optionally with (c)'s URL
    log = forms.FileField(label="Job log", required=False)
    # (c) URL
    prometheus_url = forms.CharField(
        label="Prometheus URL",
        max_length=1024,
        required=False,
        widget=_text("http://127.0.0.1:9090", mono=True),
    )
    # (d) SSH tunnel: the command from the log, or its parts
    tunnel_command = forms.CharField(
        label="Tunnel command from the log",
        required=False,
        max_length=2000,
        widget=forms.Textarea(
            attrs={
                "rows": 2,
                "class": "mono",
                "placeholder": "ssh -J alice@login01 -L 9192:localhost:9192 root@gpu-101",
            }
        ),
    )
    head_host = forms.CharField(
        label="Head node", max_length=253, required=False, widget=_text("gpu-101", mono=True)
    )
    ssh_user = forms.CharField(label="User", max_length=64, required=False, widget=_text("root", mono=True))
    jump_host = forms.CharField(
        label="Jump host",
        max_length=300,
        required=False,
        widget=_text("alice@login01.example.org", mono=True),
    )
    remote_port = forms.IntegerField(
        label="Prometheus port",
        required=False,
        min_value=1,
        max_value=65535,
        widget=forms.NumberInput(attrs={"placeholder": "9192"}),
    )
    # Keys for a job that no directory or log header names.
    job_id = forms.CharField(
        label="Job id", max_length=100, required=False, widget=_text("optional", mono=True)
    )
    cluster = forms.CharField(max_length=100, required=False, widget=_text("optional"))

    def clean_log(self) -> Any:
        log = self.cleaned_data.get("log")
        limit = settings.STEPWISE_LOG_UPLOAD_MAX_MB
        if log is not None and log.size > limit * 1024 * 1024:
            raise forms.ValidationError(
                f"{log.name} is {log.size / 1024 / 1024:.0f} MB; the limit is {limit} MB."
            )
        return log

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        assert data is not None  # Form.clean returns cleaned_data
        kind = data.get("source")
        if kind == "job_dir" and not data.get("job_dir", "").strip():
            self.add_error(
                "job_dir", "Pick a job directory in the browser below, or type its path or job id."
            )
        elif kind == "upload" and not data.get("log") and "log" not in self.errors:
            self.add_error("log", "Choose the job's log file.")
        elif kind == "url" and not data.get("prometheus_url", "").strip():
            self.add_error("prometheus_url", "Give the URL of the Prometheus that holds the job's metrics.")
        elif kind == "tunnel":
            data["tunnel"] = self._tunnel_spec(data)
        return data

    def _tunnel_spec(self, data: dict[str, Any]) -> TunnelSpec | None:
        command = data.get("tunnel_command", "").strip()
        if command:
            try:
                return tunnel_allowed(parse_tunnel_command(command))
            except TunnelError as exc:
                self.add_error("tunnel_command", str(exc))
                return None
        missing = [
            (name, label)
            for name, label in (("head_host", "the head node"), ("remote_port", "the Prometheus port"))
            if not data.get(name)
        ]
        if missing:
            for name, label in missing:
                self.add_error(name, f"Give {label}, or paste the tunnel command from the log.")
            return None
        try:
            return tunnel_allowed(
                TunnelSpec(
                    user=data.get("ssh_user", "").strip(),
                    host=data["head_host"].strip(),
                    remote_port=data["remote_port"],
                    jump=data.get("jump_host", "").strip(),
                )
            )
        except TunnelError as exc:
            self.add_error("head_host", str(exc))
            return None

    def source_request(self) -> SourceRequest:
        data = self.cleaned_data
        return SourceRequest(
            kind=data["source"],
            job_dir=data.get("job_dir", ""),
            log=data.get("log"),
            prometheus_url=data.get("prometheus_url", ""),
            tunnel=data.get("tunnel"),
            job_id=data.get("job_id", ""),
            cluster=data.get("cluster", ""),
        )


class InvestigationUpdateForm(forms.Form):
    """Inline edits on the investigation page; only the fields sent are changed."""

    title = forms.CharField(max_length=200, required=False)
    status = forms.ChoiceField(choices=Investigation.Status.choices, required=False)
    severity = forms.ChoiceField(choices=Investigation.Severity.choices, required=False)
    team = forms.CharField(max_length=100, required=False)
    owner = forms.ModelChoiceField(queryset=get_user_model().objects.filter(is_active=True), required=False)

    def changes(self) -> dict[str, Any]:
        """Return the submitted fields only (an empty owner clears it)."""
        return {name: self.cleaned_data[name] for name in self.fields if name in self.data}


class JobAddForm(forms.Form):
    """Add another job to an investigation: a baseline to compare against, or another job to compare."""

    job_dir = forms.CharField(
        label="Job directory or job id",
        max_length=1024,
        widget=_text("/jobs/81200-llama  or  81200", mono=True),
    )
    role = forms.ChoiceField(
        choices=[(InvestigationJob.Role.BASELINE, "Baseline"), (InvestigationJob.Role.COMPARE, "Compare")],
        initial=InvestigationJob.Role.COMPARE,
    )


class LogAttachForm(forms.Form):
    """Give a job opened from a URL or a tunnel its log, to triage it."""

    log = forms.FileField(label="Job log")


class TimeField(forms.Field):
    """A time typed as unix seconds or ISO 8601 (UTC unless it carries an offset); cleans to float seconds.

    A plain Field with a text input, not a CharField: what it cleans to is a number (or None when left
    empty), never the text typed.
    """

    widget = forms.TextInput

    def to_python(self, value: Any) -> float | None:
        text = "" if value in self.empty_values else str(value).strip()
        if not text:
            return None
        try:
            return parse_time(text)
        except ValueError:
            raise forms.ValidationError(
                "Enter unix seconds or an ISO 8601 time such as 2026-11-20T14:05:00Z."
            ) from None


class DiagnosisStartForm(forms.Form):
    """Start a diagnosis of one job: what the triage calls for, or every playbook; optional window."""

    scope = forms.ChoiceField(
        choices=[("triage", "Playbooks the triage calls for"), ("all", "All playbooks")]
    )
    start = TimeField(required=False)
    end = TimeField(required=False)
    profile = forms.ChoiceField(
        choices=[("auto", "auto (from the metric names)")] + [(name, name) for name in PROFILES],
        required=False,
    )
    gpu_model = forms.ChoiceField(
        choices=[("auto", "auto (from the labels)")] + [(name, name) for name in GPU_MODELS], required=False
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        assert data is not None  # Form.clean returns cleaned_data
        try:
            data["window"] = window_validate(data.get("start"), data.get("end"))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data


def form_errors(form: forms.Form) -> str:
    """Return every error of a bound form as one line, for a page region that shows a single message."""
    return " ".join(str(e) for errors in form.errors.values() for e in errors)
