"""Other log grammars a generated job's log can be written in (`generate_job(..., log_format=...)`), as the
real tools print them, so the triage's readers of these formats are exercised end to end:

- ``kubectl-titan``: every pod's lines merged by ``kubectl logs --prefix --timestamps`` (``[pod/NAME/pytorch]
  2026-06-02T02:33:11.957133056Z <line>``, UTC, nanoseconds), each pod first echoing ``NODE_NAME=<host>
  POD_NAME=<pod> NODE_RANK=<rank>``; rank 0 logs torchtitan's step lines with its own stamp in local time
  (UTC+5:30): ``[rank0]:[titan] 2026-06-02 08:00:00,000 - root - INFO - step:    12  loss:  9.6370 ...``;
- ``kubectl-nemo``: the same prefix; rank 0 logs NeMo's (Megatron-core through Lightning) undated
  ``Training epoch 0, iteration 12/9999 | ... | reduced_train_loss: 9.5 | train_step_timing in s: 4.662 | ...``;
- ``srun-nemo``: NeMo's undated step lines behind srun's task label (``0: ``), the seed's other lines as they are;
- ``srun-hf``: Hugging Face Trainer's behind srun's task label: ``***** Running training *****`` and ``Total
  optimization steps = N`` in its logger's format (``[INFO|trainer.py:2128] 2026-06-14 11:50:54,123 >> ``, UTC),
  then per step its undated dict (``{'loss': 4.4992, 'grad_norm': 37.113, ...}``) and tqdm's bar (``280/20000
  [30:57<32:28:34, 5.93s/it]``), whose clock starts with the training loop, 2-6 minutes after "Running
  training" (the data loaders' and the model's warm-up between): a bar placed from that line puts every step
  minutes early;
- ``slurm-nemo``: NeMo as a plain Slurm script runs it: the script's ``Start: Wed Jun 24 05:04:06 CEST 2026``
  (local time, UTC+2) first, no dated line before the steps (no barrier), every step undated with its own
  duration (``train_step_timing in s``: the step alone, without the save or validation after the one before),
  Megatron-core's ``Global Checkpoint Save : Rank: 0 : Iteration: N : Start time: <unix>s : Save duration:
  <s>s``, NeMo's dated (local) ``validation at step N: val_loss=X (Ys)`` after each evaluation
  (`eval_pauses`, `sparse_evals`) and ```Trainer.fit` stopped: `max_steps=N` reached.`` at the end.

These are PyTorch trainers: a heartbeat kill is PyTorch's NCCL heartbeat monitor's (`torch_heartbeat_kill`),
not the JAX coordinator's. Every other line of the log stays in the seed's grammar.
"""

from __future__ import annotations

import datetime as dt

LOG_FORMATS = ("kubectl-titan", "kubectl-nemo", "srun-nemo", "slurm-nemo", "srun-hf")
_TITAN_TZ = dt.timezone(dt.timedelta(hours=5, minutes=30))
#: the machines' zone of a format whose job script prints it (slurm-nemo's `Start:` line), seconds east of UTC
_LOCAL_TZ = {"slurm-nemo": 7200.0}
_CEST = dt.timezone(dt.timedelta(seconds=_LOCAL_TZ["slurm-nemo"]))


def check(fmt: str) -> None:
    """Raise ValueError for a grammar this module does not write ("" is the seed's)."""
    if fmt and fmt not in LOG_FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; known: {', '.join(LOG_FORMATS)}")


def kubectl(fmt: str) -> bool:
    return fmt.startswith("kubectl-")


def pod_name(job_id: str, rank: int) -> str:
    return f"{job_id.lower()}-master-0" if rank == 0 else f"{job_id.lower()}-worker-{rank - 1}"


def pod_prefix(job_id: str, rank: int, ts: float) -> str:
    """kubectl's ``--prefix --timestamps`` before one line of the pod of node rank `rank`."""
    stamp = dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return f"[pod/{pod_name(job_id, rank)}/pytorch] {stamp}{int(ts * 1e9) % 1000:03d}Z "


def pod_env(job_id: str, rank: int, host: str) -> str:
    return f"NODE_NAME={host} POD_NAME={pod_name(job_id, rank)} NODE_RANK={rank}"


def local_tz(fmt: str) -> float:
    """Seconds east of UTC of the local stamps a log of format `fmt` prints (absl's, c10's, NeMo's)."""
    return _LOCAL_TZ.get(fmt, 0.0)


def nemo_dated(ts: float, text: str) -> str:
    """NeMo's logger line at `ts`, in the machine's local time (slurm-nemo: UTC+2)."""
    return f"[NeMo I {dt.datetime.fromtimestamp(ts, _CEST):%Y-%m-%d %H:%M:%S} nemo_logging:393] {text}"


def start_line(ts: float) -> str:
    """The job script's ``echo "Start: $(date)"`` (slurm-nemo), in the local zone."""
    d = dt.datetime.fromtimestamp(ts, _CEST)
    return f"Start: {d:%a %b} {d.day:>2} {d:%H:%M:%S} CEST {d.year}"


def save_line(step: int, began: float, took: float) -> str:
    """Megatron-core's report of a checkpoint save under NeMo (slurm-nemo): its start in unix seconds."""
    return f"Global Checkpoint Save : Rank: 0 : Iteration: {step} : Start time: {began:.3f}s : Save duration: {took:.3f}s"


