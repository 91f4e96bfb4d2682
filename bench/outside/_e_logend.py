"""Corpus E: how each story shows in the log (NCCL watchdogs, node failure, heartbeats, OOM kills, CUDA
errors, NaN aborts) and how the job ends (#10).
"""

from __future__ import annotations

from bench.outside._e_log import Log
from bench.outside._e_series import ip_of

TORCH = ("megatron", "hf", "deepspeed")


def prefix(lg: Log, node: int, local: int = 0) -> str:
    """The prefix a rank's own lines carry in this format."""
    c = lg.case
    rank = node * len(c.gpus) + local
    return {
        "megatron": lg.label(rank),
        "hf": f"[rank{rank}]:",
        "deepspeed": f"{c.hosts[node]}: ",
    }.get(c.log_format, lg.node_label(node))


def _torch_err(lg: Log, t: float) -> str:
    return f"[E{lg.local(t, '%m%d %H:%M:%S')}.{int(t % 1 * 1e6):06d} {3000 + lg.job_id % 900} "


def _watchdog(lg: Log, t: float, nodes: list[int]) -> None:
    wd = int(lg.tl.ev.get("watchdog_s", 600)) * 1000
    seq = 40000 + lg.rng.randint(0, 9000)
    for n in nodes[:16]:
        for g in range(min(2, len(lg.case.gpus))):
            r = n * len(lg.case.gpus) + g
            tt = t + lg.rng.uniform(0, 2)
            lg.add(
                tt,
                f"{prefix(lg, n, g)}{_torch_err(lg, tt)}ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
                f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=67108864, "
                f"NumelOut=67108864, Timeout(ms)={wd}) ran for {wd + lg.rng.randint(20, 900)} milliseconds "
                "before timing out.",
            )


def _slurm_exit(lg: Log, t: float, codes: dict[int, int]) -> None:
    c = lg.case
    for n, code in sorted(codes.items()):
        if c.log_format in TORCH and code in (1, 137) and c.log_format != "megatron":
            lg.add(
                t - 0.5,
                f"{prefix(lg, n)}torch.distributed.elastic.multiprocessing.api:[ERROR] failed "
                f"(exitcode: {-9 if code == 137 else 1}) local_rank: 0 (pid: {41000 + n}) of binary: "
                "/usr/bin/python3",
            )
        task = n * len(c.gpus) if c.log_format == "megatron" else n
        lg.add(t + n * 0.001, f"srun: error: {c.hosts[n]}: task {task}: Exited with exit code {code}")


def _cancel(lg: Log, t: float, why: str = "") -> None:
    c = lg.case
    lg.add(
        t,
        f"slurmstepd: error: *** JOB {lg.job_id} ON {c.hosts[0]} CANCELLED AT "
        f"{lg.local(t, '%Y-%m-%dT%H:%M:%S')}{why} ***",
    )


def _nccl_warn(lg: Log, t: float, node: int, peer: int) -> None:
    c = lg.case
    g = c.gpus[lg.rng.randrange(len(c.gpus))]
    lg.add(
        t,
        f"{prefix(lg, node, c.gpus.index(g))}{c.hosts[node]}:{52000 + node}:{52100 + g} [{g}] NCCL WARN "
        f"NET/IB : Got completion from peer {ip_of(c, peer)}<{40000 + peer}> with status=12 opcode=0 len=0 "
        f"vendor err 129 (Recv) localGid ::ffff:{ip_of(c, node)} hca mlx5_{g}",
    )


def completed(lg: Log) -> None:
    c, t = lg.case, lg.tl.end
    fmt = c.log_format
    if fmt == "megatron":
        lg.add(t, f"{lg.label(0)}[after training is done] datetime: {lg.local(t)} ")
    elif fmt == "hf":
        run = t - lg.tl.train_start
        lg.add(
            t,
            f"{{'train_runtime': {run:.4f}, 'train_samples_per_second': {512 * len(lg.tl.steps) / run:.3f}, "
            f"'train_loss': {lg.tl.steps[-1].loss if lg.tl.steps else 0:.4f}, 'epoch': 3.0}}",
        )
    elif fmt == "deepspeed":
        for n, host in enumerate(c.hosts):
            lg.add(
                t + n * 0.01,
                f"{host}: [{lg.local(t)},900] [INFO] [launch.py:351:main] Process {41000 + n} "
                "exits successfully.",
            )
    elif fmt == "jax":
        lg.add(t, f"{lg.node_label(0)}{lg.absl(t, where='train.py:530')}Training finished.")
    else:
        _summary(lg, t, "SUCCESS (exit 0)")


