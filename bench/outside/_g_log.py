"""Corpus G's job logs (#10): torchrun under Slurm, Kubeflow PyTorchJob, JobSet + Composer, Ray Train.

`render(story)` returns the job log: a launcher header, NCCL's init lines, one line (or block) per
logged step with loss, grad norm and throughput, checkpoint / eval / stall lines, the story's events
(see `_g_logev`) and the launcher's ending. Times are written as the flavour writes them: ISO 8601
with the site's UTC offset, `kubectl logs --timestamps` RFC 3339 in UTC, Python logging's local
`asctime`, glog's `E1125 12:52:17.512903`, dmesg -T, or epoch seconds in Ray Train's results.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import numpy as np

from bench.outside._g_time import CKPT, EVAL, STALL


class Clock:
    """Time formats of one site (its UTC offset)."""

    def __init__(self, tz_hours: float) -> None:
        self.tz = timezone(timedelta(hours=tz_hours))

    def local(self, t: float) -> datetime:
        return datetime.fromtimestamp(t, self.tz)

    def iso(self, t: float) -> str:
        return self.local(t).isoformat(timespec="milliseconds")

    def pylog(self, t: float) -> str:
        d = self.local(t)
        return d.strftime("%Y-%m-%d %H:%M:%S") + f",{d.microsecond // 1000:03d}"

    def glog(self, t: float, sev: str) -> str:
        d = self.local(t)
        return f"{sev}{d:%m%d %H:%M:%S}.{d.microsecond:06d}"

    def dmesg(self, t: float) -> str:
        d = self.local(t)
        return f"[{d:%a %b} {d.day:2d} {d:%H:%M:%S %Y}]"

    def accel(self, t: float) -> str:
        return f"{self.local(t):%m/%d/%Y %H:%M:%S}"

    @staticmethod
    def kube(t: float) -> str:
        d = datetime.fromtimestamp(t, UTC)
        return d.strftime("%Y-%m-%dT%H:%M:%S") + f".{d.microsecond:06d}{int(t * 1e9) % 1000:03d}Z"


class Log:
    """Timed lines of one job log, plus sections appended at the end (epilog dumps, other pods)."""

    def __init__(self, st, rng: random.Random) -> None:
        self.st, self.fl, self.rng = st, st.fleet, rng
        self.clock = Clock(st.fleet.tz)
        self.lines: list[tuple[float, int, str]] = []
        self.tail: list[str] = []
        self.n = 0
        self.pids = {h: rng.randint(4000, 60000) for h in range(len(st.fleet.hosts))}

    def add(self, t: float, text: str) -> None:
        self.lines.append((t, self.n, text))
        self.n += 1

    def app(self, t: float, msg: str, level: str = "INFO", host: int = 0, rank: int = 0) -> None:
        """One application log line as the flavour prints it."""
        fl, c = self.fl, self.clock
        if fl.log == "torchrun":
            self.add(t, f"{host}: {c.iso(t)} {level} [rank{rank}] {msg}")
        elif fl.log == "pytorchjob":
            self.add(t, f"{c.kube(t)} {c.accel(t)} - {level} - __main__ - {msg}")
        elif fl.log == "composer":
            self.add(
                t,
                f"{c.pylog(t)}: rank{rank}[{self.pids[host]}][MainThread]: {level}: composer.trainer.trainer: {msg}",
            )
        else:
            ip = fl.hosts[host].ip
            self.add(
                t,
                f"(RayTrainWorker pid={self.pids[host]}, ip={ip}) {c.pylog(t)}\t{level} train_loop.py:141 -- {msg}",
            )

    def raw(self, t: float, text: str) -> None:
        """A line the launcher prints as is (kubectl --timestamps still prefixes it)."""
        self.add(t, f"{self.clock.kube(t)} {text}" if self.fl.log == "pytorchjob" else text)

    def nccl(self, t: float, host: int, lr: int, msg: str) -> None:
        h = self.fl.hosts[host]
        pid = self.pids[host] + lr
        prefix = f"{host}: " if self.fl.log == "torchrun" else ""
        if self.fl.log == "raytrain":
            prefix = f"(RayTrainWorker pid={pid}, ip={h.ip}) "
        self.raw(t, f"{prefix}{h.name}:{pid}:{pid + 312} [{lr}] {msg}")

    def text(self) -> str:
        body = [x[2] for x in sorted(self.lines)]
        return "\n".join(body + self.tail) + "\n"


def _nic_line(fl, h: int) -> str:
    if fl.rdma == "efa":
        return f"NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found {len(fl.nics)} nics)"
    if fl.rdma == "none":
        return "NCCL INFO NET/OFI Selected provider is cxi, fabric is cxi (found 4 nics)"
    kind = "RoCE" if fl.rdma == "roce" else "IB"
    nics = " ".join(f"[{i}]{d}:1/{kind}" for i, d in enumerate(fl.nics))
    return f"NCCL INFO NET/IB : Using {nics} [RO]; OOB eth0:{fl.hosts[h].ip}<0>"


def header(lg: Log) -> None:
    st, fl, t = lg.st, lg.fl, lg.st.tl.t_launch
    n, g = len(fl.hosts), len(fl.owned)
    master = fl.hosts[0]
    if fl.log == "torchrun":
        lg.raw(t - 2, f"SLURM_JOB_ID={lg.rng.randint(10000, 999999)}")
        lg.raw(t - 2, f"SLURM_JOB_NODELIST={','.join(fl.names)}")
        lg.raw(t - 2, f"SLURM_NNODES={n}")
        lg.raw(
            t - 1,
            f"+ srun -l --kill-on-bad-exit=1 torchrun --nnodes={n} --nproc-per-node={g} --rdzv-backend=c10d "
            f"--rdzv-endpoint={master.name}:29500 --rdzv-id={fl.job_name} train.py --config configs/{fl.job_name}.yaml",
        )
        for h in range(n):
            lg.raw(
                t + 1 + h * 0.01,
                f"{h}: W{lg.clock.local(t):%m%d %H:%M:%S}.{h:06d} {lg.pids[h]} torch/distributed/run.py:793] "
                "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default",
            )
        lg.raw(
            t + 3,
            f"0: I{lg.clock.local(t + 3):%m%d %H:%M:%S}.120000 {lg.pids[0]} torch/distributed/elastic/agent/server/api.py:525] "
            f"[default] Rendezvous complete for workers. Result: restart_count=0 master_addr={master.name} "
            f"master_port=29500 group_rank=0 group_world_size={n} local_ranks={list(range(g))} "
            f"role_ranks={list(range(g))} global_ranks={list(range(g))} role_world_sizes={[n * g] * g}",
        )
    elif fl.log == "pytorchjob":
        lg.tail.append(
            f"$ kubectl -n {fl.namespace} get pods -l training.kubeflow.org/job-name={fl.job_name} -o wide"
        )
        lg.tail.append("NAME                          READY   STATUS    RESTARTS   AGE   IP            NODE")
        for h, host in enumerate(fl.hosts):
            pod = f"{fl.job_name}-master-0" if h == 0 else f"{fl.job_name}-worker-{h - 1}"
            lg.tail.append(
                f"{pod:<30}0/1     {'Completed' if st.end == 'completed' else 'Error':<10}0          "
                f"{int((st.tl.t1 - t) // 60)}m   {'10.' + str(100 + h % 100) + '.0.' + str(h + 2):<14}{host.name}"
            )
        lg.app(
            t + 5,
            f"Distributed environment: MULTI_GPU  Backend: nccl Num processes: {n * g} Process index: 0 "
            f"Local process index: 0 Device: cuda:0 Mixed precision type: bf16",
        )
    elif fl.log == "composer":
        lg.app(t + 4, f"Run name: {fl.job_name}-{lg.rng.randint(1000, 9999)}")
        lg.app(
            t + 5,
            f"Using {n} nodes with {g} devices per node (world size {n * g}); node ranks: "
            + ", ".join(f"{i}={h.name}" for i, h in enumerate(fl.hosts)),
        )
    else:
        cfg = lg.st.extra
        lg.raw(
            t,
            f"{lg.clock.pylog(t)}\tINFO worker.py:1821 -- Connecting to existing Ray cluster at address: {master.ip}:6379...",
        )
        lg.raw(
            t + 1,
            f"{lg.clock.pylog(t + 1)}\tINFO worker.py:1999 -- Connected to Ray cluster. "
            f"_system_config={{'health_check_period_ms': {cfg.get('period', 3000)}, "
            f"'health_check_failure_threshold': {cfg.get('thresh', 5)}}}",
        )
        lg.raw(t + 8, f"(TorchTrainer pid={lg.pids[0] - 7}) Started distributed worker processes:")
        for h, host in enumerate(fl.hosts):
            lg.raw(
                t + 8 + h * 0.001,
                f"(TorchTrainer pid={lg.pids[0] - 7}) - (node_id={lg.rng.getrandbits(112):028x}, "
                f"ip={host.ip}, pid={lg.pids[h]}) world_rank={h * g}, local_rank=0, node_rank={h}",
            )
    ti = st.tl.t_train - lg.rng.uniform(20, 60)
    for h in sorted({0, len(fl.hosts) - 1}):
        lg.nccl(
            ti,
            h,
            0,
            "NCCL INFO NCCL version 2.21.5+cuda12.4"
            if fl.gpu.per_host == 8 and "H" in fl.gpu.name
            else "NCCL INFO NCCL version 2.26.2+cuda12.8",
        )
        lg.nccl(ti + 0.2, h, 0, f"NCCL INFO Bootstrap : Using eth0:{fl.hosts[h].ip}<0>")
        lg.nccl(ti + 0.5, h, 0, _nic_line(fl, h))
        lg.nccl(
            ti + 3,
            h,
            0,
            f"NCCL INFO comm 0x{lg.rng.getrandbits(40):x} rank {h * g} nRanks {n * g} nNodes {n} "
            f"localRanks {g} localRank 0 MNNVL {1 if fl.gpu.per_host == 4 else 0}",
        )
        lg.nccl(
            ti + 6,
            h,
            0,
            f"NCCL INFO ncclCommInitRankConfig comm 0x{lg.rng.getrandbits(40):x} rank {h * g} "
            f"nranks {n * g} cudaDev 0 nvmlDev 0 busId 18000 commId 0x{lg.rng.getrandbits(64):x} - Init COMPLETE",
        )
    if st.restored_from is not None:
        t_r = st.tl.t_launch + (st.tl.t_train - st.tl.t_launch) * 0.6
        lg.app(
            t_r,
            f"Loading checkpoint from /checkpoints/{fl.job_name}/step_{st.restored_from} "
            f"(resuming at step {st.restored_from + 1})",
        )
        lg.app(t_r + 40, f"Restored model, optimizer and dataloader state from step {st.restored_from}")


def _lr(k: int) -> float:
    return 3e-4 * min(1.0, (k + 1) / 500.0)


def steps(lg: Log) -> None:
    st, tl, fl = lg.st, lg.st.tl, lg.fl
    total = tl.total_steps
    every = max(1, len(tl.step_no) // 700) if fl.log in ("composer", "raytrain") else 1
    prev = tl.t_train
    for i, (k, t) in enumerate(zip(tl.step_no.tolist(), tl.step_t.tolist(), strict=True)):
        dt = t - prev
        prev = t
        if i % every:
            continue
        loss = tl.loss[i] if i < len(tl.loss) else float("nan")
        gn = tl.gnorm[i] if i < len(tl.gnorm) else float("nan")
        tps = st.tokens_per_step / dt
        if fl.log == "torchrun":
            lg.app(
                t,
                f"step {k}/{total} | loss {loss:.4f} | grad_norm {gn:.3f} | lr {_lr(k):.3e} | "
                f"{dt:.2f} s/step | {tps / 1e6:.2f}M tok/s",
            )
        elif fl.log == "pytorchjob":
            lg.app(
                t,
                f"Step {k}: loss={loss:.4f} grad_norm={gn:.3f} lr={_lr(k):.6f} step_time={dt:.3f}s tokens/s={tps:.0f}",
            )
        elif fl.log == "composer":
            hours = (t - tl.t_train) / 3600.0
            block = [
                f"[batch={k + 1}/{total}]:",
                f"\t Train time/batch: {k}",
                f"\t Train time/token: {int(k * st.tokens_per_step)}",
                f"\t Train loss/train/total: {loss:.4f}",
                f"\t Train gradient_norms/l2_norm/model: {gn:.4f}",
                f"\t Train throughput/batches_per_sec: {1 / dt:.4f}",
                f"\t Train time/train: {hours:.4f}",
                f"\t Train time/total: {hours + (tl.t_train - tl.t_launch) / 3600:.4f}",
                f"\t Train lr-DecoupledAdamW/group0: {_lr(k):.4e}",
            ]
            for j, line in enumerate(block):
                lg.add(t + j * 1e-6, line)
        else:
            lg.add(
                t,
                f"(RayTrainWorker pid={lg.pids[0]}, ip={fl.hosts[0].ip}) {{'step': {k}, 'loss': {loss:.4f}, "
                f"'grad_norm': {gn:.4f}, 'step_time_s': {dt:.3f}, 'tokens_per_s': {tps:.1f}, 'timestamp': {int(t)}}}",
            )
            if k % 100 == 0:
                run = int(t - tl.t_launch)
                lg.add(
                    t + 0.01,
                    f"Training finished iteration {k + 1} at {lg.clock.local(t):%Y-%m-%d %H:%M:%S}. "
                    f"Total running time: {run // 3600}hr {run % 3600 // 60}min {run % 60}s"
                    if run >= 3600
                    else f"Training finished iteration {k + 1} at {lg.clock.local(t):%Y-%m-%d %H:%M:%S}. "
                    f"Total running time: {run // 60}min {run % 60}s",
                )
    _pauses(lg)


def _pauses(lg: Log) -> None:
    tl, fl = lg.st.tl, lg.fl
    for a, b, code in tl.pauses:
        i = int(np.searchsorted(tl.step_t, a + 1e-6)) - 1
        k = int(tl.step_no[i]) if i >= 0 else tl.first_step
        if code == CKPT:
            path = f"/checkpoints/{fl.job_name}/step_{k}"
            lg.app(a + 0.5, f"Saving checkpoint at step {k} to {path}")
            killed = any(a <= k <= b + 5 for k in lg.st.eff.oom_kill.values())
            if b < tl.t_stop - 1 and not killed:
                lg.app(b - 0.3, f"Saved checkpoint at step {k} ({b - a:.1f} s)")
        elif code == EVAL:
            lg.app(a + 0.5, f"Running evaluation at step {k}")
            if b < tl.t_stop - 1:
                lg.app(b - 0.3, f"eval at step {k}: val_loss={tl.loss[max(i, 0)] + 0.04:.4f} ({b - a:.1f} s)")
        elif code == STALL:
            lg.app(
                b,
                f"data loader took {b - a:.1f} s to produce batch {k + 1} (prefetch queue was empty)",
                "WARNING",
            )
