"""Write a generated job's log in the seed system's grammar (seed-system.md §2)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import numpy as np

from . import _log_trainers as _lt
from ._sim import Job

HARMLESS = (
    "NCCL WARN MSCCL++: Feature not enabled",
    "Failed call to cuInit: UNKNOWN ERROR (303)",
    "Token indices sequence length is longer than the specified maximum sequence length for this model",
    "Fiber init: default domain = futex",
)


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC)


def _absl(sev: str, ts: float, tid: int, where: str) -> str:
    d = _utc(ts)
    return f"{sev}{d:%m%d %H:%M:%S}.{d.microsecond:06d} {tid} {where}] "


def _wall(seconds: float) -> str:
    s = int(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if h:
        return f"{h}h {m}m {sec}s"
    if m:
        return f"{m}m {sec}s"
    return f"{sec}s"


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


class _Writer:
    def __init__(self, job: Job, rng: np.random.Generator):
        self.job = job
        self.rng = rng
        self.k8s = job.job_id.startswith("k8s-")
        self.width = len(str(job.nodes - 1))
        self.events: list[tuple[float, int, str]] = []  # (time, seq, line)
        self.rank_events: dict[int, list[tuple[float, int, str]]] = {}
        self.seq = 0
        self.absl = bool(rng.random() < 0.7)
        self.fmt = job.log_format  # "" the seed's grammar, else one of _log_trainers.LOG_FORMATS
        self.pids = [int(x) for x in rng.integers(20_000, 90_000, job.nodes)]

    def lab(self, rank: int | None) -> str:
        if rank is None or self.k8s:
            return ""
        return f"{rank:>{self.width}}: "

    def add(self, ts: float, line: str, rank: int | None = None) -> None:
        self.seq += 1
        if _lt.kubectl(self.fmt):  # every pod's lines in one log, behind kubectl's prefix
            self.events.append((ts, self.seq, _lt.pod_prefix(self.job.job_id, rank or 0, ts) + line))
            return
        if self.k8s and rank not in (None, 0):
            self.rank_events.setdefault(rank, []).append((ts, self.seq, line))
            return  # the primary k8s log holds rank 0 only
        self.events.append((ts, self.seq, self.lab(rank) + line))

    def all_ranks(self, ts: float, line: str, jitter: float = 0.0) -> None:
        for r in range(self.job.nodes):
            self.add(ts + (self.rng.random() * jitter if jitter else 0.0), line, r)

    def ray(self, rank: int) -> str:
        return f"(MaxTextTrainerActor pid={self.pids[rank]}) "


def write_log(job: Job, path: Path, job_dir_name: str) -> None:
    """Write the job's whole log to `path`."""
    rng = np.random.default_rng([job.seed, 3, 0 if job.restored_from is None else 1])
    w = _Writer(job, rng)
    prom_port = 9190 + int(rng.integers(0, 3))
    ray_port = int(rng.integers(20000, 52767))
    pass_args = " ".join(f"{k}={v}" for k, v in job.passthrough.items())
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
        w.add(cfg_t + 1, _absl("I", cfg_t + 1, w.pids[0], "main.py:81") + line, 0)
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
    for r in range(job.nodes):
        w.add(
            job.train_start - 30,
            _absl("I", job.train_start - 30, w.pids[r], "train.py:612")
            + "====== BARRIER: Synchronizing hosts before training loop ======",
            r,
        )
        w.add(
            job.train_start - 1,
            _absl("I", job.train_start - 1, w.pids[r], "train.py:615")
            + "====== BARRIER PASSED: Starting training loop ======",
            r,
        )


def _steps(w: _Writer, job_dir_name: str) -> None:
    """One metrics line per completed step and rank, checkpoint saves and the TensorBoard reminder."""
    job, K = w.job, w.job.nodes
    tokens = float(job.tokens)
    for i, step in enumerate(job.step_num):
        te = float(job.step_end[i])
        secs = float(job.step_secs[i])
        tf = float(job.tflops_s[i])
        mfu = tf / 2500.0 * 100 if job.gpu.name == "MI355X" else None
        mfu_s = f", MFU: {mfu:.2f}%" if mfu is not None else ""
        body = (
            f"completed step: {int(step)}, seconds: {secs:.3f}, TFLOP/s/device: {tf:.3f}{mfu_s}, "
            f"Tokens/s/device: {tokens / secs:.3f}, total_weights: {int(tokens * K * job.gpus)}, "
            f"loss: {float(job.loss[i]):.3f}"
        )
        if w.fmt:  # the trainer's own step line, on rank 0
            w.add(te, _lt.step_line(w.fmt, te, int(step), secs, float(job.loss[i]), job.steps_total), 0)
        for r in range(K if not w.fmt else 0):
            jit = float(w.rng.random()) * 0.05
            pre = w.ray(r) + (_absl("I", te + jit, w.pids[r], "metric_logger.py:190") if w.absl else "")
            w.add(te + jit, pre + body, r)
        if int(step) in job.ckpt_steps:
            w.add(te + 1, w.ray(0) + f"Saved a checkpoint at step {int(step)}.", 0)
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
    """How the log ends: the summary of a complete run, scancel of a hang, or the scenario's crash."""
    name = job.scenario.name
    if "nan_stop" in job.variants:
        _nan_ending(job, w)
        return
    if job.scenario.ending == "complete":
        # the run's own end: before the capture's when the exporters kept scraping after it
        end = job.job_end if "capture_after_end" not in job.variants else float(job.crash_time or 0) + 25
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
    """The trainer sees a non-finite loss, skips the update, and raises after three of them: exit 1."""
    first = int(np.argmax(~np.isfinite(job.loss)))
    t, crash = float(job.step_end[first]), float(job.crash_time or job.job_end)
    w.add(t + 0.5, w.ray(0) + f"WARNING: loss is nan at step {int(job.step_num[first])}; skipping update", 0)
    w.add(crash, w.ray(0) + "RuntimeError: training diverged: 3 consecutive non-finite losses", 0)
    for r, host in enumerate(job.hosts):
        w.add(crash + 5, f"NODE_EXIT host={host} exit=1", r)
    w.add(crash + 30, f"== Training FAILED (exit=1, {int(crash - job.train_start)}s) ==")
    _summary(w, crash + 31, 1, "training diverged")


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
    stamp = _utc(end).strftime("%Y-%m-%dT%H:%M:%S")
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
    """The JAX coordinator accuses the tasks that stopped sending heartbeats; the others terminate."""
    name, hosts = job.scenario.name, job.hosts
    w.add(
        crash,
        _absl("E", crash, 9012, "client.cc:84") + "UNAVAILABLE: The following tasks are unhealthy "
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
            _absl("E", crash + 0.5, 9013, "coordination_service_agent.cc:335")
            + "Polled error from coordination service: UNAVAILABLE",
            r,
        )
        w.add(
            crash + 0.6,
            _absl("F", crash + 0.6, 9013, "client.h:77")
            + "Terminating process because the JAX distributed service detected fatal errors.",
            r,
        )
    if name == "node-death":
        dead = job.accused_tasks[0]
        w.add(crash + 20, f"srun: error: Node failure on {hosts[dead]}")
    for r, host in enumerate(hosts):
        if name == "node-death" and r in job.accused_tasks:
            continue
        w.add(crash + 5, f"NODE_EXIT host={host} exit=1", r)
    w.add(crash + 30, f"== Training FAILED (exit=1, {int(crash - job.train_start)}s) ==")
    _summary(w, crash + 40, 1, "Training FAILED (exit=1)")


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
    stamp = _utc(crash).strftime("%Y-%m-%dT%H:%M:%S")
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
