"""Plan one simulated job: its hosts, identity, timeline and scenario parameters (the `Job` record)."""

from __future__ import annotations

import datetime as _dt
import math
import zlib
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ._deploy import Exporters
from . import _variants
from ._models import GPU_MODELS, HOST_SCHEMES, MODEL_NAMES, SCENARIO_TABLE, VENDOR_MODELS, GpuModel, Scenario

NAN = float("nan")
TIB = 1024.0**4
GIB = 1024.0**3


@dataclass(frozen=True)
class GpuFault:
    """A failing GPU: its host's index, its index on the host and when its errors begin."""

    host: int
    gpu: int
    t: float


@dataclass
class Job:
    """Everything the generator decided about one job, plus its simulated signals.

    Attributes are filled by `simulate`; arrays are on the time grid `t` unless named `step_*`.
    """

    scenario: Scenario
    seed: int
    profile: str
    gpu: GpuModel
    hosts: list[str]
    gpus: int
    interval: float
    job_id: str
    job_name: str
    model_name: str
    moe: bool
    start: float
    setup_s: float
    passthrough: dict[str, str]
    config: dict[str, str]
    steps_total: int
    ckpt_period: int
    hb_timeout: int
    replicas: int
    first_step: int
    restored_from: int | None
    steps_limit: int | None = None
    # timeline
    train_start: float = 0.0
    job_end: float = 0.0
    stall_time: float | None = None
    crash_time: float | None = None
    onset: float | None = None
    culprits: list[dict[str, Any]] = field(default_factory=list)
    accused_tasks: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    red_herrings: dict[str, Any] = field(default_factory=dict)
    variants: dict[str, Any] = field(default_factory=dict)
    opt_in: frozenset[str] = frozenset()  # the off-by-default variants asked for (_variants.OPT_IN)
    log_format: str = ""  # the log's grammar: the seed's, or one of `_log_trainers.LOG_FORMATS`
    restart: tuple[float, int] | None = (
        None  # an elastic restart: (the old run's last step end, resumed step)
    )
    # steps (index i = i-th completed step of this run)
    step_num: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    step_end: np.ndarray = field(default_factory=lambda: np.zeros(0))
    step_secs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    loss: np.ndarray = field(default_factory=lambda: np.zeros(0))
    grad_norm: np.ndarray = field(default_factory=lambda: np.zeros(0))
    raw_grad_norm: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lr: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tgs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tflops_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    moe_lb: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tb_exported: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    fills: list[tuple[float, int]] = field(default_factory=list)  # (time, index into steps)
    ckpt_steps: list[int] = field(default_factory=list)
    # what the run's steps are made of (base step time, noise, loss curve, ...): a restored run shares its
    # baseline's (same model, config and cluster), so it differs only by what the scenario adds
    step_params: dict[str, float] = field(default_factory=dict)
    # grid
    t: np.ndarray = field(default_factory=lambda: np.zeros(0))
    gpu_sig: dict[str, np.ndarray] = field(default_factory=dict)  # (K, G, N)
    host_sig: dict[str, np.ndarray] = field(default_factory=dict)  # (K, N)
    nic_sig: dict[str, np.ndarray] = field(default_factory=dict)  # (K, D, N)
    present: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (K, N) exporter answers
    gpu_present: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (K, N) GPU plugin produced data
    frozen_from: dict[int, int] = field(default_factory=dict)  # host index -> grid index
    frozen_to: dict[int, int] = field(
        default_factory=dict
    )  # host index -> grid index it thaws at (else never)
    scrape_timeout_mask: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (K, N)
    failed_scrape_mask: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (K, N) GPU scrape failed
    gpu_down: np.ndarray = field(
        default_factory=lambda: np.zeros(0)
    )  # (K, N) GPU scrape refused (late_driver)
    node_failed: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (K, N) node_exporter scrape failed
    exporters: Exporters | None = None  # how the exporters are deployed (set by build; None for amd)
    monitoring_outage: tuple[float, float] | None = None  # (start, end): Prometheus stored no sample
    # what the simulation decided on the way, for the log and the truth
    tokens: float = 0.0  # tokens per step (batch x sequence)
    warm_end: float | None = None  # end of the warm-up steps
    ckpt_extra: dict[int, float] = field(default_factory=dict)  # checkpoint step -> seconds its save adds
    eval_extra: dict[int, float] = field(default_factory=dict)  # step -> seconds the evaluation after it ran
    oom: dict[str, float] | None = None  # host-oom: ramp_start and kill times
    oom_host: int | None = None  # host-oom: the index of the killed host
    hwfault: GpuFault | None = None  # gpu-hardware-fault: the GPU that fails
    predeath: GpuFault | None = None  # node-death with errors first: the GPU that errs before the death
    driver_xid: GpuFault | None = None  # gpu-driver-fault `xid_stretch`: the GPU whose driver logs Xid 119
    preremap: GpuFault | None = None  # node-death variant remap_before_death: the GPU that remaps one row

    @property
    def nodes(self) -> int:
        return len(self.hosts)

    @property
    def head(self) -> str:
        return self.hosts[0]

    @property
    def last_step(self) -> int | None:
        return int(self.step_num[-1]) if len(self.step_num) else None


