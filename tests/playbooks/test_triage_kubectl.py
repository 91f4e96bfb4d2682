"""The triage reads `kubectl logs --prefix --timestamps` logs (pods mapped to their hosts, kubectl's UTC stamp
before the pod's local one) and the step, checkpoint and completion lines of NeMo, Lightning and torchtitan."""

from __future__ import annotations

import datetime as dt

from playbooks.triage import triage_log


def _utc(text: str) -> float:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp()


def _pod(name: str, stamp: str, line: str) -> str:
    return f"[pod/{name}/pytorch] {stamp}Z {line}"


_PODS = [
    _pod("j-master-0", "2026-06-02T02:27:42.900953856", "NODE_NAME=r19n01 POD_NAME=j-master-0 NODE_RANK=0"),
    _pod("j-worker-0", "2026-06-02T02:27:42.910953728", "NODE_NAME=r19n02 POD_NAME=j-worker-0 NODE_RANK=1"),
]


def _titan(stamp: str, local: str, step: int, loss: float) -> str:
    """torchtitan's step line on rank 0, its own stamp local time (UTC+5:30 here)."""
    return _pod(
        "j-master-0",
        stamp,
        f"[rank0]:[titan] {local} - root - INFO - step: {step:5d}  loss: {loss:8.4f}  grad_norm:  3.8531  "
        "memory: 61.87GiB(78.12%)  tps: 1,272  tflops: 61.06  mfu: 6.17%",
    )


def test_kubectl_torchtitan_steps_take_kubectls_utc_stamp_and_complete():
    lines = [
        *_PODS,
        _titan("2026-06-02T02:30:00.000000000", "2026-06-02 08:00:00,000", 1, 9.6),
        _titan("2026-06-02T02:30:08.000000000", "2026-06-02 08:00:08,000", 2, 9.5),
        _titan("2026-06-02T02:30:16.000000000", "2026-06-02 08:00:16,000", 3, 9.4),
        _pod(
            "j-master-0",
            "2026-06-02T02:30:20.5",
            "[rank0]:[titan] 2026-06-02 08:00:20,500 - root - INFO - Finished saving the checkpoint (or "
            "staging if async is enabled)in 4.10 seconds.",
        ),
        _pod("j-master-0", "2026-06-02T02:30:21.0", "[rank0]:[titan] 2026-06-02 08:00:21,000 - root - INFO - "
             "Training completed"),
    ]  # fmt: skip
    t = triage_log(lines)
    assert (t.status, t.first_step, t.last_step) == ("completed", 1, 3)
    assert t.progress["last_step_time"] == _utc("2026-06-02T02:30:16")
    assert t.details["checkpoints_saved"] == [3]
    assert t.nodes == ["r19n01", "r19n02"]


_TWO_STEPS = [
    _titan("2026-06-02T02:30:00.0", "2026-06-02 08:00:00,000", 1, 9.6),
    _titan("2026-06-02T02:30:08.0", "2026-06-02 08:00:08,000", 2, 9.5),
]
_RAY_DEAD = _pod(
    "j-master-0",
    "2026-06-02T02:41:00.0",
    "(raylet) The node with node id: 09cd61 and address: 10.2.0.12 and node name: r19n02 has been marked dead "
    "because the detector has missed too many heartbeats from it.",
)


def test_kubectl_pod_events_land_on_the_pods_host_and_ray_heartbeat_accuses_a_host():
    lines = [
        *_PODS,
        _pod("j-master-0", "2026-06-02T02:28:00.0", "RAY_health_check_period_ms=30000 "
             "RAY_health_check_failure_threshold=20 (a node is marked dead after 600 s without heartbeats)"),
        *_TWO_STEPS,
        _pod("j-worker-0", "2026-06-02T02:40:00.0", "E0602 08:10:00.000000 1201 torch/distributed/elastic/"
             "multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 7 (pid: 55498) of binary: /usr/bin/python3"),
        _RAY_DEAD,
    ]  # fmt: skip
    t = triage_log(lines)
    assert t.config["jax_distributed_heartbeat_timeout_seconds"] == "600"
    assert t.heartbeat_accused == ["r19n02"]
    killed = [e for e in t.details["host_events"] if e["kind"] == "killed"]
    assert killed and killed[0]["host"] == "r19n02" and killed[0]["time"] == _utc("2026-06-02T02:40:00")


def _nemo(it: int, loss: str, secs: float) -> str:
    return (
        f"Training epoch 0, iteration {it}/9999 | lr: 0.0003 | global_batch_size: 512 | global_step: {it} | "
        f"reduced_train_loss: {loss} | train_step_timing in s: {secs} | consumed_samples: {(it + 1) * 512}"
    )


