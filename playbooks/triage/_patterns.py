"""What the triage recognises in a line: failure signatures, harmless lines, the line grammar, small parsers."""

from __future__ import annotations

import datetime as dt
import re

from ._torch import HEARTBEAT_SIGNS

_NCCL_TIMEOUT_SIGNS = (
    "NCCL WARN Timeout",
    "NCCL error",
    "Timeout waiting for",
    "ncclSystemError",
    # PyTorch's NCCL watchdog (ProcessGroupNCCL.cpp): a collective of this rank timed out, or another rank's
    # did and the store told this one ("... watchdog detected a collective timeout and notified current rank")
    "Watchdog caught collective operation timeout",
    "watchdog detected a collective timeout",
)

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
            # Ray's GCS: "The node with node id: ... and node name: H has been marked dead because the detector
            # has missed too many heartbeats from it."
            "has been marked dead because the detector has missed too many heartbeats",
            # PyTorch's NCCL heartbeat monitor: this rank's own watchdog thread stopped beating (`_torch`)
            *HEARTBEAT_SIGNS,
        ),
    ),
    ("oom-gpu", ("RESOURCE_EXHAUSTED", "ResourceExhausted", "OUT_OF_MEMORY", "XLA_ERROR", "out of memory")),
    ("oom-host", ("Killed", "oom-kill", "Out of memory")),
    ("nccl-timeout", _NCCL_TIMEOUT_SIGNS),
    ("xla-compile-fail", ("INTERNAL: Failed to compile", "XLA compilation failed")),
    ("python-exception", ("Traceback (most recent call last):",)),
    ("signal-kill", ("Training subprocess killed by",)),
    ("subprocess-fail", ("Training subprocess exited with code",)),
    ("actor-fail", ("Actor failed:",)),
    ("checkpoint-fs-error", ("Training stopped: Checkpointing failed", "manifest.ocdbt.__lock")),
    ("gpu-hw-error", ("HSA_STATUS_ERROR", "rocdevice.cpp", "uncorrectable ECC error")),
)

#: a line that shows a collective timed out or failed (the watchdog's "Watchdog caught collective operation
#: timeout" says "timeout"); any other NCCL WARN is read as one only when the training did not go on after it
NCCL_TIMEOUT = re.compile("|".join(re.escape(p) for p in _NCCL_TIMEOUT_SIGNS) + r"|[Tt]imeout|[Tt]imed out")

# Known-harmless lines, filtered BEFORE matching (§3.2).
HARMLESS = (
    "Failed call to cuInit: UNKNOWN ERROR (303)",
    "INTERNAL: CUDA error",
    "NCCL WARN MSCCL++",
    # NCCL's advisory at communicator init on hosts whose IOMMU is not in pass-through: configuration, no failure
    'NCCL WARN Missing "iommu=pt"',
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
_LABEL = re.compile(r"^\s*(\d+): ")
_RAY = re.compile(r"^\((\w+) pid=\d+(?:, ip=[^)]*)?\) ")
_ABSL = re.compile(r"^([IWEF])(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?\s+\d+\s+[^\]\s]+\] ")
# PyTorch's c10 header, the same date in brackets without a thread id, after its rank label:
# "[rank0]:[E1122 00:44:55.086705123 ProcessGroupNCCL.cpp:1664] "
_C10 = re.compile(
    r"^(?:\[rank\d+\]:)?\[([IWEF])(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?\s+[^\]\s]+\]\s?"
)
# a line dated in ISO 8601 with its UTC offset (Python logging's own stamp), after torchrun's per-rank
# `--tee` label ("[default0]:"); a stamp without an offset reads as UTC, like absl's
_ISO = re.compile(
    r"^(?:\[[A-Za-z_]+\d+\]:)?\[(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\]\s?"
)
# the same stamp after pdsh's host label (DeepSpeed's multi-node launcher: "host: [2026-... ,900] [INFO] ...") or
# a space (Megatron-LM's training_log: " [2026-04-17 17:53:27] iteration ..."), and Hugging Face's own
# logging format "[INFO|trainer.py:2128] 2026-07-17 19:57:24,593 >> "
# Python logging's own header before the message, its stamp local time: torchtitan's "[titan] %(asctime)s -
# %(name)s - %(levelname)s - " (after torchrun's "[rank0]:"), "%(asctime)s %(levelname)s [%(filename)s:%(lineno)d] "
# and NeMo's "[NeMo %(levelname)1.1s %(asctime)s %(module)s:%(lineno)d] "
_PYLOG = re.compile(
    r"^(?:\[rank\d+\]:)?(?:\[titan\] )?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d+)?) - [\w.]+ - [A-Z]+ - "
    r"|^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d+)?) (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \[[^\]]{1,200}\] "
    r"|^\[NeMo [DIWEC] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) [^\]]{1,200}\] "
)
_ISO_LOOSE = re.compile(
    r"^(?:[A-Za-z0-9][\w.-]{0,252}: | +)\[(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?)\]\s?"
    r"|^\[(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\|[^\]]{1,200}\] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d+)?) >> "
)
# a bare ISO 8601 stamp with its zone at the line's start (`kubectl logs --timestamps`' RFC 3339 with nanoseconds,
# a logger's `%Y-%m-%dT%H:%M:%S.%f%z`): the 'T' and the zone make it unambiguous
# (not syslog's `<stamp> <host> <program>[pid]: `, whose host and stamp the host events read themselves)
_ISO_BARE = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)) (?![\w.-]+ [\w./-]+(?:\[\d+\])?: )"
)
# a fraction of a second finer than microseconds, which datetime does not read
_FINE = re.compile(r"([.,]\d{6})\d+")
# a trainer reporting a non-finite loss ("loss is nan", "loss=inf", "NaN loss", "non-finite losses")
_NONFINITE = re.compile(
    r"\bloss\W{0,3}(?:is|=|:|became|becomes)?\W{0,3}(?:nan|[-+]?inf(?:inity)?)\b"
    r"|\b(?:nan|non-?finite|inf(?:inite)?)\s+loss(?:es)?\b"
    r"|found NaN in local grad norm",  # Megatron-core's check before the gradients' all-reduce
    re.IGNORECASE,
)
_STEP = re.compile(
    r"completed step: (\d+), seconds: ([0-9.]+)(?:.*?Tokens/s/device: ([0-9.]+))?"
    r"(?:.*?loss: ([-+0-9.eEnaif]+))?"
)
_CONFIG = re.compile(r"^Config param ([A-Za-z0-9_.]+): ?(.*)$")
#: the JAX coordination service's heartbeat timeout as a program prints or passes it, other than a `Config
#: param` line: `jax.distributed heartbeat_timeout_seconds=600`, `heartbeat_timeout_seconds: 600`,
#: `--jax_distributed_heartbeat_timeout_seconds=600`, `initialize(..., heartbeat_timeout_seconds=600)`
HB_TIMEOUT = re.compile(r"\b(?:jax_distributed_)?heartbeat_timeout_seconds['\"]?\s*[=:]\s*(\d+)")
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


