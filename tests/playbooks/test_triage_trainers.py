"""The triage reads the step, checkpoint and completion lines of common trainers as their projects print them,
and places their local time stamps in UTC by the zone of the job script's `date` line."""

from __future__ import annotations

import datetime as dt

from playbooks.triage import triage_log


def _utc(text: str) -> float:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp()


_SLURM = [
    "SLURM_JOB_ID=4242",
    "SLURM_JOB_NODELIST=gpu-[01-02]",
]


def _megatron(it: int, stamp: str, ms: float, loss: str) -> str:
    """One line of Megatron-LM's training_log, on the last rank (srun label 15)."""
    return (
        f"15:  [{stamp}] iteration {it:8d}/  500000 | consumed samples: {it * 512:12d} | "
        f"elapsed time per iteration (ms): {ms:.1f} | learning rate: 1.500000E-04 | "
        f"global batch size:   512 | lm loss: {loss} | loss scale: 1.0 | grad norm: 0.912 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def test_megatron_steps_losses_local_time_and_completion():
    """Megatron's iteration lines give steps, per-step seconds, lm loss and the total; the stamps are the header
    zone's local time (MST = UTC-7); `[after training is done]` completes the job."""
    lines = [
        "Thu Jul 16 07:25:09 MST 2026",
        *_SLURM,
        _megatron(10, "2026-07-16 07:30:00", 3200.0, "1.080501E+01"),
        _megatron(20, "2026-07-16 07:30:32", 3150.0, "9.965051E+00"),
        "  0: saving checkpoint at iteration      20 to /ckpt in torch_dist format",
        _megatron(30, "2026-07-16 07:31:04", 3180.0, "9.040627E+00"),
        "  0: [after training is done] datetime: 2026-07-16 07:31:10 ",
    ]
    t = triage_log(lines)
    assert (t.status, t.first_step, t.last_step) == ("completed", 10, 30)
    assert t.progress["steps_total"] == 500000
    assert t.progress["last_step_time"] == _utc("2026-07-16T14:31:04")
    assert t.details["log_loss"][0] == [_utc("2026-07-16T14:30:00"), 10.80501]
    assert t.details["checkpoints_saved"] == [20]
    assert t.crash_time is None and t.triage_class is None


def test_megatron_cancelled_job_crash_time_is_slurms_local_time():
    """A Megatron job Slurm cancelled: no completion, crash at the CANCELLED AT time (the header's zone, CET)."""
    lines = [
        "Job start: Sun Aug 16 07:15:57 CET 2026",
        *_SLURM,
        _megatron(10, "2026-08-16 07:20:00", 6000.0, "1.0E+01"),
        _megatron(20, "2026-08-16 07:21:00", 6000.0, "9.5E+00"),
        "slurmstepd: error: *** JOB 4242 ON gpu-01 CANCELLED AT 2026-08-16T07:51:09 ***",
        "srun: error: gpu-01: task 0: Exited with exit code 143",
    ]
    t = triage_log(lines)
    assert t.status != "completed" and t.last_step == 20
    assert t.crash_time == _utc("2026-08-16T06:51:09")


def test_hf_trainer_dicts_tqdm_and_train_runtime():
    """HF Trainer: the bar gives step and time since `Running training` (PST = UTC-8), the dict before it the
    loss, `Total optimization steps` the total, `{'train_runtime': ...}` the completion; an evaluation's bar
    (another total) is no training step."""
    lines = [
        "Fri Jul 17 19:57:04 PST 2026",
        *_SLURM,
        "[INFO|trainer.py:2128] 2026-07-17 19:57:24,593 >> ***** Running training *****",
        "[INFO|trainer.py:2134] 2026-07-17 19:57:24,593 >>   Total optimization steps = 20,000",
        "{'loss': 10.777, 'grad_norm': 0.9737, 'learning_rate': 7.5e-06, 'epoch': 0.0}",
        "  0%|          | 10/20000 [01:36<53:44:17,  9.68s/it]",
        "{'loss': 10.0653, 'grad_norm': 0.9082, 'learning_rate': 1.5e-05, 'epoch': 0.0}",
        "\r  0%|          | 19/20000 [02:30<33:08:50,  6.01s/it]\r  0%|          | 20/20000 [02:36<33:08:50,  5.97s/it]",
        "100%|##########| 50/50 [00:05<00:00,  9.50it/s]",
        "{'eval_loss': 2.2295, 'eval_runtime': 5.1, 'eval_samples_per_second': 54.542, 'epoch': 0.01}",
        "[INFO|trainer.py:3478] 2026-07-17 19:59:40,220 >> Saving model checkpoint to /ckpt/checkpoint-20",
        "{'loss': 9.6287, 'grad_norm': 1.102, 'learning_rate': 2.25e-05, 'epoch': 0.0}",
        "  0%|          | 30/20000 [1:03:36<33:25:02,  1.66it/s]",
        "{'train_runtime': 3816.1, 'train_samples_per_second': 71.3, 'train_loss': 9.6287, 'epoch': 0.0}",
    ]
    t = triage_log(lines)
    assert (t.status, t.first_step, t.last_step) == ("completed", 10, 30)
    assert t.progress["steps_total"] == 20000
    start = _utc("2026-07-18T03:57:24.593")
    assert t.details["log_loss"] == [
        [round(start + 96, 3), 10.777],
        [round(start + 156, 3), 10.0653],
        [round(start + 3816, 3), 9.6287],
    ]
    assert t.details["checkpoints_saved"] == [20]


def test_hf_trainer_crash_has_no_completion():
    """An HF run that dies with a traceback after its last bar is not completed; the crash is the traceback's."""
    lines = [
        "Job start: Fri Feb 13 10:15:40 UTC 2026",
        "[INFO|trainer.py:2128] 2026-02-13 10:16:00,000 >> ***** Running training *****",
        "{'loss': 10.777, 'grad_norm': 0.9737, 'learning_rate': 7.5e-06, 'epoch': 0.0}",
        "  0%|          | 10/20000 [01:40<53:44:17,  9.68s/it]",
        "[rank3]:[E0213 10:20:00.086705123 ProcessGroupNCCL.cpp:1664] [PG 0 Rank 3] Process group watchdog thread "
        "terminated with exception: NCCL error: remote process exited or there was a network error",
    ]
    t = triage_log(lines)
    assert t.status != "completed" and t.last_step == 10
    assert abs(t.crash_time - _utc("2026-02-13T10:20:00.086705")) < 1e-3


def test_deepspeed_engine_and_pipeline_lines_and_launcher_exits():
    """DeepSpeed: the engine's dated `step=N` and the pipeline's `steps: N loss: X iter time (s): T` make one step;
    the pdsh host label is no part of the stamp; `exits successfully` completes, a return code does not."""
    body = [
        "Tue May 05 14:12:28 UTC 2026",
        *_SLURM,
        "gpu-01: [2026-05-05 14:17:04,243] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=0, "
        "lr=[7.500000e-06], mom=[(0.9, 0.95)]",
        "gpu-01: steps: 10 loss: 10.6039 iter time (s): 2.345 samples/sec: 218.303",
        "gpu-01: [2026-05-05 14:17:22,071] [INFO] [logging.py:96:log_dist] [Rank 0] step=20, skipped=0, "
        "lr=[1.500000e-05], mom=[(0.9, 0.95)]",
        "gpu-01: steps: 20 loss: 10.7704 iter time (s): 1.783 samples/sec: 287.191",
    ]
    ok = triage_log(
        [
            *body,
            "gpu-01: [2026-05-05 14:20:00,900] [INFO] [launch.py:351:main] Process 41023 exits successfully.",
        ]
    )
    assert (ok.status, ok.first_step, ok.last_step) == ("completed", 10, 20)
    assert ok.details["log_loss"] == [
        [_utc("2026-05-05T14:17:04.243"), 10.6039],
        [_utc("2026-05-05T14:17:22.071"), 10.7704],
    ]
    bad = triage_log(
        [
            *body,
            "gpu-01: [2026-05-05 14:20:00,900] [INFO] [launch.py:351:main] Process 41023 exits successfully.",
            "gpu-02: [2026-05-05 14:20:01,000] [ERROR] [launch.py:325:sigkill_handler] ['python', 'train.py'] "
            "exits with return code = 1",
        ]
    )
    assert bad.status != "completed"


def test_absl_step_lines_take_the_year_and_zone_of_the_date_header():
    """A JAX trainer's absl `step N: loss=X ... step_time=Ts` lines; absl's date has no year and is local (KST)."""
    lines = [
        "Sat Aug 01 02:54:44 KST 2026",
        *_SLURM,
        " 0: I0801 03:19:34.308000 140294 train.py:412] step 80: loss=2.5 grad_norm=0.9 step_time=14.1s lr=6e-05",
        " 0: I0801 03:19:48.454632 140294 train.py:412] step 81: loss=nan grad_norm=nan step_time=14.146s",
        " 0: E0801 03:20:21.648391 140294 train.py:455] Loss is NaN at step 81, aborting.",
        "srun: error: gpu-01: task 0: Exited with exit code 1",
    ]
    t = triage_log(lines)
    assert (t.first_step, t.last_step) == (80, 81) and t.status != "completed"
    assert t.details["log_loss"] == [
        [_utc("2026-07-31T18:19:34.308"), 2.5],
        [round(_utc("2026-07-31T18:19:48.454632"), 3), None],
    ]
    assert t.details["nonfinite_loss"]["line"] == 5


def test_a_log_without_a_date_header_keeps_reading_stamps_as_utc():
    """No `date` line: naive stamps stay UTC, as before."""
    t = triage_log([_megatron(10, "2026-07-16 07:30:00", 3200.0, "2.0")])
    assert t.progress["last_step_time"] == _utc("2026-07-16T07:30:00")


def test_jax_checkpoint_saves_bound_the_lost_steps_and_an_ecc_error_is_not_harmless():
    """flax/orbax `Saving checkpoint for step N` is the last checkpoint (lost steps after it); an XLA
    `INTERNAL: CUDA error` that reports an uncorrectable ECC error is a GPU hardware error, not harmless noise."""
    lines = [
        "Mon Oct 05 10:12:30 CET 2026",
        *_SLURM,
        *(
            f" 0: I1005 10:{20 + s // 10:02d}:{s % 10 * 5:02d}.000000 140214 train.py:412] step {s}: loss=3.0 "
            "step_time=5.0s"
            for s in range(0, 30)
        ),
        " 0: I1005 10:21:00.000000 140214 checkpoints.py:610] Saving checkpoint for step 20",
        " 3: E1005 10:24:00.726152 140214 pjrt_stream_executor_client.cc:2985] Execution of replica 2 failed: "
        "INTERNAL: CUDA error: : CUDA_ERROR_ECC_UNCORRECTABLE: uncorrectable ECC error encountered",
        "srun: error: gpu-02: task 1: Exited with exit code 1",
    ]
    t = triage_log(lines)
    assert t.progress["last_checkpoint_step"] == 20 and t.progress["lost_steps"] == 9
    assert t.triage_class == "gpu-hw-error"
    assert abs(t.crash_time - _utc("2026-10-05T09:24:00.726152")) < 1e-3


def test_hf_bar_without_running_training_is_placed_from_the_job_start_and_marked_estimated():
    """Without the Trainer's INFO lines (its default verbosity is WARNING) the bar starts at the `date` line."""
    t = triage_log(["Fri Feb 13 10:15:40 UTC 2026", "  0%|          | 10/200 [01:40<53:44,  9.68s/it]"])
    assert t.last_step == 10 and t.progress["last_step_time"] == _utc("2026-02-13T10:17:20")
    assert t.details["last_step_time_estimated"] is True


def test_megatron_nan_iterations_are_a_nonfinite_loss():
    """Megatron counts the iterations whose loss or gradients were NaN: a count above 0 is a non-finite loss."""
    line = _megatron(20, "2026-07-16 07:30:32", 3150.0, "9.9E+00").replace(
        "number of nan iterations:   0", "number of nan iterations:   3"
    )
    t = triage_log([_megatron(10, "2026-07-16 07:30:00", 3200.0, "1.0E+01"), line])
    assert t.details["nonfinite_loss"]["line"] == 2


def test_absl_training_finished_completes_the_job():
    """A JAX trainer's absl `Training finished.` after its last step: the training completed, no death."""
    lines = [
        "Sat Jan 31 04:00:00 PST 2026",
        *_SLURM,
        " 0: I0131 12:15:33.790744 140218 train.py:412] step 700: loss=2.4808 grad_norm=1.216 step_time=4.655s",
        " 0: I0131 12:16:33.331266 140218 eval.py:95] eval at step 700: loss=2.2093",
        " 0: I0131 12:16:38.054448 140218 train.py:412] step 701: loss=2.5122 grad_norm=0.997 step_time=4.538s",
        " 0: I0131 12:16:51.608925 140218 train.py:530] Training finished.",
    ]
    t = triage_log(lines)
    assert (t.status, t.last_step, t.crash_time) == ("completed", 701, None)
    assert "unknown-death" not in [m.klass for m in t.matches]


def test_undated_megatron_nan_grad_norm_after_a_traceback_is_dated_by_the_line_before():
    """torchrun's undated `RuntimeError: Rank 0: found NaN in local grad norm ...` (Megatron-core's check)
    under srun: a non-finite loss no later than it, dated by the last dated line (torchtitan's step)."""
    lines = [
        *_SLURM,
        " 0: [rank0]:[titan] 2026-06-10 07:51:23,837 - root - INFO - Finished saving the checkpoint (or staging "
        "if async is enabled)in 65.08 seconds.",
        " 0: [rank0]:[titan] 2026-06-10 07:51:40,065 - root - INFO - step:   205  loss:   8.0667  grad_norm: "
        "48.3972  memory: 61.87GiB(78.12%)  tps: 5,127  tflops: 246.07  mfu: 24.88%",
        " 0: Traceback (most recent call last):",
        " 0: RuntimeError: Rank 0: found NaN in local grad norm in backward pass before data-parallel "
        "communication collective",
        "srun: error: gpu-01: task 0: Exited with exit code 1",
    ]
    t = triage_log(lines)
    assert t.details["nonfinite_loss"]["time"] == _utc("2026-06-10T07:51:40.065")
    assert t.details["nonfinite_loss"]["line"] == 6


def _ray(end: str) -> list[str]:
    """A Ray Train job under srun whose raylet declared a node dead (undated lines), then Ray's end line."""
    return [
        *_SLURM,
        " 0: RAY_health_check_period_ms=30000 RAY_health_check_failure_threshold=20",
        " 0: 2026-06-08 19:59:32,917 INFO [train.py:142] step=120 loss=5.8682 grad_norm=1.735 step_time=6.76s",
        " 0: 2026-06-08 20:01:47,388 INFO [train.py:142] step=140 loss=5.5189 grad_norm=1.648 step_time=6.83s",
        " 0: (raylet) The node with node id: d86f88b2ac7e00af7fbbe7d8dfff and address: 10.3.0.13 and node name: "
        "gpu-02 has been marked dead because the detector has missed too many heartbeats from it.",
        " 0: ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task. The actor "
        "died because its node has died.",
        f" 0: Training {end} after 147 iterations at 2026-06-08 20:02:41. Total running time: 24min 5s",
    ]


def test_ray_trains_errored_end_line_dates_the_crash_of_an_undated_heartbeat_kill():
    """Ray Train's `Training errored after N iterations at <time>` dates the failure the undated raylet
    and actor lines before it report: the crash time a heartbeat playbook judges from."""
    t = triage_log(_ray("errored"))
    assert t.triage_class == "heartbeat-timeout" and t.heartbeat_accused == ["gpu-02"]
    assert t.crash_time == _utc("2026-06-08T20:02:41")
    assert t.config["jax_distributed_heartbeat_timeout_seconds"] == "600"


def test_ray_trains_completed_end_line_completes_the_job():
    """`Training completed after N iterations at <time>` is the training's completion."""
    lines = [line for line in _ray("completed") if "raylet" not in line and "ActorDied" not in line]
    t = triage_log(lines)
    assert (t.status, t.crash_time) == ("completed", None)


def _hf_late_bar(save_stamp: str | None) -> list[str]:
    """An HF run (EST = UTC-5): step 240 ends 25:50 after the bar began; a dated save of checkpoint 241 (or
    none) follows it, its stamp minutes off the bar's clock or not; the loss goes NaN at step 288, undated but
    for the bar."""
    lines = [
        "Job start: Sun Jun 14 06:50:34 EST 2026",
        *_SLURM,
        "[INFO|trainer.py:2128] 2026-06-14 06:50:54,013 >> ***** Running training *****",
        "[INFO|trainer.py:2134] 2026-06-14 06:50:54,013 >>   Total optimization steps = 20000",
        "{'loss': 4.6969, 'grad_norm': 1.0464, 'learning_rate': 1.5e-04, 'epoch': 0.04}",
        "  1%|          | 240/20000 [25:50<33:04:08, 6.00s/it]",
    ]
    if save_stamp is not None:
        lines.append(
            f"[INFO|trainer.py:3478] {save_stamp} >> Saving model checkpoint to /ckpt/checkpoint-241"
        )
    return [
        *lines,
        "{'loss': 4.4992, 'grad_norm': 37.113, 'learning_rate': 1.5e-04, 'epoch': 0.04}",
        "  1%|          | 280/20000 [30:57<32:28:34, 5.93s/it]",
        "{'loss': nan, 'grad_norm': nan, 'learning_rate': 1.5e-04, 'epoch': 0.04}",
        "  1%|          | 288/20000 [31:45<32:47:19, 5.99s/it]",
        "[rank0]: RuntimeError: Loss is NaN at step 287",
    ]


def test_an_undated_nan_report_is_dated_by_the_nan_step_of_the_bar_after_it():
    """HF's undated loss dict with a NaN is dated, on its own, no earlier than the last dated line before it
    (the save's): the bar's step after it, which carries that NaN, dates the same event."""
    t = triage_log(_hf_late_bar("2026-06-14 07:21:07,220"))
    began = _utc("2026-06-14T11:50:54.013")
    assert t.details["nonfinite_loss"]["line"] == len(_hf_late_bar("x")) - 1
    assert abs(t.details["nonfinite_loss"]["time"] - (began + 31 * 60 + 45)) < 1e-3


def test_a_bar_is_placed_from_running_training_whatever_the_saves_say():
    """The bar's steps are `Running training` + elapsed, with or without dated saves between them: a save's
    stamp that disagrees with the bar by minutes is not enough to tell which of the two clocks is off."""
    began = _utc("2026-06-14T11:50:54.013")
    for stamp in ("2026-06-14 07:16:50,013", "2026-06-14 07:21:07,220"):  # 8 s after step 240, 4 min after
        saved = triage_log(_hf_late_bar(stamp))
        assert abs(saved.progress["last_step_time"] - (began + 31 * 60 + 45)) < 1e-3
    unsaved = triage_log(_hf_late_bar(None))
    assert abs(unsaved.progress["last_step_time"] - (began + 31 * 60 + 45)) < 1e-3


def test_a_bar_that_began_after_running_training_is_moved_by_the_dated_save_among_its_states():
    """A resumed HF run (EST = UTC-5) skipped batches for minutes before its bar began: the save of
    checkpoint 81, dated 15:47:17, was printed after the bar's step 80 (8:39 in) and before its step 90
    (10:22 in), so the bar began between 15:36:55 and 15:38:38, not at `Running training` (15:33:41). Its
    steps are moved to the middle of what the save allows, and their times marked as estimates."""
    lines = [
        "Job start: Fri Aug 21 15:33:21 EST 2026",
        *_SLURM,
        "[INFO|trainer.py:2128] 2026-08-21 15:33:41,872 >> ***** Running training *****",
        "[INFO|trainer.py:2134] 2026-08-21 15:33:41,872 >>   Total optimization steps = 20000",
        "  0%|          | 10/20000 [01:39<55:00:07, 9.91s/it]",
        "  0%|          | 80/20000 [08:39<33:17:24, 6.02s/it]",
        "[INFO|trainer.py:3478] 2026-08-21 15:47:17,220 >> Saving model checkpoint to /ckpt/checkpoint-81",
        "  0%|          | 90/20000 [10:22<33:29:41, 6.06s/it]",
        "  0%|          | 136/20000 [15:42<39:59:29, 7.25s/it]",
        "{'train_runtime': 951.8469, 'train_samples_per_second': 73.155, 'train_loss': 6.5671, 'epoch': 3.0}",
    ]
    t = triage_log(lines)
    saved = _utc("2026-08-21T20:47:17.220")
    lo, hi = saved - (10 * 60 + 22), saved - (8 * 60 + 39)  # when the bar can have begun
    began = t.details["first_step_time"] - 99
    assert abs(began - (lo + hi) / 2) < 1e-3
    assert abs(t.progress["last_step_time"] - (began + 15 * 60 + 42)) < 1e-3
    assert t.details.get("last_step_time_estimated") is True
    assert t.status == "completed"
