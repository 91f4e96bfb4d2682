"""How fast the timeline is at scale: 128 nodes x 8 GPUs (1,024 GPUs) x 4 h at 15 s.

Usage: .venv/bin/python bench/timeline_speed.py [--nodes 128] [--gpus 8] [--hours 4] [--rebuild] [--no-browser]
                                               [--figures FILE.json] [--per-query]

1. Generates a thermal-straggler job once into data/bench/timeline-<nodes>x<gpus>x<hours>h/ (about 100 s and
   3 GB peak, promtool's; a marker file records it, later runs reuse it).
2. Registers it in a private Stepwise database (a temporary data directory: SQLite, the database cache
   table) and serves a read-only copy of its TSDB with a real Prometheus (not timed).
3. Cold view: every default panel through the app's service (`timeline_figures`) with an empty cache:
   context, panel queries in parallel, annotations, one Plotly figure per panel. Server time, queries, and
   the CPU seconds Prometheus and the app spent on it (what the machine's load inflates least).
4. Prometheus's own evaluation time of the same queries: each query the cold view sent is sent again,
   one at a time, with `stats=all`; the sum of Prometheus's evalTotalTime is the physical limit of a
   cold view (on one core), printed with the ratio of the cold view to it, and the five costliest queries
   (`--per-query`: every query, in the order sent, with the samples it read).
5. Cache hit: the same view again (another user), then one panel alone, as the page loads it: server
   time and queries sent (0: nothing is served or queried).
6. Prints bytes per panel, the panel modes and the outliers named (the hot GPU should be first in GPU
   temperature and clock), and the load average next to every figure (the machine is shared).
7. Renders every figure in headless Chromium with the vendored plotly.js (its gl2d bundle) and prints the
   load and render times, and the render of the first screen's panels (the page draws the others when
   scrolled to).
8. `--figures FILE.json` writes the cold view's figures, to compare two versions of the code on the same job.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from playbooks import tsdb_guard  # noqa: E402 - after the path set-up above
from playbooks.prometheus import PrometheusClient  # noqa: E402
from playbooks.synth import generate_job  # noqa: E402
from playbooks.triage import triage_job  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
FIRST_SCREEN_PANELS = 3


def _job(args: argparse.Namespace) -> Path:
    root = REPO / "data" / "bench" / f"timeline-{args.nodes}x{args.gpus}x{args.hours:g}h"
    marker = root / "built.json"
    job_dir = root / "job"
    want = {"scenario": "thermal-straggler", "seed": 5, "nodes": args.nodes, "gpus": args.gpus,
            "hours": args.hours, "interval": 15.0}  # fmt: skip
    if not args.rebuild and marker.exists() and json.loads(marker.read_text()) == want:
        return job_dir
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    t0 = time.monotonic()
    generate_job("thermal-straggler", 5, args.nodes, job_dir, profile="amd", gpus=args.gpus, hours=args.hours,
                 interval=15.0)  # fmt: skip
    print(f"generated {job_dir} in {time.monotonic() - t0:.0f} s")
    marker.write_text(json.dumps(want))
    return job_dir


def _cpu_seconds(pid: int) -> float:
    """Return the CPU seconds (user + system) process `pid` has used: Prometheus's share of a view, which the
    machine's load does not inflate as it does wall time."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"


def _django(data_dir: Path, job_root: Path) -> None:
    """Set up Django on a private data directory (SQLite + the database cache table), migrated."""
    os.environ.update(
        DJANGO_SETTINGS_MODULE="stepwise.settings", STEPWISE_DATA_DIR=str(data_dir),
        STEPWISE_JOB_ROOTS=str(job_root), STEPWISE_LOG_LEVEL="WARNING",
    )  # fmt: skip
    os.environ.pop("REDIS_URL", None)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


