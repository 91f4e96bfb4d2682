"""`manage.py diagnose (--job-dir DIR | --prometheus URL [--log FILE]) [--start T] [--end T] [--format ...]`.

Follows the diagnosis contract. With --job-dir the job's TSDB is served read-only (a private copy on a
free loopback port, in a temporary work root) and the server is stopped before the command returns: on
success, on error, on Ctrl-C and on SIGTERM. A TSDB locked by a live Prometheus is refused.
Exit status: 0 when a diagnosis was made, 2 for bad arguments or unreadable input, 3 when the data
source could not be reached. stdout carries the result only; logs go to stderr.

The window defaults to the data's range (--job-dir) or, with --prometheus and --log, to where the log
says the job ran (10 minutes either side), else the data's range.

What the log adds: the triage picks the playbooks and anchors their windows. Without a log (--prometheus
alone) every playbook runs and the data alone decides; a heartbeat false positive (it needs the log's
accused hosts and heartbeat timeout) and a restore leak (it needs the log's restore) then come out
healthy. A restored job diagnosed on its own is judged against a prior on runnable processes per host
(low confidence); `compare` against its fresh-start baseline is the real test.
"""

from __future__ import annotations

import functools
import json
import shutil
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from django.core.management.base import BaseCommand

from investigations.management import early_serve
from investigations.management.os_signals import CommandExit as _Exit
from investigations.management.os_signals import ExitOnSignal, run_command
from investigations.services import DataSourceError, prometheus_url_check
from investigations.times import parse_time as unix_seconds
from playbooks import tsdb_guard, tsdb_server
from playbooks.diagnose import DiagnosisError, discover_source, run_diagnosis, serves_copy
from playbooks.gpus import GPU_MODELS, gpu_model_named
from playbooks.profiles import PROFILES
from playbooks.prometheus import PrometheusClient, PrometheusError, PrometheusQueryError
from playbooks.report import diagnosis_markdown
from playbooks.triage import TriageError, find_job_log, triage_job, triage_log


def parse_time(raw: str | None, name: str) -> float | None:
    """Return unix seconds from unix seconds or ISO 8601 (naive times are UTC); raise _Exit(2) otherwise."""
    if raw is None:
        return None
    try:
        return unix_seconds(raw)
    except ValueError:
        raise _Exit(2, f"{name} {raw!r} is neither unix seconds nor ISO 8601") from None


def log_window(triage: dict, margin: float = 600.0) -> tuple[float | None, float | None]:
    """Return (start, end) of the job as its log tells it, with a margin; (None, None) when it cannot.

    The end is the crash time, else the last step plus the stall the log saw after it; the start is
    that end minus the job's wall time from the log's summary.
    """
    job, prog, det = triage.get("job") or {}, triage.get("progress") or {}, triage.get("details") or {}
    last = prog.get("last_step_time")
    end = job.get("crash_time") or (last + float(det.get("stall_after_last_step_s") or 0.0) if last else None)
    if end is None:
        return None, None
    wall = det.get("wall_s")
    start = end - float(wall) - margin if wall else None
    return start, end + margin


