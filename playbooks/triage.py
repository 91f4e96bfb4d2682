"""Log triage of the seed system (seed-system.md §2-3): status, failure classes, progress, config.

Streams the log line by line (bounded memory for a 1 GB log), survives truncated files and binary
garbage, and never raises on bad content: what it could not read is listed in `unreadable`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .confine import OutsideRoots, open_inside, resolved_roots
from .errors import PlaybooksError

__all__ = [
    "CLASS_ORDER",
    "Match",
    "Triage",
    "TriageError",
    "expand_nodelist",
    "find_job_log",
    "triage_job",
    "triage_log",
]

MAX_LINE = 64 * 1024  # longer lines are cut (runaway binary logs)
MAX_MATCHES_PER_CLASS = 50  # a log with 100k NCCL warnings still gives a readable answer


class TriageError(PlaybooksError):
    """The log could not be opened at all (missing, a directory, permission denied)."""


# --------------------------------------------------------------------------------------- vocabulary

# Priority order of the seed triage table (§3.2): first match = primary.
CLASS_ORDER: tuple[str, ...] = (
    # 1. infrastructure
    "prolog-kill-no-log",
    "container-pull-fail",
    "container-load-fail",
    "no-gpu",
    "nccl-nic-fail",
    "port-fail",
    "model-not-found",
    "patch-branch-fail",
    "ray-start-fail",
    # 2. stage timeouts
    "preflight-timeout",
    "pull-timeout",
    "ecc-timeout",
    "train-timeout",
    # 3. training
    "hang",
    "heartbeat-timeout",
    "oom-host",
    "oom-gpu",
    "nccl-timeout",
    "xla-compile-fail",
    "python-exception",
    "signal-kill",
    "subprocess-fail",
    "actor-fail",
    "checkpoint-fs-error",
    "gpu-hw-error",
    # 4. performance
    "tgs-degradation",
    # 5. job level
    "cancelled",
    "node-fail",
    "unknown-death",
    "stage-fail",
    "soft-success",
)
_RANK = {c: i for i, c in enumerate(CLASS_ORDER)}

# (class, substrings any of which match). Checked in this order per line; one class per line.
SIGNATURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("container-pull-fail", ("[ERROR] Pull failed for", "[ERROR] Authenticated pull failed")),
    ("container-load-fail", ("[ERROR] Unable to determine image name or ID from docker load output",)),
    ("no-gpu", ("WARNING: No GPU devices detected",)),
    ("nccl-nic-fail", ("Failed to auto-detect NCCL_SOCKET_IFNAME",)),
    (
        "port-fail",
        (
            "FATAL: Could not find a free port for JAX coordinator",
            "FATAL: Could not find a free port for Ray",
        ),
    ),
    ("model-not-found", ("!!! Unknown model:", "!!! Model name resolution failed")),
    ("patch-branch-fail", ("[FAIL] Failed to check out",)),
    (
        "ray-start-fail",
        ("[Ray] HEAD failed to start", "[Ray] HEAD timeout", "[Ray] WORKER failed", "[!] Ray cluster failed"),
    ),
    (
        "heartbeat-timeout",
        (
            "UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats)",
            "Terminating process because the JAX distributed service detected fatal errors",
            "Polled error from coordination service",
        ),
    ),
    ("oom-gpu", ("RESOURCE_EXHAUSTED", "ResourceExhausted", "OUT_OF_MEMORY", "XLA_ERROR", "out of memory")),
    ("oom-host", ("Killed", "oom-kill", "Out of memory")),
    ("nccl-timeout", ("NCCL WARN Timeout", "NCCL error", "Timeout waiting for", "ncclSystemError")),
    ("xla-compile-fail", ("INTERNAL: Failed to compile", "XLA compilation failed")),
    ("python-exception", ("Traceback (most recent call last):",)),
    ("signal-kill", ("Training subprocess killed by",)),
    ("subprocess-fail", ("Training subprocess exited with code",)),
    ("actor-fail", ("Actor failed:",)),
    ("checkpoint-fs-error", ("Training stopped: Checkpointing failed", "manifest.ocdbt.__lock")),
    ("gpu-hw-error", ("HSA_STATUS_ERROR", "rocdevice.cpp", "uncorrectable ECC error")),
)

# Known-harmless lines, filtered BEFORE matching (§3.2).
HARMLESS = (
    "Failed call to cuInit: UNKNOWN ERROR (303)",
    "INTERNAL: CUDA error",
    "NCCL WARN MSCCL++",
    "Token indices sequence length is longer",
    "OCI runtime exec failed",
    "docker exec failed",
    "[cgroup] Sent SIGKILL to 0/0 processes",
    "Cannot read CPU core",
    "No hardware is found. Using default TPU",
    "No device identifiers found",
    "Enabling PjRt/TPU event dependency logging",
    "Fiber init: default domain",
    "Error response from daemon: cannot remove container",
)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\x1b\(B")
# Control bytes other than tab, newline, vertical tab, form feed and carriage return: a line with more
# than 8 of them in its first 256 bytes (or any NUL) is binary.
_CTRL = re.compile(rb"[\x00-\x08\x0e-\x1f]")
_NOT_CTRL = bytes(b for b in range(256) if not (b < 9 or 13 < b < 32))  # bytes.translate deletes these
_LABEL = re.compile(r"^\s*(\d+): ")
_RAY = re.compile(r"^\((\w+) pid=\d+(?:, ip=[^)]*)?\) ")
_ABSL = re.compile(r"^([IWEF])(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?\s+\d+\s+[^\]\s]+\] ")
_STEP = re.compile(
    r"completed step: (\d+), seconds: ([0-9.]+)(?:.*?Tokens/s/device: ([0-9.]+))?"
    r"(?:.*?loss: ([-+0-9.eEnaif]+))?"
)
_CONFIG = re.compile(r"^Config param ([A-Za-z0-9_.]+): ?(.*)$")
_HEADER = re.compile(
    r"^(JOB_ID|JOB_NAME|NNODES|JOB_NODELIST|JAX_COORDINATOR_PORT|RAY_PORT|PASSTHROUGH_ARGS|"
    r"MODEL_NAME|MODEL_NAME_ALIAS|EXP_TAG|SLURM_JOB_ID|SLURM_JOB_NAME|SLURM_JOB_NUM_NODES|"
    r"SLURM_JOB_NODELIST|HOSTNAME)=(.*)$"
)
_TUNNEL = re.compile(r"ssh\s+(?:-J\s+\S+\s+)?((?:-L\s+\S+\s+)+)(\S+@)?(\S+)\s*$")
_FWD = re.compile(r"-L\s+(\d+):localhost:(\d+)")
_TASK = re.compile(r"/job:[\w_]+/replica:\d+/task:(\d+)")
_NODE_EXIT = re.compile(r"NODE_EXIT host=(\S+) exit=(-?\d+)")
_STAGE = re.compile(r"^== (.+?) (BEGIN|END|FAILED|TIMEOUT)\b(.*)==\s*$")
_SUMMARY_STATUS = re.compile(r"Status:\s*(SUCCESS|FAILED)\s*\(exit\s+(\d+)\)(?:\s*\u2014\s*(.*))?")
_WALL = re.compile(r"^\s*Wall:\s*(?:(\d+)h\s*)?(?:(\d+)m\s*)?(\d+)s")
_SAVED = re.compile(r"Saved a checkpoint at step (\d+)")
_RESTORE = re.compile(r"restoring from this run's directory step (\d+)")
_PROCS = re.compile(r"Launching (\d+) processes per node")
_CANCELLED_AT = re.compile(r"CANCELLED AT (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")
_STAMP = re.compile(r"artifact_(\d{8})_(\d{6})|^k8s-(\d{8})-(\d{6})|^local_(\d{8})_(\d{6})")


@dataclass(frozen=True)
class Match:
    """One failure-signature hit.

    Attributes:
        klass: triage class name.
        line: 1-based line number in the log (0 for computed classes).
        text: the line, labels and ANSI codes stripped, cut to 500 characters.
    """

    klass: str
    line: int
    text: str


@dataclass
class Triage:
    """The result of triaging one log; `to_dict()` gives the contract's JSON.

    Attributes:
        job_id, status, triage_class, first_step, last_step, crash_time: the contract's `job` object.
        matches: all signature hits, primary class first.
        progress: the contract's progress figures.
        config: header keys, PASSTHROUGH_ARGS items and `Config param` values.
        nodes: expanded node list (NODE_RANK order).
        head, port, tunnel: where the job's Prometheus lives.
        heartbeat_accused: hosts named by a heartbeat timeout.
        unreadable: what could not be read, in words.
        details: further figures (training vs wall time, TGS, expected step now, ...).
    """

    job_id: str | None = None
    status: str | None = None
    triage_class: str | None = None
    first_step: int | None = None
    last_step: int | None = None
    crash_time: float | None = None
    matches: list[Match] = field(default_factory=list)
    progress: dict[str, Any] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)
    head: str | None = None
    port: int | None = None
    tunnel: str | None = None
    heartbeat_accused: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def classes(self) -> list[str]:
        seen: list[str] = []
        for m in self.matches:
            if m.klass not in seen:
                seen.append(m.klass)
        return seen

    def to_dict(self) -> dict[str, Any]:
        """Return the contract's triage JSON object (plus `details`)."""
        return {
            "job": {
                "id": self.job_id,
                "status": self.status,
                "triage_class": self.triage_class,
                "first_step": self.first_step,
                "last_step": self.last_step,
                "crash_time": self.crash_time,
            },
            "matches": [{"class": m.klass, "line": m.line, "text": m.text} for m in self.matches],
            "progress": {
                k: self.progress.get(k)
                for k in (
                    "steps_total",
                    "restored_from",
                    "step_time_s",
                    "last_step_time",
                    "lost_steps",
                    "last_checkpoint_step",
                    "tgs_trend_pct",
                )
            },
            "config": dict(self.config),
            "nodes": list(self.nodes),
            "prometheus": {"head": self.head, "port": self.port, "tunnel": self.tunnel},
            "heartbeat_accused": list(self.heartbeat_accused),
            "unreadable": list(self.unreadable),
            "details": dict(self.details),
        }


