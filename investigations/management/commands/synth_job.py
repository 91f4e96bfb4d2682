"""`manage.py synth_job`: build a generated incident job (thin wrapper around playbooks.synth)."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from playbooks.synth import PERTURBATIONS, PROFILES, SCENARIOS, SynthError, generate_job


class Command(BaseCommand):
    requires_system_checks: list[str] = []  # stdout carries only the result
    help = (
        "Write a job directory of the seed system's shape (log, prometheus/ TSDB, truth.json) for an "
        "incident scenario. restore-resource-leak also writes <out>-baseline."
    )

    def add_arguments(self, parser):
        parser.add_argument("--scenario", required=True, choices=SCENARIOS)
        parser.add_argument("--seed", type=int, required=True)
        parser.add_argument("--nodes", type=int, required=True)
        parser.add_argument("--out", required=True, help="the job directory to create (replaced if present)")
        parser.add_argument("--profile", choices=PROFILES, default="amd")
        parser.add_argument(
            "--exporters",
            default=None,
            help=f"how nvidia/amd-dme exporters are deployed: random (by seed) or one of "
            f"{', '.join(PERTURBATIONS)}",
        )
        parser.add_argument("--gpus", type=int, default=8)
        parser.add_argument("--interval", type=float, default=15.0, help="scrape interval in seconds")
        parser.add_argument(
            "--hours", type=float, default=None, help="job length (default: 2.2-3.2 h by seed)"
        )
        parser.add_argument(
            "--wal-tail-minutes",
            type=float,
            default=None,
            help="final minutes that live only in wal/ (default 30; 0: blocks only)",
        )
        parser.add_argument("--promtool", default="promtool")
        parser.add_argument("--prometheus", default="prometheus")
        parser.add_argument("--keep-openmetrics", action="store_true")
        parser.add_argument(
            "--variant",
            action="append",
            default=[],
            help="an off-by-default variant of the scenario (node-death: death_at_end); repeatable",
        )

    def handle(self, *args, **opts):
        try:
            built = generate_job(
                opts["scenario"],
                opts["seed"],
                opts["nodes"],
                Path(opts["out"]),
                profile=opts["profile"],
                gpus=opts["gpus"],
                interval=opts["interval"],
                hours=opts["hours"],
                wal_tail_minutes=opts["wal_tail_minutes"],
                promtool=opts["promtool"],
                prometheus=opts["prometheus"],
                keep_openmetrics=opts["keep_openmetrics"],
                exporters=opts["exporters"],
                variants=opts["variant"],
            )
        except SynthError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            json.dumps(
                {
                    "job_dirs": [str(d) for d in built.job_dirs],
                    "class": built.truth["class"],
                    "culprits": built.truth["culprits"],
                    "onset": built.truth["onset"],
                    "stats": built.stats,
                },
                indent=2,
            )
        )
