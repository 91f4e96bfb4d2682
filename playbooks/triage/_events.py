"""Host events: what Slurm, the launcher, the kernel and NCCL said about one host of the job.

An event is one log line that names (or, through its srun label or a rank, maps to) a host:

- `node-failure`: `srun: error: Node failure on <host>`, or the step/job `CANCELLED AT <time> DUE TO NODE
  FAILURE` (that line names the node that reports it, which is alive: it takes the failed host from the
  `Node failure on` line when there is one, else no host);
- `oom-kill`: the kernel's `Out of memory: Killed process`, `oom-kill:`/`oom_kill` lines, a cgroup OOM, or
  `srun: error: <host>: task N: Out Of Memory`;
- `killed`: a task killed by a signal: `srun: error: <host>: task N: Killed` / `Exited with exit code
  137|143`, `NODE_EXIT host=<h> exit=137|143`, a shell's `Killed`, torchrun's `exitcode: -9|-15`;
- `exited`: a task that ended on its own with a failing status: `srun: error: <host>: task N: Exited with
  exit code <n>` (1, 134, 139, ...: a crash, not a kill);
- `xid`: `NVRM: Xid (PCI:...): <n>` (its `pci`: the bus key of `_gpu_bus`, which nvidia-smi's lines in the
  log map to a GPU index: `resolve_gpu_bus`);
- `nccl-timeout`: an NCCL warning about a timeout, or PyTorch's NCCL watchdog timeout of a rank (`_torch`: the
  rank mapped to its host through the `NCCL INFO comm ... rank N` lines, the srun label or a one-node job);
- `exited` also for torchrun's `exitcode: -6` (SIGABRT, 134: the NCCL watchdog or heartbeat monitor aborting
  its process, as `Signal 6 (SIGABRT) received by PID` in its failure report says).

`code` is the exit status of a `killed` or `exited` event as a shell reports it (137 for SIGKILL, 143 for SIGTERM) and
the Xid number of an `xid` event, else None. Hosts are names of `[A-Za-z0-9._-]` only (anything else is
dropped, not cleaned); the text has no control characters.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

from playbooks.textclean import printable

from ._gpu_bus import bus_key, smi_line
from ._patterns import _abs_time
from ._torch import watchdog_line

__all__ = [
    "DRIVER_XIDS",
    "HW_XIDS",
    "KINDS",
    "EventScan",
    "event_line",
    "merge_events",
    "rank_host",
    "resolve_events",
    "resolve_gpu_bus",
    "srun_task_exit",
]

KINDS = ("node-failure", "oom-kill", "killed", "exited", "xid", "nccl-timeout")
#: Xids of a failing GPU, not of the program (13, 31, 43, 45 are the application's own faults or cleanup):
#: 48 double-bit ECC, 63/64 row remapping, 74 NVLink, 79 fallen off the bus, 92 high single-bit ECC rate,
#: 94/95 contained/uncontained ECC.
HW_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95})
#: Xids of the driver or the GPU's firmware failing (the `xid_driver` rule's codes): 62 internal
#: micro-controller halt, 109 context-switch timeout, 119 GSP RPC timeout, 120 GSP error.
DRIVER_XIDS = frozenset({62, 109, 119, 120})
MAX_EVENTS = 2000  # distinct (kind, host, code) events kept; a log cannot grow the triage without bound

_TRIGGERS = (
    "Node failure",
    "NODE FAILURE",
    "srun: error:",
    "NODE_EXIT",
    "Killed",
    "oom",
    "Out of memory",
    "out of memory",
    "Xid",
    "exitcode",
    "NCCL",
    "Watchdog caught",
    "Root Cause",
    "Failures:",
    "0000:",  # a PCI address: nvidia-smi's GPU table or CSV
)
_HOST = re.compile(r"[A-Za-z0-9._-]{1,253}")
_NODE_FAIL = re.compile(r"srun: error: Node failure on ([^\s,;]+)")
_NF_CANCEL = re.compile(r"CANCELLED AT (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d) DUE TO NODE FAILURE")
#: srun names the signal that ended a task (strsignal's words): its exit status as a shell reports it
_SRUN_SIGNALS = {
    "Hangup": 129,
    "Interrupt": 130,
    "Aborted": 134,
    "Bus error": 135,
    "Floating point exception": 136,
    "Killed": 137,
    "Segmentation fault": 139,
    "Terminated": 143,
}
_SRUN_TASK = re.compile(
    r"srun: error: ([^\s:]+): tasks? [\d,\-]+: (Out Of Memory|Exited with exit code (\d+)|"
    + "|".join(_SRUN_SIGNALS)
    + ")"
)
_NODE_EXIT = re.compile(r"NODE_EXIT host=(\S+) exit=(\d+)")
_SHELL_KILLED = re.compile(r"(?:^|line \d+:\s+\d+ )Killed\b")
_KERNEL_OOM = re.compile(
    r"[Oo]ut of memory: Kill(?:ed)? process|invoked oom-killer|oom_kill_process"
    r"|\boom[-_]kill\b"
)
_TORCH_EXIT = re.compile(r"exitcode\s*: (-?\d+)")
#: torchrun's exit codes of a signal (minus the signal number): the status a shell reports for it
_TORCH_SIGNALS = {-9: 137, -15: 143, -6: 134}
_TORCH_FIELD = re.compile(r"^\s*(time|host|rank)\s*:\s*(\S+)")
_TORCH_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)_(\d\d):(\d\d):(\d\d)")
_XID = re.compile(r"NVRM: Xid \(([^)]{0,40})\): (\d{1,4})\b")
_NCCL_HOST = re.compile(r"^([A-Za-z0-9._-]+):\d+:\d+ \[\d+\] NCCL")
#: NCCL's prefix names the host and the CUDA device (`host:pid:tid [dev] NCCL WARN ...`)
_NCCL_DEV = re.compile(r"^([A-Za-z0-9._-]+):\d+:\d+ \[(\d{1,2})\] NCCL WARN")
_NCCL_COMM = re.compile(r"NCCL INFO comm 0x[0-9a-fA-F]+ rank (\d+) nranks \d+")
_SYSLOG = re.compile(
    r"^(?:<\d+>)?(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) (\d\d):(\d\d):(\d\d) "
    r"([A-Za-z0-9._-]+) kernel:"
)
_ISO_SYSLOG = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?(?:Z|[+-]00:?00)? ([A-Za-z0-9._-]+) kernel:"
)
_DMESG_T = re.compile(r"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \d{4})\]")
_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    )
}
# What each kind of line makes of the triage's class for that line (None: the signatures decide).
_CLASS = {"node-failure": "node-fail", "oom-kill": "oom-host", "nccl-timeout": "nccl-timeout"}


@dataclass
class _Raw:
    kind: str
    line: int
    host: str | None  # named by the line
    label: int | None  # srun task label (= node rank)
    rank: int | None  # a global rank the line names
    time: float | None
    code: int | None
    text: str
    pci: str | None = None  # an Xid's bus key


@dataclass
class EventScan:
    """What the scan gathered for host events.

    Attributes:
        raw: the events, their hosts not yet mapped.
        rank_host: global rank -> host, from NCCL's communicator lines.
        torch: the fields of torchrun's failure report being read (time, host, rank).
        torch_open: the line where that report began (it is read for at most 40 lines).
        node_failure: a Slurm node failure was reported.
        seen: (kind, host, label, rank, code, pci) already kept (the first line of each is the event).
        gpu_bus: (srun label or None, bus key) -> GPU index, from nvidia-smi's lines.
        section_host: the host a banner names for the lines under it (an epilog's `==== dmesg -T on H ====`).
    """

    raw: list[_Raw] = field(default_factory=list)
    rank_host: dict[int, str] = field(default_factory=dict)
    torch: dict[str, str] = field(default_factory=dict)
    torch_open: int = -1
    node_failure: bool = False
    seen: set[tuple[Any, ...]] = field(default_factory=set)
    gpu_bus: dict[tuple[int | None, str], str] = field(default_factory=dict)
    section_host: str | None = None


def _host(text: str | None) -> str | None:
    """Return a host name made of [A-Za-z0-9._-], or None (trailing punctuation dropped)."""
    if not text:
        return None
    text = text.strip().rstrip(".,:;")
    return text if _HOST.fullmatch(text) else None


def _iso(text: str) -> float | None:
    try:
        return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None


def _prefix(msg: str, year: tuple[int, int] | None) -> tuple[str | None, float | None]:
    """Return (host, time) of a kernel line's syslog or `dmesg -T` prefix."""
    s = _SYSLOG.match(msg)
    if s:
        hh, mm, ss = (int(x) for x in s.group(3, 4, 5))
        t = _abs_time(year, _MONTHS[s.group(1)], int(s.group(2)), hh, mm, ss, None)
        return _host(s.group(6)), t
    i = _ISO_SYSLOG.match(msg)
    if i:
        return _host(i.group(2)), _iso(i.group(1))
    d = _DMESG_T.match(msg)
    if d:
        try:
            stamp = dt.datetime.strptime(" ".join(d.group(1).split()), "%b %d %H:%M:%S %Y")
        except ValueError:
            return None, None
        return None, stamp.replace(tzinfo=dt.UTC).timestamp()
    return None, None


def event_line(
    ev: EventScan,
    n: int,
    label: int | None,
    ts: float | None,
    msg: str,
    year: tuple[int, int] | None,
    tz: float = 0.0,
    grank: int | None = None,
) -> str | None:
    """Record the host event of one line, if any; return the triage class the line stands for, or None.
    `tz`: seconds east of UTC of the local times Slurm and the kernel print (0: read as UTC); `grank`: the
    global rank of torchrun's `[rankN]:` label the line had."""
    if ev.torch_open >= 0 and ("=====" in msg or n - ev.torch_open > 40):
        ev.torch, ev.torch_open = {}, -1
    if msg[:3] in ("===", "---", "###"):
        # a banner opens a section: the host it names (`==== epilog: dmesg -T on gpu-7 ====`) is the host of the
        # kernel's lines under it that name none; another banner closes it
        b = _BANNER.match(msg)
        ev.section_host = _host(b.group(1)) if b else None
    for k in _TRIGGERS:  # most lines hold none of these: a plain loop is the cheapest test
        if k in msg:
            break
    else:
        if ev.torch_open < 0:
            return None
    if "Root Cause" in msg or "Failures:" in msg:
        ev.torch, ev.torch_open = {}, n
        return None
    found = _slurm(msg) or _kernel(msg, year) or _launcher(ev, msg) or _nccl(ev, msg, grank)
    if found is None:
        smi = smi_line(msg) if "0000:" in msg and len(ev.gpu_bus) < MAX_EVENTS else None
        if smi is not None:
            ev.gpu_bus.setdefault((label, smi[1]), smi[0])
        return None
    kind, host, rank, t, code = found
    if host is None and kind in _KERNEL_KINDS:
        host = ev.section_host
    t = t - tz if t is not None else t  # Slurm's, the kernel's and torchrun's times are the hosts' local time
    x = _XID.search(msg) if kind == "xid" else None
    pci = bus_key(x.group(1)) if x else None
    _keep(ev, _Raw(kind, n, host, label, rank, t if t is not None else ts, code, msg, pci))
    if kind == "node-failure":
        ev.node_failure = True
    if kind == "xid":
        return "gpu-hw-error" if code in HW_XIDS else None
    if kind == "killed":
        return "signal-kill" if "exitcode" in msg else None
    if kind == "exited":
        return None  # a crash or an abort: the lines before it say why
    return _CLASS.get(kind)


_Found = tuple[str, str | None, int | None, float | None, int | None]
#: the events the kernel reports (dmesg), whose host a section's banner may name
_KERNEL_KINDS = frozenset({"xid", "oom-kill"})
#: a banner line naming a host: `==== epilog: dmesg -T on hgx-r13-n2 (NVRM / oom) ====`, `--- dmesg from h7 ---`
_BANNER = re.compile(r"^[=#-]{3,}\s.*?\b(?:on|from|of|for)\s+([A-Za-z][\w.-]*\w)\b.*?[=#-]{3,}\s*$")


def srun_task_exit(msg: str) -> tuple[str | None, int] | None:
    """Return (host, exit status) of srun's report of tasks that ended (`srun: error: <host>: task 0-7:
    Killed` is 137, SIGKILL; `Segmentation fault` 139; `Exited with exit code <n>`), or None (another line,
    an OOM kill)."""
    t = _SRUN_TASK.search(msg) if "srun: error:" in msg else None
    if t is None or t.group(2) == "Out Of Memory":
        return None
    return _host(t.group(1)), _SRUN_SIGNALS.get(t.group(2)) or int(t.group(3))


def _slurm(msg: str) -> _Found | None:
    if "srun: error:" in msg:
        m = _NODE_FAIL.search(msg)
        if m:
            return "node-failure", _host(m.group(1)), None, None, None
        t = _SRUN_TASK.search(msg)
        if t and t.group(2) == "Out Of Memory":
            return "oom-kill", _host(t.group(1)), None, None, None
        ended = srun_task_exit(msg)
        if ended and ended[1]:
            return "killed" if ended[1] in (137, 143) else "exited", ended[0], None, None, ended[1]
    if "NODE FAILURE" in msg:
        c = _NF_CANCEL.search(msg)
        if c:
            return "node-failure", None, None, _iso(c.group(1)), None
    if "NODE_EXIT" in msg:
        e = _NODE_EXIT.search(msg)
        if e and int(e.group(2)) in (137, 143):
            return "killed", _host(e.group(1)), None, None, int(e.group(2))
    return None


def _kernel(msg: str, year: tuple[int, int] | None) -> _Found | None:
    if "Xid" in msg:
        x = _XID.search(msg)
        if x:
            host, t = _prefix(msg, year)
            return "xid", host, None, t, int(x.group(2))
    if ("oom" in msg or "ut of memory" in msg) and _KERNEL_OOM.search(msg):
        host, t = _prefix(msg, year)
        return "oom-kill", host, None, t, None
    if "Killed" in msg and _SHELL_KILLED.search(msg.strip()) and "srun:" not in msg:
        return "killed", None, None, None, 137
    return None


def _launcher(ev: EventScan, msg: str) -> _Found | None:
    """torchrun/elastic: `failed (exitcode: -9) local_rank: N` and its failure report's fields."""
    f = _TORCH_FIELD.match(msg) if ev.torch_open >= 0 else None
    if f:
        ev.torch[f.group(1)] = f.group(2)
        return None
    if "exitcode" not in msg:
        return None
    e = _TORCH_EXIT.search(msg)
    code = _TORCH_SIGNALS.get(int(e.group(1))) if e else None
    if code is None:
        return None
    host = _host(ev.torch.get("host"))
    rank = int(ev.torch["rank"]) if ev.torch.get("rank", "").isdecimal() else None
    tm = _TORCH_TIME.search(ev.torch.get("time", ""))
    t = _iso("{}-{}-{}T{}:{}:{}".format(*tm.groups())) if tm else None
    return "killed" if code in (137, 143) else "exited", host, rank, t, code


def _nccl(ev: EventScan, msg: str, grank: int | None) -> _Found | None:
    if "NCCL INFO comm" in msg:
        c, h = _NCCL_COMM.search(msg), _NCCL_HOST.match(msg)
        host = _host(h.group(1)) if h else None
        if c and host and len(ev.rank_host) < 100_000:
            ev.rank_host.setdefault(int(c.group(1)), host)
        return None
    if "Watchdog caught" in msg:
        w = watchdog_line(msg, grank)
        return ("nccl-timeout", None, w[0], None, None) if w else None
    if "NCCL WARN" in msg and "uncorrectable ECC" in msg:
        # CUDA reported an uncorrectable ECC error on this host's device: the GPU fault, placed by NCCL's prefix
        d = _NCCL_DEV.match(msg)
        return ("gpu-ecc", _host(d.group(1)), None, None, int(d.group(2))) if d else None
    if "NCCL WARN" in msg and ("imeout" in msg or "Timeout waiting for" in msg):
        h = _NCCL_HOST.match(msg)
        return "nccl-timeout", _host(h.group(1)) if h else None, None, None, None
    return None


def _keep(ev: EventScan, r: _Raw) -> None:
    key = (r.kind, r.host, r.label, r.rank, r.code, r.pci)
    if key in ev.seen or len(ev.raw) >= MAX_EVENTS:
        return
    ev.seen.add(key)
    r.text = printable(r.text.strip())[:300]
    ev.raw.append(r)


def resolve_events(ev: EventScan, nodes: list[str]) -> list[dict[str, Any]]:
    """Return the events with their hosts mapped, one per (kind, host, code), in log order.

    A host is the one the line names (its short name when only that is in the node list), else the node of
    the line's srun label, else the host of the rank it names, else the only node of a one-node job. The
    node-failure line that names no host takes the failed host when one host was reported failed, and
    lends its time to the ones without a time.
    """
    out: list[dict[str, Any]] = []
    for r in ev.raw:
        host = rank_host(ev, nodes, r.label, r.rank, r.host)
        e = {"kind": r.kind, "host": host, "time": r.time, "line": r.line, "code": r.code, "text": r.text}
        out.append(e | ({"pci": r.pci} if r.pci else {}) | ({"gpu": r.code} if r.kind == "gpu-ecc" else {}))
    failed = {e["host"] for e in out if e["kind"] == "node-failure" and e["host"]}
    when = min((e["time"] for e in out if e["kind"] == "node-failure" and e["time"]), default=None)
    for e in out:
        if e["kind"] == "node-failure":
            if e["host"] is None and len(failed) == 1:
                e["host"] = next(iter(failed))
            if e["time"] is None:
                e["time"] = when
    kept: list[dict[str, Any]] = []
    merge_events(kept, out, None, "")
    return kept


def rank_host(
    ev: EventScan, nodes: list[str], label: int | None, rank: int | None, named: str | None = None
) -> str | None:
    """Return the host of a line: the one it names (`named`; its short name when only that is in the node
    list), else the node of its srun label, else the host of the global rank it names (NCCL's communicator
    lines), else the only node of a one-node job; None when none of these tells."""
    host = named
    if host is None and label is not None and 0 <= label < len(nodes):
        host = nodes[label]
    if host is None and rank is not None:
        host = ev.rank_host.get(rank)
    if host is None and len(nodes) == 1:
        host = nodes[0]
    short = {n.split(".")[0]: n for n in nodes} if host and host not in nodes else {}
    return _host(short.get(host.split(".")[0], host) if host and short else host)


def merge_events(
    events: list[dict[str, Any]], more: list[dict[str, Any]], host: str | None, name: str
) -> None:
    """Append `more` to `events`, one per (kind, host, code); `more` came from the log `name` (a k8s
    rank-N.log: its events without a host are that rank's node `host`)."""
    seen = {(e["kind"], e["host"], e["code"], e.get("pci")) for e in events}
    for e in more:
        e = dict(e, host=e["host"] or _host(host), text=f"[{name}] {e['text']}" if name else e["text"])
        key = (e["kind"], e["host"], e["code"], e.get("pci"))
        if key not in seen and len(events) < MAX_EVENTS:
            seen.add(key)
            events.append(e)


def resolve_gpu_bus(ev: EventScan, nodes: list[str]) -> list[dict[str, Any]]:
    """Return nvidia-smi's GPU index per bus key: `host` is the node of the line's srun label, or None for a
    line without one (the job's nodes are alike)."""
    return [
        {
            "host": nodes[label] if label is not None and 0 <= label < len(nodes) else None,
            "pci": key,
            "gpu": gpu,
        }
        for (label, key), gpu in ev.gpu_bus.items()
    ]