def _summary(lg: Log, t: float, status: str) -> None:
    wall = int(t - lg.tl.start)
    for i, line in enumerate(
        (
            "========================== JOB SUMMARY ==========================",
            f"  Job:    {lg.job_id} (JAX-llama2-70b)",
            f"  Nodes:  {len(lg.case.hosts)}",
            f"  Wall:   {wall // 3600}h {wall % 3600 // 60}m {wall % 60}s",
            f"  Status: {status}",
            "=================================================================",
        )
    ):
        lg.add(t + 1 + i * 0.001, line)


def hang_end(lg: Log) -> None:
    tl, c = lg.tl, lg.case
    everyone = list(range(len(c.hosts)))
    if tl.exit == "failed" and c.log_format in TORCH:
        _watchdog(lg, tl.end - 3, everyone)
        _slurm_exit(lg, tl.end, dict.fromkeys(everyone[:8], 1))
    else:
        _cancel(lg, tl.end)
        _slurm_exit(lg, tl.end + 1, dict.fromkeys(everyone[:4], 143))
        if c.log_format == "maxtext":
            _summary(lg, tl.end + 2, "FAILED (exit 143) — CANCELLED (scancel / SIGTERM)")


def story_lines(lg: Log) -> None:
    tl, c, ev = lg.tl, lg.case, lg.tl.ev
    cls = c.cls
    if cls in ("collective-hang",):
        hang_end(lg)
    elif cls == "network-hang":
        hosts = [i for i in range(len(c.hosts)) if int(ev["net_hosts"]) >> i & 1]
        for h in hosts:
            for k in range(3):
                _nccl_warn(lg, (tl.hang or ev["net"]) + 15 + k * 40, h, (h + 1) % len(c.hosts))
        hang_end(lg)
    elif cls == "node-death":
        dead = int(ev["dead_host"])
        peers = [n for n in range(len(c.hosts)) if n != dead][:3]
        for p in peers:
            _nccl_warn(lg, ev["death"] + lg.rng.uniform(20, 90), p, dead)
        lg.add(tl.end - 1, f"srun: error: Node failure on {c.hosts[dead]}")
        _cancel(lg, tl.end, " DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS")
    elif cls == "heartbeat-false-positive":
        _heartbeat(lg)
    elif cls == "host-oom":
        _oom(lg)
    elif cls == "gpu-hardware-fault":
        _cuda_error(lg)
    elif cls == "training-instability":
        _instability(lg)
    else:
        completed(lg)


def _heartbeat(lg: Log) -> None:
    tl, c = lg.tl, lg.case
    t = tl.crash or tl.end
    accused = [c.hosts.index(h) for h in tl.accused]
    lg.add(
        t,
        f"{lg.node_label(0)}{lg.absl(t, 'E', 'coordination_service.cc:512')}UNAVAILABLE: The following tasks "
        "are unhealthy (stopped sending heartbeats):",
    )
    for a in accused:
        lg.add(t + 0.001, f"{lg.node_label(0)}/job:jax_worker/replica:0/task:{a}")
    lg.add(
        t + 0.002,
        f"{lg.node_label(0)}The tasks have crashed. Check the task logs for an earlier error to debug "
        "further.",
    )
    for n in range(len(c.hosts)):
        tt = t + lg.rng.uniform(0.5, 3)
        lg.add(
            tt,
            f"{lg.node_label(n)}{lg.absl(tt, 'E', 'client.cc:84')}Polled an error from coordination service "
            "(this can be an error from this or another task).",
        )
        lg.add(
            tt + 0.01,
            f"{lg.node_label(n)}{lg.absl(tt, 'F', 'client.h:77')}Terminating process because the JAX "
            "distributed service detected fatal errors. This most likely indicates that another task "
            "died; see the other task logs for more details.",
        )
    _slurm_exit(lg, tl.end, dict.fromkeys(range(min(6, len(c.hosts))), 134))
    if c.log_format == "maxtext":
        _summary(lg, tl.end + 1, "FAILED (exit 1) — Training FAILED (exit=134)")


