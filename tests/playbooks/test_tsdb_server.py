"""tsdb_server against real Prometheus processes and real TSDBs (blocks from promtool, a WAL tail)."""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from playbooks import tsdb_launch, tsdb_server
from playbooks.prometheus import PrometheusClient
from playbooks.tsdb_server import (
    PrometheusNotInstalled,
    TSDBLocked,
    TSDBServerError,
    ensure_served,
    find_free_port,
    list_served,
    reap_leftovers,
    serve_readonly,
    stop,
    stop_idle,
    tsdb_lock_holder,
)
from tests.support.prometheus import (
    WAL_TAIL_METRIC,
    Family,
    WalTail,
    build_tsdb,
    make_wal_tsdb,
    points,
    running_prometheus,
    served,
    tree_snapshot,
    write_openmetrics,
)

REPO = Path(__file__).resolve().parents[2]
T0 = 1772323200.0  # 2026-03-01 00:00:00 UTC
END = T0 + 3 * 3600
BLOCKS_LAST = END  # the last block sample; the block's meta.json maxTime is END + 1 ms


@pytest.fixture(scope="module")
def blocks_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("blocks")
    fam = Family("tb_step", series=[({"host": "node-0"}, points(T0, END, 30, lambda t: (t - T0) / 30))])
    return build_tsdb(write_openmetrics(base / "job.om", [fam]), base / "prometheus")


@pytest.fixture
def blocks_dir(blocks_template: Path, tmp_path: Path) -> Path:
    """A private blocks-only TSDB a test may hand to a live Prometheus."""
    return Path(shutil.copytree(blocks_template, tmp_path / "job" / "prometheus"))


@pytest.fixture(scope="module")
def wal_job(blocks_template: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, WalTail]:
    """Blocks of 2026-03-01 plus a tail near now that lives only in wal/, left by a killed Prometheus."""
    src = Path(shutil.copytree(blocks_template, tmp_path_factory.mktemp("waljob") / "prometheus"))
    tail = make_wal_tsdb(src, crash=True)
    # A SIGKILL mid-write leaves a torn record; Prometheus "repairs" the WAL it opens.
    last_segment = max(p for p in (src / "wal").iterdir() if p.is_file() and p.stat().st_size > 0)
    with open(last_segment, "ab") as fh:
        fh.write(b"\x01\x00\x20torn-record")
    return src, tail


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _block_metas(tsdb: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(tsdb.glob("*/meta.json"))]


def test_it_serves_the_blocks_and_the_wal_only_tail(wal_job, tmp_path: Path) -> None:
    """A served copy answers from the immutable blocks AND from the tail that only the WAL holds."""
    src, tail = wal_job
    assert all(m["maxTime"] < tail.timestamps[0] * 1000 for m in _block_metas(src))  # tail is WAL-only
    with served(src, tmp_path / "work") as server, PrometheusClient(server.url) as client:
        assert client.query("tb_step", at=T0 + 600)[0].value == 20.0
        got = client.query(f"{WAL_TAIL_METRIC}[1h]", at=tail.timestamps[-1])
        assert set(tail.timestamps) <= {s.timestamp for s in got}
        assert server.blocks_only is False and server.note == ""
        assert server.time_range is not None
        assert server.time_range[0] == T0
        assert server.time_range[1] >= tail.timestamps[-1]
        first, last = client.data_time_range()
        assert (first, last) == pytest.approx(server.time_range, abs=0.001)
        # A finished job's head spans hours: with 2 h blocks Prometheus would compact it into a new
        # block a minute after start. The copy's head chunk range is far too large for that.
        flags = client.flags()
        assert flags["storage.tsdb.min-block-duration"] == flags["storage.tsdb.retention.time"] == "100y"
        assert flags["web.enable-admin-api"] == flags["web.enable-lifecycle"] == "false"