class _Recorder:
    """Records every query the app sends (path and parameters), to replay them with stats=all."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []
        self._orig = PrometheusClient._api
        recorder = self

        def api(client, path, params, *, query):
            if path in ("/api/v1/query", "/api/v1/query_range"):
                recorder.sent.append((client.base_url, path, dict(params)))
            return recorder._orig(client, path, params, query=query)

        PrometheusClient._api = api  # type: ignore[method-assign]

    def evaluation(self) -> tuple[float, float, list[tuple[float, int, int, str]]]:
        """Return (Prometheus's evalTotalTime summed, its execTotalTime summed, every recorded query as
        (evalTotalTime, samples read, series returned, PromQL) in the order sent)."""
        import httpx

        evals = execs = 0.0
        each = []
        for base, path, params in self.sent:
            with httpx.Client(base_url=base, timeout=300, trust_env=False) as http:
                body = http.post(path, data={**params, "stats": "all"}).json()
            stats = body["data"]["stats"]
            timings = stats["timings"]
            evals += timings["evalTotalTime"]
            execs += timings["execTotalTime"]
            samples = stats.get("samples", {}).get("totalQueryableSamples", 0)
            each.append((timings["evalTotalTime"], samples, len(body["data"]["result"]), params["query"]))
        return evals, execs, each


def _views(job_dir: Path, data_dir: Path, triage: dict, recorder: _Recorder) -> dict:
    """Return the cold view, the cache hits and what they cost, through the app's timeline service."""
    from django.core.cache import cache

    from investigations import services
    from investigations.models import Investigation, InvestigationJob
    from investigations.services import timeline as svc

    job, ds = services.job_register(job_dir)
    job.triage = {"state": "done", **triage}
    job.save()
    investigation = Investigation.objects.create(title="bench")
    InvestigationJob.objects.create(investigation=investigation, job=job, role=InvestigationJob.Role.PRIMARY)
    with services.datasource_client(ds):  # serve the TSDB first: starting Prometheus is not the view's cost
        pass
    from playbooks import tsdb_server

    (served,) = tsdb_server.list_served(data_dir / "tsdb-views")
    cache.clear()
    out: dict = {"load_before": _load()}
    t0, cpu0, prom0 = time.perf_counter(), time.process_time(), _cpu_seconds(served.pid)
    cold = svc.timeline_figures(investigation, job, ds, svc.TimelineView())
    out["cold_s"], out["cold_queries"], out["cold_load"] = time.perf_counter() - t0, cold["queries"], _load()
    out["cold_cpu"], out["cold_prom_cpu"] = time.process_time() - cpu0, _cpu_seconds(served.pid) - prom0
    out["figures"] = cold["figures"]
    sent = list(recorder.sent)
    t0 = time.perf_counter()
    hit = svc.timeline_figures(investigation, job, ds, svc.TimelineView())
    out["hit_s"], out["hit_queries"] = time.perf_counter() - t0, hit["queries"]
    t0 = time.perf_counter()
    one = svc.timeline_figures(investigation, job, ds, svc.TimelineView(), panels=["gpu_temp"])
    out["hit_one_s"], out["hit_one_queries"], out["hit_load"] = (
        time.perf_counter() - t0,
        one["queries"],
        _load(),
    )
    out["same"] = hit["figures"] == cold["figures"]
    recorder.sent = sent
    return out


def _render(figures: dict[str, dict]) -> dict[str, float] | None:
    if not CHROMIUM.exists():
        print("no /usr/bin/chromium: render time not measured")
        return None
    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp(prefix="stepwise-render-"))
    try:
        (tmp / "figures.js").write_text(
            "window.FIGURES = " + json.dumps(figures, separators=(",", ":")) + ";"
        )
        divs = "".join(f'<div id="p-{k}" style="width:1300px;height:260px"></div>' for k in figures)
        plotly = (REPO / "static" / "vendor" / "plotly-gl2d.min.js").as_uri()
        (tmp / "index.html").write_text(
            f'<!doctype html><html><body>{divs}<script src="{plotly}"></script><script src="figures.js"></script>'
            "<script>window.render = async () => { const t0 = performance.now(); const per = {};"
            " for (const [k, f] of Object.entries(window.FIGURES)) { const s = performance.now();"
            " await Plotly.newPlot('p-' + k, f.data, f.layout); per[k] = performance.now() - s; }"
            " return {total: performance.now() - t0, per}; };</script></body></html>"
        )
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                         args=["--no-sandbox", "--disable-gpu"])  # fmt: skip
            page = browser.new_page(viewport={"width": 1360, "height": 900})
            t0 = time.perf_counter()
            page.goto((tmp / "index.html").as_uri())
            page.wait_for_function("() => window.Plotly && window.FIGURES")
            load = time.perf_counter() - t0
            result = page.evaluate("() => window.render()")
            browser.close()
        return {
            "load_s": load,
            "render_ms": result["total"],
            "slowest": max(result["per"].items(), key=lambda kv: kv[1]),
            # what the page draws on load in a 1360x900 window: the first three panels (the others are
            # fetched near the screen and drawn when scrolled to, static/timeline_panels.js)
            "first_screen_ms": sum(list(result["per"].values())[:FIRST_SCREEN_PANELS]),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=4.0)
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument(
        "--figures", type=Path, help="write the cold view's figures to this JSON file (to compare runs)"
    )
    ap.add_argument(
        "--per-query", action="store_true", help="print every query's evaluation and samples read"
    )
    args = ap.parse_args()
    job_dir = _job(args)
    data_dir = Path(tempfile.mkdtemp(prefix="stepwise-bench-"))
    (data_dir / "tsdb-views").mkdir()
    tsdb_guard.guard(data_dir / "tsdb-views")  # the copies stop even if this bench is killed
    try:
        _django(data_dir, job_dir.parent)
        _run(args, job_dir, data_dir)
    finally:
        from playbooks import tsdb_server

        tsdb_server.reap_leftovers(data_dir / "tsdb-views")
        tsdb_guard.release(data_dir / "tsdb-views")
        shutil.rmtree(data_dir, ignore_errors=True)


