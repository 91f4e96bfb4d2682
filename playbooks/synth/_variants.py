"""Seed-dependent variants of the scenarios, as real deployments show them.

Each variant draws from its own random stream (seed, variant number), so adding one leaves every other
value of a seed's job as it was. `choose` decides the variants of a job before it is simulated; the functions of
`_variants_apply.py` change the simulated arrays in place.

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
- healthy `restart_at_end`: one host's GPU exporter is restarted 5-9 minutes before the data ends and is not
  back when the capture is taken: its scrapes are refused (`up` 0 for its target, a scrape duration of a few
  milliseconds, no GPU sample) to the end, while its node_exporter answers; no driver error anywhere.
- healthy `stall_in_dip`: the exporter stall (one host, 4-5 minutes) begins as every GPU of the job cools by
  8-14 degC (an evaluation pause, a cooling change) for the stall's length and a minute, recovering over 3
  min: a range query holds the stalled host's last (hot) values up to its lookback while the pack cools.
- healthy, thermal-straggler `hot_host`: one host's GPUs all warm by 8-14 degC (each by its own share)
  partway into the training and stay warm (its rack's inlet air, a fan): the thermal straggler's own host.
- gpu-driver-fault `xid_stretch`: the GPU's firmware (GSP) stops answering once: one stretch of 3-7 minutes of
  timed-out scrapes on the culprit host, Xid 119 in DCGM's Xid gauge on one of its GPUs from then on, and no
  kernel error count: the Xid is the driver error that tells it from an outage of the monitoring.
- gpu-driver-fault `late_driver`: the GSP stops answering 9-10.5 minutes before the data ends and stays so: from
  then on Xid 119 in DCGM's Xid gauge on one GPU (the culprit), every scrape of the host's GPU exporter takes
  6.5-9.9 s (its peers' a few hundredths) and 25-40 % of them fail outright (the exporter restarting refuses
  them: `up` 0 for the GPU exporter's target, no GPU sample, a scrape duration of a few milliseconds), no
  kernel error count: a stretch the data's end cuts short. The GPU exporter's own target (standard profiles).
- every scenario `scrape_blips` (standard profiles): network blips drop random scrapes across the fleet: every
  target, the GPU exporter's and node_exporter's, on every host, fails each scrape independently at one fleet
  rate of 0.3-1 % (a timed-out scrape: `up` 0, `scrape_duration_seconds` the timeout, none of the target's
  samples at that scrape): a few lost scrapes on each target, nobody's fault.
- thermal-straggler `culprit_stall`: the hot GPU's host's exporter stalls once for 2-5 minutes while the GPU
  heats (10-50 % into its ramp): its values are held, then it serves again, hotter.
- training-instability `sparse_gauges`: the trainer's bridge refreshes its gauges (step, loss, grad norm...)
  only every 60-120 s, so the log's per-step losses are finer than the TSDB's.
- restore-resource-leak `wide_background`: each host's background daemons spread over 35-45 runnable
  processes (drawn anew per run), more than twice the leak: the leak shows only as a shift of the hosts'
  distribution, barely beyond its spread on a few hosts.
- restore-resource-leak `leak_at_launch`: the restored run's extra runnable processes appear when its
  processes launch, during the setup before the restore and the first step (the onset stays the start of
  training: the comparison judges training).
- collective-hang, healthy `mixed_models`: one host (never a hang's culprit) holds GPUs of another, bigger
  model than the rest (an H200 host among A100s): its GPUs draw 1.7-2.1 times the others' power in every
  phase (idle, training, checkpoint wait, busy-wait), so the job's busiest GPUs are that host's alone.
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
- training-instability `climb_to_nan`: the loss climbs by 25-45 % a step for 4-8 steps from the onset, then
  turns NaN; the trainer logs it and raises as for `nan_stop` (the climb is the onset, the NaN its end).
- training-instability `nan_stop`: the loss turns NaN at the onset's step; the trainer logs it, skips two
  more non-finite steps and raises, so the job fails (exit 1) with no loss jump before it.
- healthy, thermal-straggler, rdma-degradation `eval_pauses`: the trainer evaluates every 40-60 steps (Hugging
  Face's `eval_steps`), each evaluation pausing training for 60-95 s between two steps; rank 0 prints HF's
  undated ``{'eval_loss': ..., 'eval_runtime': 63.2, ...}`` when it ends. Nobody's fault: a pause, not slow steps.
- healthy, thermal-straggler, rdma-degradation `sparse_evals`: the trainer validates only every 70-110 steps
  (NeMo's `val_check_interval`), each validation pausing training for 25-45 s: in a `slurm-nemo` log its dated
  line is the first time the log gives after its start, often after the incident's onset.
- training-instability `nan_traceback`: the loss turns NaN at the onset's step and the trainer raises at once,
  before that step's line is printed: the only report is an undated Python traceback (a `FloatingPointError:
  NaN loss at step N` or Megatron-core's `found NaN in local grad norm`), and the job fails (exit 1).
- training-instability `blowup_traceback`: the loss blows up by 20-35 % a step for 14-25 steps from the onset
  (tripled within five steps, tens of times its level by the end), then turns NaN and the trainer raises at
  once as for `nan_traceback` (an undated traceback): with a log that prints every 10th step, one or two
  prints show the blow-up, dated, before the undated NaN; the blow-up is the onset.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from ._models import SCENARIOS

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
    "nan_traceback": "training-instability",
    "climb_to_nan": "training-instability",
    "blowup_traceback": "training-instability",
    "sparse_gauges": "training-instability",
    "wide_background": "restore-resource-leak",
    "leak_at_launch": "restore-resource-leak",
    "short_freeze": "monitoring-ghost-data",
    "node_freeze": "monitoring-ghost-data",
    "capture_after_end": "healthy",
    "exporter_stall": "healthy",
    "stall_in_dip": "healthy",
    "restart_at_end": "healthy",
    "watchdog_kill": "collective-hang",
    "heartbeat_kill": "collective-hang",
    "noisy_spin": "collective-hang",
    "mixed_models": ("collective-hang", "healthy"),
    "eval_pauses": ("healthy", "thermal-straggler", "rdma-degradation"),
    "sparse_evals": ("healthy", "thermal-straggler", "rdma-degradation"),
    "hb_net_blip": "heartbeat-false-positive",
    "hb_printed": "heartbeat-false-positive",
    "hb_default": "heartbeat-false-positive",
    "xid_stretch": "gpu-driver-fault",
    "late_driver": "gpu-driver-fault",
    "missed_dip": ("healthy", "thermal-straggler"),  # _variants_thermal
    "faint_heat": "thermal-straggler",  # _variants_thermal
    "settled_heat": "thermal-straggler",  # _variants_thermal
    "late_host": ("healthy", "thermal-straggler", "rdma-degradation"),  # _variants_thermal
    "scrape_blips": SCENARIOS,  # every scenario
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
    """Return the job's variants (decided once, before the simulation): its scenario's, in a fixed order."""
    rng = stream(job, 0)
    draws = rng.random(4)
    v: dict[str, Any] = {}
    by_scenario = _CHOOSERS.get(job.scenario.name)
    if by_scenario is not None:
        by_scenario(job, rng, draws, v)
    if "mixed_models" in job.opt_in:
        v["mixed_models"] = float(stream(job, 27).uniform(1.7, 2.1))
    if "eval_pauses" in job.opt_in:
        v["eval_pauses"] = (int(stream(job, 47).integers(40, 61)), 60.0, 95.0)  # (every N steps, seconds)
    if "sparse_evals" in job.opt_in:
        v["eval_pauses"] = (int(stream(job, 48).integers(70, 111)), 25.0, 45.0)
    if "scrape_blips" in job.opt_in:
        v["scrape_blips"] = float(stream(job, 51).uniform(0.003, 0.01))  # each scrape's chance to fail
    return v


def _collective_hang(job: Any, rng: np.random.Generator, draws: np.ndarray, v: dict[str, Any]) -> None:
    if draws[0] < 0.35:
        v["pre_step"] = float(
            rng.uniform(5, 35)
        )  # seconds after the training loop starts: before step 0 ends
    if "watchdog_kill" in job.opt_in:
        r = stream(job, 17).uniform(0, 1, 2)
        v["watchdog_kill"] = (float(600 + 600 * r[0]), float(300 + 600 * r[1]))  # (hang, data after) s
    if "heartbeat_kill" in job.opt_in:
        hb = stream(job, 18)
        # (timeout s, heartbeat stop after the stall s, accused tasks)
        v["heartbeat_kill"] = (
            int(hb.choice([100, 300, 600])),
            float(hb.uniform(-60, 60)),
            sorted({int(x) for x in hb.integers(1, max(2, job.nodes), 2)}),
        )
    if "noisy_spin" in job.opt_in:
        v["noisy_spin"] = True


def _node_death(job: Any, rng: np.random.Generator, draws: np.ndarray, v: dict[str, Any]) -> None:
    v["slurm_node_failure"] = bool(draws[1] < 0.5)
    if "remap_before_death" in job.opt_in:
        v["remap_before_death"] = float(stream(job, 13).uniform(120, 600))  # seconds before the death
    elif draws[2] < 0.5:
        v["errors_before_death"] = float(rng.uniform(60, 300))
    if "long_wait" in job.opt_in:
        v["long_wait"] = float(stream(job, 16).uniform(1200, 2400))  # seconds from the death to the kill
    if "death_at_end" in job.opt_in:
        # data after the death: the final scrape or two
        v["death_at_end"] = float(stream(job, 9).uniform(0.7, 2.3)) * job.interval


def _host_oom(job: Any, rng: np.random.Generator, draws: np.ndarray, v: dict[str, Any]) -> None:
    if draws[1] < 0.6 or "coarse_staircase" in job.opt_in:
        v["staircase"] = float(rng.uniform(0.80, 0.88))
    if "coarse_staircase" in job.opt_in:
        v["save_peaks"] = float(stream(job, 10).uniform(0.90, 0.95))


def _thermal_straggler(job: Any, rng: np.random.Generator, draws: np.ndarray, v: dict[str, Any]) -> None:
    if "slow_heating" in job.opt_in:
        v["slow_heating"] = float(stream(job, 11).uniform(1500, 2700))  # seconds of the ramp
    if "capped_rack" in job.opt_in:
        r = stream(job, 14).uniform(0, 1, 2)
        v["capped_rack"] = (float(6 + 6 * r[0]), float(0.82 + 0.06 * r[1]))  # (degC cooler, clock factor)
    if "cooling_drop" in job.opt_in:
        r = stream(job, 15).uniform(0, 1, 2)
        v["cooling_drop"] = (float(8 + 6 * r[0]), float(-30 + 120 * r[1]))  # (degC, seconds after the onset)
    if "culprit_stall" in job.opt_in:
        r = stream(job, 23).uniform(0, 1, 2)
        v["culprit_stall"] = (float(120 + 180 * r[0]), float(0.1 + 0.4 * r[1]))  # (seconds, into the ramp)
    _hot_host(job, v)


def _hot_host(job: Any, v: dict[str, Any]) -> None:
    if "hot_host" in job.opt_in:
        r = stream(job, 24).uniform(0, 1, 3)
        # (degC warmer, where in the training it warms, seconds the warming takes)
        v["hot_host"] = (float(8 + 6 * r[0]), float(0.3 + 0.3 * r[1]), float(120 + 360 * r[2]))


def _gpu_driver_fault(job: Any, rng: np.random.Generator, draws: np.ndarray, v: dict[str, Any]) -> None:
    if "xid_stretch" in job.opt_in:
        r = stream(job, 24).uniform(0, 1, 2)
        v["xid_stretch"] = (float(180 + 240 * r[0]), int(r[1] * job.gpus))  # (seconds of timeouts, the GPU)
    if "late_driver" in job.opt_in:
        r = stream(job, 49).uniform(0, 1, 3)
        # (seconds before the data's end, the GPU, the share of its exporter's scrapes that fail)
        v["late_driver"] = (float(540 + 90 * r[0]), int(r[1] * job.gpus), float(0.25 + 0.15 * r[2]))


def _training_instability(job: Any, rng: np.random.Generator, draws: np.ndarray, v: dict[str, Any]) -> None:
    if "smooth_divergence" in job.opt_in:
        v["smooth_divergence"] = float(stream(job, 12).uniform(150, 400))  # e-folding time, seconds
    if "elastic_restart" in job.opt_in:
        r = stream(job, 14).uniform(0, 1, 2)
        v["elastic_restart"] = (float(600 + 900 * r[0]), float(60 + 120 * r[1]))  # (before the onset, gap) s
    if "sparse_gauges" in job.opt_in:
        v["sparse_gauges"] = float(stream(job, 17).uniform(60, 120))  # seconds between refreshes
    if "nan_stop" in job.opt_in:
        v["nan_stop"] = True
    if "nan_traceback" in job.opt_in:
        v["nan_traceback"] = True
    if "climb_to_nan" in job.opt_in:
        r = stream(job, 29).uniform(0, 1, 2)
        v["climb_to_nan"] = (int(4 + 5 * r[0]), float(1.25 + 0.2 * r[1]))  # (steps of climb, factor a step)
    if "blowup_traceback" in job.opt_in:
        r = stream(job, 53).uniform(0, 1, 2)
        v["blowup_traceback"] = (
            int(14 + 12 * r[0]),
            float(1.2 + 0.15 * r[1]),
        )  # (steps of climb, factor a step)


def _healthy(job: Any, rng: np.random.Generator, draws: np.ndarray, v: dict[str, Any]) -> None:
    if "capture_after_end" in job.opt_in:
        v["capture_after_end"] = float(stream(job, 15).uniform(180, 420))  # seconds of data after the end
    if "exporter_stall" in job.opt_in:
        r = stream(job, 16).uniform(0, 1, 2)
        v["exporter_stall"] = (
            float(180 + 180 * r[0]),
            float(0.3 + 0.4 * r[1]),
        )  # (seconds, where in the run)
    if "restart_at_end" in job.opt_in:
        r = stream(job, 50).uniform(0, 1, 2)
        v["restart_at_end"] = (float(300 + 240 * r[0]), 1 + int(r[1] * max(1, job.nodes - 1)))  # (s, host)
    if "stall_in_dip" in job.opt_in:
        r = stream(job, 22).uniform(0, 1, 3)
        v["exporter_stall"] = (float(240 + 60 * r[0]), float(0.3 + 0.4 * r[1]))
        v["cooling_drop"] = (float(8 + 6 * r[2]), 0.0)
    _hot_host(job, v)
    if draws[3] < 0.4:
        v["near_limit_save"] = float(rng.uniform(0.955, 0.975))
    _host_background(job, rng, draws, v)


def _host_background(job: Any, rng: np.random.Generator, draws: np.ndarray, v: dict[str, Any]) -> None:
    v["host_background"] = float(rng.uniform(8.0, 16.0))  # spread of runnable daemons across hosts
    if "wide_background" in job.opt_in:  # both runs
        v["host_background"] = float(stream(job, 18).uniform(35.0, 45.0))


def _rdma_degradation(job: Any, rng: np.random.Generator, draws: np.ndarray, v: dict[str, Any]) -> None:
    if stream(job, 7).random() < 0.3:
        v["majority_degraded"] = True


def _gpu_hardware_fault(job: Any, rng: np.random.Generator, draws: np.ndarray, v: dict[str, Any]) -> None:
    if stream(job, 8).random() < 0.3:
        v["error_at_end"] = float(stream(job, 8).uniform(5.0, 50.0, 2)[1])  # data after the error, seconds


def _monitoring_ghost_data(job: Any, rng: np.random.Generator, draws: np.ndarray, v: dict[str, Any]) -> None:
    if "short_freeze" in job.opt_in:
        r = stream(job, 10).random(2)
        v["short_freeze"] = (float(300 + 600 * r[0]), bool(r[1] < 0.5))  # (seconds frozen, until the end)
    if "node_freeze" in job.opt_in:
        v["node_freeze"] = True


def _heartbeat_false_positive(
    job: Any, rng: np.random.Generator, draws: np.ndarray, v: dict[str, Any]
) -> None:
    if "hb_net_blip" in job.opt_in:
        r = stream(job, 19).uniform(0, 1, 2)
        v["hb_net_blip"] = (float(60 + 240 * r[0]), float(60 + 120 * r[1]))  # (ends before the stop, lasts) s
    for k in ("hb_printed", "hb_default"):
        if k in job.opt_in:
            v[k] = True


#: each scenario's variants, drawn in this order (the stream-0 draws after `choose`'s four: one scenario's)
_CHOOSERS: dict[str, Callable[[Any, np.random.Generator, np.ndarray, dict[str, Any]], None]] = {
    "collective-hang": _collective_hang,
    "node-death": _node_death,
    "host-oom": _host_oom,
    "thermal-straggler": _thermal_straggler,
    "gpu-driver-fault": _gpu_driver_fault,
    "training-instability": _training_instability,
    "healthy": _healthy,
    "restore-resource-leak": _host_background,
    "rdma-degradation": _rdma_degradation,
    "gpu-hardware-fault": _gpu_hardware_fault,
    "monitoring-ghost-data": _monitoring_ghost_data,
    "heartbeat-false-positive": _heartbeat_false_positive,
}
