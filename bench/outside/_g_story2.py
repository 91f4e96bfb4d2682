"""Corpus G's stories, part two (#10): slowdowns, broken data, GPU faults, divergence, restore pairs."""

from __future__ import annotations

import random

from bench.outside._g_gpu import THROTTLE_AFTER_S
from bench.outside._g_story import Story, _base, _culprit_hosts, _herrings, _truncate
from bench.outside._g_time import Effects, Timeline, build, during, losses


def _slow_from(
    tl: Timeline, eff: Effects, rng: random.Random, t_on: float, factor: float, first_step: int
) -> Timeline:
    """Rebuild the steps with a step-time factor from t_on (same seed stream for the rest)."""
    eff.slow.append((t_on, factor))
    minutes = (tl.t_stop - tl.t_launch) / 60.0
    return build(
        rng, tl.t_launch, minutes, tl.step_s, eff, first_step=first_step, init_s=tl.t_train - tl.t_launch
    )


def thermal(rng: random.Random, launch: float, variant: int) -> Story:
    st = _base("thermal-straggler", rng, launch)
    fl, tl, eff = st.fleet, st.tl, st.eff
    h, g = rng.randrange(len(fl.hosts)), rng.choice(fl.owned)
    t_on = during(tl, rng, 0.25, 0.55)
    factor = rng.uniform(1.18, 1.4)
    st.tl = _slow_from(tl, eff, rng, t_on + THROTTLE_AFTER_S, factor, 0)
    said = _herrings(st, rng, heavy=variant == 1)
    eff.thermal = (h, g, t_on)
    st.culprits, st.onset = [(h, g)], t_on + THROTTLE_AFTER_S / 2  # the heat shows before the clock drops
    st.text = (
        f"GPU {g} of {fl.names[h]} heats up (cooling fault) and is clocked down; every step is "
        f"~{(factor - 1) * 100:.0f} % slower from then on"
        + ("; herrings: " + ", ".join(said) if said else "")
    )
    losses(st.tl, rng)
    return st


def rdma(rng: random.Random, launch: float, variant: int) -> Story:
    st = _base("rdma-degradation", rng, launch)
    fl, tl, eff = st.fleet, st.tl, st.eff
    k = 1 if len(fl.hosts) < 12 else rng.choice([1, 2, 3])
    hosts = _culprit_hosts(rng, len(fl.hosts), k)
    t_on = during(tl, rng, 0.2, 0.5)
    factor = rng.uniform(1.15, 1.35)
    st.tl = _slow_from(tl, eff, rng, t_on, factor, 0)
    _herrings(st, rng, heavy=variant == 1)
    eff.trickle = max(eff.trickle, rng.uniform(0.05, 0.3))
    for h in hosts:
        eff.retx[h] = (t_on, st.tl.t1 + 10, rng.uniform(60, 600))
    st.culprits, st.onset = [(h, None) for h in hosts], t_on
    st.text = (
        f"sustained RDMA retransmits / ACK timeouts on {', '.join(fl.names[h] for h in hosts)}; "
        f"steps ~{(factor - 1) * 100:.0f} % slower, no hang"
    )
    if rng.random() < 0.5:
        st.events.append((t_on + rng.uniform(30, 200), hosts[0], "nccl_ib_warn_soft", {}))
    losses(st.tl, rng)
    return st


def ghost(rng: random.Random, launch: float, variant: int) -> Story:
    st = _base("monitoring-ghost-data", rng, launch)
    fl, tl, eff = st.fleet, st.tl, st.eff
    _herrings(st, rng, heavy=False)
    h = rng.randrange(len(fl.hosts))
    t_g = during(tl, rng, 0.2, 0.6)
    eff.ghost[h] = t_g
    st.culprits, st.onset = [(h, None)], t_g
    st.text = (
        f"{fl.names[h]}'s dcgm-exporter freezes (same values and scrape duration every scrape) while "
        "the job trains on normally" + (" through its checkpoints" if variant else "")
    )
    losses(tl, rng)
    return st


def driver(rng: random.Random, launch: float, variant: int) -> Story:
    st = _base("gpu-driver-fault", rng, launch)
    fl, tl, eff = st.fleet, st.tl, st.eff
    _herrings(st, rng, heavy=False)
    h, g = rng.randrange(len(fl.hosts)), rng.choice(fl.owned)
    t1 = during(tl, rng, 0.15, 0.5)
    code = 119 if variant == 0 else rng.choice([109, 119])
    times = [t1]
    while times[-1] < tl.t_stop - 400:
        times.append(times[-1] + rng.uniform(120, 600))
    for tx in times:
        eff.xids.append((h, g, tx, code))
        st.events.append((tx, h, "xid", {"gpu": g, "xid": code}))
    eff.scrape_fail[h] = [tx + rng.uniform(0, 4) for tx in times] + [
        rng.uniform(t1, tl.t_stop) for _ in range(rng.randint(2, 6))
    ]
    st.culprits, st.onset = [(h, g)], t1
    st.text = (
        f"GPU {g} of {fl.names[h]} logs Xid {code} ({'GSP RPC timeout' if code == 119 else 'context switch timeout'}) "
        f"{len(times)} times; its dcgm-exporter scrapes time out now and then; training is unaffected"
    )
    losses(tl, rng)
    return st


