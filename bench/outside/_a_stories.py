"""Generator A, part 2: one planner per incident class, on top of a healthy training timeline.

Truth follows /work/shared/reference/diagnosis-contract.md: culprits and onset exactly as it defines
them per class (a hang's onset is the last advance of the step counter, or, before the first step,
when the busy-wait pattern settled; a network hang's is the network event; a dead host's GPU errors
are its onset; a heartbeat kill's onset is the crash minus the heartbeat timeout).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from bench.outside._a_plan import (
    GPU_MODELS,
    Plan,
    RdmaFault,
    apply_slowdown,
    draw_layout,
    host_names,
    losses,
    step_durations,
)

FAMILIES = {
    "healthy": "none",
    "collective-hang": "collective",
    "network-hang": "network-rdma",
    "node-death": "node",
    "heartbeat-false-positive": "heartbeat",
    "rdma-degradation": "network-rdma",
    "monitoring-ghost-data": "monitoring",
}
BASE_EPOCH = 1772409600.0  # 2026-03-02T00:00:00Z


def _sizes(rng: np.random.Generator) -> tuple[int, int, float, float]:
    """Return hosts, GPUs per host, scrape interval and minutes, kept to a modest series count."""
    hosts = int(rng.choice([4, 5, 6, 8, 8, 10, 12, 16]))
    gpus = int(rng.choice([4, 8, 8]))
    interval = float(rng.choice([5, 10, 15, 15, 30, 60]))
    if hosts * gpus >= 64 and interval < 15:
        interval = 15.0
    minutes = float(rng.uniform(35, 80))
    if interval <= 5:
        minutes = min(minutes, 40.0)
    if interval >= 60:
        minutes = max(minutes, 70.0)
    return hosts, gpus, interval, minutes


def base_plan(rng: np.random.Generator, seed: int, name: str, cls: str) -> Plan:
    """A healthy job that trains to its last step, with checkpoints, warm-up and red herrings."""
    n, gpus, interval, minutes = _sizes(rng)
    hosts, ips, _style = host_names(rng, n)
    need_hw = cls in ("network-hang", "rdma-degradation")
    t0 = BASE_EPOCH + int(rng.integers(0, 60)) * 86400 + int(rng.integers(0, 80000))
    load_start = t0 + float(rng.uniform(60, 240))
    train_start = load_start + float(rng.uniform(60, 200))
    base = float(rng.uniform(5, 20))
    tail = float(rng.uniform(60, 150))
    n_steps = max(40, int((t0 + minutes * 60 - tail - train_start) / base * 0.8))
    period = int(max(10, round(n_steps / int(rng.integers(2, 5)) / 10) * 10))
    secs = step_durations(rng, n_steps, base, period)
    first = 0 if rng.random() < 0.75 else period * int(rng.integers(1, 4)) + 1
    ends = train_start + np.cumsum(secs)
    plan = Plan(
        name=name,
        cls=cls,
        family=FAMILIES[cls],
        story="",
        seed=seed,
        hosts=hosts,
        ips=ips,
        gpus=gpus,
        model=str(rng.choice(list(GPU_MODELS))),
        nics=int(rng.choice([2, 4, 8])),
        interval=interval,
        layout=draw_layout(rng, interval, hosts, need_hw),
        t0=t0,
        t_end=0.0,
        load_start=load_start,
        train_start=train_start,
        step_end=ends,
        step_secs=secs,
        losses=losses(rng, n_steps, first),
        first_step=first,
        total_steps=first + n_steps,
        tokens_per_step=float(rng.choice([2, 4, 8])) * 2**20,
        ckpt_period=period,
        ckpts=[],
        replica0=hosts[: max(1, n // int(rng.choice([1, 2, 4])))],
        hiccups=[],
        active_end=0.0,
        job_end=0.0,
        end_kind="completed",
        hb_timeout=float(rng.choice([100, 300, 600, 900])),
    )
    _derive_windows(plan, base)
    _finish(plan, plan.step_end[-1] + float(rng.uniform(5, 20)), "completed", rng)
    _red_herrings(plan, rng)
    return plan


def _derive_windows(plan: Plan, base: float) -> None:
    """Checkpoint saves and loader hiccups from the step timeline."""
    starts = plan.step_end - plan.step_secs
    plan.ckpts, plan.hiccups = [], []
    for i in range(1, len(plan.step_end)):
        step = plan.first_step + i
        extra = plan.step_secs[i] - base
        # a loader stall is a step slower than its neighbours (a job slowed as a whole has none)
        local = float(np.median(plan.step_secs[max(1, i - 10) : i + 11]))
        if step % plan.ckpt_period == 0 and extra > base:
            plan.ckpts.append((float(starts[i]), float(starts[i] + extra)))
        elif plan.step_secs[i] > 1.25 * local and i > 8:
            plan.hiccups.append((float(starts[i]), float(plan.step_end[i])))


def _finish(plan: Plan, active_end: float, kind: str, rng: np.random.Generator) -> None:
    plan.active_end = active_end
    plan.end_kind = kind
    plan.job_end = active_end + float(rng.uniform(10, 60))
    plan.t_end = plan.job_end + float(rng.uniform(45, 150))


def _cut(plan: Plan, k: int) -> None:
    """Keep only the first k completed steps."""
    plan.step_end, plan.step_secs, plan.losses = plan.step_end[:k], plan.step_secs[:k], plan.losses[:k]
    plan.ckpts = [w for w in plan.ckpts if k and w[0] < plan.step_end[-1]]
    plan.hiccups = [w for w in plan.hiccups if k and w[1] <= plan.step_end[-1]]


def _mid_step(plan: Plan, rng: np.random.Generator, lo: float = 0.35, hi: float = 0.8) -> int:
    """A step index in the steady part of the run, not right after a checkpoint."""
    n = len(plan.step_end)
    k = int(rng.integers(int(n * lo), int(n * hi)))
    while (plan.first_step + k) % plan.ckpt_period in (0, 1):
        k += 2
    return min(k, n - 2)


def _red_herrings(plan: Plan, rng: np.random.Generator) -> None:
    if rng.random() < 0.6:
        plan.warm = (str(rng.choice(plan.hosts)), float(rng.uniform(3, 7)))
    if rng.random() < 0.4:
        plan.xids.append(
            (
                str(rng.choice(plan.hosts)),
                int(rng.integers(0, plan.gpus)),
                plan.t0 - 86400.0,
                int(rng.choice([13, 31, 43, 45, 79, 94])),
            )
        )
    if rng.random() < 0.4:
        plan.ecc.append(
            (
                str(rng.choice(plan.hosts)),
                int(rng.integers(0, plan.gpus)),
                plan.t0,
                float(rng.uniform(0.05, 0.3)),
            )
        )


def _hang(plan: Plan, rng: np.random.Generator, stop: float, odd: str | None, pre: bool) -> float:
    """Every host's GPUs busy-wait from shortly after `stop`; returns when the pattern settled."""
    lag = 0.0 if pre else float(np.median(plan.step_secs)) * 0.4
    for h in plan.hosts:
        plan.busy_start[h] = stop + lag + float(rng.uniform(0, 0.6 * plan.interval if pre else 2.0))
        plan.busy_gpus[h] = list(range(plan.gpus))
    if odd is not None:
        size = int(rng.integers(1, plan.gpus))
        plan.busy_gpus[odd] = sorted(int(g) for g in rng.choice(plan.gpus, size=size, replace=False))
    _finish(plan, stop, "cancelled", rng)
    plan.job_end = stop + float(rng.uniform(8, 20)) * 60
    plan.t_end = plan.job_end + float(rng.uniform(45, 120))
    return max(plan.busy_start.values())