# ------------------------------------------------------------------------------------------ helpers


def expand_nodelist(text: str) -> list[str]:
    """Return the hosts of a Slurm compressed node list: ``gpu-[101-103,105],login1`` -> 4 hosts."""
    hosts: list[str] = []
    depth, token = 0, ""
    parts = []
    for ch in text.strip():
        if ch == "," and depth == 0:
            parts.append(token)
            token = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        token += ch
    if token:
        parts.append(token)
    for part in parts:
        m = re.fullmatch(r"([^\[]*)\[([^\]]+)\](.*)", part)
        if not m:
            if part:
                hosts.append(part)
            continue
        prefix, body, suffix = m.groups()
        for rng in body.split(","):
            if "-" in rng:
                a, b = rng.split("-", 1)
                if a.isdigit() and b.isdigit():
                    hosts.extend(f"{prefix}{n:0{len(a)}d}{suffix}" for n in range(int(a), int(b) + 1))
                    continue
            hosts.append(f"{prefix}{rng}{suffix}")
    return hosts


def find_job_log(job_dir: str | os.PathLike[str]) -> Path | None:
    """Return the log of a job directory: DIR/job.log, the DIR/log symlink, or the sibling <DIR>*.log/.out."""
    d = Path(job_dir)
    for cand in (d / "job.log", d / "log"):
        if cand.is_file():
            return cand
    parent = d.parent
    for ext in (".log", ".out"):
        sib = parent / f"{d.name}{ext}"
        if sib.is_file():
            return sib
    for ext in (".log", ".out"):
        hits = sorted(parent.glob(f"{d.name}*{ext}"))
        if hits:
            return hits[0]
    m = re.match(r"^(k8s-\d+-\d+-[0-9a-f]+|local_[\d_]+[0-9a-f]+|\d+)-", d.name)
    if m:
        hits = sorted(parent.glob(f"{m.group(1)}-*.log")) + sorted(parent.glob(f"{m.group(1)}-*.out"))
        if hits:
            return hits[0]
    return None


