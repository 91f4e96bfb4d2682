"""`manage.py rundemo`: build the demo jobs once, then run the web server and a worker until Ctrl-C.

0. Apply migrations (a no-op when up to date).
1. Stop TSDB servers a previous crashed run left behind (only those recorded under our work root).
2. Generate the demo job set under <data>/demo-jobs, once (a marker file records what was built).
3. Create or update the `demo` user; its password is generated once into <data>/demo_password.
4. Register a Job and a job_tsdb DataSource per demo job directory, and open an investigation per demo
   job that has none (its triage and discovery are queued for the worker).
5. Start a Celery worker and gunicorn, each in its own process group, and wait for the login page.
   A worker that dies is restarted (at most a few times a minute); a web server that dies stops all.
6. On Ctrl-C or SIGTERM: stop both groups, stop every TSDB server started meanwhile, exit 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from investigations import services
from investigations.management.commands._supervise import WorkerSupervisor
from investigations.models import Investigation, InvestigationJob, Job
from investigations.services import comparison as cmp
from investigations.services import diagnosis as dx
from investigations.services import investigations as inv
from investigations.tasks import job_triage_task
from investigations.tasks.comparison import comparison_execute_task
from investigations.tasks.diagnosis import diagnosis_plan_task
from playbooks import tsdb_server, tunnel
from reports import demo as report_demo

DEMO_SCENARIOS = (
    "healthy",
    "thermal-straggler",
    "rdma-degradation",
    "collective-hang",
    "restore-resource-leak",
)
MARKER = ".stepwise-demo.json"
STOP_GRACE_S = 10.0
STARTUP_TIMEOUT_S = 60.0


def _demo_password(path: Path) -> str:
    """Return the demo password, generating it once into `path` (mode 0600)."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    password = secrets.token_urlsafe(12)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(password + "\n")
    return password


def _probe_url(bind: str) -> str:
    host, _, port = bind.rpartition(":")
    if host in ("0.0.0.0", "[::]", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{port}/"


def _port_free(bind: str) -> bool:
    host, _, port = bind.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, int(port)))
        except OSError:
            return False
    return True


