"""Test helpers that build real TSDBs and run real Prometheus servers.

- write_openmetrics() + build_tsdb(): immutable blocks in the past via `promtool tsdb create-blocks-from`.
- make_wal_tsdb(): add a tail that lives only in wal/ (a short-lived Prometheus records a rule).
- running_prometheus(): a "live job" Prometheus on a directory (it holds the lock).
- served(): serve_readonly() ... stop() as a context manager.
- tree_snapshot(): every path with size, mtime and content hash, to prove a directory was not touched.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playbooks.prometheus import PrometheusClient
from playbooks.tsdb_server import ServedTSDB, find_free_port, serve_readonly, stop

PROMETHEUS = shutil.which("prometheus") or "prometheus"
PROMTOOL = shutil.which("promtool") or "promtool"

WAL_TAIL_METRIC = "stepwise_wal_tail"


@dataclass(frozen=True)
class Family:
    """One OpenMetrics metric family.

    Attributes:
        name: Family name; for a counter without the `_total` suffix that its samples carry.
        type: "gauge", "counter" or "unknown".
        help: HELP text.
        series: (labels, points) pairs; points are (unix seconds, value) in time order.
    """

    name: str
    type: str = "gauge"
    help: str = ""
    series: Sequence[tuple[Mapping[str, str], Sequence[tuple[float, float]]]] = field(default_factory=tuple)


def points(start: float, end: float, step: float, fn: Callable[[float], float]) -> list[tuple[float, float]]:
    """Return [(t, fn(t))] for t = start, start + step, ... <= end."""
    n = int(math.floor((end - start) / step + 1e-9)) + 1
    return [(start + i * step, fn(start + i * step)) for i in range(n)]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _fmt_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _fmt_ts(ts: float) -> str:
    # OpenMetrics timestamps are seconds; keep millisecond precision, no trailing zeros.
    return f"{ts:.3f}".rstrip("0").rstrip(".")


def write_openmetrics(path: str | os.PathLike[str], families: Iterable[Family]) -> Path:
    """Return `path` after writing `families` as OpenMetrics text ending in `# EOF`.

    Each family's lines are contiguous and each series' samples stay in the given (time) order, as
    promtool's backfill requires.
    """
    lines: list[str] = []
    for fam in families:
        if fam.help:
            lines.append(f"# HELP {fam.name} {fam.help}")
        lines.append(f"# TYPE {fam.name} {fam.type}")
        sample_name = f"{fam.name}_total" if fam.type == "counter" else fam.name
        for labels, pts in fam.series:
            rendered = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(labels.items()))
            head = f"{sample_name}{{{rendered}}}" if rendered else sample_name
            lines.extend(f"{head} {_fmt_value(v)} {_fmt_ts(t)}" for t, v in pts)
    lines.append("# EOF")
    out = Path(path)
    out.write_text("\n".join(lines) + "\n")
    return out


def build_tsdb(openmetrics_path: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> Path:
    """Return `out_dir` after backfilling it with blocks from an OpenMetrics file (2 h blocks)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics_path), str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if res.returncode != 0:
        raise RuntimeError(f"promtool failed ({res.returncode}): {res.stderr.strip() or res.stdout.strip()}")
    return out


@functools.cache
def _supports(flag: str) -> bool:
    res = subprocess.run([PROMETHEUS, "--help"], capture_output=True, text=True, timeout=30)
    return flag in res.stdout + res.stderr


@dataclass(frozen=True)
class LiveServer:
    """A Prometheus started by running_prometheus().

    Attributes:
        pid: Its process id.
        url: http://127.0.0.1:<port>.
        tsdb_dir: The directory it owns.
    """

    pid: int
    url: str
    tsdb_dir: Path