def _year_hint(value: str) -> tuple[int, int] | None:
    m = _STAMP.search(value)
    if not m:
        return None
    digits = next(g for g in m.groups() if g and len(g) == 8)
    return int(digits[:4]), int(digits[4:6])


def _clean(raw: str) -> tuple[int | None, str]:
    """Return (srun task label, message) with label, ANSI, Ray prefix and absl header left in the message."""
    line = _ANSI.sub("", raw) if "\x1b" in raw else raw
    m = _LABEL.match(line)
    rank = None
    if m:
        rank = int(m.group(1))
        line = line[m.end() :]
    r = _RAY.match(line)
    if r:
        line = line[r.end() :]
    return rank, line


#: Bytes read at a time; a block is decoded and split at C speed unless it holds control bytes or bad UTF-8.
BLOCK = 1 << 20


@dataclass
class _Reading:
    """What reading a log found wrong, for `Triage.unreadable`."""

    lines: int = 0
    binary: int = 0
    first_binary: int | None = None
    cut: int = 0
    bad_utf8: int = 0
    ends_with_newline: bool = True


def _blocks(fh: IO[bytes], rd: _Reading) -> Iterator[list[bytes]]:
    """Yield the log's lines (without their newline) in blocks of about BLOCK bytes.

    A line longer than MAX_LINE is cut to its first MAX_LINE + 1 bytes and the rest skipped without
    being held; a last line without a newline is yielded as it is (`rd.ends_with_newline` False).
    """
    while True:
        block = fh.read(BLOCK)
        if not block:
            return
        if not block.endswith(b"\n"):
            block += fh.readline(MAX_LINE + 1)  # finish the last line, bounded
        lines = block.split(b"\n")
        tail = lines.pop()  # b"" when the block ends with a newline
        if tail:
            if len(tail) > MAX_LINE:
                while True:  # skip the rest of this over-long line without holding it
                    more = fh.readline(MAX_LINE)
                    if not more or more.endswith(b"\n"):
                        rd.ends_with_newline = bool(more)
                        break
            else:
                rd.ends_with_newline = False  # the end of the file, in the middle of a line
            lines.append(tail)
        if any(len(line) > MAX_LINE for line in lines):
            rd.cut += sum(len(line) > MAX_LINE for line in lines)
            lines = [line[: MAX_LINE + 1] for line in lines]
        yield lines


def _is_binary(raw: bytes) -> bool:
    return b"\x00" in raw or (_CTRL.search(raw, 0, 256) is not None and len(_CTRL.findall(raw, 0, 256)) > 8)