def _oom(lg: Log) -> None:
    tl, c = lg.tl, lg.case
    k, kill = int(tl.ev["oom_hosts"]), tl.ev["kill"]
    for n in range(k):
        lg.add(
            kill + 1 + n,
            f"slurmstepd: error: Detected 1 oom_kill event in StepId={lg.job_id}.0. Some of the "
            "step tasks have been OOM Killed.",
        )
        if c.log_format in ("jax", "maxtext"):
            lg.add(kill + 0.5, f"{prefix(lg, n)}Killed")
    _slurm_exit(lg, kill + 3, dict.fromkeys(range(k), 137))
    others = list(range(k, len(c.hosts)))[:6]
    _slurm_exit(lg, tl.end, dict.fromkeys(others, 143))
    if c.log_format == "maxtext":
        _summary(lg, tl.end + 1, "FAILED (exit 1) — Training FAILED (exit=137)")


def _cuda_error(lg: Log) -> None:
    tl, c, ev = lg.tl, lg.case, lg.tl.ev
    n, g = int(ev["hw_host"]), int(ev["hw_gpu"])
    t = tl.crash or tl.end
    local = c.gpus.index(g)
    msg = {
        "xid48": "uncorrectable ECC error encountered",
        "remap": "uncorrectable ECC error encountered",
        "xid79_gpu": "unspecified launch failure",
    }[c.variant]
    pre = prefix(lg, n, local)
    if c.log_format in ("jax", "maxtext"):
        lg.add(
            t,
            f"{pre}{lg.absl(t, 'E', 'pjrt_stream_executor_client.cc:2985')}Execution of replica {local} "
            f"failed: INTERNAL: CUDA error: : CUDA_ERROR_{'ECC_UNCORRECTABLE' if 'ECC' in msg else 'LAUNCH_FAILED'}: {msg}",
        )
    else:
        lg.add(t, f"{pre}Traceback (most recent call last):")
        lg.add(t + 0.001, f'{pre}  File "/workspace/train.py", line 412, in train_step')
        lg.add(t + 0.002, f"{pre}RuntimeError: CUDA error: {msg}")
        lg.add(
            t + 0.003,
            f"{pre}CUDA kernel errors might be asynchronously reported at some other API call, so the "
            "stacktrace below might be incorrect.",
        )
    codes = {m: 143 for m in range(len(c.hosts)) if m != n}
    codes = dict(list(codes.items())[:4])
    codes[n] = 1
    _slurm_exit(lg, tl.end, codes)
    if c.log_format == "maxtext":
        _summary(lg, tl.end + 1, "FAILED (exit 1) — Training FAILED (exit=1)")


def _instability(lg: Log) -> None:
    tl, c = lg.tl, lg.case
    if c.log_format == "deepspeed":
        for s in tl.steps:
            if s.end >= tl.ev["instab"] and s.n % 7 == 0:
                lg.add(
                    s.end + 0.002,
                    f"{c.hosts[0]}: [{lg.local(s.end)},010] [INFO] [loss_scaler.py:183:"
                    f"update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss "
                    "scale: 65536, reducing to 32768",
                )
    if c.variant == "nan":
        t = tl.end - 2
        last = tl.steps[-1].n if tl.steps else 0
        line = {
            "megatron": f"{lg.label(0)}AssertionError: Rank 0: found NaN in local grad norm in backward pass before "
            f"data-parallel communication collective. Device: 0, node: {c.hosts[0]}",
            "hf": "[rank0]: RuntimeError: Loss is NaN at step " + str(last),
            "deepspeed": f"{c.hosts[0]}: RuntimeError: Loss is NaN at step {last}",
            "jax": f"{lg.node_label(0)}{lg.absl(t, 'E', 'train.py:455')}Loss is NaN at step {last}, aborting.",
            "maxtext": f"{lg.node_label(0)}{lg.absl(t, 'E', 'train.py:455')}Loss is NaN at step {last}, aborting.",
        }[c.log_format]
        lg.add(t, line)
        _slurm_exit(lg, tl.end, {0: 1})
        if c.log_format == "maxtext":
            _summary(lg, tl.end + 1, "FAILED (exit 1) — Training FAILED (exit=1)")
    else:
        _cancel(lg, tl.end)
        _slurm_exit(lg, tl.end + 1, dict.fromkeys(range(min(4, len(c.hosts))), 143))
