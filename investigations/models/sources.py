"""Where a job's metrics can be queried: a job TSDB, a Prometheus URL (with its credentials) or a tunnel."""

from __future__ import annotations

from django.db import models

from investigations.crypto import EncryptedTextField

from .common import TaskStatus
from .jobs import Job


class DataSource(models.Model):
    """Where a job's metrics can be queried.

    kind=job_tsdb: `address` is a job directory; Stepwise serves a read-only copy of its
    prometheus/ TSDB and records the URL in `served_url`. kind=url: `address` is the base URL of a
    running Prometheus. kind=ssh_tunnel: `address` is the local end of a tunnel (a URL), `tunnel`
    describes it (user, host, remote port) for display and re-creation.
    """

    also: list[Job]  # set by views.sources.one_per_address: the other jobs on this address

    class Kind(models.TextChoices):
        JOB_TSDB = "job_tsdb", "Job TSDB"
        URL = "url", "Prometheus URL"
        SSH_TUNNEL = "ssh_tunnel", "SSH tunnel"

    class State(models.TextChoices):
        UNKNOWN = "unknown", "Unknown"
        STARTING = "starting", "Starting"
        UP = "up", "Up"
        DOWN = "down", "Down"
        ERROR = "error", "Error"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, null=True, blank=True, related_name="datasources")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    address = models.CharField(max_length=1024)
    tunnel = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.UNKNOWN)
    state_detail = models.TextField(blank=True)
    served_url = models.CharField(max_length=255, blank=True)
    last_checked = models.DateTimeField(null=True, blank=True)
    # Discovery: what the TSDB holds (families, hosts, GPUs, range, targets, profile, identity check).
    discovery_status = models.CharField(max_length=16, choices=TaskStatus.choices, blank=True)
    discovery = models.JSONField(default=dict, blank=True)
    discovery_error = models.TextField(blank=True)
    discovered = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job__job_id", "pk"]

    def __str__(self) -> str:
        if self.job_id is not None:
            return f"{self.job} ({self.get_kind_display()})"
        return f"{self.address} ({self.get_kind_display()})"

    @property
    def shown_address(self) -> str:
        """Return the address as pages show it: a URL source's credentials (kept apart) masked."""
        credential = getattr(self, "credential", None) if self.kind == self.Kind.URL else None
        if credential is None or "://" not in self.address:
            return self.address
        scheme, rest = self.address.split("://", 1)
        return f"{scheme}://{credential.username}:••••••@{rest}"


class DataSourceCredential(models.Model):
    """Basic-auth credentials of a URL data source, kept apart from its address.

    The address (shown to every user, written into messages and logs) never holds them; the client
    gets them as httpx auth. Pages show the user name and a mask, the admin shows no password, and the
    database holds the password encrypted.
    """

    datasource = models.OneToOneField(DataSource, on_delete=models.CASCADE, related_name="credential")
    username = models.CharField(max_length=255)
    # Encrypted at rest (investigations/crypto.py): the column holds a Fernet token, never the password.
    password = EncryptedTextField(blank=True)

    def __str__(self) -> str:
        return f"credentials of data source {self.datasource_id}"
