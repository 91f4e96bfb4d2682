"""manage.py's early start of `diagnose --job-dir`: which arguments start serving the TSDB before Django
(the command's own tests run it end to end)."""

from __future__ import annotations

from pathlib import Path

import pytest

from investigations.management import early_serve


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
