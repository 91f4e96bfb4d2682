"""Seed-dependent variants of the scenarios, as real deployments show them.

Each variant draws from its own random stream (seed, variant number), so adding one leaves every other
value of a seed's job as it was. `choose` decides the variants of a job before it is simulated; the other
functions change the simulated arrays in place.

- every scenario, healthy included: a trickle of RDMA retransmits (a few to tens of packets on about 1 % of
  scrapes of 2-8 NICs a host) and a rarer ACK timeout, with no change point and no effect on throughput;
- collective-hang: cancelled before step 0, with 2-3 GPU indices a host busy-waiting in the first
  collective (a host whose set differs is where to start);
- node-death: the node is lost as Slurm reports it (`Node failure`, the step CANCELLED DUE TO NODE FAILURE,
  the survivors exit 143), and/or its GPU fell off the bus (Xid 79, kernel errors) minutes before it went
  silent, which is then the onset;
- host-oom: checkpoint saves leave memory retained, so memory climbs in a staircase and the last save hits
  the limit (the onset is the start of that last rise);
- healthy: a checkpoint writer brushes the memory limit during a save and recovers, without any kill;
- restore-resource-leak (both runs) and healthy: each host runs its own number of background daemons, drawn
  anew for every run (another allocation), so a host's level differs between a restored run and its baseline;
- rdma-degradation: a fabric fault (a leaf switch) degrades most of the job's hosts at once, so the pack's
  level over the job is the degraded one and each host must be judged against its own history;
- gpu-hardware-fault: the uncorrectable error comes in the last minute of the data (the trainer aborts
  seconds later and the capture ends soon after), so a grid anchored at the data's start may miss it;
- every scenario, half the seeds: one host's exporter comes up a scrape or two late.

Off by default (a caller asks for them: `generate_job(..., variants=...)`), so no seed's job changes:

- node-death `death_at_end`: the node dies in the data's last minute, a scrape or two before the capture
  ends (the TSDB was copied while the job still waited for its heartbeat timeout or Slurm), so a grid
  anchored at the data's start, or a silence that must last minutes, misses it.
- node-death `remap_before_death`: 2-10 minutes before the host goes silent one of its GPUs remaps one
  row (its correctable-error counter, a remapped row under DCGM's default fields, grows by one), with no
  Xid and no kernel errors: that one change is the onset (instead of the seed's errors_before_death).
- monitoring-ghost-data `short_freeze`: the exporter stays frozen only 5-15 minutes: either for the data's
  last minutes (the capture was taken while it hung) or mid-run until it is restarted and serves live
  values again.
- monitoring-ghost-data `node_freeze`: the host's node_exporter freezes instead of its GPU exporter (every
  node_* value constant, `up` still 1, the GPU exporter live); node_exporter deployments (nvidia) only.
- host-oom `coarse_staircase`: the staircase, scraped every 30 or 60 s, and each earlier save peaks well
  above the floor it leaves (90-95 % of the memory during its write-back) before it falls back: the
  fatal rise is seen by a sample or two, which may stand lower than an earlier save's peak.
- thermal-straggler `slow_heating`: the hot GPU heats over 25-45 min instead of 10-20, so its
  temperature crosses any threshold against the pack long after it left its own level.
- training-instability `smooth_divergence`: gradient norm, loss and MoE load-balance loss climb smoothly
  (exponentially, over minutes) from the onset instead of jumping.
- thermal-straggler `capped_rack`: half the hosts (a rack, never the culprit's) are power-capped by design
  for the whole job: their GPUs run 6-12 degC cooler and clock 12-18 % lower, so the pack is two packs.
- thermal-straggler `cooling_drop`: a fleet-wide temperature drop of 8-14 degC (a cooling change; each
  host cools by its own share of it) within a minute or two of the onset, recovering over a few minutes;
  each host's exporter sees it up to a scrape and a half late (its own collection phase).
- node-death `long_wait`: the survivors wait 20-40 minutes (a collective timeout) before the job is
  killed, so the dead host has been silent far longer than any lookback at the data's end.
- training-instability `elastic_restart`: 10-25 minutes before the onset an
  elastic agent restarts every worker: after a gap of 1-3 minutes the steps go back to a checkpoint at least
  40 steps back (or to the run's first step) and are run again, so the loss (and every step's metrics) are logged anew from that step's level: nobody's
  fault, and no onset.
- healthy `capture_after_end`: the run completes 3-7 minutes before the capture ends (the exporters keep
  scraping): the steps stop, the job's GPUs idle from its last step on, the log ends with its summary.
- healthy `exporter_stall`: one host's GPU exporter hangs once for 3-6 minutes mid-run (its scrapes time
  out and its GPU samples are missing for that one stretch, then it serves again), with no driver error in
  the kernel log: one outage of the monitoring, not the recurring timeouts of a GPU driver fault.
- healthy `stall_in_dip`: the exporter stall (one host, 4-5 minutes) begins as every GPU of the job cools by
  8-14 degC (an evaluation pause, a cooling change) for the stall's length and a minute, recovering over 3
  min: a range query holds the stalled host's last (hot) values up to its lookback while the pack cools.
- healthy, thermal-straggler `hot_host`: one host's GPUs all warm by 8-14 degC (each by its own share)
  partway into the training and stay warm (its rack's inlet air, a fan): the thermal straggler's own host.
- gpu-driver-fault `xid_stretch`: the GPU's firmware (GSP) stops answering once: one stretch of 3-7 minutes of
  timed-out scrapes on the culprit host, Xid 119 in DCGM's Xid gauge on one of its GPUs from then on, and no
  kernel error count: the Xid is the driver error that tells it from an outage of the monitoring.
- thermal-straggler `culprit_stall`: the hot GPU's host's exporter stalls once for 2-5 minutes while the GPU
  heats (10-50 % into its ramp): its values are held, then it serves again, hotter.
- training-instability `sparse_gauges`: the trainer's bridge refreshes its gauges (step, loss, grad norm...)
  only every 60-120 s, so the log's per-step losses are finer than the TSDB's.
- restore-resource-leak `wide_background`: each host's background daemons spread over 35-45 runnable
  processes (drawn anew per run), more than twice the leak: the leak shows only as a shift of the hosts'
  distribution, barely beyond its spread on a few hosts.
- collective-hang `watchdog_kill`: 10-20 minutes into the hang the collective's watchdog kills every rank
  (undated NCCL warnings, srun's exits; no summary), the GPUs go idle and the capture goes on 5-15 minutes:
  the busy-wait fills only the first part of what follows the stall.
- collective-hang `noisy_spin`: a spinning GPU's sampled utilisation scatters widely (mean 84 %, sd 14,
  40-100 %), as a polling kernel's duty cycle does between samples; the idle GPUs stay at 0-2 %.
- collective-hang `heartbeat_kill`: the hang blocks the JAX heartbeats too (a gRPC deadlock): within a minute
  of the stall the tasks stop sending them, and the coordinator kills the job one heartbeat timeout (100-600
  s) later, accusing one or two tasks: a real hang, reported as a heartbeat timeout.
- heartbeat-false-positive `hb_net_blip`: one accused host's RDMA links retransmit in a burst (as a
  network hang's trigger does) for 1-3 minutes, ending 1-5 minutes before the heartbeat-stop time; the job
  trains on until the kill (the seed's "high utilisation, retransmit spike": still a false positive).
- heartbeat-false-positive `hb_printed`: the program prints the heartbeat timeout as JAX takes it
  (`jax.distributed heartbeat_timeout_seconds=N`, an absl line of rank 0) instead of a `Config param` line.
- heartbeat-false-positive `hb_default`: the log states no heartbeat timeout at all; the coordinator uses
  JAX's documented default of 100 s.
- training-instability `nan_stop`: the loss turns NaN at the onset's step; the trainer logs it, skips two
  more non-finite steps and raises, so the job fails (exit 1) with no loss jump before it.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

TIB = 1024.0**4
#: the variants a caller may ask for, by the scenario that has them
OPT_IN: dict[str, str | tuple[str, ...]] = {
    "death_at_end": "node-death",
    "remap_before_death": "node-death",
    "coarse_staircase": "host-oom",
    "slow_heating": "thermal-straggler",
    "capped_rack": "thermal-straggler",
    "cooling_drop": "thermal-straggler",
    "culprit_stall": "thermal-straggler",
    "hot_host": ("healthy", "thermal-straggler"),
    "long_wait": "node-death",
    "smooth_divergence": "training-instability",
    "elastic_restart": "training-instability",
    "nan_stop": "training-instability",
    "sparse_gauges": "training-instability",
    "wide_background": "restore-resource-leak",
    "short_freeze": "monitoring-ghost-data",
    "node_freeze": "monitoring-ghost-data",
    "capture_after_end": "healthy",
    "exporter_stall": "healthy",
    "stall_in_dip": "healthy",
    "watchdog_kill": "collective-hang",
    "heartbeat_kill": "collective-hang",
    "noisy_spin": "collective-hang",
    "hb_net_blip": "heartbeat-false-positive",
    "hb_printed": "heartbeat-false-positive",
    "hb_default": "heartbeat-false-positive",
    "xid_stretch": "gpu-driver-fault",
    "missed_dip": ("healthy", "thermal-straggler"),  # _variants_thermal
}


def scrape_interval(seed: int, interval: float, opt_in: Any) -> float:
    """Return the scrape interval of a job: the caller's, or 30 or 60 s for a `coarse_staircase`."""
    if "coarse_staircase" not in opt_in:
        return interval
    return max(interval, float(np.random.default_rng([seed, 110]).choice([30.0, 60.0])))


