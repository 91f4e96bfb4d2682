"""Incident-job generator: job directories of the seed system's shape with a real TSDB and a truth file.

Public API:
    SCENARIOS            names of the scenarios (one per diagnosis class, plus "healthy")
    generate_job(...)    build one scenario (two job directories for restore-resource-leak)
    GeneratedJob         what was built
    SynthError           a build step failed
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _emit, _log, _log_trainers, _sim, _tsdb, _variants
from ._deploy import PERTURBATIONS, Exporters, apply_to_job
from ._models import GPU_MODELS, SCENARIO_TABLE, SCENARIOS, Scenario
from ._tsdb import SynthError

__all__ = [
    "GPU_MODELS",
    "PERTURBATIONS",
    "PROFILES",
    "SCENARIOS",
    "SCENARIO_TABLE",
    "Exporters",
    "GeneratedJob",
    "Scenario",
    "SynthError",
    "generate_job",
]

#: Exporter families the generator writes: the seed system, dcgm-exporter or AMD's device-metrics-exporter
#: (each with node_exporter and training_* gauges).
PROFILES = ("amd", "nvidia", "amd-dme")


@dataclass(frozen=True)
class GeneratedJob:
    """What `generate_job` built.

    Attributes:
        job_dirs: the job directories, the incident first (restore-resource-leak: restored, then baseline).
        truth: the primary job's truth (also written to <job_dir>/truth.json).
        stats: series/sample counts and build times per job directory.
    """

    job_dirs: list[Path]
    truth: dict[str, Any]
    stats: list[dict[str, Any]]


def _config(job: _sim.Job, job_dir_name: str) -> dict[str, str]:
    p = job.passthrough
    cfg = {
        "steps": p["steps"],
        "checkpoint_period": p["checkpoint_period"],
        "enable_checkpointing": p["enable_checkpointing"],
        "async_checkpointing": p["async_checkpointing"],
        "per_device_batch_size": p["per_device_batch_size"],
        "max_target_length": p["max_target_length"],
        "remat_policy": p["remat_policy"],
        "dcn_data_parallelism": p["dcn_data_parallelism"],
        "ici_fsdp_parallelism": str(job.gpus),
        "log_period": "100",
        "profiler": "",
        "jax_distributed_heartbeat_timeout_seconds": str(job.hb_timeout),
        "run_name": f"{job.model_name}_train",
        "model_name": job.model_name,
        "tensorboard_dir": f"/outputs/{job_dir_name}/{job.model_name}_train/tensorboard",
        "quantization": "",
        "enable_single_replica_ckpt_restoring": p.get("enable_single_replica_ckpt_restoring", "false"),
    }
    if "hb_printed" in job.variants or "hb_default" in job.variants:
        del cfg["jax_distributed_heartbeat_timeout_seconds"]  # printed otherwise (_log._setup), or not at all
    return cfg


def _triage_class(job: _sim.Job) -> str | None:
    """Return the triage's primary class of this run's log: a node death Slurm reports (the
    `slurm_node_failure` variant: no heartbeat timeout is logged, Slurm ends the job first) is `node-fail`."""
    if job.variants.get("slurm_node_failure"):
        return "node-fail"
    return _tgs_class(job, job.scenario.triage_class)


def _tgs_class(job: _sim.Job, default: str | None) -> str | None:
    """Return what the seed's TGS check makes of this run: last 10 steps >10 % below steps 5-15."""
    n = len(job.tgs)
    if job.scenario.ending != "complete" or n < 20:
        return default
    early = job.tgs[5:16].mean()
    late = job.tgs[-10:].mean()
    return "tgs-degradation" if (late - early) / early < -0.10 else None


def _truth(job: _sim.Job, job_dir: Path, log_path: Path) -> dict[str, Any]:
    sc = job.scenario
    return {
        "scenario": sc.name,
        "class": sc.klass,
        "root_cause_family": sc.family,
        "culprits": job.culprits,
        "onset": job.onset,
        "job_id": job.job_id,
        "job_name": job.job_name,
        "status": "failed" if {"nan_stop", "climb_to_nan"} & set(job.variants) else sc.status,
        "triage_class": _triage_class(job),
        "first_step": int(job.step_num[0]) if len(job.step_num) else None,
        "last_step": job.last_step,
        "steps_total": job.steps_total,
        "checkpoint_period": job.ckpt_period,
        "restored_from": job.restored_from,
        "restart": list(job.restart) if job.restart else None,
        "crash_time": job.crash_time,
        "stall_time": job.stall_time,
        "train_start": job.train_start,
        "job_start": job.start,
        "job_end": job.job_end,
        "heartbeat_timeout_s": job.hb_timeout,
        "accused_tasks": job.accused_tasks,
        "accused_hosts": [job.hosts[a] for a in job.accused_tasks],
        "profile": job.profile,
        "exporters": job.exporters.to_dict() if job.profile != "amd" and job.exporters is not None else None,
        "gpu_model": job.gpu.name,
        "nodes": job.nodes,
        "gpus_per_host": job.gpus,
        "hosts": job.hosts,
        "head": job.head,
        "interval_s": job.interval,
        "variants": job.variants,
        "checkpoint_steps": job.ckpt_steps,
        "warmup_end": job.warm_end,
        "data_range": [float(job.t[0]), float(job.t[-1])],
        "red_herrings": job.red_herrings,
        "notes": job.notes,
        "description": sc.description,
        "seed": job.seed,
        "log": str(log_path),
        "job_dir": str(job_dir),
    }


