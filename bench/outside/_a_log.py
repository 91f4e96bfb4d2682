"""Generator A, part 5: the job log in the seed system's grammar (seed-system.md §2).

Header (`KEY=VALUE`), stage framing, labelled per-node lines (`srun -l`, right-aligned task ids), the
config dump, absl-headed `completed step:` lines at the times the TSDB's step gauges hold, checkpoint
lines, the ending the story calls for (scancel after a hang, a heartbeat kill, a Slurm node failure)
and the JOB SUMMARY.
"""

from __future__ import annotations

import datetime as dt
import re

import numpy as np

from bench.outside._a_plan import Plan

Line = tuple[float, str]


def _absl(t: float, sev: str = "I", tid: int = 140551, src: str = "metric_logger.py:190") -> str:
    d = dt.datetime.fromtimestamp(t, dt.UTC)
    return f"{sev}{d:%m%d %H:%M:%S}.{d.microsecond:06d} {tid} {src}] "


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _nodelist(hosts: list[str]) -> str:
    """Slurm's compressed form when the names share a prefix and run contiguously, else a list."""
    m = [re.fullmatch(r"(.*?)(\d+)", h) for h in hosts]
    if all(m) and len({x.group(1) for x in m if x}) == 1:
        nums = [x.group(2) for x in m if x]
        vals = [int(v) for v in nums]
        if vals == list(range(vals[0], vals[0] + len(vals))):
            prefix = m[0].group(1) if m[0] else ""
            return f"{prefix}[{nums[0]}-{nums[-1]}]"
    return ",".join(hosts)


def _wall(seconds: float) -> str:
    s = int(seconds)
    h, m = s // 3600, s % 3600 // 60
    return f"{h}h {m}m {s % 60}s" if h else (f"{m}m {s % 60}s" if m else f"{s}s")


def _header(plan: Plan, job_id: int, job_name: str) -> list[str]:
    args = f"steps={plan.total_steps} enable_checkpointing=true checkpoint_period={plan.ckpt_period}"
    return [
        f"JOB_ID={job_id}",
        f"JOB_NAME={job_name}",
        f"NNODES={len(plan.hosts)}",
        f"JOB_NODELIST={_nodelist(plan.hosts)}",
        f"JAX_COORDINATOR_PORT={20000 + job_id % 30000}",
        f'PASSTHROUGH_ARGS="{args}"',
        "MODEL_NAME=llama3-70b",
        f"EXP_TAG=steps_{plan.total_steps}-enable_checkpointing_true-checkpoint_period_{plan.ckpt_period}",
        "[INFO] Capturing git summary...",
        '==STAGE TIMEOUTS (override: STAGE_TIMEOUTS="stage:seconds,...")==',
        "  preflight    900s",
        "  pull         900s",
        "  ecc          300s",
        "  train        none",
        "=================================================================",
    ]


def _setup(plan: Plan, lab: list[str], rng: np.random.Generator) -> list[Line]:
    t = plan.t0 + 5
    out: list[Line] = [
        (t, "== Preflight BEGIN (timeout=900s) =="),
        (t + 31, "== Preflight END (31s) =="),
        (t + 32, "== ECC check BEGIN (timeout=300s) =="),
        (t + 44, "== ECC check END (12s) =="),
        (t + 45, "== Training BEGIN (no timeout) =="),
    ]
    params = {
        "steps": plan.total_steps,
        "checkpoint_period": plan.ckpt_period,
        "enable_checkpointing": True,
        "async_checkpointing": False,
        "per_device_batch_size": 2,
        "log_period": 100,
        "jax_distributed_heartbeat_timeout_seconds": int(plan.hb_timeout),
        "run_name": plan.name,
    }
    for i in range(len(plan.hosts)):
        ts = plan.load_start + i * 0.05
        out.append((ts, f"{lab[i]}Launching MaxText.train directly..."))
        for k, v in sorted(params.items()):
            out.append((ts + 1, f"{lab[i]}{_absl(ts + 1, src='pyconfig.py:812')}Config param {k}: {v}"))
        out.append((ts + 20, f"{lab[i]}number parameters: 70.554 billion"))
        restore = (
            f"restoring from this run's directory step {plan.first_step - 1}"
            if plan.first_step
            else "No existing checkpoints found, not restoring checkpoint."
        )
        out.append((ts + 40, f"{lab[i]}{_absl(ts + 40, src='checkpointing.py:221')}{restore}"))
        b = plan.train_start - 2 + float(rng.uniform(0, 1))
        out.append((b, f"{lab[i]}====== BARRIER: Synchronizing hosts before training loop ======"))
        out.append((plan.train_start, f"{lab[i]}====== BARRIER PASSED: Starting training loop ======"))
    return out


