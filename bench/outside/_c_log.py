"""Corpus C: the job log of a simulated `World`, in the seed system's grammar.

Slurm jobs: the `KEY=VALUE` header, stage lines, `srun -l` task labels (right-aligned), absl headers
on the trainer's lines, `completed step:` lines (MaxText writes step N when step N+1 is done), and
the ending of the case (NCCL timeout, scancel, node failure, heartbeat, OOM kill, GPU error, NaN,
success) with `NODE_EXIT`, `srun:` lines and the JOB SUMMARY. Kubernetes jobs: a `k8s-...` id, no
labels, rank 0's output only.
"""

from __future__ import annotations

import math
import re
import time

from bench.outside._c_sim import World


def _absl(t: float, sev: str = "I", src: str = "metric_logger.py:190") -> str:
    tm = time.gmtime(t)
    return f"{sev}{tm.tm_mon:02d}{tm.tm_mday:02d} {time.strftime('%H:%M:%S', tm)}.{int((t % 1) * 1e6):06d} 140551 {src}] "


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))


def nodelist(hosts: list[str]) -> str:
    """Slurm's compressed form when the names share a prefix and a zero-padded number, else a list."""
    m = [re.fullmatch(r"(.*?)(\d+)", h) for h in hosts]
    if all(m) and len({x.group(1) for x in m}) == 1 and len({len(x.group(2)) for x in m}) == 1:  # type: ignore[union-attr]
        nums = [int(x.group(2)) for x in m]  # type: ignore[union-attr]
        width = len(m[0].group(2))  # type: ignore[union-attr]
        if nums == list(range(nums[0], nums[0] + len(nums))):
            return f"{m[0].group(1)}[{nums[0]:0{width}d}-{nums[-1]:0{width}d}]"  # type: ignore[union-attr]
    return ",".join(hosts)


STAGES = """==STAGE TIMEOUTS (override: STAGE_TIMEOUTS="stage:seconds,...")==
  preflight    900s
  pull         900s
  ecc          300s
  train        none
=================================================================
== Preflight BEGIN (timeout=900s) ==
== Preflight END (38s) ==
== Training BEGIN (no timeout) =="""


class Log:
    def __init__(self, w: World, job_id: str) -> None:
        self.w, self.job_id = w, job_id
        self.lines: list[str] = []
        self.width = len(str(w.H - 1))

    def put(self, rank: int | None, text: str) -> None:
        """A line of task `rank` (None: the batch script); Kubernetes logs hold rank 0 only."""
        if not self.w.spec.slurm:
            if rank in (None, 0):
                self.lines.append(text)
            return
        self.lines.append(text if rank is None else f"{rank:>{self.width}d}: {text}")


def _header(lg: Log, steps_total: int) -> None:
    w, s = lg.w, lg.w.spec
    args = f"steps={steps_total} enable_checkpointing=true checkpoint_period={w.ckpt_period}"
    name = f"JAX-{s.model}-steps_{steps_total}-enable_checkpointing_true"
    lg.lines += [
        f"JOB_ID={lg.job_id}",
        f"JOB_NAME={name}",
        f"NNODES={w.H}",
        f"JOB_NODELIST={nodelist(s.hosts)}",
        f"JAX_COORDINATOR_PORT={20000 + s.seed % 30000}",
        f'PASSTHROUGH_ARGS="{args}"',
        f"MODEL_NAME={s.model}",
    ]
    if s.slurm:
        lg.lines += STAGES.splitlines()
    t0 = w.t_train
    for r in range(w.H):
        lg.put(r, f'PASSTHROUGH_ARGS="{args}"')
    params = {
        "steps": steps_total,
        "checkpoint_period": w.ckpt_period,
        "enable_checkpointing": "True",
        "jax_distributed_heartbeat_timeout_seconds": int(w.hb_timeout),
        "log_period": 100,
        "per_device_batch_size": 4,
        "run_name": f"{s.model}_run",
    }
    for k in sorted(params):
        lg.put(0, _absl(t0, src="pyconfig.py:571") + f"Config param {k}: {params[k]}")
    if w.first_step:
        lg.put(
            0,
            _absl(t0 + 20, src="checkpointing.py:210")
            + f"restoring from this run's directory step {w.first_step - 1}",
        )
    else:
        lg.put(
            0,
            _absl(t0 + 20, src="checkpointing.py:188")
            + "No existing checkpoints found, not restoring checkpoint.",
        )
    lg.put(0, "====== BARRIER: Synchronizing hosts before training loop ======")
    lg.put(0, "====== BARRIER PASSED: Starting training loop ======")


def _steps(lg: Log) -> None:
    w = lg.w
    ranks = range(w.H) if w.spec.slurm and w.H * len(w.steps) <= 40_000 else range(1)
    saves = {s: t1 for _, t1, s in w.saves}
    for i, (step, _done, secs, loss) in enumerate(w.steps):
        flushed = w.steps[i + 1][1] if i + 1 < len(w.steps) else None
        if flushed is None and w.log.get("end") not in (None, "completed"):
            break  # MaxText buffers one step: the last one is written only at a clean shutdown
        t = flushed if flushed is not None else w.steps[-1][1] + 1
        tok = 4096 * 8 / secs
        ls = "nan" if math.isnan(loss) else f"{loss:.3f}"
        text = (
            f"completed step: {step}, seconds: {secs:.3f}, TFLOP/s/device: {tok * 0.24:.3f}, "
            f"Tokens/s/device: {tok:.3f}, total_weights: 1048576, loss: {ls}"
        )
        for r in ranks:
            lg.put(r, _absl(t) + text)
        if step in saves:
            lg.put(0, _absl(saves[step], src="checkpointing.py:344") + f"Saved a checkpoint at step {step}.")


