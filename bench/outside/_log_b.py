"""blind-b's job.log writer (seed-system grammar, §2) and the trainer's own gauges.

The log tells the same story as the TSDB: the `completed step:` seconds and (with absl headers) the
print times agree with the step gauges; MaxText prints step N when step N+1 completes.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from bench.outside._lay_b import Target, _put
from bench.outside._om_b import OpenMetrics
from bench.outside._sim_b import Job


def emit_training(job: Job, om: OpenMetrics, cfg: dict[str, Any]) -> None:
    """`training_*` gauges from rank 0, or the seed's `tb_*` bridge (explicit sample times)."""
    s_end, steps = job.step_end, job.steps()
    if len(s_end) == 0:
        return
    tokens = job.meta["tokens_per_step"]
    alive_until = job.crash_time if job.crash_time is not None else s_end[-1] + 20.0
    if job.meta["end"] == "running":
        alive_until = job.t_end
    if cfg["train"] == "tb":
        head = job.hosts[0]
        lab = {"host": head, "job": "node_hw", "instance": f"{head}:9400"}
        ts = s_end + job.rng.uniform(1, 8, len(s_end))
        ts = np.maximum.accumulate(np.maximum(ts, s_end[0] + 10 * np.arange(len(ts)) * (job.step_base < 10)))
        series = {
            "tb_step": steps,
            "tb_learning_loss": job.loss,
            "tb_learning_grad_norm": job.grad,
            "tb_perf_step_time_seconds": job.step_dur,
            "tb_perf_per_device_tokens_per_sec": tokens / job.step_dur,
            "tb_metrics_plugin_staleness_fill": np.zeros(len(ts)),
        }
        keep = ts < job.t_end
        for name, v in series.items():
            om.add(name, lab, ts[keep], np.asarray(v, dtype=float)[keep])
        return
    tg = Target(job, cfg["train_job"], f"{job.ips[0]}:{cfg['train_port']}")
    tg.ok &= tg.ts <= alive_until
    i = np.searchsorted(s_end, tg.ts, side="right") - 1
    have = i >= 0
    i = np.maximum(i, 0)
    tg.emit_up(om, 10.0)
    lab = {"rank": "0"} if cfg["k8s"] else {}
    _put(om, "training_step", lab, tg, steps[i], have)
    _put(om, "training_loss", lab, tg, job.loss[i], have)
    _put(om, "training_step_time_seconds", lab, tg, job.step_dur[i], have)
    _put(om, "training_tokens_per_second", lab, tg, tokens / job.step_dur[i], have)
    _put(om, "training_last_step_timestamp_seconds", lab, tg, s_end[i], have)
    if cfg["grad_norm"]:
        _put(om, "training_grad_norm", lab, tg, job.grad[i], have)


LOG_LEAD = 240.0  # the log's header comes this long before the TSDB's first sample
STAGES = (("preflight", "900s"), ("pull", "900s"), ("ecc", "300s"), ("train", "none"))


def _absl(t: float, tid: int, where: str = "metric_logger.py:190", sev: str = "I") -> str:
    g = time.gmtime(t)
    return f"{sev}{g.tm_mon:02d}{g.tm_mday:02d} {time.strftime('%H:%M:%S', g)}.{int((t % 1) * 1e6):06d} {tid} {where}] "


def _nodelist(hosts: list[str]) -> str:
    return ",".join(hosts)


def _wall(s: float) -> str:
    s = int(s)
    h, m, sec = s // 3600, (s % 3600) // 60, s % 60
    return f"{h}h {m}m {sec}s" if h else (f"{m}m {sec}s" if m else f"{sec}s")


