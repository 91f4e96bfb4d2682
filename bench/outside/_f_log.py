"""Outside corpus F (#10): the job log as people save it.

Launchers: Slurm (`srun -l` task labels, batch-script lines without labels, local time) or Kubernetes
(`kubectl logs --prefix --timestamps` of a PyTorchJob/JobSet: `[pod/<pod>/pytorch] <RFC3339Nano UTC> msg`).
Frameworks: PyTorch Lightning, torchtitan, NeMo 2 — each with its own step line and clock.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

from bench.outside._f_om import pod_name
from bench.outside._f_plan import Case
from bench.outside._f_time import Step, Timeline


@dataclass
class Log:
    """Lines as (time, rank or None for the batch script, text)."""

    case: Case
    job_id: str = ""
    rows: list[tuple[float, int | None, str]] = field(default_factory=list)

    def add(self, t: float, rank: int | None, text: str) -> None:
        self.rows.append((t, rank, text))

    def local(self, t: float, fmt: str) -> str:
        return dt.datetime.fromtimestamp(t, ZoneInfo(self.case.tz)).strftime(fmt)

    def msg(self, t: float, rank: int, text: str, level: str = "I") -> None:
        """A framework line with the framework's own clock."""
        fw = self.case.framework
        if fw == "torchtitan":
            lvl = {"I": "INFO", "W": "WARNING", "E": "ERROR"}[level]
            stamp = self.local(t, "%Y-%m-%d %H:%M:%S,") + f"{int(t * 1000) % 1000:03d}"
            text = f"[rank{rank}]:[titan] {stamp} - root - {lvl} - {text}"
        elif fw == "nemo":
            text = f"[NeMo {level} {self.local(t, '%Y-%m-%d %H:%M:%S')} nemo_logging:393] {text}"
        elif not self.case.k8s:
            lvl = {"I": "INFO", "W": "WARNING", "E": "ERROR"}[level]
            text = (
                f"{self.local(t, '%Y-%m-%d %H:%M:%S')},{int(t * 1000) % 1000:03d} {lvl} [train.py:142] {text}"
            )
        self.add(t, rank, text)

    def render(self) -> str:
        out = []
        width = len(str(len(self.case.hosts) - 1))
        for t, rank, text in sorted(self.rows, key=lambda r: r[0]):
            if self.case.k8s:
                stamp = (
                    dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.")
                    + f"{int(t * 1e9) % 10**9:09d}Z"
                )
                pod = pod_name(self.case, rank or 0)
                out.append(f"[pod/{pod}/pytorch] {stamp} {text}")
            elif rank is None:
                out.append(text)
            else:
                out.append(f"{rank:>{width}}: {text}")
        return "\n".join(out) + "\n"


