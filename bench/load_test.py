"""Load test: 20 signed-in users browsing Stepwise at once, on the production stack, loopback only.

Usage: .venv/bin/python bench/load_test.py [--users 20] [--seconds 60] [--port 8106] [--redis-db 13]
                                          [--investigations 120] [--repeat 15] [--in-process-only]
                                          [--profile "report page"]

Needs PostgreSQL at 127.0.0.1:5432 (user postgres, trust auth) and Redis at 127.0.0.1:6379, as the
`postgres` and `redis` test marks do. Bounded in time and count; everything it starts is stopped and
everything it creates is removed at the end (a throwaway database, a Redis database it flushes, a
temporary data directory).

1. Generates three small incident jobs once into data/bench/load-jobs/ (8 nodes, 2 h).
2. Creates a throwaway PostgreSQL database, migrates it, creates 20 users and 120 investigations on
   the jobs (their log triage stored), each diagnosed and with a report people worked on (edits,
   verdicts, comments, action items, pins, notes: bench/load_seed.py), and fills the shared timeline
   cache (Redis) by drawing each job's timeline once: the load test measures the app, not Prometheus.
   Then prints each page's own server cost, in this process through Django's test client, one request
   at a time (median of `--repeat`, and its database queries): the figure without contention.
3. Starts gunicorn (3 workers x 4 threads, as the Docker image; `--workers`, `--threads`) and 2 Celery workers on the same settings
   (DATABASE_URL, REDIS_URL), as in production.
4. Runs locust headless (`bench/locustfile.py`): the signed-in users browse the list (plain and
   searched), investigation pages, reports and timeline panels (cached) for `--seconds`.
5. Prints requests, failures, median, p95 and p99 per page and over all pages, with the machine's load.

The users are signed in ahead (a session each, made as the login form makes it): signing in costs a
deliberately slow password hash once per user, which is not what a page costs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from playbooks import tsdb_guard  # noqa: E402 - after the path set-up above
from playbooks.synth import generate_job  # noqa: E402

SCENARIOS = ("thermal-straggler", "rdma-degradation", "healthy")
PANELS = ("loss", "step_time", "gpu_temp", "gpu_power", "rdma_retransmits", "procs_running")


def _jobs() -> list[Path]:
    root = REPO / "data" / "bench" / "load-jobs"
    out = []
    for i, scenario in enumerate(SCENARIOS):
        job_dir = root / scenario
        if not (job_dir / "truth.json").exists():
            shutil.rmtree(job_dir, ignore_errors=True)
            generate_job(scenario, 11 + i, 8, job_dir, profile="amd", gpus=8, hours=2.0)
        out.append(job_dir)
    return out


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"


def _env(args: argparse.Namespace, data_dir: Path, db: str, job_root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "stepwise.settings",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{db}",
        "REDIS_URL": f"redis://127.0.0.1:6379/{args.redis_db}",
        "STEPWISE_DATA_DIR": str(data_dir),
        "STEPWISE_JOB_ROOTS": str(job_root),
        "SECRET_KEY": secrets.token_urlsafe(50),
        "DEBUG": "0",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "STEPWISE_LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }


def _database(db: str, create: bool) -> None:
    import psycopg

    with psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        if create:
            conn.execute(f'CREATE DATABASE "{db}"')


def _populate(jobs: list[Path], users: int, investigations: int) -> dict:
    """Migrate, create users and the data set (bench/load_seed.py), fill the timeline cache; return the
    locust plan."""
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.cache import cache
    from django.test import Client

    from bench.load_seed import seed
    from investigations import services
    from investigations.models import Investigation
    from investigations.services import timeline as svc
    from playbooks.triage import triage_job

    cache.clear()
    accounts, people = [], []
    for i in range(users):
        user = get_user_model().objects.create_user(f"engineer{i:02d}", password=secrets.token_urlsafe(16))
        # Signed in ahead (a session row, as after the login form): the run measures browsing, not the
        # deliberately slow password hash every user pays once.
        client = Client()
        client.force_login(user, backend="django.contrib.auth.backends.ModelBackend")
        accounts.append((settings.SESSION_COOKIE_NAME, client.cookies[settings.SESSION_COOKIE_NAME].value))
        people.append(user)
    registered = []
    for job_dir in jobs:
        job, ds = services.job_register(job_dir)
        job.triage = {"state": "done", **triage_job(job_dir).to_dict()}
        job.save()
        registered.append((job, ds))
    pks = seed(registered, people, investigations)
    t0 = time.perf_counter()
    for i, (job, ds) in enumerate(registered):
        inv = Investigation.objects.get(pk=pks[i])
        for panel in PANELS:  # the page asks one panel a request: fill exactly those entries
            svc.timeline_figures(inv, job, ds, svc.TimelineView(), panels=[panel])
    print(f"timeline cache filled for {len(registered)} jobs in {time.perf_counter() - t0:.1f} s")
    searches = [job.job_id for job, _ in registered] + ["incident", "thermal"]
    return {"users": accounts, "investigations": pks, "panels": list(PANELS), "searches": searches}


def _page_urls(plan: dict, i: int) -> dict[str, str]:
    """Return {page: URL} for the i-th visit, as the locust users ask them."""
    pk = plan["investigations"][i % len(plan["investigations"])]
    return {
        "investigations list": "/",
        "investigations list (search)": "/?q=" + plan["searches"][i % len(plan["searches"])],
        "investigation page": f"/investigations/{pk}/",
        "report page": f"/investigations/{pk}/report/",
        "timeline panel (cached)": f"/investigations/{pk}/timeline/panels/{plan['panels'][i % len(plan['panels'])]}/",
    }


def _in_process(plan: dict, repeat: int) -> None:
    """Print each page's own server cost: the median of `repeat` requests through Django's test client in
    this process (no network, no other request at the same time), with the CPU time this process spent
    on it (median; PostgreSQL's own is not in it) and its database queries."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(get_user_model().objects.get(username="engineer00"))
    for i in range(len(plan["investigations"])):  # the first visits create what a report needs
        client.get(_page_urls(plan, i)["report page"])
    costs: dict[str, list[tuple[float, float, int]]] = {}
    for i in range(repeat):
        for name, url in _page_urls(plan, i).items():
            with CaptureQueriesContext(connection) as captured:
                t0, cpu0 = time.perf_counter(), time.thread_time()
                response = client.get(url)
                ms, cpu = (time.perf_counter() - t0) * 1000, (time.thread_time() - cpu0) * 1000
            if response.status_code != 200:
                raise RuntimeError(f"{url} answered {response.status_code}")
            costs.setdefault(name, []).append((ms, cpu, len(captured.captured_queries)))
    print(f"in-process server time, median of {repeat} (one request at a time; {_load()}):")
    print(f"{'page':<34} {'median ms':>9} {'max ms':>7} {'CPU ms':>7} {'queries':>7}")
    for name, rows in costs.items():
        ms, cpu = [r[0] for r in rows], [r[1] for r in rows]
        print(
            f"{name:<34} {_pct(ms, 0.5):>9.1f} {max(ms):>7.1f} {_pct(cpu, 0.5):>7.1f} {max(r[2] for r in rows):>7}"
        )


def _profile(plan: dict, page: str) -> None:
    """Print one warm request of `page`: each database query (its start) and cProfile's top functions."""
    import cProfile
    import pstats

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(get_user_model().objects.get(username="engineer00"))
    url = _page_urls(plan, 1)[page]
    client.get(url)  # warm: what every later visit finds
    with CaptureQueriesContext(connection) as captured:
        profiler = cProfile.Profile()
        response = profiler.runcall(client.get, url)
    print(f"{page} ({url}, {response.status_code}): {len(captured.captured_queries)} queries")
    for q in captured.captured_queries:
        print(f"  {q['time']:>6} s  {q['sql'][:150]}")
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(25)


def _spawn(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    out = open(log, "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _wait_ready(url: str, procs: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a server process exited while starting (see the logs in the data directory)")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer within 90 s")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


def _report(times_path: Path) -> int:
    """Print per page and over all pages (signing in excluded: a deliberately slow password hash, once
    per user) the requests, failures, median, p95 and p99 in milliseconds; return the failures."""
    times = json.loads(times_path.read_text())
    pages: dict[str, list[tuple[float, bool]]] = {}
    for name, ms, ok in times:
        pages.setdefault(name, []).append((ms, ok))
    print(f"{'page':<34} {'requests':>8} {'failures':>8} {'median ms':>9} {'p95 ms':>7} {'p99 ms':>7}")
    browsing: list[float] = []
    failures = 0
    for name, rows in pages.items():
        ms = [m for m, _ in rows]
        bad = sum(1 for _, ok in rows if not ok)
        if name not in ("login form", "sign in"):
            browsing += ms
            failures += bad
        print(
            f"{name:<34} {len(ms):>8} {bad:>8} {_pct(ms, 0.5):>9.0f} {_pct(ms, 0.95):>7.0f} {_pct(ms, 0.99):>7.0f}"
        )
    print(
        f"{'all pages but sign-in':<34} {len(browsing):>8} {failures:>8} {_pct(browsing, 0.5):>9.0f} "
        f"{_pct(browsing, 0.95):>7.0f} {_pct(browsing, 0.99):>7.0f}"
    )
    return failures


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument(
        "--spawn-rate", type=float, default=2.0, help="users started a second (each signs in once)"
    )
    ap.add_argument("--port", type=int, default=8106)
    ap.add_argument("--redis-db", type=int, default=13)
    ap.add_argument("--investigations", type=int, default=120)
    ap.add_argument("--repeat", type=int, default=15, help="requests per page for the in-process cost")
    ap.add_argument("--workers", type=int, default=3, help="gunicorn worker processes")
    ap.add_argument("--threads", type=int, default=4, help="threads of each gunicorn worker")
    ap.add_argument("--in-process-only", action="store_true", help="measure each page's cost; no locust")
    ap.add_argument(
        "--profile", metavar="PAGE", help="also print the queries and a cProfile of one PAGE request"
    )
    args = ap.parse_args()
    if not args.in_process_only and importlib.util.find_spec("locust") is None:
        sys.exit(
            "load_test: locust is not installed; install the bench extra: .venv/bin/pip install -e '.[bench]'"
        )
    jobs = _jobs()
    data_dir = Path(tempfile.mkdtemp(prefix="stepwise-load-"))
    (data_dir / "tsdb-views").mkdir()
    tsdb_guard.guard(data_dir / "tsdb-views")  # the app's TSDB copies stop even if this bench is killed
    db = f"stepwise_load_{os.getpid()}"
    env = _env(args, data_dir, db, jobs[0].parent)
    os.environ.update(env)  # this process populates the same database and cache the servers use
    _database(db, create=True)
    procs: list[subprocess.Popen] = []
    try:
        plan = _populate(jobs, args.users, args.investigations)
        plan_path = data_dir / "plan.json"
        plan_path.write_text(json.dumps(plan))
        _in_process(plan, args.repeat)
        if args.profile:
            _profile(plan, args.profile)
        if args.in_process_only:
            return
        bind = f"127.0.0.1:{args.port}"
        procs.append(_spawn([sys.executable, "-m", "gunicorn", "stepwise.wsgi:application", "--bind", bind,
                             "--workers", str(args.workers), "--threads", str(args.threads)], env, data_dir / "gunicorn.log"))  # fmt: skip
        for name in ("w1", "w2"):
            procs.append(_spawn([sys.executable, "-m", "celery", "-A", "stepwise", "worker", "-l", "warning",
                                 "--concurrency", "1", "-n", f"{name}@%h"], env, data_dir / f"{name}.log"))  # fmt: skip
        _wait_ready(f"http://{bind}/login/", procs)
        print(
            f"gunicorn ({args.workers} workers x {args.threads} threads) + 2 Celery workers + PostgreSQL + Redis up; {_load()}"
        )
        times = data_dir / "times.json"
        t0 = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "locust", "-f", str(REPO / "bench" / "locustfile.py"), "--headless",
             "-u", str(args.users), "-r", str(args.spawn_rate), "-t", f"{args.seconds}s", "--host", f"http://{bind}",
             "--only-summary", "--loglevel", "WARNING", "--stop-timeout", "10"],
            env={**env, "STEPWISE_LOAD_PLAN": str(plan_path), "STEPWISE_LOAD_TIMES": str(times)}, check=False,
            timeout=args.seconds + 120,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        print(f"{args.users} users for {time.monotonic() - t0:.0f} s; {_load()} at the end")
        if _report(times):
            log = (data_dir / "gunicorn.log").read_text(errors="replace").splitlines()
            print("failures: the end of gunicorn's log\n" + "\n".join(log[-15:]))
    finally:
        _stop(procs)
        from django.db import connections

        connections.close_all()
        _database(db, create=False)
        from playbooks import tsdb_server

        tsdb_server.reap_leftovers(data_dir / "tsdb-views")
        tsdb_guard.release(data_dir / "tsdb-views")
        import redis

        redis.Redis.from_url(env["REDIS_URL"]).flushdb()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
