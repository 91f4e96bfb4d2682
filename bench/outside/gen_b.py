"""blind-b's outside corpus generator (issue #10): job directories the engine's authors did not shape.

    .venv/bin/python -m bench.outside.gen_b --seed 7 --out data/outside/blind-b [--count 32]

Writes `OUT/seed-N/<job>/` (job.log, prometheus/, truth.json) and, for restore comparisons,
`OUT/seed-N/<pair>/{a,b}/` with the pair's truth.json. Classes: healthy (with red herrings, a
near-limit save without a kill), host-oom, thermal-straggler, gpu-driver-fault, gpu-hardware-fault
(incl. remapped-row-only DCGM), training-instability, restore-resource-leak pairs; layouts: DCGM
(`Hostname`, `hostname`, Kubernetes without a host label), AMD device-metrics-exporter, the seed's hw_*.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.outside import _lay_b, _log_b, _scen_b, _sim_b
from bench.outside._om_b import OpenMetrics, build_tsdb

MIX = (
    ["healthy"] * 8
    + ["host-oom"] * 4
    + ["thermal-straggler"] * 4
    + ["gpu-driver-fault"] * 3
    + ["gpu-hardware-fault"] * 4
    + ["training-instability"] * 4
    + ["pair-leak"] * 3
    + ["pair-healthy"] * 2
)
LAYOUTS = ["dcgm-Hostname", "dcgm-hostname", "dcgm-k8s", "seed", "amd"]
BASE_T0 = 1793491200.0  # 2026-11-01T00:00:00Z


def _layout_cfg(rng: np.random.Generator, layout: str, job: _sim_b.Job) -> dict[str, Any]:
    late = {
        int(h): int(rng.integers(1, 3))
        for h in rng.choice(job.n_hosts, int(rng.integers(0, 3)), replace=False)
    }
    return {
        "layout": layout,
        "gpu": "amd" if layout == "amd" else ("seed" if layout == "seed" else "dcgm"),
        "dcgm_host": {"dcgm-Hostname": "Hostname", "dcgm-hostname": "hostname"}.get(layout),
        "k8s": layout == "dcgm-k8s",
        "dcgm_period": 30.0 if rng.random() < 0.4 else job.interval,
        # the default DCGM counters carry remapped rows, not ECC; the AMD exporters have only ECC/RAS counts
        "ecc_mode": "remap" if layout.startswith("dcgm") and rng.random() < 0.5 else "ecc",
        "gpu_job": str(rng.choice(["dcgm-exporter", "nvidia-dcgm-exporter", "gpu-metrics"]))
        if layout != "amd"
        else str(rng.choice(["amd-device-metrics-exporter", "gpu-metrics"])),
        "node_job": str(rng.choice(["node-exporter", "node", "prometheus-node-exporter"])),
        "node_by_ip": layout == "dcgm-k8s" or bool(rng.random() < 0.6),  # k8s: joined only by address
        "rdma_hw": bool(rng.random() < 0.6),
        "train": "tb" if layout == "seed" else "training",
        "train_job": str(rng.choice(["trainer", "pytorch-job", "maxtext"])),
        "train_port": int(rng.choice([8000, 9091, 8080])),
        "grad_norm": bool(rng.random() < 0.6),
        "driver": str(rng.choice(["535.183.06", "550.90.07", "560.35.03"])),
        "late": late,
    }


def plan_job(rng: np.random.Generator, cls: str, t0: float, layout: str, hosts: Any = None) -> _sim_b.Job:
    """Draw a job's shape (sizes, interval, model, timing) and its exporter layout."""
    H = int(rng.choice([4, 6, 8, 12, 16])) if hosts is None else len(hosts[0])
    G = int(rng.choice([4, 8]))
    interval = float(rng.choice([5, 10, 15, 30, 60]))
    dur = float(rng.uniform(30, 90)) * 60
    while H * G * dur / interval > 40000 and interval < 60:
        interval = {5: 10.0, 10: 15.0, 15: 30.0, 30: 60.0}[int(interval)]
    if layout == "seed":
        interval = min(interval, 15.0)
        dur = min(dur, 40000 * interval / (H * G))
    names, ips = hosts if hosts is not None else _sim_b.host_names(rng, H)
    nvidia = [k for k, v in _sim_b.GPU_MODELS.items() if v[4] == "nvidia"]
    model = "AMD Instinct MI300X" if layout in ("amd", "seed") else str(rng.choice(nvidia))
    step = float(rng.uniform(6, 40)) if layout != "seed" else float(rng.uniform(10, 40))
    start = t0 + float(rng.uniform(90, 420))
    job = _sim_b.Job(
        rng=rng,
        cls=cls,
        hosts=list(names),
        ips=list(ips),
        gpus=G,
        interval=interval,
        t0=t0,
        t_end=t0 + dur,
        gpu_model=model,
        train_start=start,
        step_base=step,
        steps_planned=0,
        ckpt_period=0,
        nics=int(rng.choice([2, 4, 8])),
    )
    reps = int(rng.choice([2, 4])) if H >= 4 else 1
    job.replica0 = list(range(max(1, H // reps)))
    job.meta["threads_per_gpu"] = float(rng.uniform(1.5, 2.5))  # the trainer's own threads
    return job


def finish_plan(job: _sim_b.Job, end: str) -> None:
    rng = job.rng
    span = job.t_end - job.train_start - float(rng.uniform(60, 300))
    fit = int(span / job.step_base * 0.93)
    job.steps_planned = max(20, fit if end == "completed" else int(fit * 1.4))
    saves = 7 if job.cls == "host-oom" else int(rng.integers(2, 6))
    job.ckpt_period = max(5, fit // saves)
    model = str(rng.choice(["llama2-70b", "llama3-8b", "mixtral-8x7b", "deepseek-v2-lite"]))
    total = job.steps_planned + job.first_step
    args = f"steps={total} enable_checkpointing=true checkpoint_period={job.ckpt_period}"
    tok = float(rng.choice([4096, 8192, 16384])) * float(rng.choice([1, 2, 4]))
    job.meta.update(
        model=model,
        args=args,
        exp_tag=args.replace("=", "_").replace(" ", "-"),
        end=end,
        job_name=f"JAX-{model}-steps_{total}",
        tokens_per_step=tok,
        tflops_per_step=tok * 0.021,
        total_weights=int(tok * job.n_hosts * job.gpus),
        absl=bool(rng.random() < 0.6),
        config={
            "steps": total,
            "checkpoint_period": job.ckpt_period,
            "enable_checkpointing": "True",
            "per_device_batch_size": 2,
            "jax_distributed_heartbeat_timeout_seconds": 100,
            "log_period": 100,
            "run_name": f"{model}_train",
        },
    )


def simulate(job: _sim_b.Job, cfg: dict[str, Any]) -> None:
    plan = _scen_b.PLANS.get(job.cls)
    if plan:
        plan(job)
    _sim_b.build_steps(job)
    if job.meta["end"] == "completed" and len(job.step_end) < job.steps_planned:
        job.meta["end"] = "running"
    if job.crash_time is not None:
        job.meta["end"] = "failed"
    job.grid = job.t0 + np.arange(0.0, job.t_end - job.t0, job.interval)
    job.meta["ecc_mode"] = cfg["ecc_mode"]
    _sim_b.base_signals(job)
    _scen_b.red_herrings(job)
    _scen_b.APPLY[job.cls](job)
    if job.cls == "host-oom":
        job.meta["end"] = "failed"


def write_job(job: _sim_b.Job, cfg: dict[str, Any], out: Path) -> dict[str, Any]:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    om = OpenMetrics()
    {"dcgm": _lay_b.emit_dcgm, "amd": _lay_b.emit_amd, "seed": _lay_b.emit_seed_hw}[cfg["gpu"]](job, om, cfg)
    if cfg["gpu"] != "seed":
        _lay_b.emit_node_exporter(job, om, cfg)
    _log_b.emit_training(job, om, cfg)
    om_file = out / "metrics.om"
    samples = om.write(om_file)
    build_tsdb(om_file, out / "prometheus")
    om_file.unlink()
    _log_b.write_log(job, out / "job.log", cfg)
    return {"series": om.series_count, "samples": samples}


def _job_id(rng: np.random.Generator, cfg: dict[str, Any], t0: float) -> str:
    if cfg["k8s"]:
        stamp = time.gmtime(t0 - _log_b.LOG_LEAD)  # when the job (its log) started
        return time.strftime("k8s-%Y%m%d-%H%M%S-", stamp) + f"{int(rng.integers(0, 65536)):04x}"
    return str(int(rng.integers(100000, 999999)))


def make_single(rng: np.random.Generator, cls: str, t0: float, layout: str, root: Path) -> dict[str, Any]:
    job = plan_job(rng, cls, t0, layout)
    cfg = _layout_cfg(rng, layout, job)
    if cls == "gpu-hardware-fault" and layout.startswith("dcgm") and rng.random() < 0.5:
        cfg["ecc_mode"] = "remap"
    ends = {
        "healthy": ["completed", "completed", "completed", "running"],
        "thermal-straggler": ["completed", "running"],
        "gpu-driver-fault": ["completed", "running"],
        "training-instability": ["completed", "running"],
    }
    finish_plan(job, str(rng.choice(ends.get(cls, ["running"]))))
    job.meta["near_limit"] = cls == "healthy" and rng.random() < 0.35
    job.meta["job_id"] = _job_id(rng, cfg, t0)
    simulate(job, cfg)
    out = root / f"{job.meta['job_id']}-{job.meta['job_name']}"
    stats = write_job(job, cfg, out)
    (out / "truth.json").write_text(json.dumps(job.truth, indent=1) + "\n")
    return {"dir": out.name, "class": cls, "layout": layout, **stats}


def make_pair(rng: np.random.Generator, leak: bool, t0: float, layout: str, root: Path) -> dict[str, Any]:
    a = plan_job(rng, "restore-resource-leak", t0, layout)
    names, ips = list(a.hosts), list(a.ips)
    if rng.random() < 0.4:  # the restored run got a partly different allocation
        other, oips = _sim_b.host_names(rng, len(names))
        for i in rng.choice(len(names), len(names) // 2, replace=False):
            names[i], ips[i] = other[i] + "x", oips[i]
    b = plan_job(rng, "restore-resource-leak", t0 + 86400 * float(rng.uniform(0.2, 2)), layout, (names, ips))
    b.gpus, b.interval, b.gpu_model, b.step_base, b.nics = (
        a.gpus,
        a.interval,
        a.gpu_model,
        a.step_base,
        a.nics,
    )
    b.t_end = b.t0 + (a.t_end - a.t0) * float(rng.uniform(0.8, 1.2))
    cfg = _layout_cfg(rng, layout, a)
    finish_plan(a, "completed")
    # b restores a checkpoint from the first half of a's steps: the runs share steps to compare
    kmax = max(1, int(0.5 * a.steps_planned / a.ckpt_period))
    b.first_step = int(a.ckpt_period * int(rng.integers(1, kmax + 1))) + 1
    finish_plan(b, "completed")
    b.ckpt_period, b.meta["config"] = a.ckpt_period, dict(a.meta["config"])
    b.meta["threads_per_gpu"] = a.meta["threads_per_gpu"]  # same code and config, same threads
    b.meta.update(
        model=a.meta["model"],
        args=a.meta["args"],
        exp_tag=a.meta["exp_tag"],
        job_name=a.meta["job_name"],
        tokens_per_step=a.meta["tokens_per_step"],
        tflops_per_step=a.meta["tflops_per_step"],
        total_weights=a.meta["total_weights"],
    )
    b.meta["restore_time"] = b.train_start + float(rng.uniform(5, 30))
    b.meta["leak"] = float(rng.uniform(8, 20)) if leak else 0.0
    pair = root / f"pair-{int(rng.integers(1000, 9999))}"
    if pair.exists():
        shutil.rmtree(pair)
    stats = []
    for role, job in (("a", a), ("b", b)):
        job.meta["job_id"] = _job_id(rng, cfg, job.t0)
        simulate(job, cfg)
        stats.append(write_job(job, cfg, pair / role))
    truth = {
        "class": "restore-resource-leak" if leak else "healthy",
        "family": "cpu-contention" if leak else "none",
        "culprits": [],
        "onset": round(b.meta["restore_time"], 3) if leak else None,
        "scrape_s": a.interval,
        "story": (
            f"restored run carries +{b.meta['leak']:.0f} runnable threads on every host"
            if leak
            else "restored run without a leak; per-host backgrounds differ between runs"
        ),
    }
    (pair / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return {
        "dir": pair.name,
        "class": truth["class"],
        "layout": layout,
        "series": sum(s["series"] for s in stats),
        "samples": sum(s["samples"] for s in stats),
    }


def generate(seed: int, out: Path, count: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    kinds = list(rng.permutation(MIX))
    kinds = (kinds * (count // len(kinds) + 1))[:count]
    amd_at = set(
        rng.choice(
            [i for i, k in enumerate(kinds) if k in ("healthy", "thermal-straggler")], 2, replace=False
        )
    )
    root = out / f"seed-{seed}"
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, kind in enumerate(kinds):
        jrng = np.random.default_rng([seed, i])
        layout = "amd" if i in amd_at else str(jrng.choice(LAYOUTS[:4], p=[0.25, 0.25, 0.25, 0.25]))
        t0 = BASE_T0 + seed % 20 * 86400 + i * 7200 + float(jrng.uniform(0, 3600))
        started = time.monotonic()
        if kind.startswith("pair-"):
            row = make_pair(jrng, kind == "pair-leak", t0, layout, root)
        else:
            row = make_single(jrng, kind, t0, layout, root)
        row["build_s"] = round(time.monotonic() - started, 1)
        rows.append(row)
        print(
            f"{row['dir']:<48} {row['class']:<22} {layout:<14} {row['series']:>6} series "
            f"{row['samples']:>8} samples {row['build_s']:>5.1f} s",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=Path("data/outside/blind-b"))
    ap.add_argument("--count", type=int, default=len(MIX))
    args = ap.parse_args(argv)
    started = time.monotonic()
    rows = generate(args.seed, args.out, args.count)
    print(f"{len(rows)} jobs in {time.monotonic() - started:.0f} s under {args.out / f'seed-{args.seed}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
