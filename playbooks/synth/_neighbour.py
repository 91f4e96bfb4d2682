"""Another tenant on the job's nodes (deployment `shared-node`): GPUs of each node the job never ran on.

A node's GPUs are split between jobs by the scheduler (Slurm's gres, Kubernetes' device plugin): the job
holds some indices of each node, another tenant's job the others, or nobody. The tenant's GPUs report
through the same exporter, under the same host, with nothing in their labels that says whose they are.
"""

from __future__ import annotations

import numpy as np

from ._sim_parts import _lag
from ._sim_plan import Job

__all__ = ["add_neighbour"]


def add_neighbour(job: Job, n: int, *, load: str = "steady", layout: str = "after") -> None:
    """Add `n` GPUs a host that never ran the job's work.

    `load`: "steady", each at its own steady partial load whatever the job does; "varying", the tenant's own
    job goes its own way (its load wanders and steps; its GPUs heat, cool and change clock with it, each
    at its own place in the node's airflow). `layout`: "after", the tenant's GPUs follow the job's on every
    host; "scattered", on about half the hosts the job holds another subset of the node's indices (e.g. 0,
    1, 3, 6), and on some of the hosts nobody else runs: those GPUs sit idle.
    """
    rng = np.random.default_rng([job.seed, 515])
    gs = job.gpu_sig
    K, _, N = gs["power"].shape
    extra = (
        _steady(job, rng, n) if load == "steady" else _varying(job, np.random.default_rng([job.seed, 516]), n)
    )
    if layout == "scattered":
        _idle_some(job, extra, np.random.default_rng([job.seed, 517]))
    for key, arr in gs.items():
        if getattr(arr, "ndim", 0) == 3 and arr.shape[:2] == (K, job.gpus):
            gs[key] = np.concatenate([arr, extra.get(key, np.zeros((K, n, N)))], axis=1)
    what = "busy" if load == "steady" else "busy with a load of its own (wandering, stepping)"
    G = job.gpus
    if layout != "scattered":
        job.red_herrings["job_gpus"] = {h: list(range(G)) for h in job.hosts}
        job.notes.append(f"another tenant keeps GPUs {G}-{G + n - 1} of every host {what}")
        return
    order = _scatter(job, n, np.random.default_rng([job.seed, 518]))
    for key, arr in gs.items():
        if getattr(arr, "ndim", 0) == 3 and arr.shape[:2] == (K, job.gpus + n):
            gs[key] = np.stack([arr[h, order[h]] for h in range(K)])
    for c in job.culprits:
        if c.get("gpu") is not None and c.get("host") in job.hosts:
            h = job.hosts.index(c["host"])
            c["gpu"] = str(order[h].index(int(c["gpu"])))
    job.red_herrings["job_gpus"] = {
        host: [i for i, src in enumerate(order[h]) if src < G] for h, host in enumerate(job.hosts)
    }
    job.notes.append(f"another tenant keeps the GPUs the job does not hold {what} (on some hosts they idle)")


