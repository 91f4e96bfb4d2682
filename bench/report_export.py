"""The report's PDF export: pinned charts drawn by kaleido (Debian's Chromium), then laid out by WeasyPrint.

Usage: .venv/bin/python bench/report_export.py [--charts 6] [--hosts 8] [--points 600]

Prints, for N pinned charts of H hosts x P points each: the time to draw them cold (Chromium started, no
cached PNG), warm (every PNG cached by the figure's hash), and WeasyPrint's layout of a report of that
size, with the PDF's size. Runs on a private data directory; nothing is left behind.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _figure(i: int, hosts: int, points: int) -> dict:
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": f"node{h:03d}",
            "x": list(range(points)),
            "y": [60 + 10 * math.sin((t + 7 * h + i) / 40) + h for t in range(points)],
        }
        for h in range(hosts)
    ]
    return {"data": data, "layout": {"title": {"text": f"panel {i}"}}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--charts", type=int, default=6)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--points", type=int, default=600)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        os.environ.update(STEPWISE_DATA_DIR=data_dir, DJANGO_SETTINGS_MODULE="stepwise.settings")
        sys.path.insert(0, str(REPO))
        import django

        django.setup()
        from weasyprint import HTML

        from reports.services import charts

        figures = [_figure(i, args.hosts, args.points) for i in range(args.charts)]
        t0 = time.perf_counter()
        pngs = charts.charts_png(figures)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        charts.charts_png(figures)
        warm = time.perf_counter() - t0
        drawn = sum(p is not None for p in pngs)
        import base64

        body = "".join(
            f"<h2>Panel {i}</h2><p>{'Evidence text. ' * 80}</p>"
            f'<img style="width:100%" src="data:image/png;base64,{base64.b64encode(p).decode()}">'
            for i, p in enumerate(pngs)
            if p
        )
        t0 = time.perf_counter()
        pdf = HTML(string=f"<html><body><h1>Report</h1>{body}</body></html>").write_pdf()
        layout = time.perf_counter() - t0
    print(f"charts: {args.charts} x {args.hosts} hosts x {args.points} points, {drawn} drawn")
    print(f"draw cold (Chromium start + every chart): {cold:.2f} s ({cold / max(drawn, 1):.2f} s per chart)")
    print(f"draw warm (PNG cache): {warm * 1000:.1f} ms")
    print(f"WeasyPrint layout: {layout:.2f} s, PDF {len(pdf) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
