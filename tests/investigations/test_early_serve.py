"""manage.py's early start of `diagnose --job-dir`: the log triaged in a forked child, the TSDB served, both
handed to the command (the command's own tests run it end to end)."""

from __future__ import annotations

from pathlib import Path

import pytest

from investigations.management import early_serve
from playbooks.triage import TriageError, triage_job


def test_the_child_s_triage_is_the_triage_of_the_log(job_factory):
    """The Triage comes back from the child whole, with how long it took and its CPU."""
    job_dir, _ = job_factory("collective-hang")
    phases: dict[str, float] = {}
    got = early_serve.EarlyTriage(job_dir).result(phases)
    assert got.to_dict() == triage_job(job_dir).to_dict()
    assert phases["triage_s"] > 0 and phases["triage_cpu_s"] > 0


def test_the_child_s_error_is_raised_in_the_parent(tmp_path: Path):
    """A log that cannot be triaged raises the child's TriageError in the command's process."""
    with pytest.raises(TriageError, match="not found"):
        early_serve.EarlyTriage(tmp_path / "missing").result()


@pytest.mark.parametrize(
    ("argv", "starts"),
    [
        (["--job-dir", "{job}"], True),
        (["--job-dir", "{job}", "--format", "markdown", "-v", "2"], True),
        (["--job-dir", "{job}", "--help"], False),
        (["--job-dir", "{job}", "--log", "x.log"], False),
        (["--prometheus", "http://127.0.0.1:9090"], False),
        (["--job-dir", "{empty}"], False),
        (["--job-dir"], False),
    ],
)
def test_only_a_job_directory_with_a_tsdb_starts_early(job_factory, tmp_path: Path, argv, starts):
    """What the command would serve starts early; help, a log, a URL or a folder without a TSDB do not."""
    job_dir, _ = job_factory("healthy")
    (tmp_path / "prometheus").mkdir()
    args = [a.format(job=job_dir, empty=tmp_path) for a in argv]
    tsdb = early_serve._tsdb_of(args)
    assert (tsdb == job_dir / "prometheus") if starts else tsdb is None
