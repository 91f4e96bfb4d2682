"""blind-b's incident stories: each bends a healthy job's arrays into one class, and writes its truth.

`plan_*` runs before the step timeline is built (slowdowns, crash times), `apply_*` after the base
signals. Truth follows the diagnosis contract: culprits and onset exactly as it defines them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from bench.outside._sim_b import Job, idx

FAMILY = {
    "healthy": "none",
    "host-oom": "host-memory",
    "thermal-straggler": "thermal",
    "gpu-driver-fault": "gpu-driver",
    "gpu-hardware-fault": "gpu-hardware",
    "training-instability": "training",
    "restore-resource-leak": "cpu-contention",
}


def _set_truth(job: Job, culprits: list[tuple[int, int | None]], onset: float | None, story: str) -> None:
    job.truth = {
        "class": job.cls,
        "family": FAMILY[job.cls],
        "culprits": [{"host": job.hosts[h], "gpu": None if g is None else str(g)} for h, g in culprits],
        "onset": None if onset is None else round(float(onset), 3),
        "scrape_s": job.interval,
        "story": story,
    }


def _onset_time(job: Job, lo: float, hi: float) -> float:
    """A time between fractions lo..hi of the training span, on no particular grid point."""
    span = job.t_end - job.train_start
    return job.train_start + span * float(job.rng.uniform(lo, hi)) + float(job.rng.uniform(0, job.interval))


def truncate(job: Job, t: float) -> None:
    """The trainer dies at t: later steps never complete."""
    job.crash_time = t
    keep = job.step_end <= t
    job.step_end, job.step_dur = job.step_end[keep], job.step_dur[keep]
    job.loss, job.grad = job.loss[keep], job.grad[keep]
    job.saves = [s for s in job.saves if s[1] < t]


# ---------------------------------------------------------------- plans (before the step timeline)


def plan_thermal(job: Job) -> None:
    t_on = _onset_time(job, 0.2, 0.5)
    d1, d2 = float(job.rng.uniform(60, 240)), float(job.rng.uniform(120, 420))
    depth = float(job.rng.uniform(0.2, 0.4))
    job.meta.update(t_on=t_on, d1=d1, d2=d2, depth=depth)
    job.slowdown.append(lambda t: 1.0 + 0.9 * depth * float(np.clip((t - t_on - d1) / d2, 0, 1)))


def plan_instability(job: Job) -> None:
    t_on = _onset_time(job, 0.3, 0.6)
    lag = float(job.rng.uniform(90, 300))
    f = float(job.rng.uniform(1.25, 1.7))
    job.meta.update(t_on=t_on, sys_lag=lag)
    job.slowdown.append(lambda t: f if t > t_on + lag else 1.0)
    if job.rng.random() < 0.5:
        job.crash_time = t_on + lag + float(job.rng.uniform(120, 500))


def plan_hardware(job: Job) -> None:
    t_on = _onset_time(job, 0.25, 0.65)
    job.meta["t_on"] = t_on
    job.crash_time = t_on + float(job.rng.uniform(15, 200))


def plan_driver(job: Job) -> None:
    job.meta["t_on"] = _onset_time(job, 0.15, 0.55)


def plan_leak(job: Job) -> None:
    if job.meta.get("leak"):
        job.slowdown.append(lambda t: 1.01)


PLANS: dict[str, Callable[[Job], None]] = {
    "thermal-straggler": plan_thermal,
    "training-instability": plan_instability,
    "gpu-hardware-fault": plan_hardware,
    "gpu-driver-fault": plan_driver,
    "restore-resource-leak": plan_leak,
}


# ---------------------------------------------------------------- stories (after the base signals)


def apply_healthy(job: Job) -> None:
    if job.meta.get("near_limit") and job.saves:
        h = job.replica0[0]
        mem = job.host["mem_used"]
        total = job.host["mem_total"][h, 0]
        peak = float(job.rng.uniform(0.93, 0.975))
        mem[h] += max(0.0, peak * total - mem[h].max())
        np.minimum(mem[h], 0.985 * total, out=mem[h])
    _set_truth(job, [], None, "trains normally; checkpoint spikes, warm-up and red herrings only")


def _kill_after_crash(job: Job) -> None:
    """After the trainer dies every GPU idles and trainer memory is released."""
    if job.crash_time is None:
        return
    i = idx(job, job.crash_time)
    idle_w = job.spec[0]
    job.gpu["util"][:, :, i:] = 0.0
    job.gpu["power"][:, :, i:] = idle_w + job.rng.normal(0, 3, job.gpu["power"][:, :, i:].shape)
    job.gpu["sm_clock"][:, :, i:] = 345.0
    job.gpu["fb_used"][:, :, i:] = 0.002 * job.spec[3]
    job.host["procs_running"][:, i:] = np.round(job.host["procs_running"][:, i:] * 0.25)
    tail = len(job.grid) - i
    if tail > 0:
        temp = job.gpu["temp"]
        decay = np.exp(-np.arange(tail) * job.interval / 180.0)
        temp[:, :, i:] = (
            33 + (temp[:, :, i - 1 : i] - 33) * decay + job.rng.normal(0, 0.3, temp[:, :, i:].shape)
        )


def apply_oom(job: Job) -> None:
    rng = job.rng
    n_cul = 1 if rng.random() < 0.65 or len(job.replica0) < 2 else 2
    cul = [int(h) for h in rng.choice(job.replica0, n_cul, replace=False)]
    saves = job.saves[1:] if len(job.saves) > 3 else job.saves
    n = int(rng.integers(3, min(6, len(saves)) + 1))
    total = float(job.host["mem_total"][0, 0])
    t = job.grid
    mem = job.host["mem_used"]
    u_f = float(np.median(job.meta["mem_floor"][cul[0]][(t > job.train_start + 60) & (t < saves[0][1])]))
    r = total * float(rng.uniform(0.1, 0.14))
    while n > 2 and u_f + (n - 1) * r > 0.86 * total:
        n -= 1  # the floor before the fatal save stays well below the limit
    r = min(r, (0.86 * total - u_f) / (n - 1))
    ramp = float(rng.uniform(45, 120))
    ts_fatal = saves[n - 1][1]
    t_full = ts_fatal + ramp
    for h in job.replica0:
        floor = job.meta["mem_floor"][h] + total * rng.normal(0, 0.002, len(t))
        u0 = float(np.median(job.meta["mem_floor"][h][(t > job.train_start + 60) & (t < saves[0][1])]))
        top = 1.02 if h in cul else float(rng.uniform(0.8, 0.88))  # earlier saves peak at top - r
        spike = max(0.08 * total, top * total - u0 - (n - 1) * r)
        add = np.zeros_like(t)
        for j, (_, ts) in enumerate(saves[:n]):
            hold = 40 + 30 * rng.random()
            fall = np.clip(1 - (t - ts - ramp - hold) / 15, 0, 1)
            add += spike * np.clip((t - ts) / ramp, 0, 1) * fall
            add += r * (1 - fall) * (j < n - 1)  # what this save keeps raises the next one's floor
        mem[h] = np.minimum(floor + add, 0.993 * total)
        if h in cul:
            frac = (0.985 * total - u0 - (n - 1) * r) / spike
            t_full = min(t_full, ts_fatal + ramp * float(np.clip(frac, 0.2, 1.0)))
    kills = [t_full + float(rng.uniform(0, 6)) for _ in cul]
    truncate(job, min(kills))
    for h, tk in zip(cul, kills, strict=True):
        k = idx(job, tk)
        job.host["oom_kills"][h, k:] += 1 + int(rng.random() < 0.3)
        mem[h, k:] = total * float(rng.uniform(0.05, 0.1)) + total * rng.normal(0, 0.002, len(t) - k)
    k = idx(job, min(kills) + 5)
    for h in range(job.n_hosts):
        if h not in cul:
            mem[h, k:] = job.meta["mem_floor"][h, k:] * 0.3
    _kill_after_crash(job)
    job.meta["oom_hosts"] = cul
    story = f"memory staircase over {n} saves on replica-0 hosts; the save at step {saves[n - 1][0]} hits the limit"
    _set_truth(job, [(h, None) for h in cul], ts_fatal, story)


def apply_thermal(job: Job) -> None:
    rng, m = job.rng, job.meta
    h = int(rng.integers(0, job.n_hosts))
    if h == m.get("warm_host"):
        h = (h + 1) % job.n_hosts
    g = int(rng.integers(0, job.gpus))
    t = job.grid
    rise = np.clip((t - m["t_on"]) / (m["d1"] + m["d2"]), 0, 1)
    temp = job.gpu["temp"]
    peak = float(rng.uniform(89, 97))
    temp[h, g] += rise * max(8.0, peak - float(np.median(temp[h, g])))
    thr = m["depth"] * np.clip((t - m["t_on"] - m["d1"]) / m["d2"], 0, 1)
    act = job.meta["act"][h]
    job.gpu["sm_clock"][h, g] = np.where(
        act > 0, job.gpu["sm_clock"][h, g] * (1 - thr), job.gpu["sm_clock"][h, g]
    )
    job.gpu["power"][h, g] -= act * thr * 0.9 * (job.gpu["power"][h, g] - job.spec[0])
    for hh in range(job.n_hosts):
        job.gpu["power"][hh] -= job.meta["act"][hh] * 0.5 * thr * (job.spec[1] - job.spec[0]) * 0.4
    _kill_after_crash(job)
    _set_truth(job, [(h, g)], m["t_on"], f"GPU {g} heats to {peak:.0f} C, clock throttles, every step slows")


def apply_driver(job: Job) -> None:
    rng, t_on = job.rng, job.meta["t_on"]
    h = int(rng.integers(0, job.n_hosts))
    i0 = idx(job, t_on)
    N = len(job.grid)
    inc = np.zeros(N)
    inc[i0] = float(rng.integers(1, 4))
    later = rng.random(N) < min(0.5, job.interval / 180.0)
    inc[i0 + 1 :] += later[i0 + 1 :] * rng.integers(1, 4, N - i0 - 1)
    job.gpu["dmesg"][h, 0] = np.cumsum(inc)
    gaps = np.zeros(N, dtype=bool)
    gaps[i0 + 1 :] = rng.random(N - i0 - 1) < rng.uniform(0.3, 0.5)
    gaps[i0] = True  # the first error is also the first timed-out collection (not all layouts show dmesg)
    job.gpu_gap[h] = gaps
    job.gpu_scrape_s[h, gaps] = rng.uniform(12.0, 12.4, int(gaps.sum()))
    job.gpu_scrape_s[h, i0:][~gaps[i0:]] = rng.uniform(0.4, 2.8, int((~gaps[i0:]).sum()))
    if rng.random() < 0.6:
        gsel = rng.choice(job.gpus, int(rng.integers(1, job.gpus + 1)), replace=False)
        job.gpu["xid"][h, gsel, i0:] = float(rng.choice([119, 62, 45]))
    job.meta["driver_host"] = h
    story = "driver errors, GPU-exporter timeouts and gaps on one host; training unaffected"
    _set_truth(job, [(h, None)], t_on, story)


def apply_hardware(job: Job) -> None:
    rng, t_on = job.rng, job.meta["t_on"]
    h, g = int(rng.integers(0, job.n_hosts)), int(rng.integers(0, job.gpus))
    i0 = idx(job, t_on)
    if job.meta.get("ecc_mode") == "remap":
        job.gpu["remap_uncorr"][h, g, i0:] += float(rng.integers(1, 3))
        job.gpu["remap_fail"][h, g, i0:] = 1.0
        job.gpu["xid"][h, g, i0:] = 64.0
    else:
        job.gpu["ecc_dbe"][h, g, i0:] += float(rng.integers(1, 4))
        xid = float(rng.choice([48, 48, 79]))
        job.gpu["xid"][h, g, i0:] = xid
        if xid == 79:  # fallen off the bus: its exporter reads nothing more from it, the host goes on
            job.meta["gpu_lost"] = (h, g, idx(job, t_on + float(rng.uniform(1, 3)) * job.interval))
    _kill_after_crash(job)
    job.meta["hw_gpu"] = (h, g)
    story = "uncorrectable memory error on one GPU, the trainer aborts; the host keeps reporting"
    _set_truth(job, [(h, g)], t_on, story)


def apply_instability(job: Job) -> None:
    rng, t_on, lag = job.rng, job.meta["t_on"], job.meta["sys_lag"]
    s = job.step_end
    after = np.clip((s - t_on) / rng.uniform(120, 360), 0, None)
    job.grad = job.grad * np.exp(np.minimum(after, 4.0) * rng.uniform(0.8, 1.2))
    loss_lag = float(rng.uniform(0, 60))
    la = np.clip((s - t_on - loss_lag) / rng.uniform(150, 400), 0, None)
    job.loss = job.loss * (1 + np.minimum(la, 3.0) * rng.uniform(0.4, 0.9))
    t = job.grid
    sys = (t > t_on + lag) & (job.meta["act"][0] > 0)
    if job.crash_time is not None:
        sys &= t < job.crash_time
    drop = rng.uniform(0, 25, (job.n_hosts, job.gpus, 1))
    job.gpu["util"] = np.where(sys, job.gpu["util"] - drop, job.gpu["util"])
    job.gpu["power"] = np.where(sys, job.gpu["power"] - 6 * drop, job.gpu["power"])
    _kill_after_crash(job)
    _set_truth(job, [], t_on, "gradient norm and loss climb first; utilisation and step time follow")


def apply_leak(job: Job) -> None:
    """Only the restored run (`b`) carries the extra runnable threads, from the restore on."""
    if job.meta.get("leak"):
        t0 = job.meta["restore_time"]
        stop = job.crash_time if job.crash_time is not None else job.last_step_time() + 1
        on = (job.grid >= t0) & (job.grid <= stop)
        job.host["procs_running"] += (
            np.round(job.meta["leak"] + job.rng.normal(0, 0.8, job.host["procs_running"].shape)) * on
        )
    _kill_after_crash(job)


APPLY: dict[str, Callable[[Job], None]] = {
    "healthy": apply_healthy,
    "host-oom": apply_oom,
    "thermal-straggler": apply_thermal,
    "gpu-driver-fault": apply_driver,
    "gpu-hardware-fault": apply_hardware,
    "training-instability": apply_instability,
    "restore-resource-leak": apply_leak,
}


def red_herrings(job: Job) -> None:
    """Harmless oddities every kind of job may carry."""
    rng = job.rng
    N = len(job.grid)
    if rng.random() < 0.4:  # a stale Xid from before the job
        h, g = int(rng.integers(0, job.n_hosts)), int(rng.integers(0, job.gpus))
        if not job.gpu["xid"][h, g].any():
            job.gpu["xid"][h, g] = float(rng.choice([13, 31, 43, 94]))
    if rng.random() < 0.4:  # a correctable ECC trickle
        h, g = int(rng.integers(0, job.n_hosts)), int(rng.integers(0, job.gpus))
        ticks = rng.random(N) < job.interval / rng.uniform(300, 900)
        job.gpu["ecc_sbe"][h, g] += np.cumsum(ticks)
        job.gpu["remap_corr"][h, g] += np.cumsum(ticks) // 4
    if rng.random() < 0.3:  # a few stale dmesg lines on one host, not growing
        job.gpu["dmesg"][int(rng.integers(0, job.n_hosts)), 0] += float(rng.integers(1, 5))