def collective_hang(plan: Plan, rng: np.random.Generator, variant: int) -> None:
    """Variants: 0 mid-run, no odd host; 1 mid-run, one odd host; 2/3 before the first step."""
    odd = str(rng.choice(plan.hosts)) if variant in (1, 3) else None
    if variant >= 2:
        _cut(plan, 0)
        settled = _hang(plan, rng, plan.train_start + float(rng.uniform(20, 90)), odd, pre=True)
        plan.onset = settled
        plan.story = "hang in the first collective, before step 0" + (
            f"; {odd} spins on fewer GPUs" if odd else ""
        )
    else:
        k = _mid_step(plan, rng)
        _cut(plan, k)
        _hang(plan, rng, float(plan.step_end[-1]), odd, pre=False)
        plan.onset = float(plan.step_end[-1])
        plan.story = f"steps stop after step {plan.first_step + k - 1}; GPUs busy-wait" + (
            f"; {odd} spins on GPUs {plan.busy_gpus[odd]} only" if odd else ", same pattern everywhere"
        )
    plan.culprits = [{"host": odd, "gpu": None}] if odd else []


def network_hang(plan: Plan, rng: np.random.Generator, variant: int) -> None:
    """RDMA retransmits and ACK timeouts burst on one or two hosts, then the collective hangs."""
    k = _mid_step(plan, rng)
    _cut(plan, k)
    stop = float(plan.step_end[-1])
    t_net = stop - float(rng.uniform(15, 120))
    bad = [str(h) for h in rng.choice(plan.hosts, size=1 + variant % 2, replace=False)]
    for h in bad:
        nics = sorted(int(x) for x in rng.choice(plan.nics, size=int(rng.integers(1, 3)), replace=False))
        start = t_net + (0.0 if h == bad[0] else float(rng.uniform(0, 20)))
        plan.rdma.append(
            RdmaFault(
                h,
                nics,
                start,
                stop + float(rng.uniform(30, 240)),
                float(rng.uniform(150, 2500)),
                float(rng.uniform(1, 30)),
            )
        )
    _hang(plan, rng, stop, None, pre=False)
    plan.onset = t_net
    plan.culprits = [{"host": h, "gpu": None} for h in bad]
    plan.story = f"RDMA retransmit burst on {', '.join(bad)}, then steps stop and GPUs busy-wait"