def _build_one(
    job: _sim.Job,
    job_dir: Path,
    *,
    wal_tail_minutes: float,
    promtool: str,
    prometheus: str,
    keep_openmetrics: bool,
    tsdb_last_minutes: float | None = None,
) -> dict[str, Any]:
    t0 = time.monotonic()
    if job_dir.exists():
        shutil.rmtree(job_dir)
    job_dir.mkdir(parents=True)
    log_path = job_dir.parent / f"{job_dir.name}.log"
    job.config = _config(job, job_dir.name)
    if job.job_id.startswith("k8s-"):
        job.notes.append("k8s job: the primary log is rank 0's, other ranks in rank-N.log")
    _log.write_log(job, log_path, job_dir.name)
    os.symlink(f"../{log_path.name}", job_dir / "log")
    tsdb = job_dir / "prometheus"
    tsdb.mkdir()
    om = job_dir / "metrics.om"
    # the TSDB's first sample: the data's own, or (a Prometheus started late, a retention that dropped the
    # rest) its last `tsdb_last_minutes`; the log is whole
    since = float(job.t[0]) if tsdb_last_minutes is None else float(job.t[-1]) - 60.0 * tsdb_last_minutes
    since = max(since, float(job.t[0]))
    # the WAL tail never holds more than half of a job's data, so that blocks always exist too
    tail_s = min(wal_tail_minutes * 60.0, 0.5 * float(job.t[-1] - since))
    cut = float(job.t[-1]) - tail_s if wal_tail_minutes > 0 else None
    if job.profile != "amd" and job.exporters is not None:
        apply_to_job(job, job.exporters)
    tail, om_stats = _tsdb.write_openmetrics(_emit.series(job), om, cut, since)
    t_om = time.monotonic()
    _tsdb.promtool_blocks(om, tsdb, promtool)
    t_blocks = time.monotonic()
    if not keep_openmetrics:
        om.unlink()
    wal_stats = _tsdb.write_wal_tail(tsdb, tail, prometheus) if tail else {"samples": 0}
    truth = _truth(job, job_dir, log_path)
    truth["wal_tail_start"] = cut
    truth["data_range"][0] = since
    (job_dir / "truth.json").write_text(json.dumps(truth, indent=2, sort_keys=True))
    return {
        "job_dir": str(job_dir),
        "openmetrics": om_stats,
        "wal": wal_stats,
        "seconds": {
            "openmetrics": round(t_om - t0, 2),
            "promtool": round(t_blocks - t_om, 2),
            "wal": round(time.monotonic() - t_blocks, 2),
        },
    }


def _exporters(profile: str, seed: int, exporters: Exporters | str | None) -> Exporters | None:
    if profile == "amd":
        if exporters not in (None, "plain"):
            raise SynthError(
                "the seed system (profile amd) has one deployment: exporters apply to nvidia, amd-dme"
            )
        return None
    gpu = "dcgm" if profile == "nvidia" else "amd-dme"
    if isinstance(exporters, Exporters):
        return exporters
    try:
        if exporters == "random":
            return Exporters.random(seed, gpu=gpu)
        return Exporters.named(exporters or "plain", gpu=gpu)
    except ValueError as exc:
        raise SynthError(str(exc)) from None


