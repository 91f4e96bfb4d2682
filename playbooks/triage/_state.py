"""The scan's working state and its two small helpers (dating an absl header, recording a match)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._bar import BarAnchor
from ._events import EventScan
from ._gpus_env import GpuEnv
from ._kubectl import Pods
from ._model import MAX_MATCHES_PER_CLASS, Match


@dataclass
class _State:
    """What the scan has read so far.

    Attributes:
        steps: step -> (seconds, TGS, loss, time, line) of the lowest rank that logged it; step_rank: that rank.
        matches: signature hits by class; node_exits: (host, exit status, line, text) of each NODE_EXIT and
        each srun report of a host's tasks that ended (`srun: error: <host>: task 3: Exited with exit code 1`).
        summary_status: (SUCCESS|FAILED, exit status, reason) of the JOB SUMMARY; summary_seen: it began.
        wall_s, saved, restored: the summary's wall time, checkpoint steps saved, the step restored from.
        accused_tasks, in_heartbeat: task ids a heartbeat timeout named, and whether its list is being read.
        procs_per_node: trainer processes a node (1-GPU-per-process mode); training_started: past the barrier.
        year: (year, month) the absl dates fall in; start_time, barrier_time, cancel_time: from the log;
        cancel_line: the line of the first `CANCELLED AT` (slurmstepd's `*** STEP ... CANCELLED AT ... ***`).
        fatal_times: (line, time) of each dated failure line; header_done: the KEY=value header has ended.
        events: the host events gathered (`_events.EventScan`).
        last_logged: the step of the last step line read; restarts: (time, step) where the steps went back.
        nonfinite: (time, line, text) of the first line reporting a non-finite loss (an undated one: the last
            dated line's time, and nonfinite_undated).
        tz: seconds east of UTC of the log's local stamps (its `date` header); job_start: that header's time.
        train_start: when a Trainer's progress bar began; total_steps: the steps the trainer said it runs.
        pending_loss: a logged loss waiting for its step; trainer_rank: the rank whose step lines are read.
        trainer_done: the time a trainer said it completed; launcher_ok / launcher_failed: the launcher's
        successful exits, and the codes of its failing ones; bar_from_job_start: a progress bar was placed
        from the job's start (no `Running training` line: its step times are early by the setup).
        gpus_env: the GPU indices the log's environment lines gave (`_gpus_env`).
        pods: the pods of a `kubectl logs --prefix` log (`_kubectl`); accused_hosts: hosts a coordinator
        declared dead for missed heartbeats (Ray's `... node name: H has been marked dead ...`).
        clock: the time of the last dated line (an undated step line is placed its duration after it).
        accused_ranks: (srun label, global rank) of each rank PyTorch's NCCL heartbeat monitor killed for its
        stuck watchdog; torch_hb_timeout: the monitor's timeout its exit message printed (`_torch`).
        step_placed: the last step line read was placed so (its time is the earliest it can have ended).
        pauses: (the step it followed, the line's time, its length) of each evaluation the log names (`_pauses`).
        save_lengths: step -> (when training went on, the save's length) of the saves whose report times them.
        save_began: step -> when the save after it began (its report's own clock: when that step ended).
        open_run: (step, line) of the step lines placed by their durations since the last dated line; runs: each
            such run once a dated line closed it, with that line's time and number (`_placing.fit_runs`).
        clock_inferred: some step's time was inferred, not read from its line (a progress bar's elapsed time,
            an undated step line placed by its duration).
        bar: the bounds the dated lines set on a progress bar's start (`_bar`).
    """

    steps: dict[int, tuple[float, float | None, float | None, float | None, int]] = field(
        default_factory=dict
    )
    step_rank: dict[int, int] = field(default_factory=dict)
    matches: dict[str, list[Match]] = field(default_factory=dict)
    node_exits: list[tuple[str, int, int, str]] = field(default_factory=list)
    summary_status: tuple[str, int, str | None] | None = None
    summary_seen: bool = False
    wall_s: float | None = None
    saved: list[int] = field(default_factory=list)
    restored: int | None = None
    accused_tasks: list[int] = field(default_factory=list)
    in_heartbeat: bool = False
    procs_per_node: int = 1
    training_started: bool = False
    year: tuple[int, int] | None = None
    cancel_time: float | None = None
    cancel_line: int = 0
    fatal_times: list[tuple[int, float]] = field(default_factory=list)
    header_done: bool = False
    start_time: float | None = None
    barrier_time: float | None = None
    events: EventScan = field(default_factory=EventScan)
    last_logged: int | None = None
    restarts: list[tuple[float | None, int]] = field(default_factory=list)
    nonfinite: tuple[float, int, str] | None = None
    nonfinite_undated: bool = False
    tz: float = 0.0
    job_start: float | None = None
    train_start: float | None = None
    total_steps: int | None = None
    pending_loss: float | None = None
    trainer_rank: int | None = None
    trainer_done: float | None = None
    launcher_ok: int = 0
    bar_from_job_start: bool = False
    launcher_failed: list[int] = field(default_factory=list)
    gpus_env: GpuEnv = field(default_factory=GpuEnv)
    pods: Pods = field(default_factory=Pods)
    accused_hosts: list[str] = field(default_factory=list)
    clock: float | None = None
    accused_ranks: list[tuple[int | None, int | None]] = field(default_factory=list)
    torch_hb_timeout: int | None = None
    step_placed: bool = False
    pauses: list[tuple[int, float | None, float | None]] = field(default_factory=list)
    save_lengths: dict[int, tuple[float, float]] = field(default_factory=dict)
    save_began: dict[int, float] = field(default_factory=dict)
    open_run: list[tuple[int, int]] = field(default_factory=list)
    runs: list[tuple[list[tuple[int, int]], float, int]] = field(default_factory=list)
    clock_inferred: bool = False
    bar: BarAnchor = field(default_factory=BarAnchor)


def _add(st: _State, klass: str, n: int, text: str) -> None:
    lst = st.matches.setdefault(klass, [])
    if len(lst) < MAX_MATCHES_PER_CLASS:
        lst.append(Match(klass, n, text.strip()[:500]))