def stream(job: Any, k: int) -> np.random.Generator:
    salt = zlib.crc32(job.scenario.name.encode())
    return np.random.default_rng([job.seed, 100 + k, salt, 0 if job.restored_from is None else 1])


def choose(job: Any) -> dict[str, Any]:
    """Return the job's variants (decided once, before the simulation)."""
    rng = stream(job, 0)
    name = job.scenario.name
    draws = rng.random(4)
    v: dict[str, Any] = {}
    if name == "collective-hang" and draws[0] < 0.35:
        v["pre_step"] = float(
            rng.uniform(5, 35)
        )  # seconds after the training loop starts: before step 0 ends
    if name == "node-death":
        v["slurm_node_failure"] = bool(draws[1] < 0.5)
        if "remap_before_death" in job.opt_in:
            v["remap_before_death"] = float(stream(job, 13).uniform(120, 600))  # seconds before the death
        elif draws[2] < 0.5:
            v["errors_before_death"] = float(rng.uniform(60, 300))
    if name == "host-oom" and (draws[1] < 0.6 or "coarse_staircase" in job.opt_in):
        v["staircase"] = float(rng.uniform(0.80, 0.88))
    if name == "host-oom" and "coarse_staircase" in job.opt_in:
        v["save_peaks"] = float(stream(job, 10).uniform(0.90, 0.95))
    if name == "thermal-straggler" and "slow_heating" in job.opt_in:
        v["slow_heating"] = float(stream(job, 11).uniform(1500, 2700))  # seconds of the ramp
    if name == "thermal-straggler" and "capped_rack" in job.opt_in:
        r = stream(job, 14).uniform(0, 1, 2)
        v["capped_rack"] = (float(6 + 6 * r[0]), float(0.82 + 0.06 * r[1]))  # (degC cooler, clock factor)
    if name == "thermal-straggler" and "cooling_drop" in job.opt_in:
        r = stream(job, 15).uniform(0, 1, 2)
        v["cooling_drop"] = (float(8 + 6 * r[0]), float(-30 + 120 * r[1]))  # (degC, seconds after the onset)
    if name == "thermal-straggler" and "culprit_stall" in job.opt_in:
        r = stream(job, 23).uniform(0, 1, 2)
        v["culprit_stall"] = (float(120 + 180 * r[0]), float(0.1 + 0.4 * r[1]))  # (seconds, into the ramp)
    if name == "gpu-driver-fault" and "xid_stretch" in job.opt_in:
        r = stream(job, 24).uniform(0, 1, 2)
        v["xid_stretch"] = (float(180 + 240 * r[0]), int(r[1] * job.gpus))  # (seconds of timeouts, the GPU)
    if name == "node-death" and "long_wait" in job.opt_in:
        v["long_wait"] = float(stream(job, 16).uniform(1200, 2400))  # seconds from the death to the kill
    if name == "training-instability" and "smooth_divergence" in job.opt_in:
        v["smooth_divergence"] = float(stream(job, 12).uniform(150, 400))  # e-folding time, seconds
    if name == "training-instability" and "elastic_restart" in job.opt_in:
        r = stream(job, 14).uniform(0, 1, 2)
        v["elastic_restart"] = (float(600 + 900 * r[0]), float(60 + 120 * r[1]))  # (before the onset, gap) s
    if name == "training-instability" and "sparse_gauges" in job.opt_in:
        v["sparse_gauges"] = float(stream(job, 17).uniform(60, 120))  # seconds between refreshes
    if name == "training-instability" and "nan_stop" in job.opt_in:
        v["nan_stop"] = True
    if name == "healthy" and "capture_after_end" in job.opt_in:
        v["capture_after_end"] = float(stream(job, 15).uniform(180, 420))  # seconds of data after the end
    if name == "healthy" and "exporter_stall" in job.opt_in:
        r = stream(job, 16).uniform(0, 1, 2)
        v["exporter_stall"] = (
            float(180 + 180 * r[0]),
            float(0.3 + 0.4 * r[1]),
        )  # (seconds, where in the run)
    if name == "healthy" and "stall_in_dip" in job.opt_in:
        r = stream(job, 22).uniform(0, 1, 3)
        v["exporter_stall"] = (float(240 + 60 * r[0]), float(0.3 + 0.4 * r[1]))
        v["cooling_drop"] = (float(8 + 6 * r[2]), 0.0)
    if name in OPT_IN["hot_host"] and "hot_host" in job.opt_in:
        r = stream(job, 24).uniform(0, 1, 3)
        # (degC warmer, where in the training it warms, seconds the warming takes)
        v["hot_host"] = (float(8 + 6 * r[0]), float(0.3 + 0.3 * r[1]), float(120 + 360 * r[2]))
    if name == "healthy" and draws[3] < 0.4:
        v["near_limit_save"] = float(rng.uniform(0.955, 0.975))
    if name == "rdma-degradation" and stream(job, 7).random() < 0.3:
        v["majority_degraded"] = True
    if name == "gpu-hardware-fault" and stream(job, 8).random() < 0.3:
        v["error_at_end"] = float(stream(job, 8).uniform(5.0, 50.0, 2)[1])  # data after the error, seconds
    if name == "node-death" and "death_at_end" in job.opt_in:
        # data after the death: the final scrape or two
        v["death_at_end"] = float(stream(job, 9).uniform(0.7, 2.3)) * job.interval
    if name == "monitoring-ghost-data" and "short_freeze" in job.opt_in:
        r = stream(job, 10).random(2)
        v["short_freeze"] = (float(300 + 600 * r[0]), bool(r[1] < 0.5))  # (seconds frozen, until the end)
    if name == "monitoring-ghost-data" and "node_freeze" in job.opt_in:
        v["node_freeze"] = True
    if name == "collective-hang" and "watchdog_kill" in job.opt_in:
        r = stream(job, 17).uniform(0, 1, 2)
        v["watchdog_kill"] = (float(600 + 600 * r[0]), float(300 + 600 * r[1]))  # (hang, data after) s
    if name == "collective-hang" and "heartbeat_kill" in job.opt_in:
        hb = stream(job, 18)
        # (timeout s, heartbeat stop after the stall s, accused tasks)
        v["heartbeat_kill"] = (
            int(hb.choice([100, 300, 600])),
            float(hb.uniform(-60, 60)),
            sorted({int(x) for x in hb.integers(1, max(2, job.nodes), 2)}),
        )
    if name == "heartbeat-false-positive" and "hb_net_blip" in job.opt_in:
        r = stream(job, 19).uniform(0, 1, 2)
        v["hb_net_blip"] = (float(60 + 240 * r[0]), float(60 + 120 * r[1]))  # (ends before the stop, lasts) s
    if name == "collective-hang" and "noisy_spin" in job.opt_in:
        v["noisy_spin"] = True
    for k in ("hb_printed", "hb_default"):
        if name == "heartbeat-false-positive" and k in job.opt_in:
            v[k] = True
    if name in ("restore-resource-leak", "healthy"):
        v["host_background"] = float(rng.uniform(8.0, 16.0))  # spread of runnable daemons across hosts
    if name in ("restore-resource-leak", "healthy") and "wide_background" in job.opt_in:  # both runs
        v["host_background"] = float(stream(job, 18).uniform(35.0, 45.0))
    return v


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


def nan_stop(job: Any, i0: int, fields: tuple[str, ...], rng: np.random.Generator) -> None:
    """The loss is NaN from step i0 on; the trainer stops after three non-finite steps and the job fails."""
    last = min(i0 + 2, len(job.step_num) - 1)
    for name in fields:
        setattr(job, name, getattr(job, name)[: last + 1])
    job.loss[i0:] = np.nan
    job.crash_time = float(job.step_end[last]) + 5.0
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
