"""`manage.py triage --format markdown` lists the log's host events: kind, host, time, line and code."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from playbooks.report import HOST_EVENTS_LISTED, triage_markdown
from playbooks.triage import triage_log
from tests.investigations.views.test_triage_host_events import LOG

REPO = Path(__file__).resolve().parents[2]


def _section(md: str) -> list[str]:
    """Return the table rows of the `### Host events` section."""
    part = md.split("### Host events\n", 1)[1].split("\n### ", 1)[0]
    return [ln for ln in part.splitlines() if ln.startswith("| ") and not ln.startswith("| kind")]


def test_the_command_prints_each_host_event(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("\n".join(LOG) + "\n")
    out = subprocess.run(
        [sys.executable, "manage.py", "triage", "--log", str(log), "--format", "markdown"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = _section(out)
    assert [r.split(" | ")[:2] for r in rows] == [
        ["| xid", "gpu-102"],
        ["| node-failure", "gpu-104"],
        ["| killed", "gpu-103"],
    ]
    xid, failure, killed = rows
    assert "10:15:02 UTC" in xid and f"| {len(LOG) - 2} | 79 |" in xid
    assert f"| {len(LOG) - 1} |" in failure and f"| {len(LOG)} | 137 |" in killed


def test_no_section_without_events_and_pipes_in_text_are_escaped() -> None:
    triage = triage_log(LOG[:-3]).to_dict()
    assert "### Host events" not in triage_markdown(triage)
    triage["details"]["host_events"] = [
        {"kind": "killed", "host": f"h{i}", "time": None, "line": i + 1, "code": 143, "text": "a | b"}
        for i in range(HOST_EVENTS_LISTED + 3)
    ]
    md = triage_markdown(triage)
    rows = _section(md)
    assert len(rows) == HOST_EVENTS_LISTED and all(len(re.split(r"(?<!\\)\|", r)) == 8 for r in rows)
    assert "`a \\| b`" in rows[0] and "and 3 more" in md
