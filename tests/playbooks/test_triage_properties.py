"""Property tests of the triage's host-event parsers: arbitrary text, alone or spliced into every line shape
the parsers read, never crashes them, and never yields a host outside [A-Za-z0-9._-] or a control character."""

from __future__ import annotations

import json
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from playbooks.triage import triage_log
from playbooks.triage._events import KINDS

_HOST = re.compile(r"[A-Za-z0-9._-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

# Every line shape an event parser reads, with a hole for arbitrary text.
SHAPES = (
    "srun: error: Node failure on {x}",
    "slurmstepd: error: *** JOB 1 ON {x} CANCELLED AT 2026-03-01T10:20:00 DUE TO NODE FAILURE ***",
    "srun: error: {x}: task 3: Killed",
    "srun: error: {x}: tasks 0-3: Exited with exit code 137",
    "srun: error: {x}: task 1: Out Of Memory",
    "{n}: NODE_EXIT host={x} exit=143",
    "{n}: Killed {x}",
    "Mar  1 10:15:02 {x} kernel: Out of memory: Killed process 1 ({x})",
    "[Sun Mar  1 10:15:{x} 2026] oom-kill:{x}",
    "{x} kernel: NVRM: Xid (PCI:{x}): 79, {x}",
    "2026-03-01T10:15:04 {x} kernel: NVRM: Xid (PCI:0000:3b:00): {n}",
    "{x}:1:2 [0] NCCL WARN Timeout {x}",
    "{x}:1:2 [0] NCCL INFO comm 0x1 rank {n} nranks 4",
    "[Rank {n}] Watchdog caught collective operation timeout: {x}",
    "failed (exitcode: -9) local_rank: {n} {x}",
    "Root Cause (first observed failure):",
    "  host      : {x}",
    "  time      : {x}",
    "  rank      : {x}",
    "  exitcode  : -15 {x}",
    "JOB_NODELIST={x}",
)


@st.composite
def _line(draw: st.DrawFn) -> str:
    text = st.text(max_size=40)
    if draw(st.booleans()):
        return draw(text)
    shape = draw(st.sampled_from(SHAPES))
    line = shape.format(x=draw(text), n=draw(st.integers(-3, 70)))
    return draw(st.sampled_from(["", "0: ", " 3: ", "\x1b[31m"])) + line


def _assert_clean(events: list[dict]) -> None:
    for e in events:
        assert e["kind"] in KINDS and isinstance(e["line"], int) and e["line"] >= 1
        assert e["host"] is None or _HOST.fullmatch(e["host"]), e
        assert e["time"] is None or isinstance(e["time"], float)
        assert e["code"] is None or isinstance(e["code"], int)
        assert not _CONTROL.search(e["text"]) and not (e["host"] and _CONTROL.search(e["host"]))
        e["text"].encode("utf-8")  # no lone surrogate either


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_line(), max_size=40))
def test_event_lines_with_arbitrary_text_never_crash_nor_leak_bad_hosts(lines: list[str]) -> None:
    events = triage_log(["JOB_ID=1", "JOB_NODELIST=gpu-[101-104]", *lines]).to_dict()["details"][
        "host_events"
    ]
    _assert_clean(events)
    json.dumps(events)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(max_size=200), max_size=30))
def test_arbitrary_text_never_crashes_the_event_parsers(lines: list[str]) -> None:
    _assert_clean(triage_log(lines).to_dict()["details"]["host_events"])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=120), max_size=30))
def test_arbitrary_bytes_in_a_file_never_crash_the_event_parsers(
    tmp_path_factory, chunks: list[bytes]
) -> None:
    path = tmp_path_factory.mktemp("logs") / "x.log"
    path.write_bytes(b"\n".join(chunks))
    _assert_clean(triage_log(path).to_dict()["details"]["host_events"])


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(), min_size=1, max_size=30))
def test_a_named_host_is_kept_only_when_it_is_a_plain_name(name: str) -> None:
    """The host a line names is taken as it is when it is a plain name, never cleaned into another one."""
    events = triage_log([f"srun: error: Node failure on {name}"]).to_dict()["details"]["host_events"]
    hosts = {e["host"] for e in events}
    assert all(h is None or (h in name and _HOST.fullmatch(h)) for h in hosts)
    if _HOST.fullmatch(name) and not name.endswith("."):
        assert hosts == {name}
