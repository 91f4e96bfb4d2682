"""Outside corpus F (#10): the body and the end of a job log (steps, saves, and how the job ended)."""

from __future__ import annotations

import random

from bench.outside._f_log import Log, eval_lines, save_lines, startup, step_line
from bench.outside._f_story import Story, tokens_per_step


def _local(log: Log, t: float) -> str:
    return log.local(t, "%m%d %H:%M:%S") + f".{int(t * 1e6) % 10**6:06d}"


def _nccl_timeout(log: Log, st: Story, rng: random.Random) -> None:
    case, tl = log.case, st.fleet.tl
    seq = 40000 + (tl.steps[-1].n if tl.steps else 0) * 17
    t = tl.end - rng.uniform(1, 5)
    ms = int((tl.end - (tl.stop or t)) * 1000)
    dead = set(st.fleet.eff.dead)
    for r, host in enumerate(case.hosts):
        if host in dead:
            continue
        gr = r * case.gpus
        tt = t + rng.uniform(0, 3)
        log.add(
            tt,
            r,
            f"[rank{gr}]:[E{_local(log, tt)} {3100 + r} ProcessGroupNCCL.cpp:632] [Rank {gr}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=33554432, "
            f"NumelOut=33554432, Timeout(ms)={ms // 1000 * 1000}) ran for {ms + 37} milliseconds before timing out.",
        )
        if r % max(1, len(case.hosts) // 4) == 0:
            log.add(
                tt + 0.5,
                r,
                f"[rank{gr}]:[E{_local(log, tt + 0.5)} {3100 + r} ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg)"
                f" Rank {gr}] Exception (either an error or timeout) detected by watchdog at work: "
                f"{seq}, last enqueued NCCL work: {seq + 1}, last completed NCCL work: {seq - 1}.",
            )
    alive = next(r for r, h in enumerate(case.hosts) if h not in dead)
    _exit(log, tl.end, rng, "exitcode: -6", rank=alive)


def _exit(log: Log, t: float, rng: random.Random, why: str, rank: int = 0) -> None:
    case = log.case
    host = case.hosts[rank]
    log.add(
        t,
        rank,
        f"E{_local(log, t)} {1200 + rank} torch/distributed/elastic/multiprocessing/api.py:869] failed "
        f"({why}) local_rank: {rng.randrange(case.gpus)} (pid: {rng.randrange(2000, 60000)}) of binary: "
        "/usr/bin/python3",
    )
    log.add(t + 0.2, rank, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ")
    log.add(t + 0.3, rank, f"  host      : {host}")
    if not case.k8s:
        log.add(t + 2, None, f"srun: error: {host}: task {rank}: Exited with exit code 1")
        log.add(t + 2.5, None, f"srun: Terminating StepId={log.job_id}.0")


def _ending(log: Log, st: Story, rng: random.Random) -> None:
    case, tl = log.case, st.fleet.tl
    kind = st.ending
    last = tl.steps[-1] if tl.steps else None
    if kind == "completed":
        t = tl.end - 25
        if case.framework == "torchtitan":
            log.msg(t, 0, "Sleeping 2 seconds for other ranks to complete")
            log.msg(t + 2, 0, "Training completed")
        else:
            log.msg(t, 0, f"`Trainer.fit` stopped: `max_steps={(last.n + 1) if last else 0}` reached.")
        return
    if kind == "nccl-timeout":
        _nccl_timeout(log, st, rng)
    elif kind == "node-lost":
        host = next(iter(st.fleet.eff.dead))
        r = case.hosts.index(host)
        t = st.fleet.eff.dead[host] + rng.uniform(5, 40)
        peer = f"10.{(case.seed * 7) % 200 + 20}.{r // 200 + 1}.{r % 200 + 10}"
        other = (r + 1) % len(case.hosts)
        log.add(
            t,
            other,
            f"{case.hosts[other]}:{4000 + other}:{4100 + other} [3] NCCL INFO NET/IB : Got completion from "
            f"peer {peer}<{rng.randrange(30000, 60000)}> with status=12 opcode=0 len=0 vendor err 129 "
            "(Send) localGid ::ffff:10.0.0.1 remoteGid ::ffff:" + peer,
        )
        _nccl_timeout(log, st, rng)
        if not case.k8s:
            log.add(tl.end + 3, None, f"srun: error: Node failure on {host}")
            log.add(
                tl.end + 4,
                None,
                f"slurmstepd: error: *** STEP {log.job_id}.0 ON {case.hosts[0]} "
                f"CANCELLED AT {log.local(tl.end + 4, '%Y-%m-%dT%H:%M:%S')} DUE TO NODE FAILURE ***",
            )
    elif kind == "heartbeat":
        t = tl.stop or tl.end
        for h in st.accused:
            r = case.hosts.index(h)
            nid = f"{random.Random(h).getrandbits(112):028x}"
            log.add(
                t,
                0,
                f"(raylet) The node with node id: {nid} and address: 10.{r}.0.{r + 10} and node name: {h} "
                "has been marked dead because the detector has missed too many heartbeats from it. This can "
                "happen when a (1) raylet crashes unexpectedly (OOM, etc.) (2) raylet has lagging heartbeats "
                "due to slow network or busy workload.",
            )
        log.add(
            t + 2,
            0,
            "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task. "
            "The actor died because its node has died.",
        )
        log.add(
            t + 3,
            0,
            f"Training errored after {last.n if last else 0} iterations at "
            f"{log.local(t + 3, '%Y-%m-%d %H:%M:%S')}. Total running time: {t - tl.launch:.0f}s",
        )
    elif kind == "oom":
        for h in st.fleet.eff.oom:
            r = case.hosts.index(h)
            t = st.fleet.eff.oom[h][1]
            log.add(
                t + 1,
                r,
                f"W{_local(log, t + 1)} {1200 + r} torch/distributed/elastic/multiprocessing/api.py:897] "
                f"Sending process {rng.randrange(2000, 60000)} closing signal SIGTERM",
            )
            log.add(t + 0.5, r, f"Signal 9 (SIGKILL) received by PID {rng.randrange(2000, 60000)}")
            if not case.k8s:
                log.add(
                    t + 3,
                    None,
                    f"slurmstepd: error: Detected 1 oom_kill event in StepId={log.job_id}.0. "
                    "Some of the step tasks have been OOM Killed.",
                )
                log.add(t + 3.5, None, f"srun: error: {h}: task {r}: Out Of Memory")
            _exit(log, t + 2, rng, "exitcode: -9", rank=r)
    elif kind == "cuda-ecc":
        h, g = st.culprits[0]
        r = case.hosts.index(h)
        t = tl.stop or tl.end
        gr = r * case.gpus + (g or 0)
        log.add(t, r, f"[rank{gr}]: RuntimeError: CUDA error: uncorrectable ECC error encountered")
        log.add(
            t + 0.1,
            r,
            f"[rank{gr}]: CUDA kernel errors might be asynchronously reported at some other API call, "
            "so the stacktrace below might be incorrect.",
        )
        _exit(log, t + rng.uniform(5, 30), rng, "exitcode: 1", rank=r)
    elif kind == "nan":
        t = tl.end - 5
        msg = "found NaN in local grad norm in backward pass before data-parallel communication collective"
        log.add(t, 0, "Traceback (most recent call last):")
        log.add(t + 0.1, 0, f"RuntimeError: Rank 0: {msg}")
        _exit(log, t + 3, rng, "exitcode: 1")


def write_log(st: Story, restored_from: int | None) -> str:
    """The whole log of a story's job."""
    case, tl = st.fleet.case, st.fleet.tl
    rng = random.Random(case.seed * 31 + case.index)
    job_id = f"{case.seed}{case.index:02d}{rng.randrange(1000, 9999)}"
    log = Log(case, job_id)
    startup(log, tl, job_id, restored_from)
    every = rng.choice((1, 5, 10)) if case.framework != "nemo" else 1
    tokens = tokens_per_step(case)
    for s in tl.steps:
        step_line(log, s, every, tokens)
    if st.hb_timeout:
        log.add(
            tl.launch + 8,
            0,
            f"RAY_health_check_period_ms=30000 RAY_health_check_failure_threshold="
            f"{st.hb_timeout // 30} (a node is marked dead after {st.hb_timeout} s without heartbeats)",
        )
    for a, b, n in tl.saves:
        save_lines(log, a, b, n, done=tl.stop is None or b <= tl.stop)
    for a, b, n in tl.evals:
        loss = next((s.loss for s in tl.steps if s.n == n), 2.3)
        eval_lines(log, a, b, n, loss)
    _ending(log, st, rng)
    return log.render()
