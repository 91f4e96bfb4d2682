"""Corpus D: the job log as people have it (srun labels, torchrun prefixes, glog headers, UTC offsets).

Styles: `glog` (a JAX trainer under `srun -l`: `3: I1124 12:00:05.123456 140551 train.py:190] ...`, UTC),
`torchrun` (torchrun under srun: `0: [default0]:[2026-11-24T13:00:05.123+01:00] ...`, local time with its
offset; PyTorch's C++ lines `[rank3]:[E1124 13:10:05.123456123 ProcessGroupNCCL.cpp:616] ...` in local time),
`k8s` (torchrun in a pod: no srun label). Events come from the story: (offset, host index | None, kind, info).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from bench.outside._d_timeline import Plan, Timeline, step_losses

UTC = dt.UTC


class LogWriter:
    """Formats one case's lines in its style."""

    def __init__(self, plan: Plan, tl: Timeline) -> None:
        self.p, self.tl = plan, tl
        self.tz = dt.timezone(dt.timedelta(hours=plan.extra.get("tz_hours", 0)))
        self.lines: list[tuple[float, str]] = []
        self.n = len(plan.hosts)
        self.width = len(str(self.n - 1))

    def when(self, off: float) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.p.t0 + off, tz=UTC)

    def label(self, task: int) -> str:
        bare = self.p.log_style == "k8s" or self.p.layout.style == "k8s"  # no srun in a pod
        return "" if bare else f"{task:>{self.width}}: "

    def app(self, off: float, task: int, text: str, sev: str = "I", local: int = 0) -> None:
        """A line of the trainer (rank `task` of node `task`, local rank `local`)."""
        t = self.when(off)
        if self.p.log_style == "glog":
            head = f"{sev}{t:%m%d %H:%M:%S}.{t.microsecond:06d} {140551 + task} train.py:{190 + len(text) % 400}] "
            line = f"{self.label(task)}{head}{text}"
        else:
            lt = t.astimezone(self.tz)
            stamp = lt.isoformat(timespec="milliseconds")
            line = f"{self.label(task)}[default{local}]:[{stamp}] {text}"
        self.lines.append((off, line))

    def c10(self, off: float, task: int, local: int, sev: str, where: str, text: str) -> None:
        """A PyTorch C++ line (`[rank3]:[E1124 13:10:05.123456123 ProcessGroupNCCL.cpp:616] ...`), local time."""
        t = self.when(off).astimezone(self.tz)
        rank = task * self.p.gpus + local
        head = f"[rank{rank}]:[{sev}{t:%m%d %H:%M:%S}.{t.microsecond:06d}123 {where}] "
        pre = "" if self.p.log_style == "k8s" else f"{self.label(task)}[default{local}]:"
        self.lines.append((off, pre + head + text))

    def raw(self, off: float, text: str) -> None:
        self.lines.append((off, text))

    def slurm_time(self, off: float) -> str:
        return self.when(off).astimezone(self.tz).strftime("%Y-%m-%dT%H:%M:%S")


def header(w: LogWriter, job_id: str) -> list[str]:
    p = w.p
    steps = w.tl.total_steps
    args = f"steps={steps} checkpoint_period={p.ckpt_period} per_device_batch_size=2"
    out = [
        f"JOB_ID={job_id}",
        f"JOB_NAME=LLM-{p.extra.get('model', 'llama3-70b')}-steps_{steps}",
        f"NNODES={len(p.hosts)}",
        f"JOB_NODELIST={','.join(h.name for h in p.hosts)}",
        f'PASSTHROUGH_ARGS="{args}"',
        f"MODEL_NAME={p.extra.get('model', 'llama3-70b')}",
        "== Training BEGIN (no timeout) ==",
    ]
    return out


