"""Corpus G's TSDB writer (#10): scrape grids, OpenMetrics text, promtool blocks.

Each target (a host's dcgm-exporter or node_exporter, the training gauges' pushgateway) is scraped on
its own grid: the interval plus a fixed per-target offset and a few milliseconds of jitter. A scrape
that fails leaves `up 0` and no samples; a Prometheus restart leaves nothing at all for a while.
`Om` gathers series family by family and `write` turns them into blocks with promtool.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TextIO

import numpy as np

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def grid(
    t0: float, t1: float, step: float, rng: random.Random, prom_gap: tuple[float, float] | None
) -> np.ndarray:
    """Scrape times of one target: fixed offset, ms jitter, none inside a Prometheus restart."""
    start = t0 + rng.uniform(0, step)
    n = int((t1 - start) / step) + 1
    t = start + np.arange(n) * step + np.array([rng.uniform(0.0, 0.12) for _ in range(n)])
    t = np.round(t, 3)
    if prom_gap:
        t = t[(t < prom_gap[0]) | (t >= prom_gap[1])]
    return t


def _lab(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


class Om:
    """OpenMetrics families, each spooled to its own file; each series' samples strictly increasing in time."""

    def __init__(self) -> None:
        self.spool = Path(tempfile.mkdtemp(prefix="gen_g_"))
        self.fams: dict[str, TextIO] = {}
        self.samples = 0
        self.seen: set[str] = set()

    def add(self, name: str, labels: dict[str, str], t: np.ndarray, v: np.ndarray) -> None:
        """One series; NaN values are dropped (not scraped)."""
        keep = ~np.isnan(v)
        t, v = t[keep], v[keep]
        if len(t) == 0:
            return
        if np.any(np.diff(t) <= 0):
            raise ValueError(f"{name}{{{_lab(labels)}}}: times not strictly increasing")
        head = f"{name}{{{_lab(labels)}}} " if labels else f"{name} "
        if head in self.seen:
            raise ValueError(f"series {head} added twice")
        self.seen.add(head)
        if name not in self.fams:
            self.fams[name] = (self.spool / f"{len(self.fams):03d}").open("w")
            kind = f"{name[:-6]} counter" if name.endswith("_total") else f"{name} gauge"
            self.fams[name].write(f"# TYPE {kind}\n")
        f = self.fams[name]
        f.write("\n".join(f"{head}{x:.10g} {s:.3f}" for s, x in zip(t.tolist(), v.tolist(), strict=True)))
        f.write("\n")
        self.samples += len(t)

    def write(self, out: Path) -> None:
        """Join the families, build the TSDB blocks into `out` with promtool, remove the text."""
        out.mkdir(parents=True, exist_ok=True)
        om = out.parent / (out.name + ".om")
        try:
            with om.open("w") as dst:
                for f in self.fams.values():
                    f.close()
                    with open(f.name) as src:
                        shutil.copyfileobj(src, dst, 1 << 20)
                dst.write("# EOF\n")
            shutil.rmtree(self.spool, ignore_errors=True)
            done = subprocess.run(
                [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(om), str(out)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"promtool failed on {om}: {done.stderr[-800:]}")
        finally:
            shutil.rmtree(self.spool, ignore_errors=True)
            om.unlink(missing_ok=True)


def target(
    om: Om,
    labels: dict[str, str],
    t: np.ndarray,
    ok: np.ndarray,
    dur: np.ndarray,
    n_samples: int,
) -> None:
    """`up`, `scrape_duration_seconds` and `scrape_samples_scraped` of one target."""
    om.add("up", labels, t, ok.astype(float))
    om.add("scrape_duration_seconds", labels, t, dur)
    om.add("scrape_samples_scraped", labels, t, np.where(ok, float(n_samples), 0.0))
