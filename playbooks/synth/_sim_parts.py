"""The pieces `simulate` is built from: the step timeline, smoothing, counters, instability, TensorBoard export."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._sim_plan import Job

# --------------------------------------------------------------------------------------------- steps


def _simulate_steps(job: Job, rng: np.random.Generator, slowdown: Callable[[float], float]) -> None:
    """Fill the per-step arrays for a run that trains from train_start until job_end (or a stall)."""
    drawn = {
        "base": float(rng.uniform(9.5, 31.0)),
        "noise": float(rng.uniform(0.006, 0.02)),
        "tflop_factor": float(rng.uniform(0.3, 1.2)),
        "l0": float(rng.uniform(9.5, 11.0)),
        "linf": float(rng.uniform(1.9, 2.6)),
        "tau": float(rng.uniform(150, 600)),
        "lr_peak": float(rng.choice([1e-4, 3e-4, 6e-4])),
        "warm": int(rng.integers(20, 80)),
    }
    job.step_params = {**drawn, **job.step_params}  # inherited values (a restored run's) win
    p = job.step_params
    base, noise = p["base"], p["noise"]
    l0, linf, tau, lr_peak, warm = p["l0"], p["linf"], p["tau"], p["lr_peak"], int(p["warm"])
    pdbs = int(job.passthrough["per_device_batch_size"])
    seq = int(job.passthrough["max_target_length"])
    tokens = pdbs * seq
    tflop_step = tokens * 6 * 7e10 / 1e12 * p["tflop_factor"]
    stop_at = job.stall_time if job.stall_time is not None else job.job_end - float(rng.uniform(40, 120))
    t = job.train_start
    step = job.first_step
    nums, ends, secs = [], [], []
    evals = job.variants.get("eval_pauses")  # (every, shortest, longest): an evaluation every N steps
    eval_rng = np.random.default_rng([job.seed, 4747, 0 if job.restored_from is None else 1])
    while True:
        d = base * (1 + rng.normal(0, noise)) * slowdown(t)
        k = step - job.first_step
        if k == 0:
            d += float(rng.uniform(40, 150))  # first step after compile
        elif k < 5:
            d *= float(rng.uniform(1.2, 2.2))  # warm-up
        if step > 0 and (step - 1) % job.ckpt_period == 0 and step - 1 in job.ckpt_steps:
            d += job.ckpt_extra[step - 1]
        d += job.eval_extra.get(step - 1, 0.0)  # the evaluation after the last step pauses training
        if t + d > stop_at or (job.steps_limit is not None and step >= job.steps_limit):
            break
        t += d
        nums.append(step)
        ends.append(t)
        secs.append(d)
        if step % job.ckpt_period == 0:
            job.ckpt_steps.append(step)
            job.ckpt_extra[step] = float(rng.uniform(12, 80))
        if evals and step > job.first_step and step % int(evals[0]) == 0:
            job.eval_extra[step] = float(eval_rng.uniform(evals[1], evals[2]))
        step += 1
    if evals and job.eval_extra:
        job.notes.append(
            f"an evaluation every {int(evals[0])} steps pauses training for {evals[1]:.0f}-{evals[2]:.0f} s"
        )
    job.step_num = np.array(nums, dtype=int)
    job.step_end = np.array(ends)
    job.step_secs = np.array(secs)
    n = len(nums)
    s = job.step_num.astype(float)
    job.loss = linf + (l0 - linf) * np.exp(-s / tau) + rng.normal(0, 0.02, n)
    job.grad_norm = np.abs(rng.normal(0.55, 0.08, n)) + 0.9 * np.exp(-s / 80)
    job.raw_grad_norm = job.grad_norm * rng.uniform(1.0, 1.15, n)
    job.lr = np.where(
        s < warm,
        lr_peak * (s + 1) / warm,
        lr_peak * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * np.minimum(1, s / 5000)))),
    )
    job.tgs = tokens / job.step_secs
    job.tflops_s = tflop_step / job.step_secs
    job.moe_lb = np.abs(rng.normal(0.012, 0.0008, n)) if job.moe else np.zeros(n)
    job.tokens = tokens


def _lag(x: np.ndarray, alpha: float) -> np.ndarray:
    """Return an exponentially smoothed copy along the last axis (thermal inertia)."""
    out = np.empty_like(x)
    acc = x[..., 0]
    for i in range(x.shape[-1]):
        acc = acc + alpha * (x[..., i] - acc)
        out[..., i] = acc
    return out


def _ring(cum: np.ndarray) -> np.ndarray:
    """Return a dmesg error count as the exporter reads it: what is in the ring buffer, so it can drop."""
    out = cum.copy()
    for row in out.reshape(-1, out.shape[-1]):
        if row[-1] > 40:
            wrap = int(np.argmax(row > row[-1] * 0.7))
            row[wrap:] -= row[wrap] * 0.5
    return np.floor(out)


#: the per-step arrays of a job (one value per completed step)
STEP_FIELDS = (
    "step_num",
    "step_end",
    "step_secs",
    "loss",
    "grad_norm",
    "raw_grad_norm",
    "lr",
    "tgs",
    "tflops_s",
    "moe_lb",
)


def _truncate_steps(job: Job, keep: np.ndarray) -> None:
    for name in STEP_FIELDS:
        setattr(job, name, getattr(job, name)[keep])
    last = job.last_step
    job.ckpt_steps = [c for c in job.ckpt_steps if last is not None and c <= last]


def _instability(job: Job, rng: np.random.Generator, i0: int) -> None:
    """Make training-level metrics move first: grad-norm spike, loss jump, MoE load-balance spike."""
    n = len(job.step_num)
    k = np.arange(n) - i0
    after = k >= 0
    decay = np.where(after, np.exp(-np.clip(k, 0, None) / float(rng.uniform(15, 40))), 0.0)
    job.grad_norm = job.grad_norm * (1 + float(rng.uniform(6, 15)) * decay)
    job.raw_grad_norm = job.grad_norm * rng.uniform(1.5, 3.0, n)
    job.loss = job.loss + float(rng.uniform(0.6, 1.5)) * np.where(
        after, np.exp(-np.clip(k, 0, None) / 60.0), 0
    )
    job.moe_lb = job.moe_lb * (1 + float(rng.uniform(4, 9)) * decay)


def _gpu_counters(job: Job, rng: np.random.Generator, shape: tuple[int, int, int]) -> None:
    K, G, N = shape
    t = job.t
    z = np.zeros(shape)
    ce_base = np.zeros((K, G, 1))
    # a GPU with old correctable errors that do not grow in this window (red herring)
    rh, rg = int(rng.integers(0, K)), int(rng.integers(0, G))
    ce_base[rh, rg] = float(rng.integers(2, 9))
    job.red_herrings["static_correctable_errors"] = f"{job.hosts[rh]}:{rg}"
    sig = {
        "umc_ue": z.copy(),
        "umc_ce": z + ce_base,
        "xgmi_ue": z.copy(),
        "xgmi_ce": z.copy(),
        "gfx_ue": z.copy(),
        "pcie_corr": z + np.floor(rng.uniform(0, 3, (K, G, 1))),
        "pcie_nonfatal": z.copy(),
        "pcie_fatal": z.copy(),
        "xid": z.copy(),
    }
    hw = job.hwfault
    if hw is not None:
        h, g, t0 = hw.host, hw.gpu, hw.t
        on = t >= t0
        n_ue = float(rng.integers(1, 4))
        sig["umc_ue"][h, g] = np.where(on, n_ue + np.floor((t - t0) / 60.0).clip(0, 5), 0)
        sig["xid"][h, g] = np.where(on, float(rng.choice([48, 79])), 0)
        job.host_sig["dmesg"][h] = np.where(on, job.host_sig["dmesg"][h] + 3, job.host_sig["dmesg"][h])
    dx = job.driver_xid
    if dx is not None:  # DCGM's Xid gauge holds the last Xid
        sig["xid"][dx.host, dx.gpu] = np.where(t >= dx.t, 119.0, 0.0)
    pre = job.predeath
    if pre is not None:
        h, g = pre.host, pre.gpu
        on = t >= pre.t
        sig["xid"][h, g] = np.where(on, 79.0, 0.0)
        if job.gpu.vendor == "amd":  # no Xid there: the RAS counters of the failing GPU grow instead
            sig["umc_ue"][h, g] = np.where(on, 1.0 + np.floor((t - pre.t) / 60.0).clip(0, 3), 0.0)
        job.host_sig["dmesg"][h] = job.host_sig["dmesg"][h] + np.where(
            on, 2.0 + np.floor((t - pre.t) / 30.0), 0
        )
    rm = job.preremap
    if rm is not None:  # one correctable error: a remapped row under DCGM's default fields
        sig["umc_ce"][rm.host, rm.gpu] += (t >= rm.t).astype(float)
    job.gpu_sig.update(sig)


def _tb_export(job: Job, rng: np.random.Generator) -> None:
    """Decide which steps the TensorBoard bridge exported and where it wrote staleness fills."""
    n = len(job.step_num)
    exported = np.ones(n, bool)
    # the best-effort bridge drops a few steps (plugin timeouts)
    if n > 20:
        exported[rng.choice(n, size=max(1, n // 150), replace=False)] = False
    if n and "sparse_gauges" in job.variants:  # one export a refresh period: the first step after each tick
        tick = np.floor(job.step_end / float(job.variants["sparse_gauges"]))
        exported &= np.concatenate([[True], np.diff(tick) > 0])
    if n:
        exported[-1] = True  # the final step is always exported
    job.tb_exported = exported
    fills: list[tuple[float, int]] = []
    times = job.step_end[exported]
    idxs = np.nonzero(exported)[0]
    # no fill after the crash, nor after the capture ends (it may end before the crash: death_at_end)
    end = min(job.crash_time, job.job_end) if job.crash_time is not None else job.job_end
    for j in range(len(times)):
        nxt = times[j + 1] if j + 1 < len(times) else end
        f = times[j] + 150.0
        while f < nxt - 1.0:
            fills.append((float(f), int(idxs[j])))
            f += 150.0
    job.fills = fills
