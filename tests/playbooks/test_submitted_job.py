"""Two things a queued or slowly refreshed job shows that are no anomaly (#10): a job id stamped when the job
was submitted (it then waited in the queue), and a training gauge that later scrapes repeat."""

from __future__ import annotations

import datetime as dt

import numpy as np

from playbooks.anomaly import change_points
from playbooks.triage import triage_log


def _utc(text: str) -> float:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp()


def _step(n: int, at: str, loss: float) -> str:
    return (
        f"[default0]:[2026-12-18T{at}+00:00] completed step: {n}, seconds: 6.100, TFLOP/s/device: 410.000, "
        f"Tokens/s/device: 5000.000, total_weights: 1048576, loss: {loss:.3f}"
    )


def test_a_job_ends_no_earlier_than_its_last_dated_line_when_its_id_names_its_submission():
    """The job id's stamp (19:12:20) is when it was submitted; its first line is 14 minutes later, so the
    summary's wall time counted from the stamp ends the job (20:04:16) before its last dated lines (20:17:34).
    The job cannot have ended before them: it ended at its last dated line, not 13 minutes before it."""
    lines = [
        "JOB_ID=k8s-20261218-191220-6bc8",
        "JOB_NAME=LLM-llama3-70b-steps_100000",
        "NNODES=2",
        "JOB_NODELIST=ip-10-2-18-51,ip-10-1-20-39",
        "== Training BEGIN (no timeout) ==",
        "[default0]:[2026-12-18T19:26:53.000+00:00] Config param log_period: 1",
        *[_step(n, f"20:{n // 10:02d}:{n % 10 * 6:02d}.000", 4.0 - 0.001 * n) for n in range(0, 175)],
        "[default0]:[2026-12-18T20:17:34.790+00:00] RuntimeError: training diverged: 3 consecutive non-finite losses",
        "========================== JOB SUMMARY ==========================",
        "  Job:    k8s-20261218-191220-6bc8 (LLM-llama3-70b)",
        "  Nodes:  2",
        "  Wall:   0h 51m 56s",
        "  Status: FAILED (exit 1)",
    ]
    t = triage_log(lines)
    assert t.crash_time is not None and t.crash_time >= _utc("2026-12-18T20:17:34")
    assert t.crash_time <= _utc("2026-12-18T20:18:49")  # no later than the first line plus the wall time


def test_a_gauge_refreshed_every_fourth_scrape_is_not_judged_before_its_noise_is_known():
    """A loss gauge refreshed every 60 s, scraped every 15 s, just after warm-up: its first values are repeated
    by four scrapes each. An uptick of 0.014 after one fall of 0.046 is no jump: two changes tell no noise
    (1 % of the little progress made so far is no scale), and its four repeats are no three points in a row.
    The divergence later still is one."""
    t = np.arange(400) * 15.0
    refreshed = 4.42 - 0.0012 * np.arange(100) + np.random.default_rng(3).normal(0, 0.01, 100)
    refreshed[1] = refreshed[0] - 0.046
    refreshed[2] = refreshed[1] + 0.014
    refreshed[70:] += np.linspace(0.5, 14.0, 30)  # the divergence
    x = np.repeat(refreshed, 4)
    valid = np.ones(400, dtype=bool)
    found = change_points(x, t, valid, window=1200, z=10, min_rel=0.1, origin=float(np.median(x[:5])))
    assert found and found[0] == 280  # the divergence's first refresh (70 x 4), never the early uptick