def _exits(lg: Log, bad: dict[int, int], t: float) -> None:
    w = lg.w
    for r, code in sorted(bad.items(), key=lambda x: x[1] == 143):
        lg.put(r, f"NODE_EXIT host={w.spec.hosts[r]} exit={code}")
    if w.spec.slurm:
        for r, code in bad.items():
            if code != 143:
                lg.lines.append(f"srun: error: {w.spec.hosts[r]}: task {r}: Exited with exit code {code}")
        lg.lines.append(f"srun: Terminating StepId={lg.job_id}.0")


def _ending(lg: Log) -> tuple[int, str]:
    """Write the case's ending; returns (batch exit code, summary reason)."""
    w, end = lg.w, lg.w.log.get("end")
    t = w.log.get("end_t") or w.end_t
    every = dict.fromkeys(range(w.H), 143)
    if end == "timeout":
        r = int(w.rng.integers(0, w.H))
        lg.put(r, f"{w.spec.hosts[r]}:5521:5930 [2] NCCL WARN Timeout waiting for peer")
        _exits(lg, every | {r: 1}, t)
        return 1, "Training FAILED (exit=1)"
    if end in ("cancel", "node-failure"):
        if end == "node-failure":
            lg.lines.append(f"srun: error: Node failure on {w.spec.hosts[w.log['dead']]}")
            tail = " DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS"
        else:
            tail = ""
        lg.lines.append(
            f"slurmstepd: error: *** JOB {lg.job_id} ON {w.spec.hosts[0]} CANCELLED AT {_iso(t)}{tail} ***"
        )
        _exits(lg, {r: 143 for r in range(w.H) if r != w.log.get("dead")}, t)
        return 143, "CANCELLED (scancel / SIGTERM)"
    if end == "heartbeat":
        lg.put(
            0,
            _absl(t, "E", "client.cc:84")
            + "UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):",
        )
        for r in w.log["accused"]:
            lg.put(0, f"/job:jax_worker/replica:0/task:{r}")
        lg.put(
            0, "The tasks have crashed. Check the task logs for an earlier error to see why the task crashed."
        )
        for r in range(min(w.H, 4)):
            lg.put(
                r,
                _absl(t + 1, "F", "client.h:77")
                + "Terminating process because the JAX distributed service detected fatal errors.",
            )
        _exits(lg, dict.fromkeys(range(w.H), 134), t)
        return 1, "Training FAILED (exit=134)"
    if end == "oom":
        for r in w.log["killed"]:
            lg.put(r, "Killed")
        _exits(lg, every | dict.fromkeys(w.log["killed"], 137), t)
        return 1, "Training FAILED (exit=137)"
    if end == "gpu-error":
        r = w.log["bad"]
        if w.spec.layout.gpu == "dcgm":
            msg = "CUDA_ERROR_ECC_UNCORRECTABLE: uncorrectable ECC error encountered"
        else:
            msg = "HSA_STATUS_ERROR_MEMORY_FAULT: Agent attempted to access an inaccessible address"
        lg.put(
            r, _absl(t, "E", "pjrt_stream_executor_client.cc:2809") + f"Execution of replica 0 failed: {msg}"
        )
        lg.put(r, "Traceback (most recent call last):")
        lg.put(r, f"jaxlib.xla_extension.XlaRuntimeError: {msg}")
        _exits(lg, every | {r: 1}, t)
        return 1, "Training FAILED (exit=1)"
    if end == "nan":
        lg.put(0, "Traceback (most recent call last):")
        lg.put(0, f"FloatingPointError: loss is nan at step {w.steps[-1][0]}")
        _exits(lg, every | {0: 1}, t)
        return 1, "Training FAILED (exit=1)"
    return 0, ""


def _wall(secs: float) -> str:
    h, rem = divmod(int(secs), 3600)
    m, s = divmod(rem, 60)
    return f"{h}h {m}m {s}s" if h else (f"{m}m {s}s" if m else f"{s}s")


def write_log(w: World, job_id: str, steps_total: int) -> str:
    lg = Log(w, job_id)
    _header(lg, steps_total)
    _steps(lg)
    end = w.log.get("end")
    if end == "open":
        return "\n".join(lg.lines) + "\n"
    rc, reason = _ending(lg)
    t_end = w.log.get("end_t") or (w.steps[-1][1] + 5 if w.steps else w.end_t)
    status = "SUCCESS (exit 0)" if rc == 0 else f"FAILED (exit {rc})"
    if w.spec.slurm and rc:
        status += f" \u2014 {reason}"
    lg.lines += [
        "=" * 26 + " JOB SUMMARY " + "=" * 26,
        f"  Job:    {job_id} (JAX-{w.spec.model})",
        f"  Model:  {w.spec.model}",
        f"  Nodes:  {w.H}",
        f"  Wall:   {_wall(t_end - w.t[0])}",
        f"  Status: {status}",
        "=" * 65,
    ]
    return "\n".join(lg.lines) + "\n"