def node_death(plan: Plan, rng: np.random.Generator, variant: int) -> None:
    """Variants: 0 silent, 1 Xid 79 then silent, 2 growing ECC then silent, 3 GPUs read 0 W / 0 %."""
    host = str(rng.choice(plan.hosts[1:]))
    gpu = int(rng.integers(0, plan.gpus))
    k = _mid_step(plan, rng)
    t_err = float(plan.step_end[k - 1] + rng.uniform(0.2, 0.8) * plan.step_secs[k])
    if variant == 1:
        plan.xids.append((host, gpu, t_err, 79))
        plan.gpu_gone.append((host, gpu, t_err + float(rng.uniform(1, 1.5)) * plan.interval))
        t_dead, stop_k = t_err + float(rng.uniform(60, 240)), k
        plan.story = f"Xid 79 on {host} GPU {gpu}, steps stop, then {host} goes silent"
    elif variant == 2:
        plan.layout.ecc_fields = "ecc"
        plan.ecc.append((host, gpu, t_err, float(rng.uniform(30, 400))))
        t_dead = t_err + float(rng.uniform(180, 420))
        stop_k = int(np.searchsorted(plan.step_end, t_dead))
        plan.story = f"correctable ECC climbing on {host} GPU {gpu}, then {host} goes silent"
    else:
        t_dead, stop_k = t_err, k
        mode = "zero" if variant == 3 else "silent"
        plan.story = (
            f"{host} dies mid-step ({'GPUs read 0 W / 0 %' if mode == 'zero' else 'exporters silent'})"
        )
    plan.dead[host] = (t_dead, "zero" if variant == 3 else "silent")
    _cut(plan, stop_k)
    _hang(plan, rng, t_err if variant == 1 else t_dead, None, pre=False)
    plan.busy_gpus.pop(host, None)
    plan.busy_start.pop(host, None)
    kind = "node-failure" if variant in (0, 1) or rng.random() < 0.5 else "heartbeat"
    plan.end_kind = kind
    plan.job_end = t_dead + (float(rng.uniform(90, 300)) if kind == "node-failure" else plan.hb_timeout)
    plan.t_end = plan.job_end + float(rng.uniform(45, 120))
    plan.accused = [host] if kind == "heartbeat" else []
    plan.onset = t_err
    plan.culprits = [{"host": host, "gpu": None}]


