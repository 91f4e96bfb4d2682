"""Corpus D: what the launcher, Slurm, NCCL and PyTorch/JAX print when something happens (real formats)."""

from __future__ import annotations

from typing import Any

from bench.outside._d_log import LogWriter


def _watchdog(w: LogWriter, off: float, info: dict[str, Any]) -> None:
    """PyTorch's NCCL watchdog on every rank that waited, then torchrun and srun reporting the exits."""
    seq = info.get("seq", 48213)
    skip = set(info.get("skip", []))
    for task in range(w.n):
        if task in skip:
            continue
        for local in sorted({0, (task * 3) % w.p.gpus}):
            ran = 600000 + (task * 37 + local * 11) % 900
            w.c10(
                off + task * 0.01,
                task,
                local,
                "E",
                "ProcessGroupNCCL.cpp:616",
                f"[Rank {task * w.p.gpus + local}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
                f"OpType=ALLREDUCE, NumelIn=262144000, NumelOut=262144000, Timeout(ms)=600000) ran for {ran} "
                "milliseconds before timing out.",
            )
        w.c10(
            off + 0.5,
            task,
            0,
            "E",
            "ProcessGroupNCCL.cpp:1664",
            f"[PG ID 0 PG GUID 0(default_pg) Rank {task * w.p.gpus}] Exception (either an error or timeout) detected by "
            "watchdog at work: 48213, last enqueued NCCL work: 48214, last completed NCCL work: 48212.",
        )
    end = off + 3
    for task, h in enumerate(w.p.hosts):
        if task in skip:
            continue
        w.raw(
            end,
            f"[{w.slurm_time(end)}] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -6) "
            f"local_rank: 0 (pid: {20000 + task}) of binary: /usr/bin/python3",
        )
        if w.p.log_style != "k8s":
            w.raw(end + 1, f"srun: error: {h.name}: task {task}: Exited with exit code 1")


def _ib_error(w: LogWriter, off: float, task: int) -> None:
    h = w.p.hosts[task]
    peer = w.p.hosts[(task + 1) % w.n]
    for k in range(3):
        w.app(
            off + 20 * k,
            task,
            f"{h.name}:{4100 + task}:{4321 + task} [{k}] NCCL WARN NET/IB : Got completion from peer {peer.ip}<{53211 + k}> "
            f"with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:{h.ip} remoteGids::ffff:{peer.ip}",
            sev="W",
            local=k,
        )


def _node_failure(w: LogWriter, off: float, task: int, job_id: str) -> None:
    h = w.p.hosts[task]
    w.raw(off, f"srun: error: Node failure on {h.name}")
    w.raw(
        off + 1,
        f"slurmstepd: error: *** JOB {job_id} ON {w.p.hosts[0].name} CANCELLED AT {w.slurm_time(off + 1)} "
        "DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
    )
    for k, other in enumerate(w.p.hosts):
        if k != task:
            w.raw(off + 2, f"srun: error: {other.name}: task {k}: Exited with exit code 143")


def _oom(w: LogWriter, off: float, task: int, job_id: str) -> None:
    h = w.p.hosts[task]
    if w.p.log_style == "k8s":
        w.app(off, task, "Killed", local=0)
        w.raw(
            off + 1,
            f"[{w.slurm_time(off + 1)}] torch.distributed.elastic.multiprocessing.api: [ERROR] failed "
            f"(exitcode: -9) local_rank: 0 (pid: {30000 + task}) of binary: /usr/bin/python3",
        )
        return
    w.raw(
        off,
        f"slurmstepd: error: Detected 1 oom_kill event in StepId={job_id}.0. Some of the step tasks have been OOM Killed.",
    )
    w.raw(off + 0.5, f"srun: error: {h.name}: task {task}: Out Of Memory")
    w.raw(off + 0.6, f"{w.label(task)}NODE_EXIT host={h.fqdn} exit=137")
    w.raw(off + 1, f"srun: error: {h.name}: task {task}: Exited with exit code 137")


