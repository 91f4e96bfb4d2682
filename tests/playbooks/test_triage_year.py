"""Dates without a year (glog's `I0918 00:14:25`, absl, syslog) in a job directory whose log gives no other
hint of the year: the year is the one the job's own monitoring data (its TSDB's blocks) lies in, not the
clock's, or every log time misses the data by whole years and no stall is ever seen in it (#10)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from playbooks.triage import triage_job

STEPS = [
    f" 0: I0918 00:{14 + i // 12:02d}:{(i * 5) % 60:02d}.000000 140551 train.py:312] completed step: {i}, "
    f"seconds: 5.000, loss: 4.4{i % 10}"
    for i in range(40)
]


def _job(root: Path, block_year: int | None) -> Path:
    job = root / "job"
    (job / "prometheus").mkdir(parents=True)
    (job / "job.log").write_text("JOB_ID=331477\nNNODES=2\n" + "\n".join(STEPS) + "\n")
    if block_year is not None:
        start = dt.datetime(block_year, 9, 17, 23, 0, tzinfo=dt.UTC).timestamp() * 1000
        block = job / "prometheus" / "01M88PQP74XXVWFP1Q7GT97AE4"
        block.mkdir()
        block.joinpath("meta.json").write_text(
            json.dumps({"minTime": int(start), "maxTime": int(start) + 7.2e6})
        )
    return job


def _year(t: float) -> int:
    return dt.datetime.fromtimestamp(t, dt.UTC).year


@pytest.mark.parametrize("year", [2019, 2031])
def test_glog_dates_take_the_year_of_the_jobs_data(tmp_path, year):
    progress = triage_job(_job(tmp_path, year)).to_dict()["progress"]
    assert _year(progress["last_step_time"]) == year
    assert (
        dt.datetime.fromtimestamp(progress["last_step_time"], dt.UTC).strftime("%m%d %H:%M:%S")
        == "0918 00:17:15"
    )


def test_without_blocks_the_year_is_the_clocks(tmp_path):
    progress = triage_job(_job(tmp_path, None)).to_dict()["progress"]
    assert _year(progress["last_step_time"]) == dt.datetime.now(dt.UTC).year
