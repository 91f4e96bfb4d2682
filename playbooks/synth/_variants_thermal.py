"""Off-by-default variants of the GPUs' temperatures (see `_variants` for the others and their streams).

- healthy, thermal-straggler `missed_dip`: once, partway into the training, the cooling of every rack but
  one host's dips (8-14 degC, each host by its own share and up to a scrape late, for 3-5 minutes,
  recovering over 3): the spared host's GPUs hold their level while the pack cools, and stand above it
  for the dip's length.
- thermal-straggler `faint_heat`: the hot GPU heats by only 5-7 degC (its clock throttles as usual) in a
  pack whose temperatures wander by 0.6-0.8 degC on their own (fans regulating): read in whole degrees
  (DCGM, nvidia-smi), the pack's measured spread is about twice its true one.
- thermal-straggler `settled_heat`: a faint heat as `faint_heat` (7-9 degC) that rises within 4-6 minutes
  and settles: it stands beyond half the bar only once settled, long after its rise.
- healthy, thermal-straggler, rdma-degradation `late_host`: the job's GPUs cool for good by 10-16 degC
  within a scrape (rdma-degradation: as the fabric degrades, the GPUs wait on it; else a phase change partway
  into the training, never within 20 min of a thermal straggler's onset), each GPU by its own share (0.85-1.15
  of it), and one host's GPU exporter (never a thermal straggler's culprit's) serves every value a scrape late
  (its collection lags the scrape): that host's GPUs cool one scrape after the pack.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._variants import stream


def choose(job: Any, v: dict[str, Any]) -> None:
    """Add this module's variants of `job` to `v` (drawn from their own streams: 40 and up)."""
    if job.scenario.name in ("healthy", "thermal-straggler") and "missed_dip" in job.opt_in:
        r = stream(job, 42).uniform(0, 1, 4)
        # (degC, where in the training, seconds it lasts, the spared host)
        v["missed_dip"] = (
            float(8 + 6 * r[0]),
            float(0.3 + 0.4 * r[1]),
            float(180 + 120 * r[2]),
            int(r[3] * job.nodes),
        )
    if "late_host" in job.opt_in:
        r = stream(job, 47).uniform(0, 1, 3)
        # (degC the pack cools, where in the training, the late host among those allowed)
        v["late_host"] = (float(10 + 6 * r[0]), float(0.3 + 0.4 * r[1]), float(r[2]))
    if job.scenario.name == "thermal-straggler" and "faint_heat" in job.opt_in:
        r = stream(job, 44).uniform(0, 1, 2)
        v["faint_heat"] = (float(5 + 2 * r[0]), float(0.6 + 0.2 * r[1]))  # (degC of heat, the pack's wander)
    if job.scenario.name == "thermal-straggler" and "settled_heat" in job.opt_in:
        r = stream(job, 46).uniform(0, 1, 3)
        # (degC of heat, the pack's wander, seconds the heat takes to settle)
        v["settled_heat"] = (float(7 + 2 * r[0]), float(0.6 + 0.2 * r[1]), float(240 + 120 * r[2]))


def missed_dip(job: Any, temp: np.ndarray, t: np.ndarray, training: np.ndarray) -> None:
    """Cool every host's GPUs but the spared one's by about the drawn degrees for the drawn seconds."""
    depth, where, hold, spared = job.variants["missed_dip"]
    rng = stream(job, 43)
    tt = t[training] if training.any() else t
    start = float(tt[0] + where * (tt[-1] - tt[0]))
    for h in range(temp.shape[0]):
        dt = t - start - float(rng.uniform(0, job.interval))
        shape = np.where((dt >= 0) & (dt < hold), 1.0, 0.0) + np.where(
            dt >= hold, np.clip(1 - (dt - hold) / 180, 0, 1), 0
        )
        share = float(rng.uniform(0.6, 1.4))
        if h != spared:
            temp[h] -= depth * share * shape[None, :]
    job.red_herrings["missed_dip"] = f"{job.hosts[spared]} missed a {depth:.0f} degC dip at {start:.0f}"


def faint_heat(job: Any, temp: np.ndarray) -> tuple[float, float | None]:
    """Let every GPU's temperature wander by the drawn spread; return the drawn heat (degC) and, for a
    `settled_heat`, the seconds it takes to settle (None: the scenario's own ramp)."""
    name = "settled_heat" if "settled_heat" in job.variants else "faint_heat"
    drawn = job.variants[name]
    temp += stream(job, 45).normal(0.0, drawn[1], temp.shape)
    return float(drawn[0]), (float(drawn[2]) if name == "settled_heat" else None)


def late_host(job: Any, gpu: Any, t: np.ndarray, training: np.ndarray, inc: Any) -> None:
    """Cool every GPU's `gpu.temp` for good from the drawn time, then serve one host's GPU signals (hosts x
    GPUs x samples) one sample late (its first sample repeated)."""
    depth, where, pick = job.variants["late_host"]
    tt = t[training] if training.any() else t
    at = float(tt[0] + where * (tt[-1] - tt[0]))
    if job.scenario.name == "rdma-degradation":
        at = inc.onset + float(inc.slow.ramp)
    elif job.scenario.name == "thermal-straggler" and abs(at - inc.onset) < 1200:
        at = inc.onset - 1200 if at < inc.onset else inc.onset + 1200
    share = stream(job, 48).uniform(0.85, 1.15, gpu.temp.shape[:2])
    step = np.clip((t - at) / job.interval, 0.0, 1.0) * training
    gpu.temp -= depth * share[..., None] * step[None, None, :]
    late = job.scenario.name == "thermal-straggler"
    others = [h for h in range(job.nodes) if not (late and h == inc.host)]
    h = others[min(len(others) - 1, int(pick * len(others)))]
    for x in (gpu.util, gpu.power, gpu.temp, gpu.clock, gpu.vram):
        x[h, :, 1:] = x[h, :, :-1].copy()
    job.red_herrings["late_host"] = (
        f"{job.hosts[h]} a scrape late; the pack cools {depth:.0f} degC at {at:.0f}"
    )