def heartbeat_fp(plan: Plan, rng: np.random.Generator, variant: int) -> None:
    """The coordinator kills the job for missed heartbeats while every host trains at full power."""
    n = len(plan.step_end)
    lo = int(np.searchsorted(plan.step_end, plan.train_start + plan.hb_timeout + 300))
    k = int(rng.integers(min(max(lo, n // 2), n - 3), n - 2))
    crash = float(plan.step_end[k] + rng.uniform(0.1, 0.9) * plan.step_secs[k + 1])
    _cut(plan, k + 1)
    _finish(plan, crash, "heartbeat", rng)
    plan.job_end = crash  # the coordinator's error line is the crash time
    plan.t_end = crash + float(rng.uniform(45, 150))
    plan.accused = [str(h) for h in rng.choice(plan.hosts[1:], size=1 + variant % 2, replace=False)]
    plan.onset = crash - plan.hb_timeout
    plan.culprits = []
    if variant == 1:  # a TCP retransmit burst on the accused around the heartbeat stop (gRPC blocked)
        for h in plan.accused:
            plan.tcp_bursts.append((h, plan.onset - 30, plan.onset + 60, float(rng.uniform(50, 400))))
    plan.story = (
        f"heartbeat kill at step {plan.first_step + k} accusing {', '.join(plan.accused)}, all training"
    )


def rdma_degradation(plan: Plan, rng: np.random.Generator, variant: int) -> None:
    """Sustained retransmits on 1-3 hosts (variant 1: a leaf-switch fault on several); job slows."""
    n = len(plan.step_end)
    i = int(rng.integers(n // 4, n // 2))
    t_deg = float(plan.step_end[i] + rng.uniform(0.1, 0.9) * plan.step_secs[i + 1])
    count = (
        int(rng.integers(max(3, len(plan.hosts) // 3), max(4, len(plan.hosts) // 2) + 1))
        if variant == 1
        else (int(rng.integers(1, 4)))
    )
    bad = [str(h) for h in rng.choice(plan.hosts, size=min(count, len(plan.hosts) - 1), replace=False)]
    starts = plan.step_end - plan.step_secs
    factor = float(rng.uniform(1.18, 1.4))
    plan.step_secs = apply_slowdown(plan.step_secs, starts, t_deg, factor)
    plan.step_end = starts[0] + np.cumsum(plan.step_secs)
    _derive_windows(plan, float(np.median(plan.step_secs[: i + 1])))
    _finish(plan, float(plan.step_end[-1] + rng.uniform(5, 20)), "completed", rng)
    for h in bad:
        nics = sorted(int(x) for x in rng.choice(plan.nics, size=int(rng.integers(1, 3)), replace=False))
        plan.rdma.append(
            RdmaFault(
                h,
                nics,
                t_deg + float(rng.uniform(0, 10)),
                plan.t_end + 60,
                float(rng.uniform(40, 600)),
                float(rng.uniform(0.3, 8)),
            )
        )
    plan.onset = t_deg
    plan.culprits = [{"host": h, "gpu": None} for h in bad]
    plan.story = f"sustained RDMA retransmits on {len(bad)} host(s); step time x{factor:.2f}, no hang"


def ghost(plan: Plan, rng: np.random.Generator, variant: int) -> None:
    """One host's GPU exporter keeps serving frozen values while the job trains to its end."""
    host = str(rng.choice(plan.hosts))
    n = len(plan.step_end)
    t_f = float(plan.step_end[int(rng.integers(n // 4, 2 * n // 3))] + rng.uniform(1, 5))
    plan.ghost = (host, t_f)
    plan.onset = t_f
    plan.culprits = [{"host": host, "gpu": None}]
    plan.story = f"dcgm-exporter on {host} frozen from mid-run; training unaffected"


def healthy(plan: Plan, rng: np.random.Generator, variant: int) -> None:
    """Nothing beyond normal behaviour; variant 1 adds more red herrings."""
    if variant == 1:
        plan.warm = (str(rng.choice(plan.hosts)), float(rng.uniform(5, 8)))
        plan.xids.append((str(rng.choice(plan.hosts)), 0, plan.t0 - 3 * 86400.0, 13))
    plan.story = "trains to the last step" + (" (extra red herrings)" if variant == 1 else "")


PLANNERS: dict[str, Callable[[Plan, np.random.Generator, int], None]] = {
    "healthy": healthy,
    "collective-hang": collective_hang,
    "network-hang": network_hang,
    "node-death": node_death,
    "heartbeat-false-positive": heartbeat_fp,
    "rdma-degradation": rdma_degradation,
    "monitoring-ghost-data": ghost,
}