def test_a_served_copy_collects_garbage_less_often_unless_the_environment_says(
    blocks_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """The served Prometheus runs with GOGC=200 (fewer collections: less CPU a query); a GOGC already set in
    the environment is kept."""

    def gogc(server) -> str:
        env = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
        return next(v.split(b"=", 1)[1].decode() for v in env if v.startswith(b"GOGC="))

    monkeypatch.delenv("GOGC", raising=False)
    with served(blocks_dir, tmp_path / "work") as server:
        assert gogc(server) == tsdb_launch.GOGC == "200"
    monkeypatch.setenv("GOGC", "150")
    with served(blocks_dir, tmp_path / "work2") as server:
        assert gogc(server) == "150"


def test_the_source_is_untouched_by_serve_and_stop(wal_job, tmp_path: Path) -> None:
    """Serving and stopping leave every file of the source byte-for-byte as it was, stale lock included."""
    src, _ = wal_job
    before = tree_snapshot(src)
    assert "lock" in before and "wal" in before  # a killed job leaves its lock behind
    with served(src, tmp_path / "work") as server:
        copy = Path(server.copy_dir)
        # Head files are copies (Prometheus repairs and appends to them), block files are hard links.
        assert all(f.stat().st_nlink == 1 for f in (src / "wal").rglob("*") if f.is_file())
        assert all(
            (copy / "data" / f.relative_to(src)).stat().st_ino == f.stat().st_ino
            for f in src.glob("*/chunks/*")
        )
        copied_lock = copy / "data" / "lock"  # upstream Prometheus creates its own; never the job's
        assert not copied_lock.exists() or copied_lock.stat().st_ino != (src / "lock").stat().st_ino
        assert (copy / "data" / "wal").is_dir()
        with PrometheusClient(server.url) as client:
            # Every block sample (2.x range selectors include both ends of the window).
            assert client.query("count_over_time(tb_step[4h])", at=END)[0].value == 361.0
    assert tree_snapshot(src) == before
    assert not copy.exists()
    assert not _alive(server.pid)


def test_a_locked_tsdb_is_refused_or_served_as_blocks_only(blocks_dir: Path, tmp_path: Path) -> None:
    """A TSDB whose lock a live Prometheus holds raises TSDBLocked; allow_blocks_only serves its blocks."""
    with running_prometheus(blocks_dir, lockfile=True, rule_interval="200ms") as live:
        assert tsdb_lock_holder(blocks_dir) == live.pid
        with pytest.raises(TSDBLocked) as info:
            serve_readonly(blocks_dir, work_root=tmp_path / "work")
        assert info.value.pid == live.pid
        assert f"pid {live.pid}" in str(info.value)
        assert pickle.loads(pickle.dumps(info.value)).pid == live.pid  # survives a Celery result
        assert not list((tmp_path / "work").glob("*/data"))

        with served(blocks_dir, tmp_path / "work", allow_blocks_only=True) as server:
            assert server.blocks_only is True
            assert "wal/ and chunks_head/ not copied" in server.note
            assert "2026-03-01 03:00:00 UTC" in server.note  # the newest block's maxTime
            assert server.time_range == (T0, BLOCKS_LAST)
            with PrometheusClient(server.url) as client:
                assert client.query("tb_step", at=END)[0].value == 360.0
                assert client.query(f"{WAL_TAIL_METRIC}[1h]") == []  # the live head is not in the copy
        assert tsdb_lock_holder(blocks_dir) == live.pid  # the live server's lock is untouched


def _hold_lock(path: Path, kind: str) -> subprocess.Popen:
    code = (
        "import fcntl, sys, time\n"
        f"f = open({str(path)!r}, 'a')\n"
        f"fcntl.{'flock(f, fcntl.LOCK_EX)' if kind == 'flock' else 'lockf(f, fcntl.LOCK_EX)'}\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


@pytest.mark.parametrize("kind", ["flock", "posix"])
def test_lock_holder_reads_proc_locks(blocks_dir: Path, kind: str) -> None:
    """A process holding <dir>/lock (flock or POSIX) is found via /proc/locks; a stale lock file is not."""
    lock = blocks_dir / "lock"
    lock.touch()
    assert tsdb_lock_holder(blocks_dir) is None
    holder = _hold_lock(lock, kind)
    try:
        assert tsdb_lock_holder(blocks_dir) == holder.pid
    finally:
        holder.kill()
        holder.wait()
    assert tsdb_lock_holder(blocks_dir) is None


def test_lock_holder_finds_a_prometheus_without_lock_file(blocks_dir: Path) -> None:
    """A Prometheus serving the dir without any lock file is still found through its cmdline."""
    with running_prometheus(blocks_dir, lockfile=False) as live:
        assert not (blocks_dir / "lock").exists()
        assert tsdb_lock_holder(blocks_dir) == live.pid
        assert tsdb_lock_holder(blocks_dir.parent) is None


def _free_run(width: int) -> int:
    for base in range(24000, 30000, width):
        ports = range(base, base + width)
        if (
            all(tsdb_server._can_bind("127.0.0.1", p) for p in ports)
            and not set(ports) & tsdb_server._listening_ports()
        ):
            return base
    raise AssertionError("no run of free ports")


def test_find_free_port_skips_listeners_on_any_address() -> None:
    """Ports with a listener on 127.0.0.1, 0.0.0.0, 127.0.0.2 or [::1] are never returned."""
    base = _free_run(6)
    socks = []
    for offset, (family, host) in enumerate(
        [
            (socket.AF_INET, "127.0.0.1"),
            (socket.AF_INET, "0.0.0.0"),
            (socket.AF_INET, "127.0.0.2"),
            (socket.AF_INET6, "::1"),
        ]
    ):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((host, base + offset))
        except OSError:
            sock.close()  # no IPv6 loopback here: that port simply stays busy via another listener
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", base + offset))
        sock.listen()
        socks.append(sock)
    try:
        assert find_free_port(start=base, end=base + 6) == base + 4
        with pytest.raises(TSDBServerError, match="no free TCP port"):
            find_free_port(start=base, end=base + 4)
    finally:
        for sock in socks:
            sock.close()


def test_ensure_served_reuses_one_server_across_processes(wal_job, tmp_path: Path) -> None:
    """ensure_served twice, and from another process, returns the same live server."""
    src, _ = wal_job
    work = tmp_path / "work"
    first = ensure_served(src, work_root=work)
    try:
        second = ensure_served(src, work_root=work)
        assert second.pid == first.pid and second.url == first.url
        code = (
            "import sys; from playbooks.tsdb_server import ensure_served; "
            "print(ensure_served(sys.argv[1], work_root=sys.argv[2]).pid)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, str(src), str(work)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert int(out.stdout.strip()) == first.pid
        assert [s.pid for s in list_served(work)] == [first.pid]
        with pytest.raises(TSDBServerError, match="already served"):
            serve_readonly(src, work_root=work)
    finally:
        stop(first)
    assert list_served(work) == []


def test_stop_signals_only_the_pid_serving_our_copy(blocks_dir: Path, tmp_path: Path) -> None:
    """A record whose pid now belongs to an unrelated process is not signalled; the record is removed."""
    server = serve_readonly(blocks_dir, work_root=tmp_path / "work")
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        record_path = Path(server.copy_dir) / "server.json"
        record = json.loads(record_path.read_text())
        record["pid"] = sleeper.pid  # as if our server had died and its pid were reused
        record_path.write_text(json.dumps(record))
        stop(record)
        assert sleeper.poll() is None
        assert not Path(server.copy_dir).exists()
        assert _alive(server.pid)  # stop() touched no other process either
    finally:
        sleeper.kill()
        sleeper.wait()
        # The orphaned server is still ours (its cmdline names the copy): end it the checked way.
        assert tsdb_server._terminate(server.pid, server.copy_dir, 5.0)


def test_reap_leftovers_stops_recorded_servers_only(blocks_dir: Path, wal_job, tmp_path: Path) -> None:
    """After a restart, every recorded server is stopped and removed; a foreign pid is left running."""
    work = tmp_path / "work"
    ours = serve_readonly(blocks_dir, work_root=work)
    other = serve_readonly(wal_job[0], work_root=work)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        # The second server "died" and its pid went to an unrelated process.
        os.kill(other.pid, 15)
        deadline = time.monotonic() + 10
        while _alive(other.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        tsdb_server._reap_children()
        record_path = Path(other.copy_dir) / "server.json"
        record_path.write_text(json.dumps({**json.loads(record_path.read_text()), "pid": sleeper.pid}))

        assert reap_leftovers(work) == [ours.pid]
        assert not _alive(ours.pid)
        assert sleeper.poll() is None
        assert not any(p.is_dir() for p in work.iterdir())
    finally:
        sleeper.kill()
        sleeper.wait()


def test_stop_idle_stops_only_servers_idle_long_enough(blocks_dir: Path, tmp_path: Path) -> None:
    """stop_idle keeps a server used within idle_seconds and stops it once it has been idle longer."""
    work = tmp_path / "work"
    server = ensure_served(blocks_dir, work_root=work)
    try:
        assert stop_idle(work, idle_seconds=3600) == []
        assert _alive(server.pid)
        assert stop_idle(work, idle_seconds=0) == [server.pid]
        assert not _alive(server.pid)
        assert list_served(work) == []
    finally:
        if _alive(server.pid):
            stop(server)


def test_a_taken_port_makes_it_try_another(blocks_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """If the chosen port is taken before Prometheus binds it, the server starts on another port."""
    taken = socket.socket()
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    real = tsdb_server.find_free_port
    calls = []

    def racy(start: int = 19190, end: int = 19990, host: str = "127.0.0.1") -> int:
        calls.append(start)
        return busy if len(calls) == 1 else real(start=start, end=end, host=host)

    monkeypatch.setattr(tsdb_launch, "find_free_port", racy)
    try:
        with served(blocks_dir, tmp_path / "work") as server:
            assert server.port != busy
            # It tried another port after the taken one (more than one more when a port it found free was
            # taken in turn by another process before Prometheus bound it: the same retry at work).
            assert calls[0] == 19190 and len(calls) >= 2
    finally:
        taken.close()


def test_a_port_answered_by_another_prometheus_is_never_taken_for_ours(
    blocks_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """A real Prometheus already on the chosen port answers /-/ready; the copy is served elsewhere, not mistaken for it."""
    with served(blocks_dir, tmp_path / "other") as other:
        real = tsdb_server.find_free_port
        calls = []

        def racy(start: int = 19190, end: int = 19990, host: str = "127.0.0.1") -> int:
            calls.append(start)
            return other.port if len(calls) == 1 else real(start=start, end=end, host=host)

        monkeypatch.setattr(tsdb_launch, "find_free_port", racy)
        with served(blocks_dir, tmp_path / "work") as server:
            assert server.port != other.port
            with PrometheusClient(server.url) as client:
                path = Path(client.flags()["storage.tsdb.path"]).resolve()
            assert path.is_relative_to(Path(server.copy_dir).resolve())
        assert len(calls) == 2


def test_a_directory_without_data_is_refused_clearly(tmp_path: Path) -> None:
    """A dir without blocks and with an empty or missing wal/ raises 'no TSDB data in …'."""
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TSDBServerError, match=f"no TSDB data in {empty}"):
        serve_readonly(empty, work_root=tmp_path / "work")
    (empty / "wal").mkdir()
    (empty / "wal" / "00000000").write_bytes(b"")
    with pytest.raises(TSDBServerError, match="empty or missing wal/"):
        serve_readonly(empty, work_root=tmp_path / "work")
    with pytest.raises(TSDBServerError, match="no TSDB directory"):
        serve_readonly(tmp_path / "missing", work_root=tmp_path / "work")
    assert not any(p.is_dir() for p in (tmp_path / "work").glob("*"))


def test_a_missing_binary_raises_prometheus_not_installed(blocks_dir: Path, tmp_path: Path) -> None:
    """An unknown prometheus_bin raises PrometheusNotInstalled before anything is copied."""
    with pytest.raises(PrometheusNotInstalled, match="not found"):
        serve_readonly(
            blocks_dir, work_root=tmp_path / "work", prometheus_bin=str(tmp_path / "no-prometheus")
        )
    assert not any(p.is_dir() for p in (tmp_path / "work").glob("*"))


def test_a_server_that_dies_reports_its_log(blocks_dir: Path, tmp_path: Path) -> None:
    """If Prometheus exits while starting, the error quotes its log and the copy is removed."""
    fake = tmp_path / "prometheus"
    fake.write_text(
        '#!/bin/sh\necho \'level=error msg="opening storage failed" err="corrupted block"\'\nexit 1\n'
    )
    fake.chmod(0o755)
    with pytest.raises(TSDBServerError, match="exited with status 1.*corrupted block") as info:
        serve_readonly(blocks_dir, work_root=tmp_path / "work", prometheus_bin=str(fake))
    assert "opening storage failed" in info.value.log_tail
    assert not any(p.is_dir() for p in (tmp_path / "work").glob("*"))


def test_the_entry_lock_serializes_processes(tmp_path: Path) -> None:
    """The per-TSDB fcntl lock conflicts with a second holder, as ensure_served relies on."""
    entry = tmp_path / "work" / "job-prometheus-0123456789ab"
    with tsdb_server._entry_lock(entry), open(entry.parent / f"{entry.name}.lock", "a") as other:
        with pytest.raises(BlockingIOError):
            fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
