"""What the variants `_variants.choose` decided do to a simulated job: each function changes its arrays in
place (the catalogue of the variants: `_variants.py`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._variants import stream

TIB = 1024.0**4


def hb_net_blip(
    job: Any, retx: np.ndarray, ack: np.ndarray, t: np.ndarray, host: int, hb_stop: float
) -> None:
    """A retransmit burst on `host`'s first one or two RDMA devices, ending before the heartbeat-stop time."""
    rng = stream(job, 20)
    before, length = job.variants["hb_net_blip"]
    on = (t >= hb_stop - before - length) & (t < hb_stop - before)
    for d in range(min(retx.shape[1], 1 + int(rng.integers(0, 2)))):
        retx[host, d] = np.where(on, rng.uniform(200, 2500, len(t)), retx[host, d])
        ack[host, d] = np.where(on, rng.uniform(2, 25, len(t)), ack[host, d])
    job.notes.append(f"{job.hosts[host]}: RDMA retransmit burst before the heartbeat stop; training went on")


def noisy_spin(job: Any, util: np.ndarray, hang: np.ndarray) -> None:
    """Scatter the spinning GPUs' utilisation during the hang (those above 50 %: the idle ones stay)."""
    rng = stream(job, 21)
    spin = (util > 50) & hang[None, None, :]
    util[...] = np.where(spin, np.clip(rng.normal(84, 14, util.shape), 40, 100), util)


def rdma_trickle(job: Any, K: int, D: int, N: int) -> tuple[np.ndarray, np.ndarray]:
    """Return (retransmits, ACK timeouts) per second on the grid: the background every fabric shows."""
    rng = stream(job, 1)
    nics = rng.integers(2, D + 1, K) if D >= 2 else np.ones(K, int)
    used = np.arange(D)[None, :, None] < nics[:, None, None]
    retx = np.where((rng.random((K, D, N)) < 0.01) & used, rng.integers(3, 41, (K, D, N)), 0)
    ack = np.where((rng.random((K, D, N)) < 0.001) & used, rng.integers(1, 3, (K, D, N)), 0)
    return retx / job.interval, ack / job.interval