def write_log(job: Job, path: Any, cfg: dict[str, Any]) -> None:
    """The whole job log: header, stages, config, steps, failure signatures, JOB SUMMARY."""
    m, rng = job.meta, job.rng
    H = job.n_hosts
    slurm = not cfg["k8s"]
    w = len(str(H - 1))
    ranks = range(H) if slurm else range(1)

    def lab(r: int) -> str:
        return f"{r:>{w}}: " if slurm else ""

    absl = m["absl"]
    tid = int(rng.integers(10**5, 10**6))
    ev: list[tuple[float, int, str]] = []  # (time, order, text)
    head = [
        f"JOB_ID={m['job_id']}",
        f"JOB_NAME={m['job_name']}",
        f"NNODES={H}",
        f"JOB_NODELIST={_nodelist(job.hosts) if slurm else job.hosts[0]}",
        f"JAX_COORDINATOR_PORT={int(rng.integers(20000, 52000))}",
    ]
    if cfg["train"] == "tb":
        head.append(f"RAY_PORT={int(rng.integers(20000, 52000))}")
    head += [
        f'PASSTHROUGH_ARGS="{m["args"]}"',
        f"MODEL_NAME={m['model']}",
        f"EXP_TAG={m['exp_tag']}",
        "[INFO] Capturing git summary...",
        '==STAGE TIMEOUTS (override: STAGE_TIMEOUTS="stage:seconds,...")==',
        *(f"  {k:<12} {v}" for k, v in STAGES),
        "=" * 65,
    ]
    t = job.t0 - LOG_LEAD
    ev += [(t, 0, x) for x in head]
    ev.append((t + 1, 0, "== Preflight BEGIN (timeout=900s) =="))
    for r in ranks:
        ev.append((t + 5, r, f"{lab(r)}{job.hosts[r]} | disk free: {int(rng.integers(300, 3000))}G"))
    ev.append((t + 60, 0, "== Preflight END (59s) =="))
    ev.append((t + 61, 0, "== Training BEGIN (no timeout) =="))
    ts0 = job.train_start - 30
    for r in ranks:
        ev.append((ts0 - 20, r, f"{lab(r)}Running _train.sh"))
    for k, v in sorted(m["config"].items()):
        ev.append((ts0 - 10, 0, f"{lab(0)}Config param {k}: {v}"))
    for r in ranks:
        if job.first_step:
            ev.append((ts0, r, f"{lab(r)}restoring from this run's directory step {job.first_step - 1}"))
        else:
            ev.append((ts0, r, f"{lab(r)}No existing checkpoints found, not restoring checkpoint."))
        ev.append((ts0 + 5, r, f"{lab(r)}====== BARRIER PASSED: Starting training loop ======"))
    _step_lines(job, ev, ranks, lab, absl, tid)
    _ending(job, ev, ranks, lab, cfg)
    ev.sort(key=lambda e: (e[0], e[1]))
    with open(path, "w") as fh:
        fh.write("\n".join(e[2] for e in ev) + "\n")


def _step_lines(
    job: Job, ev: list[tuple[float, int, str]], ranks: Any, lab: Any, absl: bool, tid: int
) -> None:
    s_end, steps = job.step_end, job.steps()
    tokens = job.meta["tokens_per_step"]
    tflops = job.meta["tflops_per_step"]
    tw = job.meta["total_weights"]
    saves = {s for s, _ in job.saves}
    for i, s in enumerate(steps):
        printed = s_end[i + 1] if i + 1 < len(s_end) else s_end[i] + 0.5
        dur = job.step_dur[i]
        body = (
            f"completed step: {s}, seconds: {dur:.3f}, TFLOP/s/device: {tflops / dur:.3f}, "
            f"Tokens/s/device: {tokens / dur:.3f}, total_weights: {tw}, loss: {job.loss[i]:.3f}"
        )
        for r in ranks:
            pre = _absl(printed, tid) if absl else ""
            ev.append((printed, r, f"{lab(r)}{pre}{body}"))
        if s in saves:
            ev.append((s_end[i] + 3, 0, f"{lab(0)}Saved a checkpoint at step {s}."))