def _run(args: argparse.Namespace, job_dir: Path, data_dir: Path) -> None:
    truth = json.loads((job_dir / "truth.json").read_text())
    # The app reads the triage stored on the job; triaging the log here is not part of the server time.
    triage = triage_job(job_dir).to_dict()
    recorder = _Recorder()
    views = _views(job_dir, data_dir, triage, recorder)
    evals, execs, each = recorder.evaluation()
    n, costliest = len(each), sorted(each, reverse=True)[:5]
    meta = {k: f["layout"]["meta"] for k, f in views["figures"].items()}
    if args.figures:
        args.figures.write_text(json.dumps(views["figures"], sort_keys=True))
    print(f"job: {args.nodes} nodes x {args.gpus} GPUs x {args.hours:g} h, culprit {truth['culprits']}")
    print(
        f"cold view, all {len(meta)} default panels: {views['cold_s']:.2f} s server time, "
        f"{views['cold_queries']} queries ({views['load_before']} before, {views['cold_load']} after); CPU: "
        f"Prometheus {views['cold_prom_cpu']:.2f} s, the app {views['cold_cpu']:.2f} s"
    )
    print(
        f"Prometheus's own evaluation of the same {n} queries, one at a time: {evals:.2f} s "
        f"(execTotalTime {execs:.2f} s); cold view / evaluation = {views['cold_s'] / evals:.2f} ({_load()})"
    )
    for secs, samples, _, promql in each if args.per_query else costliest:
        print(f"  {secs:6.3f} s {samples:>11,} samples  {promql[: 2000 if args.per_query else 110]}")
    print(
        f"cache hit, same view by another user: {views['hit_s']:.3f} s, {views['hit_queries']} queries; "
        f"one panel: {views['hit_one_s']:.3f} s, {views['hit_one_queries']} queries; identical figures: "
        f"{views['same']} ({views['hit_load']})"
    )
    sizes = {k: len(json.dumps(f, separators=(",", ":"))) for k, f in views["figures"].items()}
    print(f"{'panel':<26} {'mode':<12} {'traces':>6} {'bytes':>9}  outliers")
    for key, m in meta.items():
        names = ", ".join(o["name"] for o in m["outliers"]) or (m["message"] or "")[:60]
        traces = len(views["figures"][key]["data"])
        print(f"{key:<26} {m['mode']:<12} {traces:>6} {sizes[key]:>9,}  {names}")
    print(f"bytes sent: {sum(sizes.values()):,} in total (max {max(sizes.values()):,} per panel)")
    if not args.no_browser:
        rendered = _render(views["figures"])
        if rendered:
            print(
                f"headless Chromium: page + plotly.js load {rendered['load_s']:.2f} s; render of all panels "
                f"{rendered['render_ms']:.0f} ms (slowest {rendered['slowest'][0]}: {rendered['slowest'][1]:.0f} ms;"
                f" the first screen's {FIRST_SCREEN_PANELS}: {rendered['first_screen_ms']:.0f} ms) ({_load()})"
            )


if __name__ == "__main__":
    main()