def _iter_lines(fh: IO[bytes], out: Triage) -> Iterator[tuple[int, str]]:
    """Yield (line number, decoded line); record binary or over-long content in `out.unreadable`.

    A block without control bytes and valid as UTF-8 (nearly every block of a real log) is decoded and
    split as a whole; only other blocks are looked at line by line.
    """
    rd = _Reading()
    n = 0
    for lines in _blocks(fh, rd):
        joined = b"\n".join(lines)
        text = None
        if not joined.translate(None, _NOT_CTRL):
            try:
                text = joined.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        if text is not None:
            split = text.split("\n")
            if "\r" in text:
                split = [line.rstrip("\r") for line in split]
            yield from zip(range(n + 1, n + 1 + len(split)), split, strict=True)
            n += len(split)
            continue
        for raw in lines:
            n += 1
            if _is_binary(raw):
                rd.binary += 1
                rd.first_binary = rd.first_binary or n
                continue
            try:
                decoded = raw.decode("utf-8")
            except UnicodeDecodeError:
                rd.bad_utf8 += 1
                decoded = raw.decode("utf-8", errors="replace")
            yield n, decoded.rstrip("\r\n")
    if rd.binary:
        out.unreadable.append(f"{rd.binary} line(s) of binary data skipped (first at line {rd.first_binary})")
    if rd.cut:
        out.unreadable.append(f"{rd.cut} line(s) longer than {MAX_LINE} bytes cut")
    if rd.bad_utf8:
        out.unreadable.append(f"{rd.bad_utf8} line(s) not valid UTF-8 (decoded with replacement characters)")
    if not rd.ends_with_newline:
        out.unreadable.append(f"the log ends in the middle of line {n} (truncated file?)")
    out.details["lines"] = n


# ---------------------------------------------------------------------------------------------- core


def triage_log(
    source: str | os.PathLike[str] | Iterable[str],
    *,
    now: float | None = None,
    slurm_state: str | None = None,
    roots: Iterable[str | os.PathLike[str]] | None = None,
) -> Triage:
    """Return the triage of a log file (or of an iterable of lines).

    `now` (unix seconds) is used to tell running from dead jobs without a summary; `slurm_state`
    ("RUNNING", "PENDING", ...) when the scheduler could be asked. With `roots`, the file actually
    opened must lie inside one of them (a symlink leading out is refused). Raises TriageError only when
    a path cannot be opened; bad content is reported in `unreadable`.
    """
    out = Triage()
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            fh = open(path, "rb") if roots is None else open_inside(path, resolved_roots(roots))  # noqa: SIM115
        except OutsideRoots as exc:
            raise TriageError(f"{path} is not read: it leads outside the job roots") from exc
        except FileNotFoundError as exc:
            raise TriageError(f"log not found: {path}") from exc
        except IsADirectoryError as exc:
            raise TriageError(f"{path} is a directory, not a log") from exc
        except OSError as exc:
            raise TriageError(f"cannot read {path}: {exc.strerror}") from exc
        with fh:
            _scan(_iter_lines(fh, out), out, now, slurm_state)
            if out.details.get("lines", 0) == 0:
                out.unreadable.append("the log is empty")
    else:
        _scan(((i + 1, ln.rstrip("\r\n")) for i, ln in enumerate(source)), out, now, slurm_state)
    return out


@dataclass
class _State:
    steps: dict[int, tuple[float, float | None, float | None, float | None, int]] = field(
        default_factory=dict
    )
    step_rank: dict[int, int] = field(default_factory=dict)
    matches: dict[str, list[Match]] = field(default_factory=dict)
    node_exits: list[tuple[str, int, int]] = field(default_factory=list)
    stages: list[tuple[str, str, str, int]] = field(default_factory=list)
    summary_status: tuple[str, int, str | None] | None = None
    summary_seen: bool = False
    wall_s: float | None = None
    saved: list[int] = field(default_factory=list)
    restored: int | None = None
    accused_tasks: list[int] = field(default_factory=list)
    in_heartbeat: bool = False
    procs_per_node: int = 1
    training_started: bool = False
    year: tuple[int, int] | None = None
    cancel_time: float | None = None
    first_fatal_time: float | None = None
    last_time: float | None = None
    header_done: bool = False
    start_time: float | None = None
    barrier_time: float | None = None