@contextlib.contextmanager
def running_prometheus(
    tsdb_dir: str | os.PathLike[str],
    *,
    lockfile: bool = True,
    rule_interval: str | None = None,
    kill: bool = False,
) -> Iterator[LiveServer]:
    """Yield a live Prometheus owning `tsdb_dir`, as a running job's server would.

    lockfile: hold `<dir>/lock` (Debian's build needs --storage.tsdb.use-lockfile; upstream locks by
    default). rule_interval: also record `stepwise_wal_tail{host="tail-host"} = time()` at this
    interval, so fresh samples land in the WAL without the 5 s wait of scrape discovery.
    kill: end with SIGKILL like a preempted job (leaves a stale `lock`), else SIGTERM.
    """
    tsdb = Path(tsdb_dir)
    tsdb.mkdir(parents=True, exist_ok=True)
    conf_dir = Path(tempfile.mkdtemp(prefix="stepwise-live-"))
    config = "global:\n  scrape_interval: 999h\n  evaluation_interval: 999h\n"
    if rule_interval:
        (conf_dir / "rules.yml").write_text(
            "groups:\n"
            "  - name: stepwise-wal-tail\n"
            f"    interval: {rule_interval}\n"
            "    rules:\n"
            f"      - record: {WAL_TAIL_METRIC}\n"
            "        expr: vector(time())\n"
            "        labels:\n"
            "          host: tail-host\n"
        )
        config += "rule_files:\n  - rules.yml\n"
    (conf_dir / "prometheus.yml").write_text(config)
    port = find_free_port(start=20190, end=20990)
    cmd = [
        PROMETHEUS,
        f"--config.file={conf_dir / 'prometheus.yml'}",
        f"--storage.tsdb.path={tsdb}",
        "--storage.tsdb.retention.time=100y",  # the default 15d would delete backfilled blocks
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    if lockfile and _supports("--storage.tsdb.use-lockfile"):
        cmd.append("--storage.tsdb.use-lockfile")
    elif not lockfile and _supports("--storage.tsdb.no-lockfile"):
        cmd.append("--storage.tsdb.no-lockfile")
    log = open(conf_dir / "prometheus.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        with PrometheusClient(url, timeout=2.0, retries=1) as client:
            deadline = time.monotonic() + 30
            while not client.ready():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"test Prometheus did not start: {(conf_dir / 'prometheus.log').read_text()[-2000:]}"
                    )
                time.sleep(0.05)
        yield LiveServer(pid=proc.pid, url=url, tsdb_dir=tsdb)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()
        shutil.rmtree(conf_dir, ignore_errors=True)


@dataclass(frozen=True)
class WalTail:
    """Samples make_wal_tsdb() saw written to the WAL (more may follow until the server stopped).

    Attributes:
        metric: The metric name, `stepwise_wal_tail`.
        timestamps: Sample times in unix seconds, ascending.
    """

    metric: str
    timestamps: tuple[float, ...]


def make_wal_tsdb(tsdb_dir: str | os.PathLike[str], *, samples: int = 4, crash: bool = True) -> WalTail:
    """Return the tail written to `tsdb_dir`/wal by a short-lived Prometheus (blocks stay as they are).

    The tail is near now and never compacted (far less than the 3 h a head needs), so it lives only in
    wal/ as a finished job's last hours do. crash=True ends with SIGKILL like a killed job, leaving a
    stale `lock` and `queries.active`; False shuts down cleanly (Debian's build then removes `lock`).
    """
    with running_prometheus(tsdb_dir, lockfile=True, rule_interval="200ms", kill=crash) as live:
        with PrometheusClient(live.url, timeout=5.0, retries=2, backoff=0.05) as client:
            deadline = time.monotonic() + 30
            while True:
                got = client.query(f"{WAL_TAIL_METRIC}[1h]")
                if len(got) >= samples or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
    if len(got) < samples:
        raise RuntimeError(f"only {len(got)} WAL samples were recorded")
    return WalTail(WAL_TAIL_METRIC, tuple(sorted(s.timestamp for s in got)))


@contextlib.contextmanager
def served(
    tsdb_dir: str | os.PathLike[str], work_root: str | os.PathLike[str], **kw: Any
) -> Iterator[ServedTSDB]:
    """Yield serve_readonly(tsdb_dir, work_root=work_root, **kw) and stop it afterwards."""
    server = serve_readonly(tsdb_dir, work_root=work_root, **kw)
    try:
        yield server
    finally:
        stop(server)


def tree_snapshot(root: str | os.PathLike[str]) -> dict[str, tuple[Any, ...]]:
    """Return {relative path: (kind, size, mtime_ns, sha256)} for everything under `root`."""
    base = Path(root)
    snap: dict[str, tuple[Any, ...]] = {}
    for path in sorted(base.rglob("*")):
        st = path.lstat()
        rel = str(path.relative_to(base))
        if path.is_dir():
            snap[rel] = ("dir", st.st_mtime_ns)
        else:
            snap[rel] = ("file", st.st_size, st.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return snap
