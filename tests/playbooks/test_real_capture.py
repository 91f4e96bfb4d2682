"""A real capture: Debian's node_exporter scraped by a real Prometheus while the test loads this machine.

node_exporter (the `prometheus-node-exporter` package, installed by `scripts/bootstrap.sh --tests`) runs
on a loopback port; a Prometheus scrapes it every 5 s under a deployer's job name into a fresh TSDB. The
test puts CPU load (busy processes), I/O load (fsync'd writes) and memory load (a few GiB touched) on
the machine, one after the other, and logs when each ran. The TSDB is then diagnosed as a finished job's
would be (a read-only served copy): no refusal, the node_exporter-only profile, each load named on this
host within its logged interval, and the GPU signals listed as missing.

The machine is shared (other tests run beside this one), so each load is judged against the host's own
typical level over the capture and only the strongest episode of each signal is compared with the log.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from playbooks import tsdb_server
from playbooks.diagnose import run_diagnosis
from playbooks.tsdb_server import find_free_port
from tests.support.prometheus import PROMETHEUS

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or "/usr/bin/prometheus-node-exporter"
SCRAPE_S = 5
LOAD_S = 40.0
PAUSE_S = 15.0

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(420),
    pytest.mark.skipif(not Path(NODE_EXPORTER).exists(), reason="prometheus-node-exporter is not installed"),
]

_CPU = "import time\nend = time.time() + {s}\nwhile time.time() < end:\n    pass\n"
_IO = (
    "import os, time\nend = time.time() + {s}\nbuf = os.urandom(1 << 20)\n"
    "with open({path!r}, 'wb') as f:\n    while time.time() < end:\n"
    "        for _ in range(8):\n            f.write(buf)\n        f.flush(); os.fsync(f.fileno()); f.seek(0)\n"
)
_MEM = (
    "import time\nchunks = [bytearray(1 << 28) for _ in range({n})]\n"
    "for c in chunks:\n    c[::4096] = b'x' * len(c[::4096])\ntime.sleep({s})\n"
)


def _start(cmd: list[str], log: Path) -> subprocess.Popen:
    with open(log, "w") as fh:
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait(url: str, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    pytest.fail(f"{what} did not answer at {url}")


def _busy_count() -> int:
    """Busy processes enough to stand out on this machine: 12, or twice what already runs when it is loaded.

    On a shared machine at a load of 30, twelve more runnable processes sit inside the host's own spread
    and no diagnostician would call them far above its usual level; the test's load must be the outlier.
    """
    return min(96, max(12, round(2 * os.getloadavg()[0])))


def _load(kind: str, tmp: Path) -> list[subprocess.Popen]:
    if kind == "cpu":
        return [subprocess.Popen([sys.executable, "-c", _CPU.format(s=LOAD_S)]) for _ in range(_busy_count())]
    if kind == "io":
        return [
            subprocess.Popen([sys.executable, "-c", _IO.format(s=LOAD_S, path=str(tmp / f"io{i}.bin"))])
            for i in range(2)
        ]
    return [subprocess.Popen([sys.executable, "-c", _MEM.format(s=LOAD_S, n=16)])]  # 4 GiB


def _capture(tmp: Path) -> tuple[Path, dict[str, tuple[float, float]]]:
    """Scrape node_exporter while loading the machine; return the TSDB and {load: (start, end)}."""
    tsdb = tmp / "job" / "prometheus"
    tsdb.mkdir(parents=True)
    ne_port = find_free_port(start=21100, end=21900)
    exporter = _start([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{ne_port}"], tmp / "node_exporter.log")
    prom = None
    try:
        _wait(f"http://127.0.0.1:{ne_port}/metrics", exporter, "node_exporter")
        (tmp / "prometheus.yml").write_text(
            f"global:\n  scrape_interval: {SCRAPE_S}s\n  scrape_timeout: 4s\n  evaluation_interval: 1h\n"
            "scrape_configs:\n  - job_name: node-exporter-capture\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{ne_port}']\n"
        )
        port = find_free_port(start=21100, end=21900)
        prom = _start(
            [
                PROMETHEUS,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tsdb}",
                "--storage.tsdb.retention.time=100y",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            tmp / "prometheus.log",
        )
        _wait(f"http://127.0.0.1:{port}/-/ready", prom, "prometheus")
        loads: dict[str, tuple[float, float]] = {}
        time.sleep(40.0)  # a baseline
        for kind in ("cpu", "io", "mem"):
            t0 = time.time()
            procs = _load(kind, tmp)
            for p in procs:
                p.wait(timeout=LOAD_S + 60)
            loads[kind] = (t0, time.time())
            print(f"{kind} load from {t0:.1f} to {loads[kind][1]:.1f}")
            time.sleep(PAUSE_S)
    finally:
        if prom is not None:
            _stop(prom)
        _stop(exporter)
        for f in tmp.glob("io*.bin"):
            f.unlink()
    return tsdb, loads


def test_a_node_exporter_capture_names_each_load_on_its_host(tmp_path):
    tsdb, loads = _capture(tmp_path)
    served = tsdb_server.ensure_served(tsdb, work_root=tmp_path / "views")
    try:
        from playbooks.prometheus import PrometheusClient

        with PrometheusClient(served.url, timeout=60.0, retries=2) as client:
            result = run_diagnosis(client, triage=None)
    finally:
        tsdb_server.stop(served)
    source = result["source"]
    assert source["profile"].partition("@")[0] == "node"
    nodename = os.uname().nodename
    assert source["hosts"] == [nodename], "node_exporter scraped at 127.0.0.1 is named by node_uname_info"
    assert source["gpus_per_host"] is None
    by_rule = {f["title"].split(" far above")[0]: f for f in result["findings"]}
    for kind, title in (("cpu", "CPU load"), ("io", "I/O stalls"), ("mem", "Memory use")):
        f = by_rule.get(title)
        assert f is not None, f"{kind} load not named: {[x['title'] for x in result['findings']]}"
        assert f["hosts"] == [nodename]
        t0, t1 = loads[kind]
        assert t0 - 3 * SCRAPE_S <= f["onset"] <= t1, (kind, f["onset"], loads[kind])
    missing = " ".join(str(e["value"]) for f in result["findings"] for e in f["evidence"])
    assert "gpu_power" in missing and "gpu_temp" in missing, "the absent GPU signals are listed"
    assert result["diagnosis"]["class"] == "healthy"