def _abs_time(st: _State, month: int, day: int, hh: int, mm: int, ss: int, frac: str | None) -> float | None:
    year = st.year[0] if st.year else dt.datetime.now(dt.UTC).year
    if st.year and month < st.year[1]:
        year += 1  # the job crossed New Year
    try:
        t = dt.datetime(year, month, day, hh, mm, ss, tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None
    return t + (float("0." + frac) if frac else 0.0)


def _add(st: _State, klass: str, n: int, text: str) -> None:
    lst = st.matches.setdefault(klass, [])
    if len(lst) < MAX_MATCHES_PER_CLASS:
        lst.append(Match(klass, n, text.strip()[:500]))


def _scan(lines: Iterable[tuple[int, str]], out: Triage, now: float | None, slurm_state: str | None) -> None:
    st = _State()
    for n, raw in lines:
        if "completed step: " in raw and _step_seen(st, raw):
            continue  # most lines of a big log: another rank's copy of a step already read
        rank, msg = _clean(raw)
        ts = None
        a = _ABSL.match(msg)
        if a:
            ts = _abs_time(
                st,
                int(a.group(2)),
                int(a.group(3)),
                int(a.group(4)),
                int(a.group(5)),
                int(a.group(6)),
                a.group(7),
            )
            msg = msg[a.end() :]
            if ts is not None:
                st.last_time = ts
        if rank is None and not st.header_done and _scan_header(st, out, msg):
            continue
        if "completed step:" in msg and _scan_step(st, n, rank, ts, msg):
            continue
        if _scan_progress(st, out, n, ts, msg):
            continue
        _scan_failure(st, n, ts, msg)
    _finish(st, out, now, slurm_state)


_SECONDS_START = frozenset("0123456789.")


def _step_seen(st: _State, raw: str) -> bool:
    """Return True for a labelled step line whose step a lower (or the same) rank already gave.

    Cheap string checks only; anything unusual (no srun label, ANSI codes, a malformed step line) is
    left to the full parse, so the outcome is exactly what `_scan_step` would decide.
    """
    k = raw.find(": ")
    label = raw[:k].lstrip()  # the srun label: `^\s*(\d+): `
    if k < 0 or not label.isdecimal() or "\x1b" in raw:
        return False
    i = raw.find("completed step: ") + 16
    j = raw.find(", seconds: ", i)
    num = raw[i:j]
    if j < 0 or not num.isdecimal() or raw[j + 11 : j + 12] not in _SECONDS_START:
        return False
    prev = st.step_rank.get(int(num))
    return prev is not None and int(label) >= prev


def _scan_header(st: _State, out: Triage, msg: str) -> bool:
    """Read a header line (JOB_ID=..., the artifact stamp); return True when it was a KEY=value line."""
    h = _HEADER.match(msg)
    if h:
        key, val = h.group(1), h.group(2).strip()
        key = {
            "SLURM_JOB_ID": "JOB_ID",
            "SLURM_JOB_NAME": "JOB_NAME",
            "SLURM_JOB_NUM_NODES": "NNODES",
            "SLURM_JOB_NODELIST": "JOB_NODELIST",
        }.get(key, key)
        out.config.setdefault(key, val.strip('"'))
        if key == "JOB_ID":
            st.year = st.year or _year_hint(val)
        return True
    if "artifact_" in msg:
        st.year = _year_hint(msg) or st.year
        am = re.search(r"artifact_(\d{8})_(\d{6})", msg)
        if am:
            st.start_time = _parse_stamp(am.group(1), am.group(2))
    return False


def _scan_step(st: _State, n: int, rank: int | None, ts: float | None, msg: str) -> bool:
    """Record a `completed step:` line (one rank's values per step, rank 0 / unlabelled preferred)."""
    m = _STEP.search(msg)
    if not m:
        return False
    step = int(m.group(1))
    st.training_started = True
    prev_rank = st.step_rank.get(step)
    if prev_rank is None or (rank or 0) < prev_rank:
        loss = _float(m.group(4))
        st.steps[step] = (float(m.group(2)), _float(m.group(3)), loss, ts, n)
        st.step_rank[step] = rank or 0
    return True


def _scan_progress(st: _State, out: Triage, n: int, ts: float | None, msg: str) -> bool:
    """Read config, tunnel, stage, summary, node exit, cancel, checkpoint and restore lines; return True
    when the line is fully read (it cannot also be a failure signature)."""
    if msg.startswith("Config param "):
        c = _CONFIG.match(msg)
        if c:
            out.config.setdefault(c.group(1), c.group(2).strip())
        return True
    if "ssh " in msg and "-L " in msg and out.tunnel is None:
        t = _TUNNEL.search(msg.strip())
        if t:
            fwd = [(int(x), int(y)) for x, y in _FWD.findall(t.group(1))]
            ports = [x for x, y in fwd if x not in (8265, 6006)]
            out.tunnel = msg.strip()
            out.head = t.group(3)
            out.port = ports[0] if ports else None
        return True
    if msg.startswith("== ") and _scan_stage(st, n, msg):
        return True
    if "JOB SUMMARY" in msg:
        st.summary_seen = True
        return True
    if st.summary_seen and _scan_summary(st, msg):
        return True
    if "NODE_EXIT" in msg:
        e = _NODE_EXIT.search(msg)
        if e:
            st.node_exits.append((e.group(1), int(e.group(2)), n))
        return True
    if "CANCELLED AT" in msg:
        c2 = _CANCELLED_AT.search(msg)
        if c2:
            with contextlib.suppress(ValueError):
                st.cancel_time = dt.datetime.fromisoformat(c2.group(1)).replace(tzinfo=dt.UTC).timestamp()
    if "Saved a checkpoint at step" in msg:
        s3 = _SAVED.search(msg)
        if s3:
            st.saved.append(int(s3.group(1)))
        return True
    if "restoring from this run's directory step" in msg:
        r = _RESTORE.search(msg)
        if r:
            st.restored = int(r.group(1))
        return True
    if "processes per node" in msg:
        p = _PROCS.search(msg)
        if p:
            st.procs_per_node = max(1, int(p.group(1)))
    if "BARRIER PASSED" in msg:
        st.training_started = True
        st.barrier_time = ts if ts is not None else st.barrier_time
    return False


def _scan_stage(st: _State, n: int, msg: str) -> bool:
    s = _STAGE.match(msg.strip())
    if not s:
        return False
    st.stages.append((s.group(1), s.group(2), s.group(3).strip(), n))
    st.header_done = True
    if s.group(2) == "TIMEOUT":
        stage = s.group(1).lower()
        klass = {
            "preflight": "preflight-timeout",
            "docker pull": "pull-timeout",
            "ecc check": "ecc-timeout",
            "training": "train-timeout",
        }.get(stage, "train-timeout")
        _add(st, klass, n, msg)
    elif s.group(2) == "FAILED":
        _add(st, "stage-fail", n, msg)
    return True


def _scan_summary(st: _State, msg: str) -> bool:
    s2 = _SUMMARY_STATUS.search(msg)
    if s2:
        st.summary_status = (s2.group(1), int(s2.group(2)), (s2.group(3) or "").strip() or None)
        return True
    w = _WALL.match(msg)
    if w:
        st.wall_s = sum(int(x or 0) * k for x, k in zip(w.groups(), (3600, 60, 1), strict=True))
        return True
    return False


def _scan_failure(st: _State, n: int, ts: float | None, msg: str) -> None:
    """Read heartbeat-accused tasks and failure signatures (harmless lines filtered first)."""
    if st.in_heartbeat:
        tk = _TASK.search(msg)
        if tk:
            st.accused_tasks.append(int(tk.group(1)))
            return
        st.in_heartbeat = False
    if any(h in msg for h in HARMLESS):
        return
    klass = _classify(msg, st.training_started)
    if klass:
        _add(st, klass, n, msg)
        if klass == "heartbeat-timeout" and "stopped sending heartbeats" in msg:
            st.in_heartbeat = True
        if ts is not None and (st.first_fatal_time is None or ts < st.first_fatal_time):
            st.first_fatal_time = ts


def _float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _classify(msg: str, training: bool) -> str | None:
    for klass, pats in SIGNATURES:
        if any(p in msg for p in pats):
            return klass
    if training and "NCCL WARN" in msg:
        return "nccl-timeout"
    if "HloModule" in msg and "error" in msg.lower():
        return "xla-compile-fail"
    return None


def _finish(st: _State, out: Triage, now: float | None, slurm_state: str | None) -> None:
    _finish_config(st, out)
    steps = sorted(st.steps)
    out.first_step = steps[0] if steps else None
    out.last_step = steps[-1] if steps else None
    prog, last_ts = _progress(st, out, steps)
    status = _status(st, out, prog, last_ts, now, slurm_state)
    out.status = status
    prog["lost_steps"] = None
    if out.last_step is not None and status not in ("completed", "soft-success", "running"):
        last_ckpt = prog["last_checkpoint_step"]
        base = last_ckpt if last_ckpt is not None else ((out.first_step or 0) - 1)
        prog["lost_steps"] = out.last_step - base
    elif status in ("completed", "soft-success"):
        prog["lost_steps"] = 0
    out.progress = prog
    stall, end_time = _timing(st, out, steps, last_ts, prog["step_time_s"], now)
    _computed_classes(st, out, stall, prog["step_time_s"], prog["tgs_trend_pct"])
    ordered = sorted((m for lst in st.matches.values() for m in lst), key=lambda m: (_RANK[m.klass], m.line))
    out.matches = ordered
    out.triage_class = ordered[0].klass if ordered else None
    if st.accused_tasks:
        hosts = []
        for task in dict.fromkeys(st.accused_tasks):
            node = task // st.procs_per_node
            hosts.append(out.nodes[node] if node < len(out.nodes) else f"task:{task}")
        out.heartbeat_accused = hosts
    crash = st.first_fatal_time
    if crash is None and status in ("failed", "cancelled", "unknown-death"):
        crash = st.cancel_time or end_time
    out.crash_time = crash
    if not steps and out.details.get("lines"):
        out.unreadable.append("no 'completed step:' lines found")


def _finish_config(st: _State, out: Triage) -> None:
    """Fill the job id, PASSTHROUGH_ARGS items and the node list from what the scan read."""
    cfg = out.config
    out.job_id = cfg.get("JOB_ID")
    if st.year is None and out.job_id:
        st.year = _year_hint(out.job_id)
    for item in _split_args(cfg.get("PASSTHROUGH_ARGS", "")):
        k, _, v = item.partition("=")
        if k and v:
            cfg.setdefault(k, v)
    if cfg.get("JOB_NODELIST"):
        out.nodes = expand_nodelist(cfg["JOB_NODELIST"])
    if not out.nodes and st.node_exits:
        out.nodes = list(dict.fromkeys(h.split(".")[0] for h, _, _ in st.node_exits))


def _progress(st: _State, out: Triage, steps: list[int]) -> tuple[dict[str, Any], float | None]:
    """Return (the progress figures but lost steps, the last step's time)."""
    cfg = out.config
    total = _int(cfg.get("steps"))
    prog: dict[str, Any] = {"steps_total": total}
    restored = (
        st.restored
        if st.restored is not None
        else (out.first_step - 1 if out.first_step and out.first_step > 0 else None)
    )
    prog["restored_from"] = restored
    period = _int(cfg.get("checkpoint_period"))
    ckpt_on = cfg.get("enable_checkpointing", "").lower() in ("true", "1", "yes")
    if ckpt_on and period is None:
        period = 200  # the seed skill's assumption (MaxText's own default is 10000)
    ckpt_steps = set(st.saved) | ({s for s in steps if period and s % period == 0} if ckpt_on else set())
    steady = [st.steps[s][0] for s in steps[5:] if not ({s - 1, s - 2} & ckpt_steps)]
    step_time = None
    if steady:
        med = statistics.median(steady)
        kept = [x for x in steady if x <= 3 * med]
        step_time = round(sum(kept) / len(kept), 3)
    prog["step_time_s"] = step_time
    last_ts = st.steps[out.last_step][3] if steps else None
    if last_ts is None and steps and st.barrier_time is not None:
        # print-style step lines carry no time: training start + the steps' own seconds
        last_ts = st.barrier_time + sum(st.steps[s][0] for s in steps)
        out.details["last_step_time_estimated"] = True
    prog["last_step_time"] = round(last_ts, 3) if last_ts is not None else None
    last_ckpt = None
    if ckpt_on and out.last_step is not None:
        if st.saved:
            last_ckpt = (
                max(s for s in st.saved if s <= out.last_step)
                if any(s <= out.last_step for s in st.saved)
                else None
            )
        elif period:
            c = (out.last_step // period) * period
            last_ckpt = c if c >= (out.first_step or 0) or restored is not None else None
    prog["last_checkpoint_step"] = last_ckpt
    prog["tgs_trend_pct"] = _tgs_trend(st, out, steps)
    return prog, last_ts


def _tgs_trend(st: _State, out: Triage, steps: list[int]) -> float | None:
    """Return the TGS change (%) from steps first+5..first+15 to the last ten, with 20 or more TGS figures."""
    tgs = [(s, st.steps[s][1]) for s in steps if st.steps[s][1] is not None]
    if len(tgs) < 20 or out.first_step is None:
        return None
    early = [v for s, v in tgs if out.first_step + 5 <= s <= out.first_step + 15]
    late = [v for _, v in tgs[-10:]]
    if not (early and late):
        return None
    e, lt = sum(early) / len(early), sum(late) / len(late)
    out.details.update(tgs_early=round(e, 3), tgs_late=round(lt, 3))
    return round((lt - e) / e * 100.0, 2)


def _status(
    st: _State,
    out: Triage,
    prog: dict[str, Any],
    last_ts: float | None,
    now: float | None,
    slurm_state: str | None,
) -> str:
    """Return the job's status from its summary, else from its progress and the clock."""
    total = prog["steps_total"]
    summ = st.summary_status
    complete = total is not None and out.last_step is not None and out.last_step >= total - 1
    if summ is not None:
        word, rc, reason = summ
        out.details.update(exit_code=rc, summary_reason=reason)
        if word == "SUCCESS" and rc == 0:
            return "completed"
        if complete:
            return "soft-success"
        return "cancelled" if rc in (130, 143) else "failed"
    if st.summary_seen or complete:
        return "completed"
    step_time = prog["step_time_s"]
    if now is not None and last_ts is not None and step_time and now - last_ts <= max(5 * step_time, 900.0):
        return "running"
    if (slurm_state or "").upper() == "RUNNING":
        return "hanging"
    return "unknown-death"


def _timing(
    st: _State,
    out: Triage,
    steps: list[int],
    last_ts: float | None,
    step_time: float | None,
    now: float | None,
) -> tuple[float | None, float | None]:
    """Record training time vs wall time and the stall after the last step; return (stall, end time)."""
    secs = [st.steps[s][0] for s in steps]
    train_s = sum(secs) if secs else 0.0
    out.details.update(
        training_time_s=round(train_s, 1),
        wall_s=st.wall_s,
        steps_logged=len(steps),
        checkpoints_saved=sorted(st.saved),
    )
    start_hint = st.start_time if st.start_time is not None else _start_time(out.config)
    end_time = st.cancel_time or (start_hint + st.wall_s if start_hint is not None and st.wall_s else None)
    stall = None
    if last_ts is not None and end_time is not None:
        stall = end_time - last_ts
    elif st.wall_s is not None and secs:
        stall = st.wall_s - train_s - 1800.0  # minus a generous setup + compile allowance
    if stall is not None:
        out.details["stall_after_last_step_s"] = round(stall, 1)
    if last_ts is not None and step_time and now is not None and out.status == "running":
        out.details["expected_step_now"] = int(out.last_step + (now - last_ts) / step_time)
    return stall, end_time


def _computed_classes(
    st: _State, out: Triage, stall: float | None, step_time: float | None, trend: float | None
) -> None:
    """Add the classes no single line shows: hang, TGS degradation, cancelled, node failure, unknown death."""
    status = out.status
    summ = st.summary_status
    fatal_training = {
        "heartbeat-timeout",
        "oom-host",
        "oom-gpu",
        "xla-compile-fail",
        "python-exception",
        "signal-kill",
        "subprocess-fail",
        "actor-fail",
        "checkpoint-fs-error",
        "gpu-hw-error",
    }
    stalled = stall is not None and step_time is not None and stall > max(5 * step_time, 600.0)
    if status == "hanging" or (
        status in ("cancelled", "unknown-death") and stalled and not (fatal_training & set(st.matches))
    ):
        _add(
            st,
            "hang",
            0,
            f"steps stopped at {out.last_step}"
            + (f"; no progress for {stall / 60:.0f} min before the end" if stall else ""),
        )
    if trend is not None and trend < -10.0:
        _add(
            st,
            "tgs-degradation",
            0,
            f"TGS {out.details['tgs_early']:.0f} -> {out.details['tgs_late']:.0f} "
            f"({trend:+.1f} %) between steps {out.first_step + 5}-{out.first_step + 15} and the last 10",
        )
    if status == "cancelled":
        _add(st, "cancelled", 0, f"cancelled (exit {summ[1] if summ else '?'})")
    bad_exits = [(h, rc, n) for h, rc, n in st.node_exits if rc != 0]
    if bad_exits and not all(rc == 143 for _, rc, _ in bad_exits):
        first_suspect = next(((h, rc, n) for h, rc, n in bad_exits if rc != 143), bad_exits[0])
        _add(st, "node-fail", first_suspect[2], f"NODE_EXIT host={first_suspect[0]} exit={first_suspect[1]}")
        out.details["node_exits"] = [{"host": h, "exit": rc} for h, rc, _ in bad_exits]
    if status == "unknown-death":
        _add(st, "unknown-death", 0, "no JOB SUMMARY and no step progress")
    if status == "soft-success":
        _add(st, "soft-success", 0, f"last step {out.last_step} = steps-1 although the job exited non-zero")


def triage_job(
    job_dir: str | os.PathLike[str],
    *,
    now: float | None = None,
    slurm_state: str | None = None,
    roots: Iterable[str | os.PathLike[str]] | None = None,
) -> Triage:
    """Return the triage of a job directory: its primary log plus, for k8s jobs, every rank-N.log.

    With `roots`, every log opened must lie inside one of them: the primary log is refused otherwise,
    a rank log leading out is skipped and listed under `unreadable`. Raises TriageError when the
    directory has no log.
    """
    roots = list(roots) if roots is not None else None
    d = Path(job_dir)
    if not d.is_dir():
        raise TriageError(f"job directory not found: {d}")
    log = find_job_log(d)
    if log is None:
        raise TriageError(f"no log in {d} (looked for job.log, the log symlink and a sibling {d.name}.log)")
    out = triage_log(log, now=now, slurm_state=slurm_state, roots=roots)
    extra: list[Match] = []
    for rank_log in sorted(d.glob("rank-*.log"), key=lambda p: _int(p.stem.split("-")[-1]) or 0):
        try:
            sub = triage_log(rank_log, now=now, roots=roots)
        except TriageError as exc:
            out.unreadable.append(f"{rank_log.name}: {exc}")
            continue
        extra += [Match(m.klass, m.line, f"[{rank_log.name}] {m.text}") for m in sub.matches if m.line > 0]
        out.unreadable += [f"{rank_log.name}: {u}" for u in sub.unreadable if "completed step" not in u]
    if extra:
        out.matches = sorted(out.matches + extra, key=lambda m: (_RANK[m.klass], m.line))
        out.triage_class = out.matches[0].klass
    return out


def _start_time(cfg: dict[str, str]) -> float | None:
    m = re.match(r"^(?:k8s-|local_)(\d{8})[-_](\d{6})", cfg.get("JOB_ID", ""))
    return _parse_stamp(m.group(1), m.group(2)) if m else None


def _parse_stamp(d: str, t: str) -> float | None:
    try:
        return dt.datetime.strptime(d + t, "%Y%m%d%H%M%S").replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None


def _split_args(text: str) -> list[str]:
    return [a for a in text.split() if a]


def _int(text: str | None) -> int | None:
    try:
        return int(str(text).strip()) if text not in (None, "") else None
    except ValueError:
        return None