def generate_job(
    scenario: str,
    seed: int,
    nodes: int,
    out: Path | str,
    *,
    profile: str = "amd",
    gpus: int = 8,
    interval: float = 15.0,
    hours: float | None = None,
    wal_tail_minutes: float | None = None,
    promtool: str = "promtool",
    prometheus: str = "prometheus",
    keep_openmetrics: bool = False,
    exporters: Exporters | str | None = None,
    variants: Collection[str] = (),
    tsdb_last_minutes: float | None = None,
    log_format: str = "",
) -> GeneratedJob:
    """Build the job directory `out` (log at `<out>.log`, `out/log` symlink, `out/prometheus/`, truth).

    restore-resource-leak builds the restored job at `out` and its fresh-start baseline at
    `<out>-baseline`. `wal_tail_minutes` (default 30; 0 disables) is the final part of the data that
    lives only in the WAL, as in a real finished job. `exporters` (standard profiles only) is how they
    are deployed: an `Exporters`, a perturbation name of `PERTURBATIONS`, "random" (drawn from the
    seed) or None (the plain deployment). `variants` names off-by-default variants of the scenario
    (`_variants.OPT_IN`: node-death's `death_at_end`); their values are drawn from the seed.
    `tsdb_last_minutes` keeps only the data's last minutes in the TSDB (a Prometheus that started late or
    whose retention dropped the rest), the log whole; truth's `data_range` is then what the TSDB holds.
    `log_format` writes the log in another trainer's or launcher's grammar (`_log_trainers.LOG_FORMATS`).
    """
    if scenario not in SCENARIO_TABLE:
        raise SynthError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    if profile not in PROFILES:
        raise SynthError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
    ex = _exporters(profile, seed, exporters)
    try:
        _log_trainers.check(log_format)
    except ValueError as e:
        raise SynthError(str(e)) from None
    if nodes < 1 or gpus < 1 or interval <= 0:
        raise SynthError("nodes, gpus and interval must be positive")
    for v in variants:
        allowed = _variants.OPT_IN.get(v, ())
        if scenario not in ((allowed,) if isinstance(allowed, str) else allowed):
            known = ", ".join(f"{k} ({s})" for k, s in _variants.OPT_IN.items())
            raise SynthError(f"scenario {scenario!r} has no variant {v!r}; known: {known}")
    out = Path(out).resolve()
    tail_min = 30.0 if wal_tail_minutes is None else float(wal_tail_minutes)
    sim_profile = "amd" if profile == "amd-dme" else profile
    params: dict[str, Any] = {"profile": sim_profile, "gpus": gpus, "interval": interval, "hours": hours}
    params["variants"] = tuple(variants)
    sims = _simulate_jobs(scenario, seed, nodes, params, ex.host_domain if ex is not None else "")
    jobs = list(zip(sims, [out, out.with_name(out.name + "-baseline")][: len(sims)], strict=True))
    for job, _ in jobs:
        job.log_format = log_format
        job.profile = profile
        job.exporters = ex
        tag = "-".join(f"{k}_{v}" for k, v in list(job.passthrough.items())[:2])
        job.job_name = f"JAX-{job.model_name}-{tag}"
    stats = [
        _build_one(
            job,
            d,
            wal_tail_minutes=tail_min,
            promtool=promtool,
            prometheus=prometheus,
            keep_openmetrics=keep_openmetrics,
            tsdb_last_minutes=tsdb_last_minutes,
        )
        for job, d in jobs
    ]
    truths = [json.loads((d / "truth.json").read_text()) for _, d in jobs]
    if len(jobs) == 2:
        truths[0]["compare_with"] = str(jobs[1][1])
        truths[1]["compare_with"] = str(jobs[0][1])
        truths[1]["notes"].append("fresh-start baseline of a restore-resource-leak pair")
        for (_, d), tr in zip(jobs, truths, strict=True):
            (d / "truth.json").write_text(json.dumps(tr, indent=2, sort_keys=True))
    return GeneratedJob(job_dirs=[d for _, d in jobs], truth=truths[0], stats=stats)


def _simulate_jobs(
    scenario: str, seed: int, nodes: int, params: dict[str, Any], host_domain: str
) -> list[_sim.Job]:
    """Plan and simulate the scenario's job; restore-resource-leak gives the restored job and its baseline.

    `host_domain` is appended to the host names the exporters' deployment reports (not to a restored job's,
    which takes its baseline's hosts)."""

    def simulate(job: _sim.Job) -> _sim.Job:
        if host_domain:
            job.hosts = [h + host_domain for h in job.hosts]
        return _sim.simulate(job)

    if scenario != "restore-resource-leak":
        return [simulate(_sim.plan(scenario, seed, nodes, **params))]
    base = simulate(_sim.plan("healthy", seed, nodes, **params))
    base.scenario = SCENARIO_TABLE["restore-resource-leak"]
    # restore from an early checkpoint (~25 % in) so that both runs share a long overlapping step range
    quarter = 0.25 * base.steps_total
    restored_from = min(base.ckpt_steps, key=lambda c: abs(c - quarter)) if base.ckpt_steps else 0
    restored = _sim.simulate(
        _sim.plan(scenario, seed, nodes, restored_from=restored_from, base=base, **params)
    )
    base.scenario = SCENARIO_TABLE["healthy"]
    return [restored, base]
