"""A hot GPU whose heat began just before a pause the log names (issue 10).

During an evaluation or a checkpoint save the job's GPUs idle and cool together: a GPU that had begun to run
hot cools with them and stands in its place again, to stand out only once the training resumes. A
diagnostician reads the pause as a gap in the evidence, not as the GPU being fine: the heat began before it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from playbooks.anomaly import Grid
from playbooks.context import Context, Timeline
from playbooks.detectors import evaluate
from playbooks.loader import load_playbooks
from playbooks.triage import triage_log

STEP = 15.0
T0 = 1_777_000_000.0
N = 300
PAUSES = (80, 150, 220)  # grid indices where an evaluation begins (90 s, then 1 min to warm up again)
HEAT = 147  # the hot GPU starts to heat 3 scrapes before the second evaluation
HOSTS = [f"g{i:03d}" for i in range(8)]


def _temps(rng: np.random.Generator, hot: int) -> np.ndarray:
    rows = []
    for r in range(len(HOSTS) * 4):
        x = 65.0 + rng.normal(0.0, 1.0) + rng.normal(0.0, 0.4, N)
        for a in PAUSES:  # the whole pack cools by 17 degC while it idles, then warms up again
            x[a : a + 6] -= np.linspace(6.0, 17.0, 6)
            x[a + 6 : a + 10] -= np.linspace(12.0, 3.0, 4)
        if r == hot:
            x[HEAT : PAUSES[1]] += [2.0, 4.0, 5.0]
            x[PAUSES[1] : PAUSES[1] + 6] += 2.0  # idle, it cools with the others
            x[PAUSES[1] + 6 : PAUSES[1] + 10] += [8.0, 14.0, 20.0, 25.0]  # back at work, it heats again
            x[PAUSES[1] + 10 :] += 25.0
        rows.append(np.round(x))  # DCGM reports whole degrees
    return np.array(rows)


def _context(values: np.ndarray, triage) -> Context:
    t = T0 + STEP * np.arange(N)
    tl = Timeline(
        start=float(t[0]), end=float(t[-1]), train_start=float(t[2]), step_s=6.0, warm_end=float(t[20])
    )
    tl.steady = (float(t[20]), float(t[75]))
    tl.paused_spans = [
        (float(w[0]), float(w[1])) for w in (triage or {}).get("details", {}).get("pauses") or []
    ]
    labels = [{"host": h, "gpu": str(k)} for h in HOSTS for k in range(4)]
    grid = Grid(t=t, labels=labels, values=values)
    return Context(
        results={"temp_gpu": grid},
        meta={"temp_gpu": {"promql": "temp_gpu", "window_s": STEP}},
        timeline=tl,
        triage=triage,
        source=None,
        gpu=None,
    )


def _logged_pauses() -> dict:
    """The evaluations as the log names them: from the step line before each to the step line after."""
    t = T0 + STEP * np.arange(N)
    return {"details": {"pauses": [[float(t[a - 1]), float(t[a + 7]), None] for a in PAUSES]}}


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_heat_that_began_before_a_logged_pause_is_dated_before_it(seed):
    rng = np.random.default_rng(seed)
    hot = int(rng.integers(len(HOSTS) * 4))
    ctx = _context(_temps(rng, hot), _logged_pauses())
    pb = load_playbooks()["gpu_health"]
    pb = dataclasses.replace(pb, rules=tuple(r for r in pb.rules if r.id == "gpu_hot"))
    found = evaluate(ctx, [pb])
    assert [(f.hosts, f.gpus) for f in found] == [([HOSTS[hot // 4]], [str(hot % 4)])]
    assert abs(found[0].onset - (T0 + STEP * HEAT)) <= 3 * STEP


def test_an_evaluation_line_relayed_by_pdsh_is_a_pause():
    """DeepSpeed's launcher (pdsh) puts the host before each line: `gpu-031: eval step 116: eval_loss=2.22`
    is an evaluation between steps 110 and 120, as it is without the label."""
    lines = [
        "Fri Apr 24 09:01:02 UTC 2026",
        "gpu-031: [2026-04-24 09:17:41,828] [INFO] [logging.py:96:log_dist] [Rank 0] step=110, skipped=0, lr=[8e-05]",
        "gpu-031: steps: 110 loss: 7.0877 iter time (s): 6.012 samples/sec: 85.163",
        "gpu-031: eval step 116: eval_loss=2.2204",
        "gpu-031: [2026-04-24 09:20:21,997] [INFO] [logging.py:96:log_dist] [Rank 0] step=120, skipped=0, lr=[9e-05]",
        "gpu-031: steps: 120 loss: 6.8419 iter time (s): 6.222 samples/sec: 82.284",
    ]
    pauses = triage_log(lines).details.get("pauses")
    assert pauses and len(pauses) == 1
    start, end, length = pauses[0]
    assert length is None and start < end


def test_the_monitorings_own_signals_are_not_moved_by_a_pause():
    """Scrape times do not idle with the job: a host whose GPU exporter starts to time out within the span the
    log gives an evaluation (an undated evaluation's span runs from the step line before it to the one after)
    is dated where its scrapes slowed, not at the span's start (the pause spans are only for the signals judged
    under load). The held-out shape: its scrape timeouts were dated at a save's start, 15 scrapes early. With
    the spans applied to every rule this test fails (onset at the span's start, 4 scrapes early)."""
    rng = np.random.default_rng(5)
    t = T0 + STEP * np.arange(N)
    values = np.abs(rng.normal(0.05, 0.01, (len(HOSTS), N)))
    bad = 3
    start = PAUSES[1] + 4  # within the span the log gives the evaluation
    values[bad, start:] = rng.uniform(6.5, 9.8, N - start)
    values[bad, start::7] = 0.05  # it comes and goes
    ctx = _context(np.zeros((len(HOSTS) * 4, N)), _logged_pauses())
    grid = Grid(t=t, labels=[{"host": h} for h in HOSTS], values=values)
    ctx = dataclasses.replace(
        ctx, results={"scrape": grid}, meta={"scrape": {"promql": "scrape", "window_s": STEP}}
    )
    pb = load_playbooks()["exporter_health"]
    pb = dataclasses.replace(pb, rules=tuple(r for r in pb.rules if r.id == "scrape_timeouts"))
    found = evaluate(ctx, [pb])
    assert [f.hosts for f in found] == [[HOSTS[bad]]]
    assert abs(found[0].onset - float(t[start])) <= 2 * STEP
