"""Corpus E: the job log in one of five trainers' formats, in the cluster's local time (#10).

Megatron-LM (iteration lines from the last rank, srun -l per-GPU task labels), HF Trainer (dict lines and
tqdm bars, torchrun `[rankN]:` prefixes), JAX/absl, DeepSpeed (pdsh `host: ` prefixes) and MaxText
(`completed step:` from every node). A log is a list of (time, text) events sorted by time.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field

from bench.outside._e_plan import Case, compress
from bench.outside._e_time import Step, Timeline

ZONES = ((0, "UTC"), (-8, "PST"), (-5, "EST"), (1, "CET"), (9, "KST"), (-7, "MST"))


@dataclass
class Log:
    """Events of a job log and how its lines are dated and prefixed."""

    case: Case
    tl: Timeline
    rng: random.Random
    tz: tuple[int, str]
    job_id: int
    events: list[tuple[float, int, str]] = field(default_factory=list)

    def add(self, t: float, text: str) -> None:
        self.events.append((t, len(self.events), text))

    def local(self, t: float, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
        return time.strftime(fmt, time.gmtime(t + self.tz[0] * 3600))

    def absl(self, t: float, sev: str = "I", where: str = "train.py:412") -> str:
        micro = int((t % 1) * 1e6)
        return f"{sev}{self.local(t, '%m%d %H:%M:%S')}.{micro:06d} {140213 + self.job_id % 97} {where}] "

    @property
    def world(self) -> int:
        return len(self.case.hosts) * len(self.case.gpus)

    def label(self, rank: int) -> str:
        """srun -l task label, right-aligned to the widest task id (one task per GPU)."""
        width = len(str(self.world - 1))
        return f"{rank:>{width}}: "

    def node_label(self, node: int) -> str:
        width = len(str(len(self.case.hosts) - 1))
        return f"{node:>{width}}: "

    def render(self) -> str:
        return "".join(text + "\n" for _, _, text in sorted(self.events))


def header(lg: Log) -> None:
    c, tl = lg.case, lg.tl
    t = tl.start
    nodes = compress(c.hosts)
    date = time.strftime(f"%a %b %d %H:%M:%S {lg.tz[1]} %Y", time.gmtime(t + lg.tz[0] * 3600))
    name = {
        "megatron": "gpt-pretrain",
        "hf": "hf-finetune",
        "jax": "jax-lm",
        "deepspeed": "ds-train",
        "maxtext": "JAX-llama2-70b",
    }[c.log_format]
    lines = [
        date,
        f"SLURM_JOB_ID={lg.job_id}",
        f"SLURM_JOB_NAME={name}",
        f"SLURM_JOB_NODELIST={nodes}",
        f"SLURM_NNODES={len(c.hosts)}",
        f"SLURM_GPUS_ON_NODE={len(c.gpus)}",
        f"CUDA_VISIBLE_DEVICES={','.join(map(str, c.gpus))}",
        f"MASTER_ADDR={c.hosts[0]} MASTER_PORT={29500 + lg.job_id % 300}",
        f"Job start: {date}",
    ]
    if c.log_format == "maxtext":
        lines[1:4] = [
            f"JOB_ID={lg.job_id}",
            f"JOB_NAME={name}",
            f"NNODES={len(c.hosts)}",
            f"JOB_NODELIST={nodes}",
        ]
    for i, line in enumerate(lines):
        lg.add(t + i * 0.001, line)


def _rank_of_node(lg: Log, node: int) -> int:
    return node * len(lg.case.gpus)


def startup(lg: Log) -> None:
    c, tl, t = lg.case, lg.tl, lg.tl.start + 20
    fmt = c.log_format
    if fmt == "megatron":
        lg.add(
            t,
            f"{lg.label(0)}using world size: {lg.world}, data-parallel size: {lg.world // 8}, "
            "tensor-model-parallel size: 4, pipeline-model-parallel size: 2",
        )
        lg.add(t + 1, f"{lg.label(0)}> initializing torch distributed ...")
        lg.add(t + 2, f"{lg.label(0)}    log_interval .................................... 10")
        lg.add(
            t + 2.1,
            f"{lg.label(0)}    save_interval ................................... {tl.ckpt_every or 10000}",
        )
        lg.add(
            t + 2.2,
            f"{lg.label(0)}    eval_interval ................................... {tl.eval_every or 10000}",
        )
    elif fmt == "hf":
        lg.add(
            t, f"[INFO|trainer.py:2128] {lg.local(t)},{lg.job_id % 1000:03d} >> ***** Running training *****"
        )
        lg.add(t + 0.1, f"[INFO|trainer.py:2130] {lg.local(t)},{lg.job_id % 1000:03d} >>   Num Epochs = 3")
        lg.add(
            t + 0.2,
            f"[INFO|trainer.py:2134] {lg.local(t)},{lg.job_id % 1000:03d} >>   Total optimization steps = 20000",
        )
    elif fmt == "deepspeed":
        for n, host in enumerate(c.hosts[: min(4, len(c.hosts))]):
            lg.add(
                t + n * 0.2,
                f"{host}: [{lg.local(t)},{n:03d}] [INFO] [launch.py:146:main] "
                f"WORLD INFO DICT: {{'{host}': {c.gpus}}}",
            )
        lg.add(
            t + 2,
            f"{c.hosts[0]}: [{lg.local(t + 2)},512] [INFO] [config.py:1000:print] "
            f"  checkpoint_interval ........... {tl.ckpt_every or 0}",
        )
    else:
        for n in range(len(c.hosts)):
            pre = lg.node_label(n) + lg.absl(t + n * 0.01, where="main.py:77")
            lg.add(
                t + n * 0.01,
                f"{pre}Initializing jax.distributed with coordinator {c.hosts[0]}:"
                f"{1234 + lg.job_id % 500}, num_processes={len(c.hosts)}, process_id={n}",
            )
        if fmt == "maxtext":
            for n in range(len(c.hosts)):
                lg.add(t + 1 + n * 0.01, f"{lg.node_label(n)}Config param steps: 200000")
                lg.add(
                    t + 1 + n * 0.01,
                    f"{lg.node_label(n)}Config param checkpoint_period: {tl.ckpt_every or 10000}",
                )
                if tl.hb_timeout:
                    lg.add(
                        t + 1 + n * 0.01,
                        f"{lg.node_label(n)}Config param "
                        f"jax_distributed_heartbeat_timeout_seconds: {tl.hb_timeout}",
                    )
        elif tl.hb_timeout:
            lg.add(
                t + 2,
                f"{lg.node_label(0)}{lg.absl(t + 2, where='main.py:81')}"
                f"jax.distributed heartbeat_timeout_seconds={tl.hb_timeout}",
            )
    _restore_lines(lg, tl.train_start - 30)


def _restore_lines(lg: Log, t: float) -> None:
    c, first = lg.case, lg.tl.first_step
    if c.role != "b":
        if c.log_format == "maxtext":
            lg.add(t, f"{lg.node_label(0)}No existing checkpoints found, not restoring checkpoint.")
        return
    s = first - 1 if c.log_format in ("maxtext",) else first
    text = {
        "megatron": f"{lg.label(0)} loading checkpoint from /lustre/ckpt/gpt at iteration {s}",
        "hf": f"[INFO|trainer.py:2156] {lg.local(t)},004 >>   Continuing training from global step {s}",
        "deepspeed": f"{c.hosts[0]}: [{lg.local(t)},100] [INFO] [engine.py:2875:_load_checkpoint] rank: 0 loading "
        f"checkpoint: /ckpt/global_step{s}/mp_rank_00_model_states.pt",
        "jax": f"{lg.node_label(0)}{lg.absl(t, where='checkpoints.py:1077')}Restoring checkpoint from step {s}.",
        "maxtext": f"{lg.node_label(0)}restoring from this run's directory step {s}",
    }[c.log_format]
    lg.add(t, text)
    if c.log_format == "megatron":
        lg.add(
            t + 4,
            f"{lg.label(0)}  successfully loaded checkpoint from /lustre/ckpt/gpt [ t 1/4, p 1/2 ] "
            f"at iteration {s}",
        )


def _fmt_loss(v: float, style: str) -> str:
    if v != v:
        return "nan" if style != "megatron" else "nan"
    return f"{v:.6E}" if style == "megatron" else f"{v:.4f}"


def step_lines(lg: Log) -> None:
    c, tl = lg.case, lg.tl
    fmt, every = c.log_format, (10 if c.log_format in ("megatron", "hf", "deepspeed") else 1)
    window: list[Step] = []
    for s in tl.steps:
        window.append(s)
        if (s.n + 1) % every and s is not tl.steps[-1]:
            continue
        ms = 1000 * sum(w.seconds for w in window) / len(window)
        window = []
        if fmt == "megatron":
            last = lg.world - 1
            skipped = int(s.grad_norm > 50) if s.grad_norm == s.grad_norm else 1
            lg.add(
                s.end,
                f"{lg.label(last)} [{lg.local(s.end)}] iteration {s.n + 1:>8}/  500000 | consumed samples: "
                f"{(s.n + 1) * 512:>12} | elapsed time per iteration (ms): {ms:.1f} | throughput per GPU "
                f"(TFLOP/s/GPU): {430 * lg.tl.step_s * 1000 / ms:.1f} | learning rate: "
                f"{_lr(s.n):.6E} | global batch size:   512 | lm loss: {_fmt_loss(s.loss, fmt)} | "
                f"loss scale: 1.0 | grad norm: {s.grad_norm:.3f} | number of skipped iterations: "
                f"{skipped:>3} | number of nan iterations: {int(s.loss != s.loss):>3} |",
            )
        elif fmt == "hf":
            epoch = (s.n + 1) / 20000 * 3
            lg.add(
                s.end,
                f"{{'loss': {_fmt_loss(s.loss, fmt)}, 'grad_norm': {s.grad_norm:.4f}, "
                f"'learning_rate': {_lr(s.n):.4e}, 'epoch': {epoch:.2f}}}",
            )
            left = (20000 - s.n - 1) * ms / 1000
            lg.add(
                s.end + 0.01,
                f"{int(100 * (s.n + 1) / 20000):>3}%|          | {s.n + 1}/20000 "
                f"[{_hms(s.end - tl.train_start)}<{_hms(left)}, {ms / 1000:.2f}s/it]",
            )
        elif fmt == "deepspeed":
            pre = f"{c.hosts[0]}: [{lg.local(s.end)},{int(s.end % 1 * 1000):03d}] [INFO] "
            lg.add(
                s.end,
                f"{pre}[logging.py:96:log_dist] [Rank 0] step={s.n + 1}, skipped=0, lr=[{_lr(s.n):.6e}], "
                "mom=[(0.9, 0.95)]",
            )
            lg.add(
                s.end + 0.001,
                f"{c.hosts[0]}: steps: {s.n + 1} loss: {_fmt_loss(s.loss, 'hf')} iter time (s): "
                f"{ms / 1000:.3f} samples/sec: {512 / (ms / 1000):.3f}",
            )
        else:
            _jax_step(lg, s)


def _jax_step(lg: Log, s: Step) -> None:
    c = lg.case
    nodes = range(len(c.hosts)) if c.log_format == "maxtext" and len(c.hosts) <= 16 else [0]
    for n in nodes:
        t = s.end + lg.rng.uniform(0, 0.4)
        if c.log_format == "maxtext":
            tok = 4096 * 4 / s.seconds * 8
            lg.add(
                t,
                f"{lg.node_label(n)}{lg.absl(t, where='metric_logger.py:190')}completed step: {s.n}, "
                f"seconds: {s.seconds:.3f}, TFLOP/s/device: {380 * lg.tl.step_s / s.seconds:.3f}, "
                f"Tokens/s/device: {tok:.3f}, total_weights: 1048576, loss: {_fmt_loss(s.loss, 'jax')}",
            )
        else:
            lg.add(
                t,
                f"{lg.node_label(n)}{lg.absl(t)}step {s.n}: loss={_fmt_loss(s.loss, 'jax')} "
                f"grad_norm={s.grad_norm:.3f} step_time={s.seconds:.3f}s lr={_lr(s.n):.3e}",
            )


def _ckpt_text(lg: Log, lo: float, hi: float, step: int) -> tuple[str, str]:
    c = lg.case
    return {
        "megatron": (
            f"{lg.label(0)}saving checkpoint at iteration {step + 1:>8} to /lustre/ckpt/gpt in torch_dist format",
            f"{lg.label(0)}  successfully saved checkpoint from iteration {step + 1:>8} to "
            "/lustre/ckpt/gpt [ t 1/4, p 1/2 ]",
        ),
        "hf": (
            f"[INFO|trainer.py:3478] {lg.local(lo)},220 >> Saving model checkpoint to /ckpt/checkpoint-{step + 1}",
            "",
        ),
        "deepspeed": (
            f"{c.hosts[0]}: [{lg.local(lo)},300] [INFO] [engine.py:3431:_save_checkpoint] "
            f"Saving model checkpoint: /ckpt/global_step{step + 1}/mp_rank_00_model_states.pt",
            f"{c.hosts[0]}: [{lg.local(hi)},301] [INFO] [torch_checkpoint_engine.py:33:commit] "
            f"[Torch] Checkpoint global_step{step + 1} is ready now!",
        ),
        "jax": (
            f"{lg.node_label(0)}{lg.absl(lo, where='checkpoints.py:610')}Saving checkpoint for step {step + 1}",
            "",
        ),
        "maxtext": (
            f"{lg.node_label(0)}{lg.absl(lo, where='checkpointing.py:288')}Saved a checkpoint at step {step}.",
            "",
        ),
    }[c.log_format]


def _eval_text(lg: Log, lo: float, hi: float, step: int) -> str:
    c = lg.case
    val = 2.2 + lg.rng.random() * 0.3
    return {
        "megatron": f"{lg.label(lg.world - 1)} validation loss at iteration {step + 1} | lm loss value: "
        f"{val:.6E} | lm loss PPL: {math.exp(val):.6E} | ",
        "hf": f"{{'eval_loss': {val:.4f}, 'eval_runtime': {hi - lo:.2f}, 'eval_samples_per_second': "
        f"{4096 / (hi - lo):.3f}, 'epoch': {(step + 1) / 20000 * 3:.2f}}}",
        "deepspeed": f"{c.hosts[0]}: eval step {step + 1}: eval_loss={val:.4f}",
        "jax": f"{lg.node_label(0)}{lg.absl(hi, where='eval.py:95')}eval at step {step}: loss={val:.4f}",
        "maxtext": f"{lg.node_label(0)}eval metrics after step: {step}, loss={val:.3f}, total_weights=8388608",
    }[c.log_format]


def phase_lines(lg: Log) -> None:
    """Checkpoint saves (begin and, where the format says so, end) and evaluation results."""
    for lo, hi, kind in lg.tl.phases:
        step = max((s.n for s in lg.tl.steps if s.end <= lo + 0.01), default=lg.tl.first_step)
        if kind == "ckpt":
            begin, done = _ckpt_text(lg, lo, hi, step)
            lg.add(lo + 0.5, begin)
            if done and hi < lg.tl.end:
                lg.add(hi, done)
        elif hi < lg.tl.end:
            lg.add(hi, _eval_text(lg, lo, hi, step))


def _lr(n: int) -> float:
    return 1.5e-4 * min(1.0, (n + 1) / 200)


def _hms(sec: float) -> str:
    sec = max(0, int(sec))
    return (
        f"{sec // 3600:02d}:{sec % 3600 // 60:02d}:{sec % 60:02d}"
        if sec >= 3600
        else f"{sec // 60:02d}:{sec % 60:02d}"
    )
