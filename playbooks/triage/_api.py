"""The public entry points: triage a log or a job directory, find a job's log, expand a node list."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

from playbooks.confine import OutsideRoots, open_inside, resolved_roots

from ._events import merge_events
from ._finish import HB_KEY
from ._model import _RANK, Match, Triage, TriageError
from ._patterns import _int
from ._read import _iter_lines
from ._scan import _scan


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


def triage_log(
    source: str | os.PathLike[str] | Iterable[str],
    *,
    now: float | None = None,
    slurm_state: str | None = None,
    roots: Iterable[str | os.PathLike[str]] | None = None,
    data_year: tuple[int, int] | None = None,
) -> Triage:
    """Return the triage of a log file (or of an iterable of lines).

    `now` (unix seconds) is used to tell running from dead jobs without a summary; `slurm_state`
    ("RUNNING", "PENDING", ...) when the scheduler could be asked. With `roots`, the file actually
    opened must lie inside one of them (a symlink leading out is refused). Raises TriageError only when
    a path cannot be opened; bad content is reported in `unreadable`. `data_year`: (year, month) when the
    job's monitoring data begins, the year of dates that carry none (glog, absl, syslog) when the log gives
    no other hint (a job script's `date` line, a dated job id or artifact).
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
            _scan(_iter_lines(fh, out), out, now, slurm_state, data_year)
            if out.details.get("lines", 0) == 0:
                out.unreadable.append("the log is empty")
    else:
        _scan(((i + 1, ln.rstrip("\r\n")) for i, ln in enumerate(source)), out, now, slurm_state, data_year)
    return out


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
    year = _tsdb_year(d / "prometheus")
    out = triage_log(log, now=now, slurm_state=slurm_state, roots=roots, data_year=year)
    extra: list[Match] = []
    for rank_log in sorted(d.glob("rank-*.log"), key=lambda p: _int(p.stem.split("-")[-1]) or 0):
        try:
            sub = triage_log(rank_log, now=now, roots=roots, data_year=year)
        except TriageError as exc:
            out.unreadable.append(f"{rank_log.name}: {exc}")
            continue
        extra += [Match(m.klass, m.line, f"[{rank_log.name}] {m.text}") for m in sub.matches if m.line > 0]
        rank = _int(rank_log.stem.split("-")[-1])
        node = out.nodes[rank] if rank is not None and 0 <= rank < len(out.nodes) else None
        merge_events(out.details["host_events"], sub.details["host_events"], node, rank_log.name)
        _merge_self_accused(out, sub, node)
        out.unreadable += [f"{rank_log.name}: {u}" for u in sub.unreadable if "completed step" not in u]
    if extra:
        out.matches = sorted(out.matches + extra, key=lambda m: (_RANK[m.klass], m.line))
        out.triage_class = out.matches[0].klass
    return out


def _tsdb_year(tsdb: Path) -> tuple[int, int] | None:
    """Return (year, month) of the earliest sample of a TSDB's blocks (their meta.json), or None."""
    starts = []
    for meta in tsdb.glob("*/meta.json") if tsdb.is_dir() else ():
        try:
            starts.append(int(json.loads(meta.read_text())["minTime"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    if not starts:
        return None
    t = dt.datetime.fromtimestamp(min(starts) / 1000.0, dt.UTC)
    return t.year, t.month


def _merge_self_accused(out: Triage, sub: Triage, node: str | None) -> None:
    """Add the ranks a k8s rank log's own heartbeat monitor killed (PyTorch's NCCL monitor: the rank that
    printed it, so that log's node when its line named no host) to the job's accused, with the monitor's
    timeout, and its kill as the crash when it came first."""
    if not sub.heartbeat_accused:
        return
    named = [a if a in out.nodes or not a.startswith("rank:") else node or a for a in sub.heartbeat_accused]
    out.heartbeat_accused = list(dict.fromkeys(out.heartbeat_accused + named))
    for key, value in sub.config.items():
        if key == HB_KEY or key.startswith("TORCH_NCCL_"):
            out.config.setdefault(key, value)
    if sub.crash_time is not None and (out.crash_time is None or sub.crash_time < out.crash_time):
        out.crash_time = sub.crash_time