def _heartbeat(w: LogWriter, off: float, info: dict[str, Any]) -> None:
    accused = info["accused"]
    w.app(off, 0, "UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):", sev="E")
    for task in accused:
        w.raw(off + 0.01, f"{w.label(0)}/job:jax_worker/replica:0/task:{task}")
    w.raw(
        off + 0.02,
        f"{w.label(0)}The tasks have crashed. Check the task logs for an earlier error to debug further.",
    )
    for task in range(w.n):
        w.app(
            off + 0.5,
            task,
            "Terminating process because the JAX distributed service detected fatal errors. This most "
            "likely indicates that another task died; see the other task logs for more details.",
            sev="F",
        )


def _cuda_ecc(w: LogWriter, off: float, task: int, gpu: int) -> None:
    h = w.p.hosts[task]
    w.app(
        off,
        task,
        f"{h.name}:{4100 + task}:{4400 + task} [{gpu}] NCCL WARN Cuda failure 'uncorrectable ECC error encountered'",
        sev="W",
        local=gpu,
    )
    w.c10(
        off + 0.5,
        task,
        gpu,
        "E",
        "ProcessGroupNCCL.cpp:1484",
        f"[PG ID 0 PG GUID 0(default_pg) Rank {task * w.p.gpus + gpu}] Process group watchdog thread terminated with "
        "exception: CUDA error: uncorrectable ECC error encountered",
    )
    w.raw(
        off + 2,
        f"[{w.slurm_time(off + 2)}] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -6) "
        f"local_rank: {gpu} (pid: {30000 + task}) of binary: /usr/bin/python3",
    )
    if w.p.log_style != "k8s":
        w.raw(off + 3, f"srun: error: {h.name}: task {task}: Exited with exit code 1")


def _nan(w: LogWriter, off: float, step: int) -> None:
    w.app(off, 0, f"WARNING: loss is nan at step {step}, grad_norm=inf; skipping update", sev="W")
    w.app(
        off + 5,
        0,
        f"RuntimeError: training diverged: 3 consecutive non-finite losses (last step {step + 2})",
        sev="E",
    )


def _scancel(w: LogWriter, off: float, job_id: str) -> None:
    w.raw(
        off,
        f"slurmstepd: error: *** STEP {job_id}.0 ON {w.p.hosts[0].name} CANCELLED AT {w.slurm_time(off)} ***",
    )
    w.raw(off + 0.2, f"srun: Terminating StepId={job_id}.0")
    for k, h in enumerate(w.p.hosts):
        w.raw(off + 1, f"srun: error: {h.name}: task {k}: Exited with exit code 143")


def _benign(w: LogWriter, off: float, task: int) -> None:
    h = w.p.hosts[task]
    w.app(
        off,
        task,
        f'{h.name}:{4100 + task}:{4100 + task} [0] NCCL WARN Missing "iommu=pt" from kernel command line '
        "which can lead to system instablity or hang!",
        sev="W",
    )
    w.app(
        off + 0.3,
        task,
        f"{h.name}:{4100 + task}:{4100 + task} [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. "
        "Using internal network plugin.",
    )


def render_event(
    w: LogWriter, job_id: str, off: float, task: int | None, kind: str, info: dict[str, Any]
) -> None:
    """One story event as the log shows it."""
    if kind == "watchdog" and w.p.log_style != "glog":
        _watchdog(w, off, info)
    elif kind == "watchdog":  # a JAX job has no NCCL watchdog: it hangs until someone cancels it
        _scancel(w, off, job_id)
    elif kind == "ib_error" and task is not None:
        _ib_error(w, off, task)
    elif kind == "node_failure" and task is not None:
        _node_failure(w, off, task, job_id)
    elif kind == "oom" and task is not None:
        _oom(w, off, task, job_id)
    elif kind == "heartbeat":
        _heartbeat(w, off, info)
    elif kind == "cuda_ecc" and task is not None:
        _cuda_ecc(w, off, task, info["gpu"])
    elif kind == "nan":
        _nan(w, off, info["step"])
    elif kind == "scancel":
        _scancel(w, off, job_id)
    elif kind == "benign" and task is not None:
        _benign(w, off, task)