class Command(BaseCommand):
    requires_system_checks: list[str] = []  # stdout carries only the result
    help = "Diagnose a job from its Prometheus TSDB: class, root-cause family, culprits, onset, findings."

    def add_arguments(self, parser):
        src = parser.add_mutually_exclusive_group(required=True)
        src.add_argument("--job-dir", help="a job directory (log + prometheus/)")
        src.add_argument("--prometheus", help="URL of a Prometheus that is already up (a tunnel, a live job)")
        parser.add_argument("--log", help="the job's log (with --prometheus)")
        parser.add_argument("--start", help="window start: unix seconds or ISO 8601 (default: the data's)")
        parser.add_argument("--end", help="window end: unix seconds or ISO 8601 (default: the data's)")
        parser.add_argument("--format", choices=("json", "markdown"), default="json")
        parser.add_argument(
            "--profile",
            default="auto",
            help="metric profile: auto, or a declared one (amd, nvidia, amd-dme, node, a team's)",
        )
        parser.add_argument(
            "--gpu-model",
            default="auto",
            help="GPU model for the priors when the labels do not name it: auto or one of "
            + ", ".join(GPU_MODELS),
        )
        parser.add_argument(
            "--playbooks",
            default=None,
            help="comma-separated playbooks to run, or 'all' (default: what the triage calls for)",
        )

    def handle(self, *args, **opts):
        t0 = time.monotonic()
        # the CPU the process spent starting (interpreter, Django, imports), for bench/diagnosis_speed.py
        self._phases: dict[str, float] = {"start_cpu_s": round(time.process_time(), 3)}

        def work(signals: ExitOnSignal) -> dict:
            self._signals = signals
            # a signal while Django started (its early server is stopped at exit)
            if early_serve.received() is not None:
                signals.received = early_serve.received()
                signals.exit_if_signalled()
            return self._diagnose(opts)

        result = run_command("diagnose", work)
        if opts["verbosity"] >= 2:
            # where the time went, for bench/diagnosis_speed.py (start-up is the process's wall time minus this)
            phases = " ".join(f"{k}={v:.3f}" for k, v in self._phases.items())
            sys.stderr.write(
                f"diagnose: timings {phases} command_s={time.monotonic() - t0:.3f} "
                f"cpu_s={time.process_time():.3f}\n"
            )
        if opts["format"] == "json":
            sys.stdout.write(json.dumps(result) + "\n")
        else:
            sys.stdout.write(diagnosis_markdown(result))

    def _diagnose(self, opts: dict) -> dict:
        self._gpu_model = None if opts["gpu_model"].strip().lower() == "auto" else opts["gpu_model"]
        if self._gpu_model is not None:
            try:
                gpu_model_named(self._gpu_model)
            except ValueError as exc:
                raise _Exit(2, str(exc)) from exc
        if opts["profile"] != "auto" and opts["profile"] not in PROFILES:
            raise _Exit(2, f"unknown profile {opts['profile']!r}; use auto or one of {', '.join(PROFILES)}")
        start, end = parse_time(opts["start"], "--start"), parse_time(opts["end"], "--end")
        if start is not None and end is not None and end <= start:
            raise _Exit(2, "--end must be after --start")
        playbooks = (
            [p.strip() for p in opts["playbooks"].split(",") if p.strip()] if opts["playbooks"] else None
        )
        if opts["job_dir"]:
            if opts["log"]:
                raise _Exit(2, "--log goes with --prometheus; a job directory has its own log")
            job_dir = Path(opts["job_dir"])
            if not job_dir.is_dir():
                raise _Exit(2, f"job directory not found: {job_dir}")
            tsdb = job_dir / "prometheus"
            if not tsdb.is_dir() or not any(tsdb.iterdir()):
                raise _Exit(2, f"no TSDB in {job_dir} (expected {tsdb}/ with blocks or a WAL)")
            if find_job_log(job_dir) is None:
                return self._served(tsdb, None, opts["profile"], start, end, playbooks)
            # The log is triaged while the TSDB is served and discovered (its wait is Prometheus's and I/O).
            with ThreadPoolExecutor(1, thread_name_prefix="triage") as pool:
                pending = pool.submit(self._timed, "triage_s", triage_job, job_dir)
                try:
                    return self._served(tsdb, pending, opts["profile"], start, end, playbooks)
                finally:
                    pending.cancel()
        try:
            url = prometheus_url_check(opts["prometheus"])
        except DataSourceError as exc:
            raise _Exit(2, str(exc)) from exc
        triage = None
        if opts["log"]:
            try:
                triage = triage_log(opts["log"]).to_dict()
            except TriageError as exc:
                raise _Exit(2, str(exc)) from exc
            # a live or shared Prometheus may hold more than this job: look where the log says it ran
            log_start, log_end = log_window(triage)
            start = log_start if start is None else start
            end = log_end if end is None else end
        return self._run(url, triage, opts["profile"], start, end, playbooks)

    def _triaged(self, pending: Future) -> dict:
        """Return the triage of the job's log as a dict once it is done (exit 2 when the log is unreadable)."""
        t0 = time.monotonic()
        try:
            triage = pending.result().to_dict()
        except TriageError as exc:
            raise _Exit(2, str(exc)) from exc
        self._phases["triage_wait_s"] = round(time.monotonic() - t0, 3)
        return triage

    def _timed(self, phase: str, fn, *args):
        t0, cpu0 = time.monotonic(), time.thread_time()
        try:
            return fn(*args)
        finally:
            self._phases[phase] = round(time.monotonic() - t0, 3)
            self._phases[phase.removesuffix("_s") + "_cpu_s"] = round(time.thread_time() - cpu0, 3)

    def _served(self, tsdb: Path, triage, profile, start, end, playbooks) -> dict:
        # where manage.py started serving it while Django started, else a work root of our own
        work_root = early_serve.work_root(tsdb) or tsdb_guard.private_root(early_serve.WORK_ROOT_PREFIX)
        served = None
        t0 = time.monotonic()
        try:
            for _attempt in range(3):
                try:
                    served = tsdb_server.ensure_served(tsdb, work_root=work_root)
                except tsdb_server.TSDBLocked as exc:
                    raise _Exit(2, f"{tsdb.parent}: {exc}") from exc
                except tsdb_server.TSDBServerError as exc:
                    raise _Exit(3, f"{tsdb.parent}: could not serve its TSDB: {exc}") from exc
                if serves_copy(served):
                    break
                # Another process took the port between the free-port check and our server's bind, and
                # answered our readiness probe: never diagnose someone else's data. Try another port.
                sys.stderr.write(f"diagnose: {served.url} answers for another TSDB; serving again\n")
                tsdb_server.stop(served)
                served = None
            else:
                raise _Exit(3, f"{tsdb.parent}: could not serve its TSDB on a port of its own")
            self._phases["serve_s"] = round(time.monotonic() - t0, 3)
            return self._run(served.url, triage, profile, start, end, playbooks, served.time_range)
        finally:
            with self._signals.shielded():
                if served is not None:
                    tsdb_server.stop(served)
                tsdb_server.reap_leftovers(work_root)
                shutil.rmtree(work_root, ignore_errors=True)
                tsdb_guard.release(work_root, timeout=0)  # the command exits next

    def _run(self, url: str, triage, profile, start, end, playbooks, time_range=None) -> dict:
        """Discover the source, diagnose; the triage (a dict, a Future of a Triage, or None) is waited for once
        the queries that do not depend on the log have run."""
        with PrometheusClient(url, timeout=60.0, retries=2, backoff=0.2) as client:
            try:
                t0, req0 = time.monotonic(), client.stats.requests
                source = discover_source(
                    client, profile=profile, time_range=time_range, gpu_model=self._gpu_model
                )
                self._phases["discovery_s"] = round(time.monotonic() - t0, 3)
                discovered_requests = client.stats.requests - req0
                if isinstance(triage, Future):
                    # the queries that do not depend on the log run while it is being triaged
                    triage = functools.partial(self._triaged, triage)
                result = run_diagnosis(
                    client,
                    triage=triage,
                    profile=profile,
                    start=start,
                    end=end,
                    playbooks=playbooks,
                    time_range=time_range,
                    gpu_model=self._gpu_model,
                    source=source,
                    phases=self._phases,
                )
                # the contract's timings cover the discovery too
                t = result["timings"]
                t["queries"] += discovered_requests
                t["total_s"] = round(t["total_s"] + self._phases["discovery_s"], 3)
                t["prometheus_s"] = round(t["prometheus_s"] + self._phases["discovery_s"], 3)
                return result
            except DiagnosisError as exc:
                raise _Exit(2, str(exc)) from exc
            except PrometheusQueryError as exc:
                raise _Exit(2, f"Prometheus refused a query: {exc}") from exc
            except PrometheusError as exc:
                raise _Exit(3, f"cannot reach Prometheus at {url}: {exc}") from exc