def _steady(job: Job, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Return the tenant's series: each GPU at its own steady load (40-80 % util) whatever the job does."""
    gs, gm = job.gpu_sig, job.gpu
    K, _, N = gs["power"].shape
    level = rng.uniform(40.0, 80.0, (K, n, 1))  # each GPU its own steady load (mean 50-60 % a host)
    util = np.clip(level + rng.normal(0.0, 3.0, (K, n, N)), 0.0, 100.0)
    power = gm.active_w * (0.1 + 0.45 * level / 100.0) + rng.normal(0.0, 8.0, (K, n, N))
    clock = np.nanmax(gs["sclk"]) * rng.uniform(0.85, 0.95, (K, n, 1)) * np.ones((1, 1, N))
    return {
        "util": util,
        "power": power,
        "temp": rng.uniform(45.0, 55.0, (K, n, 1)) + rng.normal(0.0, 0.5, (K, n, N)),
        "sclk": np.round(clock),
        "mclk": np.full((K, n, N), float(gm.mem_clock_mhz)),
        "vram_used": gm.vram_bytes * rng.uniform(0.3, 0.6, (K, n, 1)) * np.ones((1, 1, N)),
        "vram_total": np.full((K, n, N), float(gm.vram_bytes)),
    }


def _varying(job: Job, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Return the tenant's series when its own job wanders: a random walk of its load (15-95 %) plus a step
    of its own at a random time; temperature follows power with thermal lag from each GPU's own offset
    (-6 to +10 C against the job's: another place in the airflow); clocks drop when it idles or is capped."""
    gs, gm = job.gpu_sig, job.gpu
    K, _, N = gs["power"].shape
    walk = 0.55 + np.cumsum(rng.normal(0.0, 0.03, (K, n, N)), axis=-1)
    step_at = rng.integers(N // 5, 4 * N // 5, (K, n, 1))
    walk = walk + np.where(np.arange(N)[None, None, :] >= step_at, rng.choice([-0.3, 0.3], (K, n, 1)), 0.0)
    level = np.clip(walk, 0.15, 0.95)
    power = gm.idle_w + (gm.active_w - gm.idle_w) * level + rng.normal(0.0, 6.0, (K, n, N))
    heat = np.clip((power - gm.idle_w) / (gm.active_w - gm.idle_w), 0.0, 1.1)
    temp = gm.temp_idle_c + rng.uniform(-6.0, 10.0, (K, n, 1)) + (gm.temp_active_c - gm.temp_idle_c) * heat
    temp = _lag(temp, 0.35) + rng.normal(0.0, 0.4, (K, n, N))
    clock = gm.clock_mhz * np.clip(0.6 + 0.45 * level, 0.35, 1.0) + rng.normal(0.0, 6.0, (K, n, N))
    return {
        "util": np.clip(100.0 * level + rng.normal(0.0, 3.0, (K, n, N)), 0.0, 100.0),
        "power": power,
        "temp": temp,
        "sclk": np.round(clock),
        "mclk": np.full((K, n, N), float(gm.mem_clock_mhz)),
        "vram_used": gm.vram_bytes * rng.uniform(0.3, 0.6, (K, n, 1)) * np.ones((1, 1, N)),
        "vram_total": np.full((K, n, N), float(gm.vram_bytes)),
    }


def _idle_some(job: Job, extra: dict[str, np.ndarray], rng: np.random.Generator) -> None:
    """Leave the other GPUs of about a third of the hosts (never all) idle: nobody else runs there."""
    gm, K = job.gpu, job.nodes
    idle = rng.random(K) < 0.35
    if idle.all():
        idle[int(rng.integers(K))] = False
    for h in np.nonzero(idle)[0]:
        shape = extra["power"][h].shape
        extra["util"][h] = 0.0
        extra["power"][h] = gm.idle_w * (1 + rng.normal(0.0, 0.01, shape))
        extra["temp"][h] = gm.temp_idle_c + rng.normal(0.0, 1.5) + rng.normal(0.0, 0.4, shape)
        extra["sclk"][h] = np.round(gm.clock_mhz * 0.35 + rng.normal(0.0, 6.0, shape))
        extra["vram_used"][h] = gm.vram_bytes * 0.003


def _scatter(job: Job, n: int, rng: np.random.Generator) -> list[list[int]]:
    """Return, per host, the source row of each node index: the job's GPUs on a random subset of the
    node's indices on about half the hosts (at least one), in order after each other elsewhere."""
    G, K = job.gpus, job.nodes
    mixed = rng.random(K) < 0.5
    if not mixed.any():
        mixed[int(rng.integers(K))] = True
    order = []
    for h in range(K):
        mine = sorted(rng.choice(G + n, G, replace=False).tolist()) if mixed[h] else list(range(G))
        others = iter(range(G, G + n))
        jobs = iter(range(G))
        order.append([next(jobs) if i in mine else next(others) for i in range(G + n)])
    return order
