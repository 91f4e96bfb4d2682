"""How a generated job's log ends (seed-system.md §2): the summary of a complete run, the cancel of a hang,
or the scenario's crash."""

from __future__ import annotations

import numpy as np

from . import _log_trainers as _lt
from ._log_writer import _absl, _utc, _Writer
from ._sim import Job
from ._variants_apply import NAN_ENDINGS


def _wall(seconds: float) -> str:
    s = int(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h {m}m {sec}s"
    if m:
        return f"{m}m {sec}s"
    return f"{sec}s"


def _summary(w: _Writer, t: float, rc: int, reason: str) -> None:
    job = w.job
    status = "SUCCESS (exit 0)" if rc == 0 else f"FAILED (exit {rc})"
    colour = "\x1b[32m" if rc == 0 else "\x1b[31m"
    suffix = "" if (rc == 0 or w.k8s) else f" \u2014 {reason}"
    lines = [
        "=" * 26 + " JOB SUMMARY " + "=" * 26,
        f"  Job:    {job.job_id} ({job.job_name})",
        f"  Model:  {job.model_name}",
        f"  Nodes:  {job.nodes}",
        f"  Wall:   {_wall(t - job.start)}",
        f"  Status: {colour}{status}\x1b(B\x1b[m{suffix}",
        "=" * 65,
    ]
    for i, line in enumerate(lines):
        w.add(t + 1 + i * 1e-3, line)


def _ending(job: Job, w: _Writer) -> None:
    """How the log ends: the summary of a complete run, scancel of a hang, or the scenario's crash; the trainer's
    own end-of-training line before it (Ray Train's, absl's) when the deployment's trainer writes one."""
    cancelled = job.scenario.ending == "hang" and not {"watchdog_kill", "heartbeat_kill"} & set(job.variants)
    if job.scenario.ending == "complete" and not NAN_ENDINGS & set(job.variants):
        _trainer_end(job, w, _run_end(job) - 21, failed=False)
    elif not cancelled:  # a scancel's SIGTERM stops the driver before it says anything
        _trainer_end(job, w, float(job.crash_time or job.job_end) + 3, failed=True)
    _scenario_ending(job, w)


def _run_end(job: Job) -> float:
    """A complete run's own end: before the capture's when the exporters kept scraping after it."""
    return job.job_end if "capture_after_end" not in job.variants else float(job.crash_time or 0) + 25


def _trainer_end(job: Job, w: _Writer, t: float, *, failed: bool) -> None:
    """The trainer's own end line at `t`: Ray Train's driver (the head's clock, UTC here, no stamp before it)
    ends with ``Training completed|errored after N iterations at <time>. Total running time: ...``; an
    absl/JAX trainer logs ``Training finished.`` when its loop completes (nothing when it fails)."""
    if w.trainer_end == "ray-train":
        how = "errored" if failed else "completed"
        h, rem = divmod(int(t - job.train_start + 60), 3600)
        ran = (f"{h}hr " if h else "") + f"{rem // 60}min {rem % 60}s"
        w.add(
            t,
            f"Training {how} after {len(job.step_num)} iterations at {_utc(t):%Y-%m-%d %H:%M:%S}. "
            f"Total running time: {ran}",
            0,
        )
    elif w.fmt == "slurm-nemo" and not failed:
        stop = f"`Trainer.fit` stopped: `max_steps={int(job.step_num[-1]) + 1}` reached."
        w.add(t, _lt.nemo_dated(t, stop), 0)
    elif w.trainer_end == "absl" and not failed:
        w.add(t, w.ray(0) + _absl("I", t, w.pids[0], "train.py:1043", w.tz) + "Training finished.", 0)


def _scenario_ending(job: Job, w: _Writer) -> None:
    name = job.scenario.name
    if NAN_ENDINGS & set(job.variants):
        _nan_ending(job, w)
        return
    if job.scenario.ending == "complete":
        end = _run_end(job)
        w.add(end - 20, f"== Training END ({int(end - job.train_start)}s) ==")
        w.add(end - 10, "[Ray] Cleaning up...", 0)
        _summary(w, end - 5, 0, "")
        return
    if job.scenario.ending == "hang":
        _hang_ending(job, w)
        return
    assert job.crash_time is not None, "every ending but complete and hang sets crash_time"
    crash = float(job.crash_time)
    if name == "node-death" and job.variants.get("slurm_node_failure"):
        _slurm_node_failure(job, w, crash)
    elif name in ("heartbeat-false-positive", "node-death"):
        _heartbeat_ending(job, w, crash)
    elif name == "host-oom":
        _oom_ending(job, w, crash)
    elif name == "gpu-hardware-fault":
        _gpu_fault_ending(job, w, crash)
    else:
        raise ValueError(f"no log ending for scenario {name}")


def _nan_ending(job: Job, w: _Writer) -> None:
    """The trainer sees a non-finite loss, skips the update, and raises after three of them: exit 1
    (`nan_traceback`: it raises at once, an undated traceback its only report)."""
    crash = float(job.crash_time or job.job_end)
    if "nan_traceback" in job.variants or "blowup_traceback" in job.variants:
        _nan_traceback(job, w, crash)
    else:
        first = int(np.argmax(~np.isfinite(job.loss)))
        t = float(job.step_end[first])
        w.add(
            t + 0.5, w.ray(0) + f"WARNING: loss is nan at step {int(job.step_num[first])}; skipping update", 0
        )
        w.add(crash, w.ray(0) + "RuntimeError: training diverged: 3 consecutive non-finite losses", 0)
    for r, host in enumerate(job.hosts):
        w.add(crash + 5, f"NODE_EXIT host={host} exit=1", r)
    w.add(crash + 30, f"== Training FAILED (exit=1, {int(crash - job.train_start)}s) ==")
    _summary(w, crash + 31, 1, "training diverged")


def _nan_traceback(job: Job, w: _Writer, crash: float) -> None:
    """The trainer raises in the step whose loss is NaN: Python's traceback, no stamp on any of its lines (a
    check of its own on the loss, or Megatron-core's on the gradients' norm before their all-reduce)."""
    step = int(job.step_num[-1]) + 1 if len(job.step_num) else job.first_step
    if job.seed % 2:
        frames = [
            ("train.py", 1043, "train_loop", "check_finite(metrics['scalar']['learning/loss'], step)"),
            ("train.py", 212, "check_finite", 'raise FloatingPointError(f"NaN loss at step {step}")'),
        ]
        error = f"FloatingPointError: NaN loss at step {step}"
    else:
        frames = [
            ("train.py", 1021, "train_step", "grads = self.finalize_grads(model)"),
            ("distributed_data_parallel.py", 388, "finalize_grads", "self._check_for_nan_in_grad()"),
        ]
        error = (
            f"RuntimeError: Rank 0: found NaN in local grad norm in backward pass before data-parallel "
            f"communication collective. Device: 0, node: {job.hosts[0]}"
        )
    lines = ["Traceback (most recent call last):"]
    for path, n, fn, code in frames:
        lines += [f'  File "/app/MaxText/{path}", line {n}, in {fn}', f"    {code}"]
    for i, line in enumerate([*lines, error]):
        w.add(crash + i * 1e-4, w.ray(0) + line, 0)


def _hang_ending(job: Job, w: _Writer) -> None:
    """A hang is cancelled by hand (scancel): every task gets SIGTERM; network-hang first logs an IB error."""
    K, hosts, end = job.nodes, job.hosts, job.job_end
    if job.scenario.name == "network-hang":
        h = next(i for i, x in enumerate(hosts) if x == job.culprits[0]["host"])
        w.add(
            end - 300,
            f"{hosts[h]}:{w.pids[h]}:{w.pids[h] + 40} [3] NCCL WARN NET/IB : Got completion from "
            f"peer 10.12.0.{11 + (h + 1) % K}<58213> with status=12 opcode=0 len=0 vendor err 129 (Send) "
            "localGid ::ffff:10.12.0.1 remoteGid ::ffff:10.12.0.2",
            h,
        )
    if "watchdog_kill" in job.variants:
        _watchdog_kill(job, w)
        return
    if "heartbeat_kill" in job.variants:
        _heartbeat_ending(job, w, float(job.crash_time or end))
        return
    stamp = _utc(end + w.tz).strftime("%Y-%m-%dT%H:%M:%S")  # Slurm prints its local time
    w.add(end - 5, f"slurmstepd: error: *** STEP {job.job_id}.0 ON {hosts[0]} CANCELLED AT {stamp} ***")
    w.add(end - 4, f"srun: Terminating StepId={job.job_id}.0")
    for r, host in enumerate(hosts):
        w.add(end - 3, f"NODE_EXIT host={host} exit=143", r)
        w.add(end - 2.5, f"srun: error: {host}: task {r}: Exited with exit code 143")
    w.add(end - 2, f"== Training FAILED (exit=143, {int(end - job.train_start)}s) ==")
    _summary(w, end - 1, 143, "CANCELLED (scancel / SIGTERM)")


def _watchdog_kill(job: Job, w: _Writer) -> None:
    """The collective's watchdog gives up on every rank (NCCL's own lines carry no time) and srun reports
    the exits; the job leaves no summary."""
    crash = float(job.crash_time or job.job_end)
    for r, host in enumerate(job.hosts):
        pid = w.pids[r]
        w.add(
            crash, f"{host}:{pid}:{pid + 40} [0] NCCL WARN Timeout waiting for the collective to complete", r
        )
    for r, host in enumerate(job.hosts):
        w.add(crash + 5, f"srun: error: {host}: task {r}: Exited with exit code 1")


def _heartbeat_ending(job: Job, w: _Writer, crash: float) -> None:
    """The JAX coordinator accuses the tasks that stopped sending heartbeats; the others terminate. A
    PyTorch trainer's log (another grammar than the seed's) has PyTorch's NCCL heartbeat monitor kill the
    accused nodes' first rank instead; a dead node's monitor says nothing, so a node death keeps JAX's."""
    name, hosts = job.scenario.name, job.hosts
    if w.fmt and name != "node-death":
        for a in job.accused_tasks:
            for t, line in _lt.torch_heartbeat_kill(crash, a * job.gpus, job.hb_timeout, w.pids[a], w.tz):
                w.add(t, line, a)
    else:
        _jax_heartbeat_kill(job, w, crash)
    if name == "node-death":
        dead = job.accused_tasks[0]
        w.add(crash + 20, f"srun: error: Node failure on {hosts[dead]}")
    for r, host in enumerate(hosts):
        if name == "node-death" and r in job.accused_tasks:
            continue
        w.add(crash + 5, f"NODE_EXIT host={host} exit=1", r)
    w.add(crash + 30, f"== Training FAILED (exit=1, {int(crash - job.train_start)}s) ==")
    _summary(w, crash + 40, 1, "Training FAILED (exit=1)")


def _jax_heartbeat_kill(job: Job, w: _Writer, crash: float) -> None:
    """The JAX coordinator's report of the tasks that stopped sending heartbeats, and the others' ends."""
    name = job.scenario.name
    w.add(
        crash,
        _absl("E", crash, 9012, "client.cc:84", w.tz) + "UNAVAILABLE: The following tasks are unhealthy "
        "(stopped sending heartbeats):",
        0,
    )
    for a in job.accused_tasks:
        w.add(crash + 1e-4, f"/job:jax_worker/replica:0/task:{a}", 0)
    w.add(
        crash + 2e-4,
        "The tasks have crashed. Check the task logs for an earlier error to debug further.",
        0,
    )
    for r in range(1, job.nodes):
        if name == "node-death" and r in job.accused_tasks:
            continue
        w.add(
            crash + 0.5,
            _absl("E", crash + 0.5, 9013, "coordination_service_agent.cc:335", w.tz)
            + "Polled error from coordination service: UNAVAILABLE",
            r,
        )
        w.add(
            crash + 0.6,
            _absl("F", crash + 0.6, 9013, "client.h:77", w.tz)
            + "Terminating process because the JAX distributed service detected fatal errors.",
            r,
        )


def _oom_ending(job: Job, w: _Writer, crash: float) -> None:
    """The kernel kills the trainer on one host (137); the others time out in NCCL and get SIGTERM."""
    assert job.oom is not None and job.oom_host is not None, "simulate() decided the kill"
    hosts, h = job.hosts, job.oom_host
    kill = float(job.oom["kill"])
    w.add(
        kill + 1,
        f"/usr/local/bin/_train.sh: line 212: {w.pids[h]} Killed                  python3 -u "
        "-m MaxText.train",
        h,
    )
    w.add(kill + 2, f"NODE_EXIT host={hosts[h]} exit=137", h)
    for r, host in enumerate(hosts):
        if r == h:
            continue
        w.add(crash - 1, f"{host}:{w.pids[r]}:{w.pids[r] + 40} [0] NCCL WARN Timeout waiting for peer", r)
        w.add(crash + 2, f"NODE_EXIT host={host} exit=143", r)
    w.add(crash + 3, f"srun: error: {hosts[h]}: task {h}: Exited with exit code 137")
    w.add(crash + 10, f"== Training FAILED (exit=137, {int(crash - job.train_start)}s) ==")
    _summary(w, crash + 20, 1, "Training FAILED (exit=137)")


def _gpu_fault_ending(job: Job, w: _Writer, crash: float) -> None:
    """The failing GPU's runtime aborts its process (SIGABRT, 134); the others get SIGTERM."""
    assert job.hwfault is not None, "simulate() decided the failing GPU"
    hosts, h, g = job.hosts, job.hwfault.host, job.hwfault.gpu
    if job.gpu.vendor == "amd":
        w.add(
            crash - 0.5,
            f":0:rocdevice.cpp            :3019: {int(crash * 1e6) % 10**12} us: [pid:{w.pids[h]}"
            f" tid:0x7f2a] Callback: Queue 0x7f1c00000 aborting with error : HSA_STATUS_ERROR_MEMORY_"
            "APERTURE_VIOLATION: The agent attempted to access memory beyond the largest legal address. "
            "code: 0x29",
            h,
        )
    else:
        w.add(crash - 0.5, f"RuntimeError: CUDA error: uncorrectable ECC error encountered (GPU {g})", h)
    w.add(crash, f"[Node {h} @ {hosts[h]}] Training subprocess killed by SIGABRT (signal 6)", h)
    w.add(crash + 1, f"NODE_EXIT host={hosts[h]} exit=134", h)
    for r, host in enumerate(hosts):
        if r != h:
            w.add(crash + 4, f"NODE_EXIT host={host} exit=143", r)
    w.add(crash + 5, f"srun: error: {hosts[h]}: task {h}: Exited with exit code 134")
    w.add(crash + 10, f"== Training FAILED (exit=134, {int(crash - job.train_start)}s) ==")
    _summary(w, crash + 20, 1, "Training FAILED (exit=134)")


def _slurm_node_failure(job: Job, w: _Writer, crash: float) -> None:
    """Slurm notices the lost node: the step is cancelled due to node failure and the survivors get SIGTERM."""
    hosts = job.hosts
    dead = job.accused_tasks[0]
    stamp = _utc(crash + w.tz).strftime("%Y-%m-%dT%H:%M:%S")  # Slurm prints its local time
    w.add(crash, f"srun: error: Node failure on {hosts[dead]}")
    w.add(
        crash + 1,
        f"slurmstepd: error: *** STEP {job.job_id}.0 ON {hosts[0]} CANCELLED AT {stamp} DUE TO NODE "
        "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
    )
    w.add(crash + 2, f"srun: Terminating StepId={job.job_id}.0")
    for r, h in enumerate(hosts):
        if r == dead:
            continue
        w.add(crash + 3, f"NODE_EXIT host={h} exit=143", r)
        w.add(crash + 3.5, f"srun: error: {h}: task {r}: Exited with exit code 143")
    w.add(crash + 30, f"== Training FAILED (exit=143, {int(crash - job.train_start)}s) ==")
    _summary(w, crash + 40, 143, "CANCELLED DUE TO NODE FAILURE")
