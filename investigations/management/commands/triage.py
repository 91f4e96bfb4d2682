"""`manage.py triage (--log FILE | --job-dir DIR) [--format json|markdown]` per the diagnosis contract."""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand

from playbooks.report import triage_markdown
from playbooks.triage import TriageError, triage_job, triage_log


class Command(BaseCommand):
    requires_system_checks: list[str] = []  # stdout carries only the result
    help = "Triage a job log: status, failure classes (primary first), progress, config, Prometheus tunnel."

    def add_arguments(self, parser):
        src = parser.add_mutually_exclusive_group(required=True)
        src.add_argument("--log", help="the job's log file")
        src.add_argument("--job-dir", help="a job directory (DIR/job.log, DIR/log or the sibling DIR.log)")
        parser.add_argument("--format", choices=("json", "markdown"), default="json")
        parser.add_argument(
            "--slurm-state",
            default=None,
            help="the scheduler's state of the job if known (RUNNING tells a hang from a death)",
        )

    def handle(self, *args, **opts):
        try:
            if opts["log"]:
                result = triage_log(opts["log"], slurm_state=opts["slurm_state"])
            else:
                result = triage_job(opts["job_dir"], slurm_state=opts["slurm_state"])
        except TriageError as exc:
            sys.stderr.write(f"triage: {exc}\n")
            sys.exit(2)
        data = result.to_dict()
        if opts["format"] == "json":
            sys.stdout.write(json.dumps(data) + "\n")
        else:
            sys.stdout.write(triage_markdown(data))
