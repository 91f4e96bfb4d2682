"""Corpus D: OpenMetrics text from the series, turned into a real TSDB by promtool."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from bench.outside._d_sim import Series


def _label_text(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))


def write_openmetrics(series: Iterable[Series], path: Path) -> int:
    """Write every series grouped by family (OpenMetrics wants a family's samples together).

    A series twice (two hosts under one address) or a sample back in time is the generator's bug: it is
    refused here, by name, rather than by promtool's "out of order sample" with no series named.
    """
    families: dict[str, list[str]] = {}
    seen: set[str] = set()
    samples = 0
    for s in series:
        ok = ~np.isnan(s.times)
        if not ok.any():
            continue
        prefix = f"{s.name}{{{_label_text(s.labels)}}} "
        if prefix in seen or (np.diff(s.times[ok]) <= 0).any():
            raise ValueError(f"series {prefix.strip()} written twice or back in time")
        seen.add(prefix)
        fmt = "{}{:" + s.fmt + "} {:.3f}"
        vals, times = s.values[ok], s.times[ok]
        families.setdefault(s.name, []).append(
            "\n".join(fmt.format(prefix, v, t) for v, t in zip(vals.tolist(), times.tolist(), strict=True))
        )
        samples += int(ok.sum())
    with path.open("w") as out:
        for name, chunks in families.items():
            out.write(f"# TYPE {name} gauge\n")
            for chunk in chunks:
                out.write(chunk)
                out.write("\n")
        out.write("# EOF\n")
    return samples


def build_tsdb(om: Path, tsdb: Path) -> None:
    """promtool tsdb create-blocks-from openmetrics, then drop the text."""
    tsdb.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(tsdb)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"promtool failed on {om}: {done.stderr.strip()[-400:]}")
    om.unlink()
