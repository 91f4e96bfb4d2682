"""OpenMetrics text for blind-b's outside corpus, and the promtool call that turns it into a TSDB.

Series are collected per metric family (families are never interleaved, as OpenMetrics requires) and
written in time order per series. Every family is typed `gauge`: a TSDB block keeps no type, and
the exporters' own names (`..._total`, DCGM's `..._TOTAL`) are kept exactly as they expose them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

PROMTOOL = "promtool"


def _label_text(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return "{" + body + "}"


class OpenMetrics:
    """Collects series, then writes one OpenMetrics file."""

    def __init__(self) -> None:
        self._families: dict[str, list[tuple[str, np.ndarray, np.ndarray]]] = {}

    def add(self, name: str, labels: dict[str, str], ts: np.ndarray, vals: np.ndarray) -> None:
        """One series: timestamps (unix s) and values of equal length; non-finite values are dropped."""
        ts = np.asarray(ts, dtype=float)
        vals = np.asarray(vals, dtype=float)
        keep = np.isfinite(vals) & np.isfinite(ts)
        if not keep.any():
            return
        self._families.setdefault(name, []).append((_label_text(labels), ts[keep], vals[keep]))

    @property
    def series_count(self) -> int:
        return sum(len(v) for v in self._families.values())

    def write(self, path: Path) -> int:
        """Write the file; return the number of samples."""
        n = 0
        with open(path, "w") as fh:
            for name, series in self._families.items():
                fh.write(f"# TYPE {name} gauge\n")
                for lbl, ts, vals in series:
                    order = np.argsort(ts, kind="stable")
                    ts, vals = ts[order], vals[order]
                    _, first = np.unique(np.round(ts, 3), return_index=True)
                    ts, vals = ts[first], vals[first]
                    integral = bool(np.all(vals == np.round(vals))) and np.abs(vals).max() < 1e15
                    fmt = (
                        "{:.0f}" if integral else "{:.15g}"
                    )  # 15 digits: exact for unix times and byte counters
                    head = name + lbl + " "
                    fh.write(
                        "".join(f"{head}{fmt.format(v)} {t:.3f}\n" for t, v in zip(ts, vals, strict=True))
                    )
                    n += len(ts)
            fh.write("# EOF\n")
        return n


def build_tsdb(om_file: Path, tsdb_dir: Path) -> None:
    """`promtool tsdb create-blocks-from openmetrics`; raises with promtool's stderr on failure."""
    tsdb_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(om_file), str(tsdb_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"promtool failed on {om_file}: {proc.stderr.strip()[-500:]}")
