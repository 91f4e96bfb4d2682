"""How fast the timeline is at scale: 128 nodes x 8 GPUs (1,024 GPUs) x 4 h at 15 s.

Usage: .venv/bin/python bench/timeline_speed.py [--nodes 128] [--gpus 8] [--hours 4] [--rebuild] [--no-browser]

1. Generates a thermal-straggler job once into data/bench/timeline-<nodes>x<gpus>x<hours>h/ (about 100 s and
   3 GB peak, promtool's; a marker file records it, later runs reuse it).
2. Serves a read-only copy of its TSDB with a real Prometheus.
3. Builds the timeline as the app does: the shared context, every default panel's queries in parallel, the
   annotations, one Plotly figure per panel. Twice: cold (Prometheus' caches empty) and warm.
4. Prints server time per phase, query count, bytes per panel and in total, the panel modes and the
   outliers named (the hot GPU should be first in GPU temperature and clock).
5. Renders every figure in headless Chromium with the vendored plotly.js and prints the render time.
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

from playbooks import timeline as tl  # noqa: E402 - after the path set-up above
from playbooks import tsdb_server  # noqa: E402
from playbooks.profiles import PROFILES  # noqa: E402
from playbooks.prometheus import PrometheusClient  # noqa: E402
from playbooks.synth import generate_job  # noqa: E402
from playbooks.triage import triage_job  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")


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
    """Return the CPU time (user + system) a process has used, from /proc (0 when unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _build(client: PrometheusClient, served: tsdb_server.ServedTSDB, triage: dict) -> dict:
    start, end = served.time_range
    before = client.stats.requests
    cpu0, py0 = _cpu_seconds(served.pid), time.process_time()
    t0 = time.perf_counter()
    ctx = tl.context_build(client, PROFILES["amd"], start, end)
    t1 = time.perf_counter()
    keys = tl.default_panels(ctx.profile)
    panels = tl.panels_fetch(client, ctx, keys, start, end)
    t2 = time.perf_counter()
    marks = tl.annotations_build(ctx, triage)
    figures = {p.spec.key: tl.figure_build(p, ctx, xmode="step", annotations=marks) for p in panels}
    t3 = time.perf_counter()
    cpu = {"prometheus": _cpu_seconds(served.pid) - cpu0, "python": time.process_time() - py0}
    sizes = {k: len(json.dumps(f, separators=(",", ":"))) for k, f in figures.items()}
    return {
        "ctx": ctx,
        "panels": panels,
        "figures": figures,
        "sizes": sizes,
        "seconds": {"context": t1 - t0, "queries": t2 - t1, "figures": t3 - t2, "total": t3 - t0},
        "requests": client.stats.requests - before,
        "cpu": cpu,
    }


def _per_panel(client: PrometheusClient, served: tsdb_server.ServedTSDB, ctx, triage: dict) -> dict:
    """Return {panel: (seconds, Prometheus CPU seconds, queries)} of one request per panel, context cached.

    The page loads panels lazily, each its own request; this is what one costs on the server.
    """
    start, end = served.time_range
    marks = tl.annotations_build(ctx, triage)
    out = {}
    for key in tl.default_panels(ctx.profile):
        before, cpu0 = client.stats.requests, _cpu_seconds(served.pid)
        t0 = time.perf_counter()
        (panel,) = tl.panels_fetch(client, ctx, [key], start, end)
        tl.figure_build(panel, ctx, xmode="step", annotations=marks)
        seconds = time.perf_counter() - t0
        out[key] = (seconds, _cpu_seconds(served.pid) - cpu0, client.stats.requests - before)
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
        plotly = (REPO / "static" / "vendor" / "plotly.min.js").as_uri()
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
    args = ap.parse_args()
    job_dir = _job(args)
    truth = json.loads((job_dir / "truth.json").read_text())
    views = REPO / "data" / "bench" / "timeline-views"
    t0 = time.monotonic()
    served = tsdb_server.ensure_served(job_dir / "prometheus", work_root=views)
    print(f"served {served.url} in {time.monotonic() - t0:.1f} s; culprit {truth['culprits']}")
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (wall times grow with it)")
    # The app reads the triage stored on the job; triaging the log here is not part of the server time.
    t0 = time.perf_counter()
    triage = triage_job(job_dir).to_dict()
    print(
        f"triage of the job log (stored on the job in the app, not timed below): {time.perf_counter() - t0:.2f} s"
    )
    try:
        with PrometheusClient(served.url, timeout=120.0) as client:
            runs = [_build(client, served, triage) for _ in range(2)]
            per_panel = _per_panel(client, served, runs[0]["ctx"], triage)
    finally:
        tsdb_server.stop(served)
    ctx = runs[0]["ctx"]
    print(
        f"job: {args.nodes} nodes x {args.gpus} GPUs x {args.hours:g} h; {ctx.gpu_series} GPU series, "
        f"{ctx.host_series} host series, interval {ctx.interval} s, steps {ctx.axis.first_step:.0f}-{ctx.axis.last_step:.0f}"
    )
    for name, run in zip(("cold", "warm"), runs, strict=True):
        s = run["seconds"]
        print(
            f"server time ({name}): total {s['total']:.2f} s = context {s['context']:.2f} + panel queries "
            f"{s['queries']:.2f} + figures {s['figures']:.2f}; {run['requests']} queries; CPU used: "
            f"Prometheus {run['cpu']['prometheus']:.1f} s, this process {run['cpu']['python']:.1f} s"
        )
    run = runs[1]
    print("one request per panel (context cached): server s / Prometheus CPU s / queries")
    print(
        f"{'panel':<26} {'mode':<12} {'traces':>6} {'bytes':>9} {'server':>7} {'prom':>6} {'q':>2}  outliers"
    )
    for p in run["panels"]:
        names = ", ".join(o["name"] for o in p.outliers) or p.message[:60]
        sec, cpu, n = per_panel[p.spec.key]
        print(
            f"{p.spec.key:<26} {p.mode:<12} {len(p.traces):>6} {run['sizes'][p.spec.key]:>9,} {sec:>7.2f} "
            f"{cpu:>6.2f} {n:>2}  {names}"
        )
    slowest = max(per_panel.items(), key=lambda kv: kv[1][0])
    print(
        f"per-panel requests: slowest {slowest[0]} {slowest[1][0]:.2f} s; "
        f"sum {sum(v[0] for v in per_panel.values()):.2f} s, Prometheus CPU {sum(v[1] for v in per_panel.values()):.1f} s"
    )
    total = sum(run["sizes"].values())
    print(
        f"bytes sent: {total:,} in total for {len(run['sizes'])} panels "
        f"(max {max(run['sizes'].values()):,} per panel)"
    )
    if not args.no_browser:
        rendered = _render(run["figures"])
        if rendered:
            print(
                f"headless Chromium: page + plotly.js load {rendered['load_s']:.2f} s; render of all panels "
                f"{rendered['render_ms']:.0f} ms (slowest {rendered['slowest'][0]}: {rendered['slowest'][1]:.0f} ms)"
            )


if __name__ == "__main__":
    main()
