"""Step lines of trainers the triage has no grammar for, read as key-value pairs (issue 10).

A torchrun script's `step 120/900 | loss 2.48 | 4.71 s/step`, an Accelerate script's `Step 120: loss=2.48
step_time=4.7s` behind `kubectl logs --timestamps`' RFC 3339 stamp, Ray Train's reported dict with its own Unix
time: each names a step, a training loss and a duration, which is all the timeline needs. Evaluation and
checkpoint lines that name a step are not steps."""

from __future__ import annotations

import pytest

from playbooks.triage import triage_log
from playbooks.triage._kvstep import read_kv_step
from playbooks.triage._patterns import _dated


def test_a_bare_rfc3339_stamp_with_nanoseconds_dates_the_line():
    ts, msg = _dated(
        "2026-01-03T03:09:18.554055912Z 01/03/2026 03:09:18 - INFO - x - Step 0: loss=5.49", None
    )
    assert ts == pytest.approx(1767409758.554055)
    assert msg.startswith("01/03/2026")
    ts, _ = _dated("2026-01-03T09:05:49.396+05:30 INFO [rank0] step 0/900 | loss 5.48", None)
    assert ts == pytest.approx(1767411349.396)  # 03:35:49.396 UTC


def test_a_date_without_its_zone_or_t_is_not_read_as_a_bare_stamp():
    assert _dated("2026-01-03 09:05:49 something happened", None)[0] is None


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "INFO [rank0] step 120/900 | loss 2.4852 | grad_norm 1.071 | lr 6.0e-07 | 4.71 s/step | 0.45M tok/s",
            (120, 900, 4.71, 2.4852, None),
        ),
        (
            "01/03/2026 03:09:18 - INFO - __main__ - Step 7: loss=5.4931 grad_norm=1.151 step_time=4.683s",
            (7, None, 4.683, 5.4931, None),
        ),
        (
            "(RayTrainWorker pid=1, ip=10.0.0.1) {'step': 1202, 'loss': 2.6211, 'step_time_s': 1.573, "
            "'timestamp': 1767391005}",
            (1202, None, 1.573, 2.6211, 1767391005.0),
        ),
        ("global_step=40 train_loss=3.5 step_time=900ms", (40, None, 0.9, 3.5, None)),
    ],
)
def test_key_value_step_lines_are_read(line, expected):
    assert read_kv_step(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        "Running evaluation at step 50: eval loss=2.1",
        "step 100: val loss 2.3",
        "Saving checkpoint at step 250 to /ckpt (loss 2.4)",
        "Training complete: 425 steps; saving final state",
        "step 12 done",  # no loss
        "4.71 s/step | loss 2.3",  # no step number
    ],
)
def test_lines_that_are_not_training_steps_are_not_read(line):
    assert read_kv_step(line) is None


def test_a_torchrun_scripts_steps_and_completion_are_read():
    lines = [
        "SLURM_JOB_ID=4242",
        "0: 2026-01-03T09:05:49.396+00:00 INFO [rank0] step 0/900 | loss 5.4852 | 4.71 s/step | 0.45M tok/s",
        "0: 2026-01-03T09:05:52.896+00:00 INFO [rank0] step 1/900 | loss 5.4001 | 3.50 s/step | 0.60M tok/s",
        "0: 2026-01-03T09:05:56.396+00:00 INFO [rank0] step 2/900 | loss 5.3302 | 3.50 s/step | 0.60M tok/s",
        "0: 2026-01-03T09:05:58.840+00:00 INFO [rank0] Training complete: 3 steps; saving final state",
    ]
    t = triage_log(lines)
    assert (t.first_step, t.last_step) == (0, 2)
    assert t.progress["last_step_time"] == pytest.approx(1767431156.396)
    assert t.progress["steps_total"] == 900
    assert t.status == "completed"


def test_ray_trains_undated_dicts_are_dated_by_their_own_timestamp():
    lines = [
        "2026-01-02 21:11:57,786\tINFO worker.py:1821 -- Connecting to existing Ray cluster",
        *(
            f"(RayTrainWorker pid=16904, ip=10.44.134.146) {{'step': {s}, 'loss': {5.5 - s / 100:.4f}, "
            f"'step_time_s': 1.6, 'timestamp': {1767391005 + 2 * s}}}"
            for s in range(5)
        ),
    ]
    t = triage_log(lines)
    assert (t.first_step, t.last_step) == (0, 4)
    assert t.progress["last_step_time"] == 1767391013.0


def test_an_epilogs_dmesg_under_a_banner_is_the_named_hosts_in_the_logs_own_zone():
    """A job's epilog prints one host's `dmesg -T` under a banner: its Xid is that host's, and its local time
    is read in the zone the log's own stamps carry (-05:00), as Slurm's and the kernel's are."""
    lines = [
        "0: 2026-01-03T22:25:38.000-05:00 INFO [rank0] step 272/1600 | loss 2.4 | 7.5 s/step | 0.4M tok/s",
        "srun: error: Node failure on hgx-r13-n2",
        "==== epilog: dmesg -T on hgx-r13-n2 (NVRM / oom) ====",
        "[Sat Jan  3 22:25:41 2026] NVRM: Xid (PCI:0000:5d:00): 79, pid=37743, name=python3, GPU has fallen off the bus.",
    ]
    t = triage_log(lines)
    xid = next(e for e in t.details["host_events"] if e["kind"] == "xid")
    assert xid["host"] == "hgx-r13-n2"
    assert xid["time"] == pytest.approx(1767497141.0)  # 2026-01-04 03:25:41 UTC


@pytest.mark.parametrize(
    "line",
    [
        "Training complete: 425 steps; saving final state",
        "Restoring states from the checkpoint path at /c/step=40.ckpt",
    ],
)
def test_a_trainer_line_that_names_steps_but_is_no_step_is_still_read_as_the_trainers(line):
    """A completion or restore line that names steps is the trainer's own line (read, and not scanned again for
    failures or host events), though no key-value step."""
    from playbooks.triage._state import _State
    from playbooks.triage._trainers import trainer_line

    assert trainer_line(_State(), 7, None, 1767431156.0, line) is True
