"""OpenMetrics text written series by series, then turned into TSDB blocks by `promtool`.

A `Series` is a label set with its sample times (seconds) and values; a family groups series under one
`# TYPE` line, as OpenMetrics wants. `write_tsdb` writes the text (families contiguous, times in
seconds with millisecond precision, `# EOF`) and runs
`promtool tsdb create-blocks-from openmetrics FILE DIR`.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


@dataclass
class Series:
    """One time series: its labels, sample times (unix seconds) and values (same length)."""

    labels: dict[str, str]
    times: np.ndarray
    values: np.ndarray


@dataclass
class Family:
    """A metric family: name, OpenMetrics type and its series."""

    name: str
    kind: str  # gauge | counter | unknown
    series: list[Series] = field(default_factory=list)


class Store:
    """The families of one TSDB, in the order they were first added."""

    def __init__(self) -> None:
        self.families: dict[str, Family] = {}

    def add(
        self, name: str, kind: str, labels: dict[str, str], times: np.ndarray, values: np.ndarray
    ) -> None:
        """Add one series (a zero-length series is dropped: a target that was never up)."""
        if len(times) == 0:
            return
        if len(times) != len(values):
            raise ValueError(f"{name}: {len(times)} times but {len(values)} values")
        fam = self.families.setdefault(name, Family(name, kind))
        fam.series.append(Series(dict(labels), np.asarray(times, float), np.asarray(values, float)))

    def sample_count(self) -> int:
        """Return the number of samples held."""
        return sum(len(s.times) for f in self.families.values() for s in f.series)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _label_text(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items())) + "}"


def _sample_name(fam: Family) -> tuple[str, str]:
    """Return (family name for # TYPE, sample name): OpenMetrics counters carry `_total` on samples."""
    if fam.kind == "counter":
        if not fam.name.endswith("_total"):
            raise ValueError(f"counter {fam.name} must end in _total")
        return fam.name[: -len("_total")], fam.name
    return fam.name, fam.name


def _lines(fam: Family) -> Iterable[str]:
    type_name, sample = _sample_name(fam)
    yield f"# TYPE {type_name} {fam.kind}\n"
    for s in fam.series:
        head = sample + _label_text(s.labels) + " "
        order = np.argsort(s.times, kind="stable")
        times, values = s.times[order], s.values[order]
        keep = np.concatenate(([True], np.diff(np.round(times * 1000)) > 0))
        for t, v in zip(times[keep], values[keep], strict=True):
            yield f"{head}{_fmt(v)} {t:.3f}\n"


def _fmt(v: float) -> str:
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(round(float(v), 6))


def write_openmetrics(store: Store, path: Path) -> None:
    """Write the store as one OpenMetrics text file."""
    with path.open("w") as fh:
        for fam in store.families.values():
            fh.writelines(_lines(fam))
        fh.write("# EOF\n")


def write_tsdb(store: Store, tsdb_dir: Path) -> None:
    """Build TSDB blocks for the store in `tsdb_dir` through promtool (raises on failure)."""
    tsdb_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="om-") as tmp:
        text = Path(tmp) / "metrics.om"
        write_openmetrics(store, text)
        cmd = [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(text), str(tsdb_dir)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"promtool failed ({done.returncode}): {done.stderr.strip()[-400:]}")