def _classify(msg: str, training: bool) -> str | None:
    for klass, pats in SIGNATURES:
        if any(p in msg for p in pats):
            return klass
    if training and "NCCL WARN" in msg:
        return "nccl-timeout"
    if "HloModule" in msg and "error" in msg.lower():
        return "xla-compile-fail"
    return None


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


def _year_hint(value: str) -> tuple[int, int] | None:
    m = _STAMP.search(value)
    if not m:
        return None
    digits = next(g for g in m.groups() if g and len(g) == 8)
    return int(digits[:4]), int(digits[4:6])


def _abs_time(
    year_hint: tuple[int, int] | None, month: int, day: int, hh: int, mm: int, ss: int, frac: str | None
) -> float | None:
    """Return the unix time of an absl/syslog date without a year (the year from the job's id or artifact)."""
    year = year_hint[0] if year_hint else dt.datetime.now(dt.UTC).year
    if year_hint and month < year_hint[1]:
        year += 1  # the job crossed New Year
    try:
        t = dt.datetime(year, month, day, hh, mm, ss, tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None
    return t + (float("0." + frac) if frac else 0.0)


def _dated(msg: str, year: tuple[int, int] | None, tz: float = 0.0) -> tuple[float | None, str]:
    """Return (the line's time, the message without its absl or c10 header or ISO 8601 stamp).

    A stamp without a UTC offset (absl's, Python logging's) is the machine's local time: `tz` is that
    zone's offset in seconds east of UTC (from the log's `date` header; 0 reads it as UTC)."""
    a = _ABSL.match(msg) or _C10.match(msg)
    if a:
        mo, day, hh, mm, ss = (int(x) for x in a.group(2, 3, 4, 5, 6))
        t = _abs_time(year, mo, day, hh, mm, ss, a.group(7))
        return (t - tz if t is not None else None), msg[a.end() :]
    m = _ISO.match(msg) or (_ISO_LOOSE.match(msg) if msg[:1] in " [" or ": [" in msg[:256] else None)
    m = m or (_PYLOG.match(msg) if msg[:1] in "[2" else None)
    m = m or (_ISO_BARE.match(msg) if msg[:1] == "2" else None)
    if not m:
        return None, msg
    try:
        d = dt.datetime.fromisoformat(_FINE.sub(r"\1", next(g for g in m.groups() if g)))
    except ValueError:
        return None, msg
    return (d.timestamp() if d.tzinfo else d.replace(tzinfo=dt.UTC).timestamp() - tz), msg[m.end() :]


def _float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(str(text).strip()) if text not in (None, "") else None
    except ValueError:
        return None


def _split_args(text: str) -> list[str]:
    return [a for a in text.split() if a]


def _start_time(cfg: dict[str, str]) -> float | None:
    m = re.match(r"^(?:k8s-|local_)(\d{8})[-_](\d{6})", cfg.get("JOB_ID", ""))
    return _parse_stamp(m.group(1), m.group(2)) if m else None


def _parse_stamp(d: str, t: str) -> float | None:
    try:
        return dt.datetime.strptime(d + t, "%Y%m%d%H%M%S").replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None


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