def _steps(plan: Plan, lab: list[str], rng: np.random.Generator) -> list[Line]:
    out: list[Line] = []
    per_dev = plan.tokens_per_step / (len(plan.hosts) * plan.gpus)
    for j, t in enumerate(plan.step_end):
        step, secs = plan.first_step + j, float(plan.step_secs[j])
        tgs = per_dev / secs
        body = (
            f"completed step: {step}, seconds: {secs:.3f}, TFLOP/s/device: {tgs * 0.11:.3f}, "
            f"Tokens/s/device: {tgs:.3f}, total_weights: {int(plan.tokens_per_step)}, loss: {plan.losses[j]:.3f}"
        )
        for i in range(len(plan.hosts)):
            ti = float(t) + float(rng.uniform(0.001, 0.4))
            out.append((ti, f"{lab[i]}{_absl(ti, tid=140551 + i)}{body}"))
        if step and step % plan.ckpt_period == 0:
            out.append(
                (
                    float(t) + 1,
                    f"{lab[0]}{_absl(float(t) + 1, src='checkpointing.py:96')}"
                    f"Saved a checkpoint at step {step}.",
                )
            )
    return out


def _ending(plan: Plan, lab: list[str], job_id: int) -> tuple[list[Line], str]:
    """The lines of the job's end and the JOB SUMMARY status text."""
    t, host0 = plan.job_end, plan.hosts[0]
    out: list[Line] = []
    if plan.end_kind == "completed":
        out.append((t, f"== Training END ({int(t - plan.t0)}s) =="))
        return out, "SUCCESS (exit 0)"
    if plan.end_kind == "heartbeat":
        ranks = [plan.hosts.index(h) for h in plan.accused]
        out.append(
            (
                t,
                f"{lab[0]}{_absl(t, 'E', 9012, 'coordination_service.cc:684')}UNAVAILABLE: The following "
                "tasks are unhealthy (stopped sending heartbeats):",
            )
        )
        out += [(t, f"{lab[0]}/job:jax_worker/replica:0/task:{r}") for r in ranks]
        out.append(
            (t, f"{lab[0]}The tasks have crashed. Check the task logs for an earlier error to debug further.")
        )
        for i, h in enumerate(plan.hosts[1:], 1):
            if h in plan.dead:
                continue
            out.append(
                (
                    t + 1,
                    f"{lab[i]}{_absl(t + 1, 'F', 9012, 'client.h:77')}Terminating process because the JAX "
                    "distributed service detected fatal errors.",
                )
            )
        codes = {h: 134 for h in plan.hosts if h not in plan.dead}
    else:
        if plan.end_kind == "node-failure":
            dead = next(iter(plan.dead))
            out.append((t, f"srun: error: Node failure on {dead}"))
            out.append(
                (
                    t + 1,
                    f"slurmstepd: error: *** JOB {job_id} ON {host0} CANCELLED AT {_iso(t + 1)} DUE TO "
                    "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
                )
            )
        else:
            out.append((t, f"slurmstepd: error: *** STEP {job_id}.0 ON {host0} CANCELLED AT {_iso(t)} ***"))
        out.append((t + 1, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish."))
        codes = {h: 143 for h in plan.hosts if h not in plan.dead}
    for i, h in enumerate(plan.hosts):
        if h in codes:
            out.append((t + 2, f"{lab[i]}NODE_EXIT host={h} exit={codes[h]}"))
            out.append((t + 3, f"srun: error: {h}: task {i}: Exited with exit code {codes[h]}"))
    code = 134 if plan.end_kind == "heartbeat" else 143
    out.append((t + 4, f"== Training FAILED (exit={code}, {int(t - plan.t0)}s) =="))
    reason = (
        "CANCELLED (scancel / SIGTERM)" if plan.end_kind == "cancelled" else f"Training FAILED (exit={code})"
    )
    status = "FAILED (exit 143)" if plan.end_kind == "cancelled" else "FAILED (exit 1)"
    return out, f"{status} \u2014 {reason}"


def write_log(plan: Plan, rng: np.random.Generator, job_id: int) -> str:
    """Return the whole log text."""
    job_name = f"JAX-llama3-70b-steps_{plan.total_steps}-enable_checkpointing_true"
    width = len(str(len(plan.hosts) - 1))
    lab = [f"{i:>{width}}: " for i in range(len(plan.hosts))]
    lines = _setup(plan, lab, rng) + _steps(plan, lab, rng)
    end, status = _ending(plan, lab, job_id)
    lines += end
    lines.sort(key=lambda x: x[0])
    summary = [
        "========================== JOB SUMMARY ==========================",
        f"  Job:    {job_id} ({job_name})",
        "  Model:  llama3-70b",
        f"  Nodes:  {len(plan.hosts)}",
        f"  Wall:   {_wall(plan.job_end + 5 - plan.t0)}",
        f"  Status: {status}",
        "=================================================================",
    ]
    return "\n".join(_header(plan, job_id, job_name) + [x[1] for x in lines] + summary) + "\n"