def compress(hosts: list[str]) -> str:
    """Slurm's compressed node list for names ending in digits (others are listed)."""
    import re

    groups: dict[str, list[str]] = {}
    for h in hosts:
        m = re.fullmatch(r"(.*?)(\d+)", h)
        if not m:
            return ",".join(hosts)
        groups.setdefault(m.group(1), []).append(m.group(2))
    parts = []
    for pre, nums in groups.items():
        runs: list[list[str]] = []
        for n in nums:
            if runs and int(n) == int(runs[-1][-1]) + 1 and len(n) == len(runs[-1][-1]):
                runs[-1].append(n)
            else:
                runs.append([n])
        body = ",".join(r[0] if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
        parts.append(f"{pre}[{body}]" if len(nums) > 1 else f"{pre}{body}")
    return ",".join(parts)


def startup(log: Log, tl: Timeline, job_id: str, restored_from: int | None) -> None:
    """The launcher's and the framework's first lines."""
    case = log.case
    n = len(case.hosts)
    t = tl.launch
    if not case.k8s:
        log.add(t, None, f"SLURM_JOB_ID={job_id}")
        log.add(t, None, f"SLURM_JOB_NODELIST={compress(case.hosts)}")
        log.add(t, None, f"SLURM_NNODES={n}")
        log.add(t, None, f"Start: {log.local(t, '%a %b %d %H:%M:%S %Z %Y')}")
        log.add(
            t,
            None,
            f"+ srun -l --ntasks-per-node=1 torchrun --nnodes={n} --nproc-per-node={case.gpus} "
            f"--rdzv-backend=c10d --rdzv-endpoint={case.hosts[0]}:29500 train.py",
        )
    for r in range(n):
        if case.k8s:  # the entrypoint echoes the downward-API env
            log.add(
                t + 1 + r * 0.01, r, f"NODE_NAME={case.hosts[r]} POD_NAME={pod_name(case, r)} NODE_RANK={r}"
            )
        log.add(
            t + 2 + r * 0.01,
            r,
            f"W{log.local(t, '%m%d %H:%M:%S')}.000000 {1200 + r} torch/distributed/run.py:793] "
            "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default",
        )
    world = n * case.gpus
    fw = case.framework
    t1 = t + 25
    if fw == "torchtitan":
        log.msg(t1, 0, f"Starting job: {case.model} training")
        log.msg(t1 + 1, 0, f"Building 1-D device mesh with ['dp_shard'], [{world}]")
        log.msg(
            t1 + 5,
            0,
            "Checkpointing active. Checkpoints will be loaded from and saved to ./outputs/checkpoint",
        )
        if restored_from is not None:
            log.msg(t1 + 9, 0, f"Loading the checkpoint at step {restored_from}.")
            log.msg(t1 + 30, 0, "Finished loading the checkpoint in 21.47 seconds.")
        log.msg(tl.begin - 1, 0, f"Training starts at step {tl.steps[0].n if tl.steps else 1}.")
    elif fw == "nemo":
        log.msg(t1, 0, f"Experiments will be logged at /results/{case.model}")
        log.msg(t1 + 2, 0, f"Rank 0 has data parallel group : {list(range(0, world, 8))[:8]}")
        log.msg(
            t1 + 3, 0, f"World size: {world}, tensor_model_parallel_size: 8, pipeline_model_parallel_size: 1"
        )
        if restored_from is not None:
            log.msg(
                t1 + 20,
                0,
                f"Restoring states from the checkpoint path at /results/checkpoints/step={restored_from}-last.ckpt",
            )
            log.msg(t1 + 45, 0, "Restored all states from the checkpoint at /results/checkpoints/last")
    else:
        log.msg(
            t1,
            0,
            f"GPU available: True (cuda), used: True; {n} nodes x {case.gpus} devices, strategy=FSDPStrategy",
        )
        log.msg(t1 + 2, 0, f"Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/{world}")
        if restored_from is not None:
            log.msg(
                t1 + 20, 0, f"Restoring states from the checkpoint path at /ckpt/step={restored_from}.ckpt"
            )
            log.msg(t1 + 41, 0, f"Restored all states from the checkpoint at /ckpt/step={restored_from}.ckpt")


def step_line(log: Log, s: Step, every: int, tokens: float) -> None:
    """One step as the framework prints it (only every `every` steps)."""
    if s.n % every:
        return
    fw = log.case.framework
    tps = tokens / s.secs  # per device
    world = len(log.case.hosts) * log.case.gpus
    loss = "nan" if s.loss != s.loss else f"{s.loss:.4f}"
    if fw == "torchtitan":
        log.msg(
            s.t,
            0,
            f"step: {s.n:>5}  loss: {loss:>8}  grad_norm: {s.grad:7.4f}  memory: 61.87GiB(78.12%)  "
            f"tps: {tps:,.0f}  tflops: {tps * 0.048:.2f}  mfu: {tps * 0.048 / 9.89:.2f}%",
        )
    elif fw == "nemo":
        log.add(
            s.t,
            0,
            f"Training epoch 0, iteration {s.n}/{log.case.rng.choice((9999,))} | lr: 0.0003 | "
            f"global_batch_size: 512 | global_step: {s.n} | reduced_train_loss: {loss} | "
            f"train_step_timing in s: {s.secs:.3f} | consumed_samples: {512 * (s.n + 1)}",
        )
    else:
        log.msg(
            s.t,
            0,
            f"step={s.n} loss={loss} grad_norm={s.grad:.3f} step_time={s.secs:.2f}s "
            f"tokens_per_sec={tps * world:,.0f}",
        )


def save_lines(log: Log, a: float, b: float, step: int, done: bool) -> None:
    """A checkpoint save as the framework reports it (a save cut short reports only its start, if anything)."""
    fw = log.case.framework
    if fw == "torchtitan":
        log.msg(a, 0, "Saving the checkpoint (or staging if async is enabled).")
    if not done:
        return
    if fw == "torchtitan":
        log.msg(b - 0.1, 0, "[GC] GC collection invoked by checkpointer. 0.05 seconds.")
        log.msg(
            b, 0, f"Finished saving the checkpoint (or staging if async is enabled)in {b - a:.2f} seconds."
        )
    elif fw == "nemo":
        log.msg(
            b,
            0,
            f"Global Checkpoint Save : Rank: 0 : Iteration: {step} : Start time: {a:.3f}s : "
            f"Save duration: {b - a:.3f}s",
        )
    else:
        log.msg(
            b,
            0,
            f"Epoch 0, global step {step}: 'train_loss' reached a new best, saving model to "
            f"'/ckpt/step={step}.ckpt' as top 3",
        )


def eval_lines(log: Log, a: float, b: float, step: int, loss: float) -> None:
    log.msg(b, 0, f"validation at step {step}: val_loss={loss + 0.07:.4f} ({b - a:.1f}s)")
