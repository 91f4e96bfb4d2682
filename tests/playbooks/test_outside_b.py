"""What blind-b's outside corpus (bench/outside/gen_b.py, #10) exposed, each on a real TSDB or a real log.

- A counter's single increment between two grid points was lost: windows exactly one grid step long share
  no scrape, so a UE counter's 0 -> 1 that straddled a grid point fell in neither window.
- A log without a start stamp whose wall time is shorter than its steps plus the setup allowance gave a
  negative stall, and the diagnosis window ended twenty minutes before the last step.
- A gradient norm or loss that climbs (a divergence) was missed: each point is only a little above the last
  few, so no jump against them fires.
- A training instability that ended in a crash lost to the stall it caused (the hang is the fallback).
"""

from __future__ import annotations

import time

import numpy as np

from playbooks.anomaly import change_points, climbs, walk_back
from playbooks.decision import decide_diagnosis
from playbooks.diagnose import render_query
from playbooks.loader import load_playbooks
from playbooks.prometheus import PrometheusClient
from playbooks.triage import triage_log
from tests.playbooks.test_failure_modes import _ctx, _f
from tests.support.prometheus import Family, build_tsdb, points, served, write_openmetrics


def test_one_uncorrectable_error_between_two_grid_points_is_counted(tmp_path):
    """A coarse per-host increase() grid sees a 0 -> 1 step whichever grid point it straddles."""
    end = float(int(time.time() - 7200))
    start = end - 4 * 3600
    interval = 10.0
    q = next(q for q in load_playbooks()["gpu_health"].queries if q.name == "ecc_ue_host")
    pq = render_query(q, "amd", start=start, end=end, interval=interval)
    assert pq.step is not None and pq.step > 4 * interval, "a coarse grid coarser than the auto window"
    grid = [pq.start + k * pq.step for k in range(int((pq.end - pq.start) // pq.step) + 1)]
    # the last sample before the increment is just before a grid point, the first after it just after
    g = grid[len(grid) // 2]
    t0 = start + ((g - 4.0 - start) % interval)  # scrapes at g - 4 and g + 6
    lab = {"host": "h1", "gpu": "3", "instance": "h1:9400", "job": "node_hw"}
    fams = [
        Family("hw_gpu_ras_umc_ue_total", series=[(lab, points(t0, end, interval, lambda t: float(t > g)))]),
        Family("hw_gpu_power_watts", series=[(lab, points(t0, end, interval, lambda t: 700.0))]),
    ]
    tsdb = build_tsdb(write_openmetrics(tmp_path / "m.om", fams), tmp_path / "tsdb")
    with served(tsdb, tmp_path / "views") as server, PrometheusClient(server.url, retries=1) as client:
        series = client.query_range(pq.promql, pq.start, pq.end, pq.step)
    seen = [(ts, v) for s in series for ts, v in zip(s.timestamps, s.values, strict=True) if v > 0.5]
    assert seen and min(ts for ts, _ in seen) >= g, "the increment is on a grid point after it happened"


def test_a_short_wall_time_without_a_start_stamp_is_no_negative_stall():
    """Wall minus steps minus the setup allowance below zero means no stall, not an end before the last step."""
    lines = ["JOB_ID=958103", "NNODES=1", "JOB_NODELIST=n1", 'PASSTHROUGH_ARGS="steps=300"']
    lines += [
        f"I1103 08:{10 + i // 6:02d}:{i % 6 * 10:02d}.000000 1 metric_logger.py:190] completed step: {i}, "
        f"seconds: 10.000, TFLOP/s/device: 1.0, Tokens/s/device: 100.0, total_weights: 1, loss: 2.0"
        for i in range(150)
    ]
    lines += [
        "Traceback (most recent call last):",
        "FloatingPointError: non-finite loss (inf) at step 150",
        "========================== JOB SUMMARY ==========================",
        "  Wall:   35m 0s",
        "  Status: FAILED (exit 1) \u2014 Training FAILED (exit=1)",
    ]
    d = triage_log(lines).to_dict()
    assert d["details"]["stall_after_last_step_s"] == 0.0


def test_a_gradient_norm_that_climbs_many_fold_is_found_and_dated_where_it_left_its_level():
    """A divergence climbs a little each point (no jump against the last few), yet is 20x its level in minutes."""
    t = np.arange(0.0, 3600.0, 15.0)
    rng = np.random.default_rng(3)
    on = 2400.0
    x = 1.0 + rng.normal(0, 0.08, len(t))
    x = x * np.exp(np.clip((t - on) / 200.0, 0, None))
    valid = np.ones(len(t), bool)
    jumps = change_points(x, t, valid, window=1200.0, z=10.0, min_rel=1.0)
    assert all(t[i] > on + 300 for i in jumps), "against the last few points the climb barely shows"
    found, levels = climbs(x, t, valid, window=1200.0, z=10.0, min_rel=1.0)
    assert found and t[found[0]] < on + 600
    start = walk_back(x, found[0], levels[found[0]])
    assert abs(t[start] - on) <= 60.0


def test_a_training_instability_before_the_stall_explains_it():
    """The stall (the fallback) yields to a cause of a class that stops jobs and began before it."""
    loss = _f("loss_jump", "training-instability", "warning", [], 4000.0)
    stall = _f("step_stall", "collective-hang", "critical", [], 5000.0)
    d = decide_diagnosis(_ctx(stalled=True, last_advance=5000.0), [loss, stall])
    assert d["class"] == "training-instability" and d["onset"] == 4000.0
    late = _f("loss_jump", "training-instability", "warning", [], 6000.0)
    stall = _f("step_stall", "collective-hang", "critical", [], 5000.0)  # the first decision re-classed it
    d = decide_diagnosis(_ctx(stalled=True, last_advance=5000.0), [late, stall])
    assert d["class"] == "collective-hang", "what starts after the stall does not explain it"
