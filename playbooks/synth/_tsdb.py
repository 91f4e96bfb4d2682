"""Build a job's TSDB: OpenMetrics -> promtool blocks, and the final part into wal/ via a real Prometheus.

The last part of a finished job lives only in `wal/` and `chunks_head/` (Prometheus never compacted
its head before it was killed). To reproduce that honestly, a short-lived real Prometheus is started
on the block directory with the remote-write receiver on, the tail samples are pushed to it in time
order, and it is stopped: what it leaves behind is a genuine WAL.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx
import numpy as np

from playbooks import tsdb_guard
from playbooks.errors import PlaybooksError
from playbooks.tsdb_server import find_free_port

from ._emit import Item

# one series' samples for the WAL tail: (name, labels, timestamps, values)
TailSeries = tuple[str, dict[str, str], np.ndarray, np.ndarray]


class SynthError(PlaybooksError):
    """A generated job could not be built (missing promtool/prometheus, a failed tool run)."""


_FMT = {"d": "%d", "f1": "%.1f", "f2": "%.2f", "f3": "%.3f", "f4": "%.4f", "g": "%.6g"}


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(labels.items()))


def write_openmetrics(
    items: Iterable[Item], path: Path, cut: float | None, since: float | None = None
) -> tuple[list[TailSeries], dict[str, int]]:
    """Write samples older than `cut` (and not older than `since`) as OpenMetrics; return (tail series, stats).

    Each returned tail entry is (name, labels, timestamps, values) of samples at or after `cut`.
    """
    tail: list[TailSeries] = []
    ts_cache: dict[int, np.ndarray] = {}
    n_series = n_samples = 0
    with open(path, "w", encoding="ascii", buffering=1 << 22) as fh:
        for name, labels, ts, vals, fmt in items:
            key = id(ts)
            if key not in ts_cache or len(ts_cache[key]) != len(ts):
                ts_cache[key] = np.array([f"{x:.3f}" for x in ts.tolist()], dtype=object)
            ts_s = ts_cache[key]
            ok = ~np.isnan(vals) if since is None else ~np.isnan(vals) & (ts >= since)
            head = ok if cut is None else ok & (ts < cut)
            if head.any():
                pat = f"{name}{{{_labels(labels)}}} {_FMT[fmt]} %s\n"
                fh.write(
                    "".join(
                        [pat % (v, s) for v, s in zip(vals[head].tolist(), ts_s[head].tolist(), strict=True)]
                    )
                )
                n_series += 1
                n_samples += int(head.sum())
            if cut is not None:
                tl = ok & (ts >= cut)
                if tl.any():
                    # the same rounding as the text samples, so both parts of a series agree exactly
                    vf = _FMT[fmt]
                    tail.append((name, labels, ts[tl], np.array([float(vf % v) for v in vals[tl].tolist()])))
        fh.write("# EOF\n")
    return tail, {"series": n_series, "samples": n_samples}


def promtool_blocks(openmetrics: Path, tsdb_dir: Path, promtool: str = "promtool") -> None:
    """Run promtool to turn the OpenMetrics file into TSDB blocks in `tsdb_dir`."""
    tsdb_dir.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(tsdb_dir)],
            capture_output=True,
            text=True,
            timeout=3600,
        )
    except FileNotFoundError as exc:
        raise SynthError(f"promtool not found ({promtool}); install Debian's 'prometheus' package") from exc
    if proc.returncode != 0:
        raise SynthError(f"promtool failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")


# ------------------------------------------------------------------------------------ remote write


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num: int, payload: bytes) -> bytes:
    return _uvarint(num << 3 | 2) + _uvarint(len(payload)) + payload


def _encode_series(labels: list[tuple[str, str]], ts_ms: list[int], vals: list[float]) -> bytes:
    body = bytearray()
    for k, v in labels:
        body += _field(1, _field(1, k.encode()) + _field(2, v.encode()))
    for t, val in zip(ts_ms, vals, strict=True):
        body += _field(2, b"\x09" + struct.pack("<d", val) + b"\x10" + _uvarint(t))
    return _field(1, bytes(body))


def _snappy_literal(data: bytes) -> bytes:
    """Return `data` as a valid snappy block made only of literals (no compression needed here)."""
    out = bytearray(_uvarint(len(data)))
    for i in range(0, len(data), 65536):
        chunk = data[i : i + 65536]
        n = len(chunk) - 1
        if n < 60:
            out.append(n << 2)
        else:
            out.append(61 << 2)
            out += struct.pack("<H", n)
        out += chunk
    return bytes(out)


def _batches(tail: list[TailSeries], slice_s: float, max_samples: int) -> Iterator[bytes]:
    """Yield remote-write payloads in time order: every series' samples of one time slice per batch."""
    if not tail:
        return
    t_min = min(float(e[2][0]) for e in tail)
    t_max = max(float(e[2][-1]) for e in tail)
    prepared = [(sorted([("__name__", n)] + list(lab.items())), ts, v) for n, lab, ts, v in tail]
    lo = t_min
    while lo <= t_max:
        hi = lo + slice_s
        buf = bytearray()
        count = 0
        for labels, ts, v in prepared:
            m = (ts >= lo) & (ts < hi)
            if not m.any():
                continue
            buf += _encode_series(labels, [int(round(x * 1000)) for x in ts[m].tolist()], v[m].tolist())
            count += int(m.sum())
            if count >= max_samples:
                yield bytes(buf)
                buf, count = bytearray(), 0
        if buf:
            yield bytes(buf)
        lo = hi