def config_lines(w: LogWriter) -> None:
    p = w.p
    conf = {
        "steps": w.tl.total_steps,
        "checkpoint_period": p.ckpt_period,
        "enable_checkpointing": "True",
        "per_device_batch_size": 2,
        "log_period": 1,
        "jax_distributed_heartbeat_timeout_seconds": p.hb_timeout or 300,
        "eval_interval": p.eval_period or -1,
    }
    for k, v in sorted(conf.items()):
        w.app(1.0, 0, f"Config param {k}: {v}")
    for task, h in enumerate(w.p.hosts[: min(4, w.n)]):
        w.app(
            5.0 + task,
            task,
            f"{h.name}:{4100 + task}:{4100 + task} [0] NCCL INFO Bootstrap : Using eth0:{h.ip}<0>",
        )
        w.app(
            5.5 + task,
            task,
            f"{h.name}:{4100 + task}:{4190 + task} [0] NCCL INFO NET/IB : Using [0]{h.nics[0]}:1/IB ; OOB eth0:{h.ip}<0>",
        )
    if p.log_style != "glog":
        w.c10(
            8.0,
            0,
            0,
            "W",
            "ProcessGroupNCCL.cpp:4561",
            "[PG ID 0 PG GUID 0 Rank 0]  using GPU 0 to perform barrier as devices used by this process are currently unknown. This can potentially cause a hang if this rank to GPU mapping is incorrect.",
        )
    w.app(
        p.setup_s - 5,
        0,
        "No existing checkpoints found, not restoring checkpoint."
        if not p.first_step
        else f"restoring from this run's directory step {p.first_step - 1}",
    )


def step_lines(w: LogWriter) -> None:
    tl = w.tl
    losses = step_losses(w.p, tl.step_n)
    tokens = w.p.extra.get("tokens_per_step", 4.0e6) / (len(w.p.hosts) * w.p.gpus)
    for t, n, d, loss in zip(tl.step_t, tl.step_n, tl.step_dur, losses, strict=True):
        text = f"completed step: {n}, seconds: {d:.3f}, TFLOP/s/device: {410.0 / d * w.p.step_s:.3f}, Tokens/s/device: {tokens / d:.3f}, total_weights: 1048576, loss: {loss:.3f}"
        w.app(t, 0, text)
    for a, _, n in tl.saves:
        w.app(a + 1, 0, f"Saved a checkpoint at step {n}.")
    for _a, b, n in tl.evals:
        w.app(
            b,
            0,
            f"eval metrics after step: {n}, loss={step_losses(w.p, [n])[0] + 0.04:.3f}, total_weights=524288",
        )
    if tl.restart:
        kill, resume, step = tl.restart
        w.raw(
            kill,
            f"[{w.slurm_time(kill)}] torch.distributed.elastic.agent.server.api: [WARNING] [default] Detected 1 new nodes from group_rank=0; will restart worker group",
        )
        w.raw(
            kill + 1,
            f"[{w.slurm_time(kill + 1)}] torch.distributed.elastic.agent.server.api: [INFO] [default] Stopping worker group",
        )
        w.app(resume - 10, 0, f"restoring from this run's directory step {step - 1}")


def summary(w: LogWriter, job_id: str) -> None:
    p = w.p
    end = w.tl.job_end
    wall = int(end + p.extra.get("pre_log_s", 60))  # the log starts a minute before the data
    status = "SUCCESS (exit 0)" if p.status == "completed" else f"FAILED (exit {p.exit_code})"
    w.raw(end + 2, "========================== JOB SUMMARY ==========================")
    w.raw(end + 2.1, f"  Job:    {job_id} (LLM-{p.extra.get('model', 'llama3-70b')})")
    w.raw(end + 2.2, f"  Nodes:  {len(p.hosts)}")
    w.raw(end + 2.3, f"  Wall:   {wall // 3600}h {wall % 3600 // 60}m {wall % 60}s")
    w.raw(end + 2.4, f"  Status: {status}")
    w.raw(end + 2.5, "=================================================================")


def write_log(plan: Plan, tl: Timeline, events: list, path: Path) -> None:
    """The whole log: header, config, NCCL init, steps, saves, the story's events, the summary."""
    from bench.outside._d_events import render_event

    w = LogWriter(plan, tl)
    job_id = plan.extra.get("job_id", "81234")
    config_lines(w)
    step_lines(w)
    for ev in events:
        render_event(w, job_id, *ev)
    if plan.extra.get("summary", True):
        summary(w, job_id)
    w.lines.sort(key=lambda x: x[0])
    path.write_text("\n".join(header(w, job_id) + [line for _, line in w.lines]) + "\n")