class Command(BaseCommand):
    help = "Build the demo jobs (once), then run the web server and a Celery worker until Ctrl-C."
    # Checked in handle() once the demo root exists, so that its absence is not reported first.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--scenarios",
            default=",".join(DEMO_SCENARIOS),
            help="Comma-separated generator scenarios (default: %(default)s).",
        )
        parser.add_argument("--nodes", type=int, default=8, help="Nodes per demo job (default: %(default)s).")
        parser.add_argument(
            "--seed", type=int, default=7, help="Base seed of the generator (default: %(default)s)."
        )
        parser.add_argument(
            "--hours", type=float, default=None, help="Length of each job (default: the generator's)."
        )
        parser.add_argument(
            "--bind", default=settings.STEPWISE_BIND, help="HOST:PORT (default: STEPWISE_BIND)."
        )
        parser.add_argument("--web-workers", type=int, default=2, help="gunicorn worker processes.")
        parser.add_argument("--concurrency", type=int, default=2, help="Celery worker processes.")
        parser.add_argument("--rebuild", action="store_true", help="Regenerate the demo jobs even if built.")

    def handle(self, *args: Any, **opts: Any) -> None:
        Path(settings.STEPWISE_DEMO_JOBS).mkdir(parents=True, exist_ok=True)
        self.check(display_num_errors=False)
        call_command("migrate", interactive=False, verbosity=0, skip_checks=True)
        work_root = Path(settings.STEPWISE_TSDB_VIEWS)
        work_root.mkdir(parents=True, exist_ok=True)
        reaped = tsdb_server.reap_leftovers(work_root)
        if reaped:
            self.stdout.write(f"Stopped {len(reaped)} TSDB server(s) left by an earlier run: {reaped}")
        closed = tunnel.reap_leftover_tunnels(settings.STEPWISE_TUNNELS_DIR)
        if closed:
            self.stdout.write(f"Closed {len(closed)} SSH tunnel(s) left by an earlier run: {closed}")
        self._prune_broker()
        if not _port_free(opts["bind"]):
            raise CommandError(f"{opts['bind']} is already in use: stop what listens there or pass --bind.")

        scenarios = [s.strip() for s in opts["scenarios"].split(",") if s.strip()]
        job_dirs = self._build_demo(scenarios, opts["nodes"], opts["seed"], opts["hours"], opts["rebuild"])
        for job_dir in job_dirs:
            try:
                job, _ = services.job_register(job_dir, cluster="demo")
            except services.DataSourceError as exc:
                raise CommandError(f"{exc} (the demo jobs live in {settings.STEPWISE_DEMO_JOBS})") from exc
            self.stdout.write(f"  registered job {job.job_id} ({job_dir.name})")
        password = self._demo_user()
        self._copies_cap(len(job_dirs))
        self._demo_investigations(job_dirs)
        try:
            self._serve(opts, password, work_root)
        finally:
            stopped = tsdb_server.reap_leftovers(work_root)
            if stopped:
                self.stdout.write(f"Stopped {len(stopped)} TSDB server(s).")
            closed = tunnel.reap_leftover_tunnels(settings.STEPWISE_TUNNELS_DIR)
            if closed:
                self.stdout.write(f"Closed {len(closed)} SSH tunnel(s).")

    def _copies_cap(self, jobs: int) -> None:
        """Let every demo job be served at once (the worker diagnoses them all as it starts, and a visitor
        opens their timelines meanwhile): raise the cap of served TSDB copies to the job count plus two,
        for this process and the web server and worker it starts, unless STEPWISE_TSDB_MAX_COPIES is set."""
        if "STEPWISE_TSDB_MAX_COPIES" in os.environ:
            return
        cap = max(int(settings.STEPWISE_TSDB_MAX_COPIES), jobs + 2)
        os.environ["STEPWISE_TSDB_MAX_COPIES"] = str(cap)
        settings.STEPWISE_TSDB_MAX_COPIES = cap
        self.stdout.write(f"  up to {cap} TSDB copies served at once (STEPWISE_TSDB_MAX_COPIES)")

    # --- demo data -----------------------------------------------------------------------------

    def _build_demo(
        self, scenarios: list[str], nodes: int, seed: int, hours: float | None, rebuild: bool
    ) -> list[Path]:
        """Return the demo job directories, generating those not built with these parameters yet."""
        from playbooks import synth

        unknown = [s for s in scenarios if s not in synth.SCENARIOS]
        if unknown or not scenarios:
            raise CommandError(f"Unknown scenario(s) {unknown}; known: {', '.join(synth.SCENARIOS)}")
        root = Path(settings.STEPWISE_DEMO_JOBS)
        root.mkdir(parents=True, exist_ok=True)
        marker_path = root / MARKER
        try:
            marker = json.loads(marker_path.read_text())
        except (OSError, ValueError):
            marker = {}
        job_dirs: list[Path] = []
        for index, scenario in enumerate(scenarios):
            # A seed per scenario: demo jobs differ in hosts, GPU model and start time, not only in the incident.
            job_seed = seed + 101 * index
            params = {"nodes": nodes, "seed": job_seed, "hours": hours}
            built = marker.get(scenario)
            dirs = [root / name for name in built["job_dirs"]] if built else []
            if not rebuild and built and built["params"] == params and all(d.is_dir() for d in dirs):
                job_dirs.extend(dirs)
                continue
            self.stdout.write(f"Building demo job {scenario!r} ({nodes} nodes)…", ending="")
            self.stdout.flush()
            began = time.monotonic()
            try:
                generated = synth.generate_job(
                    scenario,
                    job_seed,
                    nodes,
                    root / scenario,
                    hours=hours,
                    promtool=_sibling_tool(settings.STEPWISE_PROMETHEUS_BIN, "promtool"),
                    prometheus=settings.STEPWISE_PROMETHEUS_BIN,
                )
            except synth.SynthError as exc:
                raise CommandError(f"Building the demo job {scenario!r} failed: {exc}") from exc
            self.stdout.write(f" done in {time.monotonic() - began:.1f} s")
            marker[scenario] = {"params": params, "job_dirs": [d.name for d in generated.job_dirs]}
            tmp = marker_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(marker, indent=2, sort_keys=True))
            tmp.replace(marker_path)
            job_dirs.extend(generated.job_dirs)
        return job_dirs

    def _demo_user(self) -> str:
        password = _demo_password(Path(settings.STEPWISE_DATA_DIR) / "demo_password")
        user, _ = get_user_model().objects.get_or_create(username="demo")
        user.is_staff = user.is_superuser = user.is_active = True
        user.set_password(password)
        user.save()
        return password

    def _demo_investigations(self, job_dirs: list[Path]) -> None:
        """Open one investigation per demo job that has none (a baseline joins its job's), triage queued,
        and its diagnosis (and comparison, with a baseline) started, so the demo opens with findings.

        The tasks wait in the broker until the worker starts; each triage then enqueues its discovery, and
        a diagnosis plan that finds its triage still running waits for it.
        """
        owner = get_user_model().objects.get(username="demo")
        report_demo.demo_team(owner)
        baselines = {d.name.removesuffix("-baseline"): d for d in job_dirs if d.name.endswith("-baseline")}
        for job_dir in job_dirs:
            if job_dir.name.endswith("-baseline"):
                continue
            job, _ = services.job_register(job_dir, cluster="demo")
            if InvestigationJob.objects.filter(job=job).exists():
                continue
            truth = _truth(job_dir)
            scenario = truth.get("scenario") or job_dir.name
            with transaction.atomic():
                investigation = inv.investigation_create(
                    title=f"{scenario.replace('-', ' ').capitalize()} on job {job.job_id}",
                    severity=Investigation.Severity.SEV4
                    if scenario == "healthy"
                    else Investigation.Severity.SEV2,
                    team=report_demo.TEAM,
                    owner=owner,
                    source=inv.SourceRequest(kind="job_dir", job_dir=str(job_dir), cluster="demo"),
                )
                investigation.summary = truth.get("description", "")
                investigation.save(update_fields=["summary"])
                baseline = baselines.get(job_dir.name)
                links = [job]
                if baseline is not None:
                    links.append(
                        inv.investigation_job_add(
                            investigation,
                            job_dir=str(baseline),
                            role=InvestigationJob.Role.BASELINE,
                            cluster="demo",
                        ).job
                    )
                for queued in links:
                    if Job.objects.get(pk=queued.pk).triage_status == Job.TriageStatus.QUEUED:
                        job_triage_task.delay_on_commit(queued.pk)
                run = dx.diagnosis_start(investigation, job, user=owner)
                diagnosis_plan_task.delay_on_commit(run.pk)
                if baseline is not None:
                    compared = cmp.comparison_start(investigation, user=owner)
                    comparison_execute_task.delay_on_commit(compared.pk)
            if scenario == report_demo.SCENARIO:
                report_demo.write_demo_report(investigation, owner)  # the demo opens with a written report
            self.stdout.write(f"  opened investigation #{investigation.pk}: {investigation.title}")

    def _prune_broker(self) -> None:
        """Delete embedded-broker messages processed more than a day ago (they are only a record)."""
        processed = Path(settings.STEPWISE_BROKER_DIR) / "processed"
        if settings.REDIS_URL or not processed.is_dir():
            return
        cutoff = time.time() - 86_400
        for path in processed.iterdir():
            if path.is_file() and path.stat().st_mtime < cutoff:
                path.unlink(missing_ok=True)

    # --- processes -----------------------------------------------------------------------------

    def _serve(self, opts: dict[str, Any], password: str, work_root: Path) -> None:
        stop = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
        worker = WorkerSupervisor(lambda: self._spawn(self._worker_cmd(opts["concurrency"])), self._log)
        web: subprocess.Popen[bytes] | None = None
        try:
            worker.start()
            web = self._spawn(self._web_cmd(opts["bind"], opts["web_workers"]))
            url = _probe_url(opts["bind"])
            self._wait_ready(url + "login/", web, worker, stop)
            if not stop.is_set():
                self._banner(url, password)
            # A dead worker is restarted (rate-limited) while pages are served; a dead web server stops all.
            while not stop.is_set():
                if web.poll() is not None:
                    raise CommandError(f"The web process exited with status {web.returncode}.")
                worker.check()
                stop.wait(0.5)
            self.stdout.write("Stopping…")
        finally:
            children = [("worker", worker.proc)] if worker.proc is not None else []
            if web is not None:
                children.append(("web", web))
            _stop_children(children)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _log(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def _spawn(self, cmd: list[str]) -> subprocess.Popen[bytes]:
        # A new session: Ctrl-C in the terminal reaches only this command, which then stops each child's
        # whole group (gunicorn's and Celery's own workers included) in order.
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "DJANGO_SETTINGS_MODULE": "stepwise.settings"}
        return subprocess.Popen(cmd, cwd=settings.BASE_DIR, env=env, start_new_session=True)

    def _worker_cmd(self, concurrency: int) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "stepwise",
            "worker",
            "-l",
            "info",
            "--concurrency",
            str(concurrency),
        ]
        if not settings.REDIS_URL:
            # The filesystem transport carries no broadcasts: skip the features built on them.
            cmd += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        return cmd

    def _web_cmd(self, bind: str, workers: int) -> list[str]:
        # gunicorn rather than runserver: the same server as production, it serves static files through
        # WhiteNoise with DEBUG off, and on SIGTERM its arbiter stops its own workers and exits.
        return [
            sys.executable,
            "-m",
            "gunicorn",
            "stepwise.wsgi:application",
            "--bind",
            bind,
            "--workers",
            str(workers),
            "--threads",
            "4",
            "--graceful-timeout",
            "5",
            "--access-logfile",
            "-",
        ]

    def _wait_ready(
        self, url: str, web: subprocess.Popen[bytes], worker: WorkerSupervisor, stop: threading.Event
    ) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not stop.is_set():
            if web.poll() is not None:
                raise CommandError(f"The web process exited with status {web.returncode} while starting.")
            worker.check()
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise CommandError(
                    f"The web server did not answer at {url} within {STARTUP_TIMEOUT_S:.0f} s."
                )
            stop.wait(0.3)

    def _banner(self, url: str, password: str) -> None:
        line = "─" * 60
        self.stdout.write(self.style.SUCCESS(f"\n{line}\n Stepwise is running at {url}"))
        self.stdout.write(f"   login:    demo\n   password: {password}")
        self.stdout.write(f"   (kept in {Path(settings.STEPWISE_DATA_DIR) / 'demo_password'})")
        self.stdout.write(self.style.SUCCESS(f" Press Ctrl-C to stop.\n{line}"))
        self.stdout.flush()


def _truth(job_dir: Path) -> dict[str, Any]:
    try:
        truth = json.loads((job_dir / "truth.json").read_text())
    except (OSError, ValueError):
        return {}
    return truth if isinstance(truth, dict) else {}


def _sibling_tool(prometheus_bin: str, tool: str) -> str:
    """Return `tool` next to the Prometheus binary when that is a path, else `tool` from PATH."""
    path = Path(prometheus_bin)
    return str(path.with_name(tool)) if path.parent != Path(".") else tool


def _stop_children(children: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
    """Stop each child's process group (web first): SIGTERM to the leader, which stops its own
    workers (gunicorn's arbiter, Celery's warm shutdown), then SIGKILL to the group after a grace period.

    Only groups this command created are signalled: each child leads its own session.
    """
    for _, proc in reversed(children):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for _, proc in reversed(children):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    for _, proc in children:
        # Only while the leader is unreaped is its pid surely still our group's id. A leader that
        # exited (gunicorn's arbiter, Celery's main process) has already waited for its own workers.
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