def hardware(rng: random.Random, launch: float, variant: int) -> Story:
    st = _base("gpu-hardware-fault", rng, launch)
    fl, tl, eff = st.fleet, st.tl, st.eff
    _herrings(st, rng, heavy=False)
    h, g = rng.randrange(len(fl.hosts)), rng.choice(fl.owned)
    i = int(len(tl.step_t) * rng.uniform(0.4, 0.75))
    t_f = float(tl.step_t[i]) + rng.uniform(0.2, tl.step_s * 0.7)
    _truncate(tl, t_f)
    if variant == 0:
        code = rng.choice([48, 95]) if "H100" in fl.gpu.name or "H200" in fl.gpu.name else 95
        eff.uncorrectable.append((h, g, t_f))
        what = f"an uncorrectable ECC error (Xid {code}, row remapping)"
    else:
        code = 79
        eff.gpu_gone[(h, g)] = t_f + fl.scrape_s * rng.uniform(1.6, 2.6)  # one or two scrapes show the Xid
        what = "Xid 79 (fallen off the bus) while the host keeps reporting"
    eff.xids.append((h, g, t_f, code))
    st.events.append((t_f, h, "xid", {"gpu": g, "xid": code}))
    t_crash = t_f + rng.uniform(3, 25)
    st.events.append((t_crash, h, "cuda_error", {"gpu": g, "xid": code}))
    tl.t_stop = t_crash + rng.uniform(5, 30)
    tl.t1 = tl.t_stop + rng.uniform(300, 600)
    st.end = "crashed"
    st.culprits, st.onset = [(h, g)], t_f
    st.text = f"GPU {g} of {fl.names[h]}: {what}; the job crashes, the host stays up"
    losses(tl, rng)
    return st


def instability(rng: random.Random, launch: float, variant: int) -> Story:
    st = _base("training-instability", rng, launch)
    tl = st.tl
    _herrings(st, rng, heavy=False)
    n = len(tl.step_no)
    spike = int(n * rng.uniform(0.45, 0.75))
    grow = rng.randint(12, 40)
    _truncate(tl, float(tl.step_t[min(n - 1, spike + grow)]))
    losses(tl, rng, spike_at=spike)
    tl.t_stop = float(tl.step_t[-1]) + rng.uniform(5, 20)
    tl.t1 = tl.t_stop + rng.uniform(300, 600)
    st.events.append((tl.t_stop - 2, None, "nan_stop", {}))
    st.end = "crashed"
    st.onset = float(tl.step_t[spike])
    st.text = (
        f"the loss leaves its curve at step {tl.step_no[spike]} (grad norm explodes), turns NaN "
        f"{grow} steps later and the trainer stops; the GPUs go idle after"
        + (" (a MoE router collapse)" if variant else "")
    )
    return st


def pair(rng: random.Random, launch: float, leak: bool) -> tuple[Story, Story, dict]:
    """a/ a fresh start and b/ a restore of the same config on the same hosts (with a leak or not)."""
    fresh = _base("healthy", rng, launch)
    _herrings(fresh, rng, heavy=False)
    losses(fresh.tl, rng)
    ck = [int(s) for s in fresh.tl.step_no if s and fresh.tl.ckpt_every and s % fresh.tl.ckpt_every == 0]
    step = ck[-1] if ck else int(fresh.tl.step_no[-1]) // 10 * 10
    later = fresh.tl.t1 + rng.uniform(1800, 7200)
    eff = Effects(trickle=fresh.eff.trickle, warm=dict(fresh.eff.warm))
    if leak:
        eff.extra_procs = rng.uniform(12, 22)
        eff.slow.append((0.0, rng.uniform(1.01, 1.03)))
    minutes = (fresh.tl.t_stop - fresh.tl.t_launch) / 60.0
    tl = build(rng, later, minutes, fresh.tl.step_s, eff, first_step=step + 1)
    tl.ckpt_every, tl.eval_every = fresh.tl.ckpt_every, fresh.tl.eval_every
    losses(tl, rng)
    restored = Story("healthy", fresh.fleet, tl, eff)
    restored.restored_from = step
    restored.tokens_per_step, restored.nccl_timeout_ms = fresh.tokens_per_step, fresh.nccl_timeout_ms
    truth = {
        "class": "restore-resource-leak" if leak else "healthy",
        "family": "cpu-contention" if leak else "none",
        "culprits": [],
        "onset": round(tl.t_train, 3) if leak else None,
        "scrape_s": fresh.fleet.scrape_s,
        "story": (
            f"the run restored from step {step} carries ~{eff.extra_procs:.0f} extra runnable processes on "
            "every host that the fresh start does not"
            if leak
            else f"a fresh start and a clean restore from step {step} of the same config"
        ),
    }
    return fresh, restored, truth