def _hostnames(rng: np.random.Generator, n: int) -> list[str]:
    pattern, offset = HOST_SCHEMES[int(rng.integers(len(HOST_SCHEMES)))]
    offset += int(rng.integers(0, 40))
    per_rack = int(rng.choice([4, 8, 16]))
    names = []
    for i in range(n):
        k = i + offset
        names.append(pattern.format(n=k, rack=1 + k // per_rack, slot=1 + k % per_rack))
    return names


def _job_identity(rng: np.random.Generator, seed: int, start: float, profile: str, scenario: str) -> str:
    # Jobs of one seed share hosts and start time across scenarios; their ids must still differ, as two
    # real jobs' do. The scenario and profile are mixed in without drawing from `rng`, so every other
    # value of the job stays what the seed made it.
    salt = zlib.crc32(f"{scenario}/{profile}".encode())
    if profile == "nvidia" and rng.random() < 0.5:
        stamp = _utc(start).strftime("%Y%m%d-%H%M%S")
        return f"k8s-{stamp}-{(int(rng.integers(0, 0xFFFF)) ^ salt) & 0xFFFF:04x}"
    return str(10_000 + (int(rng.integers(10_000, 99_999)) + salt) % 89_999)


def _utc(ts: float) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(ts, tz=_dt.UTC)


def plan(
    scenario: str,
    seed: int,
    nodes: int,
    *,
    profile: str = "amd",
    gpus: int = 8,
    interval: float = 15.0,
    hours: float | None = None,
    restored_from: int | None = None,
    base: Job | None = None,
    variants: Collection[str] = (),
) -> Job:
    """Return the decided (not yet simulated) job for a scenario and seed (`variants`: off-by-default variants
    to apply where the scenario has them)."""
    sc = SCENARIO_TABLE[scenario]
    rng = np.random.default_rng([seed, 0 if restored_from is None else 1])
    if base is not None:
        gpu, hosts, model_name = base.gpu, base.hosts, base.model_name
    else:
        gpu = GPU_MODELS[str(rng.choice(VENDOR_MODELS[profile]))]
        hosts = _hostnames(rng, nodes)
        model_name = str(rng.choice(MODEL_NAMES))
    moe = model_name.startswith(("mixtral", "deepseek")) or scenario == "training-instability"
    if scenario == "training-instability" and not model_name.startswith(("mixtral", "deepseek")):
        model_name = "mixtral-8x22b"
    # Jobs lie in the past (spring 2026), at a seed-dependent day and hour, aligned to the interval.
    day0 = 1_772_323_200.0  # 2026-03-01T00:00:00Z
    start = day0 + float(rng.integers(0, 90)) * 86400 + float(rng.integers(0, 86400))
    if base is not None:
        start = base.job_end + float(rng.uniform(1800, 7200))
    interval = _variants.scrape_interval(seed, interval, variants)
    start = math.floor(start / interval) * interval
    hours = float(hours) if hours else float(rng.uniform(2.2, 3.2))
    ckpt_period, hb_timeout, replicas, passthrough = _run_config(rng, sc, nodes, moe, base)
    job = Job(
        scenario=sc,
        seed=seed,
        profile=profile,
        gpu=gpu,
        hosts=hosts,
        gpus=gpus,
        interval=float(interval),
        job_id="",
        job_name="",
        model_name=model_name,
        moe=moe,
        start=start,
        setup_s=float(rng.uniform(480, 1200)),
        passthrough=passthrough,
        config={},
        steps_total=0,
        ckpt_period=ckpt_period,
        hb_timeout=hb_timeout,
        replicas=replicas,
        first_step=0 if restored_from is None else restored_from + 1,
        restored_from=restored_from,
    )
    job.opt_in = frozenset(variants)
    job.job_id = _job_identity(rng, seed, start, profile, scenario)
    job.train_start = start + job.setup_s
    job.job_end = start + hours * 3600.0
    if base is not None:
        job.steps_limit = base.steps_total  # same config: the restored run ends at the same last step
        job.step_params = dict(base.step_params)
    return job


#: JAX's heartbeat timeout when the program sets none (seconds; MaxText's base.yml has the same)
JAX_HB_DEFAULT = 100


def _run_config(
    rng: np.random.Generator, sc: Scenario, nodes: int, moe: bool, base: Job | None
) -> tuple[int, int, int, dict[str, str]]:
    """Draw the run's checkpoint period, heartbeat timeout, data-parallel replicas and passthrough arguments.

    A restored run keeps its baseline's (the draws still happen, so the rest of the seed stays the same).
    """
    ckpt_period = int(rng.choice([20, 25, 40, 50, 100]))
    replicas = max(r for r in (1, 2, 3, 4) if nodes % r == 0 and r <= max(1, nodes // 2))
    hb_timeout = (
        int(rng.choice([100, 300, 900]))
        if sc.klass in ("heartbeat-false-positive", "node-death")
        else int(rng.choice([100, 900, 14400]))
    )
    pdbs = int(rng.choice([1, 2, 4]))
    seq = int(rng.choice([4096, 8192]))
    passthrough = {
        "steps": "0",  # filled once the step count is known
        "per_device_batch_size": str(pdbs),
        "max_target_length": str(seq),
        "enable_checkpointing": "true",
        "checkpoint_period": str(ckpt_period),
        "async_checkpointing": "false",
        "remat_policy": str(rng.choice(["full", "save_qkv_proj", "minimal"])),
        "dcn_data_parallelism": str(replicas),
        "_env_NCCL_DEBUG": "WARN",
    }
    if sc.name == "restore-resource-leak":
        passthrough["enable_single_replica_ckpt_restoring"] = "true"
    if moe:
        passthrough["load_balance_loss_weight"] = "0.01"
    if base is not None:
        passthrough = dict(base.passthrough)
        ckpt_period, hb_timeout, replicas = base.ckpt_period, base.hb_timeout, base.replicas
    return ckpt_period, hb_timeout, replicas, passthrough