def _ending(job: Job, ev: list[tuple[float, int, str]], ranks: Any, lab: Any, cfg: dict[str, Any]) -> None:
    m = job.meta
    end = m["end"]
    if end == "running":
        return
    jid = m["job_id"]
    t = job.crash_time if job.crash_time is not None else job.last_step_time() + 5
    wall = _wall(t + 11 - (job.t0 - LOG_LEAD))  # from the header to the JOB SUMMARY
    code = 0
    if end == "failed":
        code = _failure_lines(job, ev, t, lab, jid)
        for r in ranks:
            if r != m.get("fail_rank"):
                ev.append((t + 8, r, f"{lab(r)}NODE_EXIT host={job.hosts[r]} exit=143"))
        ev.append((t + 9, 0, f"srun: Terminating StepId={jid}.0"))
        ev.append((t + 10, 0, f"== Training FAILED (exit={code}, {int(t - job.train_start)}s) =="))
        status = f"FAILED (exit 1) \u2014 Training FAILED (exit={code})"
    else:
        ev.append((t + 10, 0, f"== Training END ({int(t - job.train_start)}s) =="))
        status = "SUCCESS (exit 0)"
    fields = (("Job", f"{jid} ({m['job_name']})"), ("Model", m["model"]), ("Nodes", job.n_hosts))
    fields += (("Wall", wall), ("Status", status))
    summary = ["=" * 26 + " JOB SUMMARY " + "=" * 26, *(f"  {k + ':':<8}{v}" for k, v in fields), "=" * 65]
    ev += [(t + 11, 0, x) for x in summary]


def _failure_lines(job: Job, ev: list[tuple[float, int, str]], t: float, lab: Any, jid: str) -> int:
    m, cls = job.meta, job.cls
    if cls == "host-oom":
        for h in m["oom_hosts"]:
            ev.append(
                (
                    t + 1,
                    h,
                    f"slurmstepd: error: Detected 1 oom_kill event in StepId={jid}.0. Some of the step tasks have been OOM Killed.",
                )
            )
            ev.append((t + 1, h, f"srun: error: {job.hosts[h]}: task {h}: Out Of Memory"))
            ev.append((t + 2, h, f"{lab(h)}NODE_EXIT host={job.hosts[h]} exit=137"))
        m["fail_rank"] = m["oom_hosts"][0]
        return 137
    if cls == "gpu-hardware-fault":
        h, g = m["hw_gpu"]
        m["fail_rank"] = h
        if job.spec[4] == "amd":
            ev.append(
                (
                    t,
                    h,
                    f"{lab(h)}:0:rocdevice.cpp            :2984: 0123456789 us: [pid:{4000 + h} tid:0x7f] Callback: Queue 0x7f aborting with error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest legal address. code: 0x29",
                )
            )
            ev.append((t + 1, h, f"{lab(h)}rocdevice.cpp: Aborting"))
        else:
            ev.append(
                (
                    t,
                    h,
                    f"{lab(h)}{job.hosts[h]}:{4000 + h}:{4100 + h} [{g}] NCCL WARN Cuda failure 'uncorrectable ECC error encountered'",
                )
            )
            ev.append(
                (
                    t + 1,
                    h,
                    f"{lab(h)}jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CUDA error: uncorrectable ECC error encountered (CUDA_ERROR_ECC_UNCORRECTABLE)",
                )
            )
        ev.append((t + 2, h, f"{lab(h)}NODE_EXIT host={job.hosts[h]} exit=134"))
        return 134
    m["fail_rank"] = 0
    step = int(job.steps()[-1]) + 1 if len(job.step_end) else 0
    ev.append((t, 0, f"{lab(0)}Traceback (most recent call last):"))
    ev.append((t, 0, f'{lab(0)}  File "/deps/MaxText/train.py", line 1012, in train_loop'))
    ev.append((t, 0, f"{lab(0)}FloatingPointError: non-finite loss (inf) at step {step}"))
    ev.append((t + 2, 0, f"{lab(0)}NODE_EXIT host={job.hosts[0]} exit=1"))
    return 1