def majority_degraded(job: Any, bad: list[int]) -> list[int]:
    """Return the degraded hosts of a fabric fault: most of the job's (never the head: it carries tb_*)."""
    K = job.nodes
    if K < 3:
        return bad
    rng = stream(job, 7)
    rng.random()  # the draw that chose the variant
    n = min(K - 1, K // 2 + 1)
    out = sorted(int(x) for x in rng.choice(np.arange(1, K), size=n, replace=False))
    job.notes.append(f"fabric fault: {n} of {K} hosts degraded at once")
    return out


def pre_step_hang(job: Any, util: np.ndarray, power: np.ndarray, hang: np.ndarray, idle_w: float) -> None:
    """Only 2-3 GPU indices a host spin in the first collective; one host (half the seeds) spins others."""
    rng = stream(job, 2)
    K, G, _ = util.shape
    common = {int(x) for x in rng.choice(G, size=int(rng.integers(2, 4)), replace=False)}
    sets = [set(common) for _ in range(K)]
    if K > 2 and rng.random() < 0.5:
        h = int(rng.integers(1, K))
        other = [g for g in range(G) if g not in common]
        sets[h] = set(common) - {min(common)} | {int(rng.choice(other))}
        job.culprits = [{"host": job.hosts[h], "gpu": None}]
        job.notes.append(f"{job.hosts[h]} spins GPUs {sorted(sets[h])}, the others {sorted(common)}")
    else:
        job.culprits = []
        job.notes.append(f"every host spins GPUs {sorted(common)} before step 0")
    for h in range(K):
        for g in range(G):
            if g not in sets[h]:
                util[h, g] = np.where(hang, 0.0, util[h, g])
                power[h, g] = np.where(hang, idle_w * rng.uniform(0.98, 1.02, len(hang)), power[h, g])


def staircase(job: Any, mem: np.ndarray, h: int, t: np.ndarray, ramp_start: float) -> None:
    """Each checkpoint save before the fatal one leaves memory retained on host h: a staircase."""
    level = float(job.variants["staircase"]) * 2 * TIB
    saves = [
        float(job.step_end[c - job.first_step])
        for c in job.ckpt_steps
        if 0 <= c - job.first_step < len(job.step_end) and job.step_end[c - job.first_step] < ramp_start - 60
    ]
    if not saves:
        return
    before = (t >= job.train_start) & (t < saves[0])
    floor = float(np.median(mem[h][before])) if before.any() else float(mem[h][0])
    each = max(0.0, level - floor) / len(saves)
    rise = sum((t >= s).astype(float) for s in saves) * each
    until = ramp_start
    if "save_peaks" in job.variants:
        rise = rise + _save_peaks(job, mem[h] + rise, t, saves)
        until = float(job.oom["kill"])  # the fatal save's rise starts from the retained level
    mem[h] = np.where(t < until, mem[h] + rise, mem[h])
    job.notes.append(f"{len(saves)} earlier saves left {each / 2 / TIB:.1%} of memory each on {job.hosts[h]}")


def _save_peaks(job: Any, mem: np.ndarray, t: np.ndarray, saves: list[float]) -> np.ndarray:
    """Return what each save adds while it writes back: up to `save_peaks` of the memory over 60-120 s,
    held 30-60 s, then released within 20 s (what it retains is the staircase's step)."""
    rng = stream(job, 10)
    rng.random()  # the draw of the peak level
    peak = float(job.variants["save_peaks"]) * 2 * TIB
    add = np.zeros_like(t)
    for s in saves:
        up, hold = float(rng.uniform(60, 120)), float(rng.uniform(30, 60))
        shape = np.clip((t - s) / up, 0, 1) * np.clip(1 - (t - s - up - hold) / 20.0, 0, 1)
        add = np.maximum(add, np.clip(peak - mem, 0, None) * shape)
    return add


def smooth_divergence(job: Any, i0: int) -> None:
    """Training metrics climb smoothly from step i0 (which began at the onset): exponentially with the
    variant's e-folding time."""
    n = len(job.step_num)
    rng = stream(job, 12)
    tau = float(job.variants["smooth_divergence"])
    dt = np.clip(job.step_end - job.step_end[min(i0, n - 1)], 0, None)
    grow = np.expm1(np.minimum(dt / tau, 3.0))  # 0 at the onset, ~19x after three e-folding times
    job.grad_norm = job.grad_norm * (1 + float(rng.uniform(0.5, 1.0)) * grow)
    job.raw_grad_norm = job.grad_norm * rng.uniform(1.5, 3.0, n)
    job.loss = job.loss + float(rng.uniform(0.05, 0.12)) * grow
    job.moe_lb = job.moe_lb * (1 + float(rng.uniform(0.3, 0.8)) * grow)


def elastic_restart(job: Any, onset: float, fields: tuple[str, ...]) -> None:
    """Restart every worker `elastic_restart[0]` seconds before `onset`: after the gap, the steps from the last
    checkpoint run again (their metrics as first logged), shifted later; what no longer fits is dropped."""
    before, gap = job.variants["elastic_restart"]
    ends = job.step_end
    r = int(np.searchsorted(ends, onset - before)) - 1  # the last step the old workers completed
    if r < 1:
        return
    # resume at a checkpoint at least 40 steps back (the run's own first step without one): the loss goes
    # back up to that step's level
    ckpts = [c for c in job.ckpt_steps if c <= int(job.step_num[r]) - 40] or [int(job.step_num[0])]
    c = int(np.searchsorted(job.step_num[: r + 1], ckpts[-1]))
    shift = float(ends[r]) + gap - (float(ends[c]) - float(job.step_secs[c]))
    again = np.arange(c, len(ends))
    keep = again[ends[again] + shift <= ends[-1]]
    for name in fields:
        arr = getattr(job, name)
        setattr(job, name, np.concatenate([arr[: r + 1], arr[keep]]))
    job.step_end[r + 1 :] += shift
    job.step_secs[r + 1] += gap
    job.restart = (float(ends[r]), int(job.step_num[r + 1]))


#: the variants whose job ends with the trainer raising on a non-finite loss (exit 1)
NAN_ENDINGS = frozenset({"nan_stop", "nan_traceback", "climb_to_nan", "blowup_traceback"})


def nan_stop(
    job: Any, i0: int, fields: tuple[str, ...], rng: np.random.Generator, at_once: bool = False
) -> None:
    """The loss is NaN from step i0 on; the trainer stops after three non-finite steps and the job fails.
    `at_once`: it raises during step i0 itself (the NaN seen in its forward pass), which never completes."""
    i0 = max(1, i0) if at_once else i0
    last = i0 - 1 if at_once else min(i0 + 2, len(job.step_num) - 1)
    raised = 0.6 * float(job.step_secs[i0]) if at_once else 5.0
    for name in fields:
        setattr(job, name, getattr(job, name)[: last + 1])
    job.loss[i0:] = np.nan
    job.crash_time = float(job.step_end[last]) + raised
    job.stall_time = job.crash_time
    job.job_end = job.crash_time + float(rng.uniform(60, 180))
    job.ckpt_steps = [c for c in job.ckpt_steps if c <= int(job.step_num[-1])]


def near_limit_save(job: Any, mem: np.ndarray, rep0: np.ndarray, t: np.ndarray) -> None:
    """A checkpoint writer reaches `near_limit_save` of its memory during one save and recovers."""
    rng = stream(job, 3)
    writers = np.nonzero(rep0)[0]
    if not len(writers) or len(job.ckpt_steps) < 2:
        return
    h = int(rng.choice(writers))
    c = job.ckpt_steps[len(job.ckpt_steps) // 2]
    t0 = float(job.step_end[c - job.first_step])
    win = (t >= t0) & (t < t0 + float(rng.uniform(60, 150)))
    mem[h] = np.where(win, float(job.variants["near_limit_save"]) * 2 * TIB, mem[h])
    job.red_herrings["near_limit_without_kill"] = job.hosts[h]


def host_background(job: Any, running: np.ndarray, during: np.ndarray) -> None:
    """Add each host's own background runnable processes (drawn per run) while the job runs."""
    rng = stream(job, 4)
    offsets = rng.uniform(0.0, float(job.variants["host_background"]), len(running))
    running += np.where(during[None, :], offsets[:, None], 0.0)


def stall_start(job: Any) -> float:
    """Return when the exporter stall (`exporter_stall`, `stall_in_dip`) begins."""
    return float(job.train_start + job.variants["exporter_stall"][1] * (job.job_end - job.train_start))


def exporter_stall(
    job: Any,
    timeouts: np.ndarray,
    scrape: np.ndarray,
    gpu_present: np.ndarray,
    t: np.ndarray,
    at: tuple[int, float, float] | None = None,
) -> None:
    """One host's GPU exporter hangs once (`exporter_stall`; `at` (host, start, seconds): `culprit_stall`'s):
    its scrapes time out for one stretch."""
    if at is None:
        h = 1 + int(stream(job, 16).integers(0, max(1, job.nodes - 1))) if job.nodes > 1 else 0
        start, secs = stall_start(job), float(job.variants["exporter_stall"][0])
    else:
        h, start, secs = at
    win = (t >= start) & (t < start + secs)
    timeouts[h] |= win
    scrape[h] = np.where(win, 12.0, scrape[h])
    gpu_present[h] &= ~win
    job.red_herrings["exporter_stall"] = f"{job.hosts[h]} for {secs:.0f} s"


def restart_at_end(job: Any, gpu_present: np.ndarray, t: np.ndarray) -> None:
    """`restart_at_end`: one host's GPU exporter refuses its scrapes from minutes before the data's end on."""
    secs, h = job.variants["restart_at_end"]
    h = min(int(h), gpu_present.shape[0] - 1)
    down = np.zeros(gpu_present.shape, bool)
    down[h] = t >= float(t[-1]) - secs
    gpu_present &= ~down
    job.gpu_down = down
    job.red_herrings["restart_at_end"] = f"{job.hosts[h]} for {secs:.0f} s"


def scrape_blips(job: Any) -> None:
    """`scrape_blips`: every target of every host (the GPU exporter's, node_exporter's) fails each scrape at
    random, independently, at the fleet's rate (a timed-out scrape: no sample of the target at it)."""
    rate = float(job.variants["scrape_blips"])
    rng = stream(job, 52)
    shape = job.present.shape
    gpu, node = rng.random(shape) < rate, rng.random(shape) < rate
    job.failed_scrape_mask = gpu & job.present
    job.gpu_present = job.gpu_present & ~gpu
    job.node_failed = node & job.present
    job.notes.append(f"network blips: {rate:.1%} of every target's scrapes fail at random, on every host")
    job.red_herrings["scrape_blips"] = f"{rate:.2%} of the scrapes of every target"


def late_exporter(job: Any, present: np.ndarray) -> None:
    """Half the seeds: one host's exporter comes up one or two scrapes after the others."""
    rng = stream(job, 5)
    if rng.random() >= 0.5:
        return
    h, k = int(rng.integers(0, present.shape[0])), int(rng.integers(1, 3))
    present[h, :k] = False
    job.red_herrings["late_exporter"] = job.hosts[h]


def short_freeze(job: Any, t: np.ndarray, onset: float) -> tuple[int, int]:
    """Return the grid indices [from, to) of a 5-15 min freeze: the data's last minutes, or from the onset
    until the exporter is restarted; set the truth's onset to the freeze's start."""
    secs, at_end = job.variants["short_freeze"]
    start = float(t[-1]) - secs if at_end else onset
    i, j = int(np.searchsorted(t, start)), int(np.searchsorted(t, start + secs))
    job.onset = float(t[min(i, len(t) - 1)])
    job.notes.append(
        f"exporter frozen {secs / 60:.1f} min " + ("to the data's end" if at_end else "then restarted")
    )
    return i, j


def capped_rack(job: Any, temp: np.ndarray, clock: np.ndarray, power: np.ndarray, culprit: int) -> None:
    """Half the hosts, a contiguous block without the culprit, run power-capped for the whole job."""
    cooler, factor = job.variants["capped_rack"]
    K = temp.shape[0]
    half = [h for h in range(K) if h != culprit][: max(1, K // 2)]
    if culprit < K // 2:
        half = [h for h in range(K) if h != culprit][-max(1, K // 2) :]
    temp[half] -= cooler
    clock[half] *= factor
    power[half] *= 0.8
    job.red_herrings["capped_rack"] = [job.hosts[h] for h in half]


def cooling_drop(job: Any, temp: np.ndarray, t: np.ndarray, onset: float, hold: float = 90.0) -> None:
    """Every GPU cools by about the drawn degrees (each host by its own share, 0.6-1.4 of it: its place in
    the airflow) for `hold` s, recovering over 3 min; each host's exporter sees it up to 1.5 scrapes late."""
    depth, after = job.variants["cooling_drop"]
    rng = stream(job, 17)
    for h in range(temp.shape[0]):
        t0 = onset + after + float(rng.uniform(0, 1.5 * job.interval))
        dt = t - t0
        shape = np.where((dt >= 0) & (dt < hold), 1.0, 0.0) + np.where(
            dt >= hold, np.clip(1 - (dt - hold) / 180, 0, 1), 0
        )
        temp[h] -= depth * float(rng.uniform(0.6, 1.4)) * shape[None, :]
    job.red_herrings["cooling_drop"] = f"{depth:.0f} degC at {onset + after:.0f}"


def hot_host(job: Any, temp: np.ndarray, training: np.ndarray, t: np.ndarray, host: int) -> None:
    """One host's GPUs all warm by about the drawn degrees (each by 0.8-1.2 of it: its inlet air warmed, a
    fan slowed) partway into the training, and stay warm: the host's environment, no GPU's fault."""
    warmer, where, secs = job.variants["hot_host"]
    tt = t[training] if training.any() else t
    t0 = float(tt[0] + where * (tt[-1] - tt[0]))
    shape = np.clip((t - t0) / secs, 0, 1)
    share = np.asarray(stream(job, 25).uniform(0.8, 1.2, temp.shape[1]))
    temp[host] += warmer * share[:, None] * shape[None, :]
    job.red_herrings["hot_host"] = f"{job.hosts[host]} {warmer:.0f} degC warmer from {t0:.0f}"


def mixed_models(job: Any, power: np.ndarray, culprit: int) -> None:
    """One host (never the culprit) holds a bigger GPU model: its power scaled in every phase."""
    scale = job.variants["mixed_models"]
    others = [h for h in range(job.nodes) if h != culprit] or [0]
    host = int(others[int(stream(job, 28).integers(len(others)))])
    power[host] *= scale
    job.red_herrings["mixed_models"] = (
        f"{job.hosts[host]}: a GPU model drawing {scale:.1f}x the others' power"
    )
