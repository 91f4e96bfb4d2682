"""Write a generated job's log in the seed system's grammar (seed-system.md §2)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from . import _log_trainers as _lt
from ._log_endings import _ending
from ._log_writer import _absl, _utc, _Writer
from ._sim import Job

HARMLESS = (
    "NCCL WARN MSCCL++: Feature not enabled",
    "Failed call to cuInit: UNKNOWN ERROR (303)",
    "Token indices sequence length is longer than the specified maximum sequence length for this model",
    "Fiber init: default domain = futex",
)


def compress_nodelist(hosts: list[str]) -> str:
    """Return a Slurm-style compressed host list (gpu-[101-108],node7)."""
    groups: dict[tuple[str, str, int], list[int]] = {}
    order: list[tuple[str, str, int]] = []
    plain: list[str] = []
    for h in hosts:
        m = re.fullmatch(r"(.*?)(\d+)([^\d]*)", h)
        if not m:
            plain.append(h)
            continue
        key = (m.group(1), m.group(3), len(m.group(2)))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(m.group(2)))
    parts = []
    for key in order:
        prefix, suffix, width = key
        nums = sorted(groups[key])
        ranges, start, prev = [], nums[0], nums[0]
        for n in nums[1:] + [None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            ranges.append(f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}")
            if n is not None:
                start = prev = n
        body = ranges[0] if len(ranges) == 1 and "-" not in ranges[0] else "[" + ",".join(ranges) + "]"
        parts.append(f"{prefix}{body}{suffix}")
    return ",".join(parts + plain)


def write_log(job: Job, path: Path, job_dir_name: str) -> None:
    """Write the job's whole log to `path`."""
    rng = np.random.default_rng([job.seed, 3, 0 if job.restored_from is None else 1])
    w = _Writer(job, rng)
    prom_port = 9190 + int(rng.integers(0, 3))
    ray_port = int(rng.integers(20000, 52767))
    pass_args = " ".join(f"{k}={v}" for k, v in job.passthrough.items())
    if w.fmt == "slurm-nemo":
        w.add(job.start - 1.0, _lt.start_line(job.start - 1.0))
    _header(w, ray_port, pass_args)
    if _lt.kubectl(w.fmt):
        for r, host in enumerate(job.hosts):
            w.add(job.start + 0.5 + r * 0.01, _lt.pod_env(job.job_id, r, host), r)
    t = _stages(w) + 2
    _launch(w, t, pass_args, ray_port, prom_port, job_dir_name)
    cfg_t = t + 60
    _setup(w, cfg_t)
    w.add(cfg_t + 40, HARMLESS[int(rng.integers(0, len(HARMLESS)))], 0)
    _steps(w, job_dir_name)
    _ending(job, w)
    # harmless noise somewhere in the middle
    if len(job.step_end):
        mid = float(job.step_end[len(job.step_end) // 2])
        w.add(mid, HARMLESS[int(rng.integers(0, len(HARMLESS)))], int(rng.integers(0, job.nodes)))
    _flush(w, path, job_dir_name)


def _header(w: _Writer, ray_port: int, pass_args: str) -> None:
    """The launcher's header: job identity, ports, passthrough arguments and (Slurm) the stage timeouts."""
    job, s0 = w.job, w.job.start
    exp_tag = job.job_name.removeprefix(f"JAX-{job.model_name}-")
    header = [
        f"JOB_ID={job.job_id}",
        f"JOB_NAME={job.job_name}",
        f"NNODES={job.nodes}",
        f"JOB_NODELIST={compress_nodelist(job.hosts)}",
        f"JAX_COORDINATOR_PORT={int(w.rng.integers(20000, 52767))}",
        f"RAY_PORT={ray_port}",
        f'PASSTHROUGH_ARGS="{pass_args}"',
        f"MODEL_NAME={job.model_name}",
        f"EXP_TAG={exp_tag}",
        f"[INFO] Running from artifact: /outputs/.artifacts/artifact_{_utc(s0):%Y%m%d_%H%M%S}_{job.seed % 65536:04x}",
    ]
    if not w.k8s:
        header += [
            '==STAGE TIMEOUTS (override: STAGE_TIMEOUTS="stage:seconds,...")==',
            "  preflight    900s",
            "  pull         900s",
            "  ecc          300s",
            "  train        none",
            "=" * 65,
        ]
    for i, line in enumerate(header):
        w.add(s0 + i * 1e-3, line)


def _stages(w: _Writer) -> float:
    """Slurm's preflight, image pull and ECC check stages (none on k8s); returns when training begins."""
    job, rng = w.job, w.rng
    t = job.start + 1
    if w.k8s:
        return t
    for stage, dur in (("Preflight", 41), ("Docker pull", 63), ("ECC check", 14)):
        w.add(
            t,
            f"== {stage} BEGIN (timeout={ {'Preflight': 900, 'ECC': 300}.get(stage.split()[0], 900) }s) ==",
        )
        if stage == "Preflight":
            for r, h in enumerate(job.hosts):
                w.add(t + 2, f"{h} | disk free: {int(rng.integers(900, 4000))} GB", r)
        if stage == "ECC check":
            for r in range(job.nodes):
                for g in range(job.gpus):
                    w.add(t + 3, f"card{g} UMC CE=0 UE=0", r)
        t += dur
        w.add(t, f"== {stage} END ({dur}s) ==")
    w.add(t + 1, "== Training BEGIN (no timeout) ==")
    return t


def _launch(w: _Writer, t: float, pass_args: str, ray_port: int, prom_port: int, job_dir_name: str) -> None:
    """_train.sh starts Ray, the metrics exporter, Prometheus and TensorBoard, and prints the tunnel."""
    hosts, K = w.job.hosts, w.job.nodes
    w.all_ranks(t, f'PASSTHROUGH_ARGS="{pass_args}"')
    w.all_ranks(t + 1, "Running _train.sh")
    w.all_ranks(t + 1.5, f"MODEL_NAME={w.job.model_name}")
    w.all_ranks(t + 2, "Launching via Ray actor...")
    w.add(t + 3, f"[Ray] Starting HEAD on {hosts[0]}:{ray_port} (bind=10.12.0.11)", 0)
    for r in range(1, K):
        w.add(t + 8, f"[Ray] Starting WORKER -> 10.12.0.11:{ray_port} (bind=10.12.0.{11 + r})", r)
    w.add(
        t + 12,
        f"[Ray] Logs -> /outputs/{job_dir_name}/ray_logs/{hosts[0]} (persistent, symlinked from "
        f"/tmp/ray/session_latest/logs)",
        0,
    )
    w.add(
        t + 13,
        f"[Metrics Exporter] Started on port 9400 on {hosts[0]} (log: /outputs/{job_dir_name}/"
        f"metrics_exporter/{hosts[0]}.log)",
        0,
    )
    if prom_port != 9190:
        w.add(t + 14, f"[Prometheus] Port 9190 occupied, trying {prom_port}...", 0)
    targets_ray = ", ".join(f"'{h}:55080'" for h in hosts[:3]) + (", ..." if K > 3 else "")
    targets_hw = ", ".join(f"'{h}:9400'" for h in hosts[:3]) + (", ..." if K > 3 else "")
    w.add(t + 16, f"[Prometheus] Started on port {prom_port} (ray: {targets_ray}; node_hw: {targets_hw})", 0)
    w.add(t + 16.5, f"[Prometheus] TSDB -> /outputs/{job_dir_name}/prometheus (persistent)", 0)
    w.add(t + 17, f"[TensorBoard] Started on port 6006 (logdir: /outputs/{job_dir_name})", 0)
    w.add(t + 17.1, "=" * 46, 0)
    w.add(t + 17.2, "SSH tunnel from your local machine (replace the login user if needed):", 0)
    for jump in ("alice@login01.example.org", "alice@198.51.100.7"):
        w.add(
            t + 17.3,
            f"  ssh -J {jump} -L 8265:localhost:8265 -L 6006:localhost:6006 "
            f"-L {prom_port}:localhost:{prom_port} root@{hosts[0]}",
            0,
        )
    w.add(t + 17.4, "=" * 46, 0)


def _setup(w: _Writer, cfg_t: float) -> None:
    """The trainer's config, parameters, checkpoint restore, NCCL init and the barrier before training."""
    job, hosts = w.job, w.job.hosts
    for key in sorted(job.config):
        w.all_ranks(cfg_t, f"Config param {key}: {job.config[key]}")
    if "hb_printed" in job.variants:
        line = f"jax.distributed heartbeat_timeout_seconds={job.hb_timeout}"
        w.add(cfg_t + 1, _absl("I", cfg_t + 1, w.pids[0], "main.py:81", w.tz) + line, 0)
    w.all_ranks(cfg_t + 5, f"number parameters: {float(w.rng.uniform(7, 400)):.3f} billion")
    w.all_ranks(cfg_t + 6, "Memstats: After params initialized:")
    if job.restored_from is None:
        w.all_ranks(cfg_t + 20, "No existing checkpoints found, not restoring checkpoint.")
        waves = 2
    else:
        w.all_ranks(cfg_t + 20, f"restoring from this run's directory step {job.restored_from}")
        w.all_ranks(cfg_t + 22, "Using SingleReplicaArrayHandler for single-replica restore")
        w.all_ranks(cfg_t + 25, "broadcast_one_replica_to_all: broadcasting restored arrays from replica 0")
        waves = 3
    for wave in range(waves):
        for r, h in enumerate(hosts):
            w.add(
                cfg_t + 30 + wave * 20,
                f"{h}:{w.pids[r]}:{w.pids[r] + 17} [0] init.cc:2095 NCCL WARN MSCCL++: Feature not enabled",
                r,
            )
    for r in range(job.nodes if w.fmt != "slurm-nemo" else 0):  # NeMo's own log has no barrier lines
        w.add(
            job.train_start - 30,
            _absl("I", job.train_start - 30, w.pids[r], "train.py:612", w.tz)
            + "====== BARRIER: Synchronizing hosts before training loop ======",
            r,
        )
        w.add(
            job.train_start - 1,
            _absl("I", job.train_start - 1, w.pids[r], "train.py:615", w.tz)
            + "====== BARRIER PASSED: Starting training loop ======",
            r,
        )


def _steps(w: _Writer, job_dir_name: str) -> None:
    """One metrics line per completed step and rank, checkpoint saves and the TensorBoard reminder."""
    job, K = w.job, w.job.nodes
    tokens = float(job.tokens)
    hf = w.fmt == "srun-hf"
    # "Running training" comes minutes before the bar's clock starts (the loaders' and the model's warm-up)
    late = float(np.random.default_rng([job.seed, 4343]).uniform(120, 360)) if hf else 0.0
    for x in _lt.hf_start(job.train_start - late, job.steps_total) if hf else []:
        w.add(job.train_start - late, x, 0)
    for i, step in enumerate(job.step_num):
        te = float(job.step_end[i])
        if int(step) % w.every:  # a trainer that prints every Nth step trains quietly between
            _quiet_step(w, i, te, job_dir_name)
            continue
        secs = float(job.step_secs[i])
        if w.fmt == "slurm-nemo":  # NeMo times the step alone: not the save or validation before it
            secs -= job.ckpt_extra.get(int(step) - 1, 0.0) + job.eval_extra.get(int(step) - 1, 0.0)
        tf = float(job.tflops_s[i])
        mfu = tf / 2500.0 * 100 if job.gpu.name == "MI355X" else None
        mfu_s = f", MFU: {mfu:.2f}%" if mfu is not None else ""
        body = (
            f"completed step: {int(step)}, seconds: {secs:.3f}, TFLOP/s/device: {tf:.3f}{mfu_s}, "
            f"Tokens/s/device: {tokens / secs:.3f}, total_weights: {int(tokens * K * job.gpus)}, "
            f"loss: {float(job.loss[i]):.3f}"
        )
        if hf:
            grad, bar = float(job.grad_norm[i]), te - job.train_start
            for x in _lt.hf_step(int(step), job.steps_total, float(job.loss[i]), grad, bar, secs):
                w.add(te, x, 0)
        elif w.fmt:  # the trainer's own step line, on rank 0
            w.add(te, _lt.step_line(w.fmt, te, int(step), secs, float(job.loss[i]), job.steps_total), 0)
        for r in range(K if not w.fmt else 0):
            jit = float(w.rng.random()) * 0.05
            pre = w.ray(r) + (_absl("I", te + jit, w.pids[r], "metric_logger.py:190", w.tz) if w.absl else "")
            w.add(te + jit, pre + body, r)
        _quiet_step(w, i, te, job_dir_name)


def _quiet_step(w: _Writer, i: int, te: float, job_dir_name: str) -> None:
    """A step's other lines, printed or not: its checkpoint save and, now and then, the TensorBoard reminder."""
    step = int(w.job.step_num[i])
    nemo = w.fmt == "slurm-nemo"
    saving = w.job.ckpt_extra.get(step, 0.0) if step in w.job.ckpt_steps else 0.0
    if step in w.job.ckpt_steps:
        line = _lt.save_line(step, te, saving) if nemo else w.ray(0) + f"Saved a checkpoint at step {step}."
        w.add(te + (saving if nemo else 1), line, 0)
    took = w.job.eval_extra.get(step)
    if took is not None and nemo:  # NeMo's validation line, dated (local) when it ends, with its length
        ends = te + saving + took
        loss = float(w.job.loss[i]) + 0.05
        w.add(ends, _lt.nemo_dated(ends, f"validation at step {step}: val_loss={loss:.4f} ({took:.1f}s)"), 0)
    elif took is not None:  # Hugging Face's evaluation dict, printed (undated) when the evaluation ends
        loss = float(w.job.loss[i]) + 0.05
        w.add(
            te + took - 0.2,
            w.ray(0) + f"{{'eval_loss': {loss:.4f}, 'eval_runtime': {took:.2f}, 'eval_samples_per_second': "
            f"{4096 / took:.3f}, 'eval_steps_per_second': {64 / took:.3f}, 'epoch': {step / 5000:.2f}}}",
            0,
        )
    if i and i % 97 == 0:
        w.add(te + 2, "To see full metrics 'tensorboard --logdir=/outputs/" + job_dir_name + "'", 0)


def _flush(w: _Writer, path: Path, job_dir_name: str) -> None:
    """Write the lines in time order; on k8s every other rank's lines go to rank-N.log in the job dir."""
    w.events.sort()
    with open(path, "w", encoding="utf-8") as fh:
        for _, _, line in w.events:
            fh.write(line + "\n")
    if w.k8s:
        for r in range(1, w.job.nodes):
            with open(path.parent / job_dir_name / f"rank-{r}.log", "w", encoding="utf-8") as fh:
                for _, _, line in sorted(w.rank_events.get(r, [])):
                    fh.write(line + "\n")
