"""`manage.py compare --job-dir DIR_A --job-dir DIR_B [--job-dir ...] [--format json|markdown]` (the contract).

Each job directory's TSDB is served read-only (a private copy on a free loopback port, in a temporary work
root) and every server is stopped before the command returns: on success, on error, on Ctrl-C and on SIGTERM.
Exit status: 0 when a comparison was made, 2 for bad arguments or unreadable input, 3 when a job's
Prometheus could not be started or reached. stdout carries the result only.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from django.core.management.base import BaseCommand

from investigations.management.os_signals import CommandExit as _Exit
from investigations.management.os_signals import ExitOnSignal, run_command
from playbooks import tsdb_guard, tsdb_server
from playbooks.compare import CompareError, CompareJob, compare_jobs
from playbooks.diagnose import serves_copy
from playbooks.prometheus import PrometheusClient, PrometheusError
from playbooks.report_compare import compare_markdown
from playbooks.triage import TriageError, triage_job


def _check_dir(raw: str) -> Path:
    d = Path(raw)
    if not d.is_dir():
        raise _Exit(2, f"job directory not found: {d}")
    tsdb = d / "prometheus"
    if not tsdb.is_dir() or not any(tsdb.iterdir()):
        raise _Exit(2, f"no TSDB in {d} (expected {tsdb}/ with blocks or a WAL)")
    return d


class Command(BaseCommand):
    requires_system_checks: list[str] = []  # stdout carries only the result
    help = (
        "Compare two or more finished jobs by training step: config diff, overlapping steps, metric deltas."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--job-dir",
            action="append",
            required=True,
            dest="job_dirs",
            help="a job directory (log + prometheus/); give it once per job, at least twice",
        )
        parser.add_argument("--format", choices=("json", "markdown"), default="json")

    def handle(self, *args, **opts):
        result = run_command("compare", lambda signals: self._compare(opts["job_dirs"], signals))
        if opts["format"] == "json":
            sys.stdout.write(json.dumps(result) + "\n")
        else:
            sys.stdout.write(compare_markdown(result))

    def _compare(self, raw_dirs: list[str], signals: ExitOnSignal) -> dict:
        if len(raw_dirs) < 2:
            raise _Exit(2, "give at least two --job-dir")
        dirs = [_check_dir(d) for d in raw_dirs]
        if len({d.resolve() for d in dirs}) < len(dirs):
            raise _Exit(2, "the same job directory is given twice")
        try:
            triages = [triage_job(d).to_dict() for d in dirs]
        except TriageError as exc:
            raise _Exit(2, str(exc)) from exc
        work_root = tsdb_guard.private_root("stepwise-compare-")
        served: list[tsdb_server.ServedTSDB] = []
        clients: list[PrometheusClient] = []
        try:
            for d in dirs:
                served.append(self._serve(d, work_root))
                clients.append(PrometheusClient(served[-1].url, timeout=60.0, retries=3))
            jobs = [CompareJob(c, t) for c, t in zip(clients, triages, strict=True)]
            try:
                return compare_jobs(jobs)
            except CompareError as exc:
                raise _Exit(2, str(exc)) from exc
            except PrometheusError as exc:
                raise _Exit(3, f"Prometheus failed during the comparison: {exc}") from exc
        finally:
            with signals.shielded():
                for c in clients:
                    c.close()
                for s in served:
                    tsdb_server.stop(s)
                tsdb_server.reap_leftovers(work_root)
                shutil.rmtree(work_root, ignore_errors=True)
                tsdb_guard.release(work_root, timeout=0)  # the command exits next

    @staticmethod
    def _serve(job_dir: Path, work_root: Path) -> tsdb_server.ServedTSDB:
        for _attempt in range(3):
            try:
                served = tsdb_server.ensure_served(job_dir / "prometheus", work_root=work_root)
            except tsdb_server.TSDBLocked as exc:
                raise _Exit(2, f"{job_dir}: {exc}") from exc
            except tsdb_server.TSDBServerError as exc:
                raise _Exit(3, f"{job_dir}: could not serve its TSDB: {exc}") from exc
            if serves_copy(served):
                return served
            # Another process took the port between the free-port check and our server's bind and answered
            # the readiness probe: comparing against someone else's data is the seeds' "mixed-up databases".
            sys.stderr.write(f"compare: {served.url} answers for another TSDB; serving {job_dir} again\n")
            tsdb_server.stop(served)
        raise _Exit(3, f"{job_dir}: could not serve its TSDB on a port of its own")