def test_nemo_steps_times_restore_checkpoints_and_lightning_completion():
    """NeMo under srun (no stamp on its step lines): step seconds from train_step_timing, the restore from
    Lightning's checkpoint path, saves from NeMo's and Lightning's lines, `Trainer.fit` stopped completes."""
    lines = [
        "SLURM_JOB_ID=31269728",
        "SLURM_JOB_NODELIST=gpu-[01-02]",
        "Start: Thu Jun 04 06:00:00 EDT 2026",
        " 0: [NeMo I 2026-06-04 06:00:13 nemo_logging:393] Restoring states from the checkpoint path at "
        "/results/checkpoints/step=500-last.ckpt",
        f" 0: {_nemo(501, '2.99', 10.349)}",
        f" 0: {_nemo(502, '2.92', 10.612)}",
        " 0: [NeMo I 2026-06-04 06:01:00 nemo_logging:393] Global Checkpoint Save : Rank: 0 : Iteration: 502 : "
        "Start time: 1780567260.0s : Save duration: 3.1s",
        " 0: 2026-06-04 06:02:00,000 INFO [train.py:142] Epoch 0, global step 503: 'train_loss' reached a new "
        "best, saving model to '/ckpt/step=503.ckpt' as top 3",
        " 0: 2026-06-04 06:02:01,000 INFO [train.py:142] `Trainer.fit` stopped: `max_steps=503` reached.",
    ]
    t = triage_log(lines)
    assert (t.status, t.first_step, t.last_step) == ("completed", 501, 502)
    assert t.progress["restored_from"] == 500
    assert t.details["checkpoints_saved"] == [502, 503]


def test_nemo_nan_loss_and_megatron_nan_grad_norm_are_nonfinite():
    lines = [
        *_PODS,
        _pod("j-master-0", "2026-06-03T20:40:00.0", _nemo(187, "9.1", 4.2)),
        _pod("j-master-0", "2026-06-03T20:40:05.0", _nemo(188, "nan", 4.2)),
    ]
    t = triage_log(lines)
    assert t.details["nonfinite_loss"]["time"] == _utc("2026-06-03T20:40:05")
    grad = [*_PODS, _pod("j-master-0", "2026-06-03T20:42:35.9", "RuntimeError: Rank 0: found NaN in local grad "
            "norm in backward pass before data-parallel communication collective")]  # fmt: skip
    assert triage_log(grad).details["nonfinite_loss"]["time"] == _utc("2026-06-03T20:42:35.9")


def test_python_logging_steps_after_start_line_take_its_zone():
    """`%(asctime)s %(levelname)s [file:line]` step=... lines: local time of the `Start:` date line (IST)."""
    lines = [
        "Start: Tue Jun 02 12:44:44 IST 2026",
        " 0: 2026-06-02 12:49:10,597 INFO [train.py:142] step=0 loss=9.5985 grad_norm=3.620 step_time=9.43s",
        " 0: 2026-06-02 12:49:47,675 INFO [train.py:142] step=5 loss=9.4356 grad_norm=3.523 step_time=6.02s",
    ]
    t = triage_log(lines)
    assert t.last_step == 5 and t.progress["last_step_time"] == _utc("2026-06-02T07:19:47.675")


def test_undated_nemo_steps_are_placed_their_duration_after_the_last_dated_line():
    """srun'd NeMo prints its step lines undated: each ended its train_step_timing after the line before it
    (the `Start:` header's zone, EDT = UTC-4, dates NeMo's own header)."""
    lines = [
        "Start: Thu Jun 04 06:00:00 EDT 2026",
        " 0: [NeMo I 2026-06-04 06:00:13 nemo_logging:393] World size: 256",
        f" 0: {_nemo(0, '9.56', 7.5)}",
        f" 0: {_nemo(1, '9.55', 7.0)}",
    ]
    t = triage_log(lines)
    assert t.progress["last_step_time"] == _utc("2026-06-04T10:00:27.5")
    assert t.details["log_loss"][0] == [_utc("2026-06-04T10:00:20.5"), 9.56]


def test_ray_trains_errored_line_takes_kubectls_utc_stamp_over_the_local_time_it_names():
    """kubectl's UTC stamp dates Ray Train's `Training errored after ...` line, not the head's local time (UTC-4,
    which read as UTC would put the crash before the training)."""
    lines = [
        *_PODS,
        *_TWO_STEPS,
        _RAY_DEAD,
        _pod("j-master-0", "2026-06-02T02:41:03.0", "Training errored after 3 iterations at 2026-06-01 22:41:03. "
             "Total running time: 840s"),
    ]  # fmt: skip
    assert triage_log(lines).crash_time == _utc("2026-06-02T02:41:00")