def step_line(fmt: str, ts: float, step: int, secs: float, loss: float, total: int) -> str:
    """Rank 0's line for one completed step in the trainer's own grammar."""
    if fmt == "kubectl-titan":
        local = dt.datetime.fromtimestamp(ts, _TITAN_TZ)
        stamp = local.strftime("%Y-%m-%d %H:%M:%S,") + f"{local.microsecond // 1000:03d}"
        return (
            f"[rank0]:[titan] {stamp} - root - INFO - step: {step:5d}  loss: {loss:8.4f}  grad_norm:  1.2345  "
            f"memory: 61.87GiB(78.12%)  tps: 5,885  tflops: 282.49  mfu: 28.56%"
        )
    return (
        f"Training epoch 0, iteration {step}/{total} | lr: 0.0003 | global_batch_size: 512 | global_step: {step} | "
        f"reduced_train_loss: {loss:.4f} | train_step_timing in s: {secs:.3f} | consumed_samples: {(step + 1) * 512}"
    )


def hf_stamp(ts: float) -> str:
    """Hugging Face's logger format before one line (``[INFO|trainer.py:2128] 2026-06-14 11:50:54,123 >> ``)."""
    d = dt.datetime.fromtimestamp(ts, dt.UTC)
    return f"[INFO|trainer.py:2128] {d:%Y-%m-%d %H:%M:%S},{d.microsecond // 1000:03d} >> "


def hf_start(ts: float, total: int) -> list[str]:
    """The Trainer's lines as its training loop begins."""
    return [
        hf_stamp(ts) + "***** Running training *****",
        hf_stamp(ts) + f"  Total optimization steps = {total:,}",
    ]


def hf_step(step: int, total: int, loss: float, grad: float, elapsed: float, secs: float) -> list[str]:
    """The Trainer's undated dict for one step and tqdm's bar after it (`elapsed`: by the bar's own clock)."""
    left = max(0.0, (total - step) * secs)
    return [
        f"{{'loss': {loss:.4f}, 'grad_norm': {grad:.4f}, 'learning_rate': 0.0003, 'epoch': {step / total:.2f}}}",
        f"{100 * step // total:3d}%|          | {step}/{total} [{_clock(elapsed)}<{_clock(left)}, {secs:.2f}s/it]",
    ]


def _clock(s: float) -> str:
    m, sec = divmod(int(max(0.0, s)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


_STUCK = (
    "ProcessGroupNCCL's watchdog got stuck for {timeout} seconds without making progress in monitoring enqueued "
    "collectives. This typically indicates a NCCL/CUDA API hang blocking the watchdog, and could be triggered by "
    "another thread holding the GIL inside a CUDA api, or other deadlock-prone behaviors.If you suspect the "
    "watchdog is not actually stuck and a longer timeout would help, you can either increase the timeout "
    "(TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC) to a larger value or disable the heartbeat monitor "
    "(TORCH_NCCL_ENABLE_MONITORING=0).If either of aforementioned helps, feel free to file an issue to PyTorch "
    "about the short timeout or false positive abort; otherwise, please attempt to debug the hang."
)


def _c10(sev: str, ts: float, where: str, tz: float = 0.0) -> str:
    """c10's log header in the machine's local time (`tz` seconds east of UTC; the seed's: UTC):
    ``[E0301 10:20:00.086705123 ProcessGroupNCCL.cpp:1423] ``."""
    d = dt.datetime.fromtimestamp(ts + tz, dt.UTC)
    return f"[{sev}{d:%m%d %H:%M:%S}.{d.microsecond:06d}{int(ts * 1e9) % 1000:03d} {where}] "


def torch_heartbeat_kill(
    kill: float, grank: int, timeout: int, pid: int, tz: float = 0.0
) -> list[tuple[float, str]]:
    """Return (time, line) of PyTorch's NCCL heartbeat monitor killing global rank `grank` at `kill` (its
    watchdog made no progress for `timeout` s), as ProcessGroupNCCL.cpp and torchrun print it: the monitor's
    error behind torchrun's rank label, its fatal exit once the debug info is dumped, then the agent's report
    of the aborted worker (SIGABRT, exitcode -6)."""
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {grank}] "
    agent = dt.datetime.fromtimestamp(kill + 21.0 + tz, dt.UTC)
    return [
        (
            kill,
            f"[rank{grank}]:"
            + _c10("E", kill, "ProcessGroupNCCL.cpp:1423", tz)
            + pg
            + "Heartbeat monitor timed out! "
            "Process will be terminated after dumping debug info. workMetaList_.size()=1",
        ),
        (
            kill + 20.0,
            f"[rank{grank}]:"
            + _c10("F", kill + 20.0, "ProcessGroupNCCL.cpp:1224", tz)
            + pg
            + _STUCK.format(timeout=timeout),
        ),
        (
            kill + 21.0,
            f"E{agent:%m%d %H:%M:%S}.{agent.microsecond:06d} {pid} torch/distributed/elastic/multiprocessing/"
            f"api.py:869] failed (exitcode: -6) local_rank: 0 (pid: {pid + 1}) of binary: /usr/bin/python3",
        ),
    ]