def write_wal_tail(
    tsdb_dir: Path, tail: list[TailSeries], prometheus: str = "prometheus", timeout: float = 120.0
) -> dict[str, int]:
    """Push the tail samples into `tsdb_dir`'s head through a short-lived real Prometheus; return stats."""
    if not tail:
        return {"samples": 0}
    cfg = tsdb_dir.parent / ".wal-writer.yml"
    cfg.write_text("global:\n  scrape_interval: 1h\n  evaluation_interval: 1h\nscrape_configs: []\n")
    log = tsdb_dir.parent / ".wal-writer.log"
    # If this process is killed meanwhile, the writer (whose --storage.tsdb.path is under the job's folder)
    # stops all the same, instead of serving the job's TSDB, and holding its lock, for ever.
    tsdb_guard.guard(tsdb_dir.parent)
    try:
        return _push_tail(tsdb_dir, tail, prometheus, timeout, cfg, log)
    finally:
        cfg.unlink(missing_ok=True)
        tsdb_guard.release(tsdb_dir.parent)


def _push_tail(
    tsdb_dir: Path, tail: list[TailSeries], prometheus: str, timeout: float, cfg: Path, log: Path
) -> dict[str, int]:
    last_err = ""
    for _attempt in range(5):
        port = find_free_port()
        with open(log, "w") as lf:
            try:
                proc = subprocess.Popen(
                    [
                        prometheus,
                        f"--config.file={cfg}",
                        f"--storage.tsdb.path={tsdb_dir}",
                        "--storage.tsdb.retention.time=100y",
                        f"--web.listen-address=127.0.0.1:{port}",
                        "--web.enable-remote-write-receiver",
                    ],
                    stdout=lf,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except FileNotFoundError as exc:
                raise SynthError(
                    f"prometheus not found ({prometheus}); install Debian's 'prometheus' package"
                ) from exc
        try:
            url = f"http://127.0.0.1:{port}"
            if not _wait_ready(proc, url, timeout):
                last_err = log.read_text()[-1500:]
                continue
            if not _serves(url, tsdb_dir):
                # Another process took the port between our check and our bind (generators running side by
                # side): ours could not listen, and pushing to theirs would write into a foreign TSDB.
                last_err = f"port {port} was taken by another Prometheus"
                continue
            with httpx.Client(timeout=60.0) as client:
                for payload in _batches(tail, 600.0, 250_000):
                    r = client.post(
                        f"{url}/api/v1/write",
                        content=_snappy_literal(payload),
                        headers={
                            "Content-Encoding": "snappy",
                            "Content-Type": "application/x-protobuf",
                            "X-Prometheus-Remote-Write-Version": "0.1.0",
                        },
                    )
                    if r.status_code >= 300:
                        raise SynthError(f"remote write refused ({r.status_code}): {r.text[:500]}")
            log.unlink(missing_ok=True)
            return {"samples": sum(len(e[2]) for e in tail), "series": len(tail)}
        finally:
            _stop(proc)
    raise SynthError(f"could not start a Prometheus to write the WAL tail: {last_err}")


def _wait_ready(proc: subprocess.Popen[bytes], url: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if httpx.get(f"{url}/-/ready", timeout=2.0).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def _serves(url: str, tsdb_dir: Path) -> bool:
    """Return True if the Prometheus at `url` stores its data in `tsdb_dir`."""
    try:
        flags = httpx.get(f"{url}/api/v1/status/flags", timeout=5.0).json()["data"]
    except (httpx.HTTPError, ValueError, KeyError):
        return False
    return Path(flags.get("storage.tsdb.path", "")).resolve() == tsdb_dir.resolve()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
