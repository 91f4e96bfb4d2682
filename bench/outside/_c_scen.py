"""Corpus C: the incident of each class, written onto a `World` (controls, then values, then truth).

Truth follows the diagnosis contract: culprits are the hosts at fault (none for a hang without an odd
host, a heartbeat false positive, an instability or a uniform restore shift); onset is the earliest
anomaly of the causal chain (for a plain hang, when the step counter stopped advancing).
"""

from __future__ import annotations

import numpy as np

from bench.outside import _c_sim as sim
from bench.outside._c_sim import IDLE, SPIN, World


def _pick(w: World, avoid: tuple[int, ...] = ()) -> int:
    choices = [h for h in range(w.H) if h not in avoid]
    return int(w.rng.choice(choices))


def _frac_time(w: World, lo: float, hi: float) -> float:
    return float(w.t[0] + (w.t[-1] - w.t[0]) * w.rng.uniform(lo, hi))


def _hang_modes(w: World, spin_from: float, until: float | None) -> np.ndarray:
    """Training until the last step, then every GPU busy-waits until `until` (then idle)."""
    mode = sim._mode(w)
    a = w.idx(spin_from) + 1
    b = w.T if until is None else w.idx(until)
    mode[:, :, a:b] = SPIN
    mode[:, :, b:] = IDLE
    return mode


def _end_of_hang(w: World, stop: float) -> tuple[float | None, str]:
    """How a hang ends: an NCCL/heartbeat timeout, a cancel, or the capture ends while it hangs."""
    how = str(w.rng.choice(["timeout", "cancel", "open"]))
    length = {"timeout": 1800.0, "cancel": float(w.rng.uniform(900, 2400)), "open": None}[how]
    if length is None or stop + length > w.end_t - 120:
        return None, "open"
    return stop + length, how


def _stop(w: World, stop: float) -> float:
    """Steps run until `stop`; returns when the last one completed."""
    w.stop_t = stop
    sim.run_steps(w)
    return w.steps[-1][1]


def hang(w: World) -> None:
    """collective-hang mid / oddhost: steps stop, GPUs busy-wait; an odd host spins a different set."""
    last = _stop(w, _frac_time(w, 0.35, 0.6))
    until, how = _end_of_hang(w, last)
    w.crash_t = until
    mode = _hang_modes(w, last, until)
    if w.spec.variant == "oddhost":
        h = _pick(w)
        quiet = w.rng.choice(w.G, size=max(1, w.G // 4), replace=False)
        a = w.idx(last) + 1
        b = w.T if until is None else w.idx(until)
        mode[h, quiet, a:b] = IDLE
        w.culprits = [(w.spec.hosts[h], None)]
    sim.fill(w, mode)
    if w.spec.variant == "oddhost":
        _keep_job_memory(w, [h], w.idx(last) + 1, w.T if until is None else w.idx(until))
    w.onset = last
    w.log.update(end=how, end_t=until)
    w.story = f"collective hang at step {w.steps[-1][0]}, ended by {how}"


def _keep_job_memory(w: World, hosts: list[int], a: int, b: int) -> None:
    """GPUs of a live job keep their memory even when idle."""
    for h in hosts:
        w.arr["fb"][h, :, a:b] = w.arr["fb"][h, :, a - 1 : a]


def prestep(w: World) -> None:
    """A hang in the first collective: no step ever completes; a few GPU indices spin on every host."""
    w.stop_t = w.t_train  # no steps
    settle = w.t_train + float(w.rng.uniform(90, 240))
    until, how = _end_of_hang(w, settle)
    mode = np.full((w.H, w.G, w.T), IDLE, dtype=np.int8)
    spin = w.rng.choice(w.G, size=min(w.G, int(w.rng.integers(2, 4))), replace=False)
    a, b = w.idx(settle), (w.T if until is None else w.idx(until))
    mode[:, spin, a:b] = SPIN
    sim.fill(w, mode)
    busy_fb = sim.GPU_KIND[w.spec.gpu_model][3] * 0.8 * 1024
    w.arr["fb"][:, :, w.idx(w.t_train) : b] = busy_fb
    w.crash_t = until
    w.onset = settle
    w.log.update(end=how, end_t=until, prestep=True)
    w.story = f"hang before step 0, GPUs {sorted(int(g) for g in spin)} spin on every host, ended by {how}"


def network_hang(w: World) -> None:
    """A retransmit / ACK-timeout burst on one or two hosts, then the collective hangs."""
    t_ev = _frac_time(w, 0.35, 0.6)
    lag = float(w.rng.uniform(30, 150))
    last = _stop(w, t_ev + lag)
    until, how = _end_of_hang(w, last)
    w.crash_t = until
    sim.fill(w, _hang_modes(w, last, until))
    n = 2 if w.rng.random() < 0.3 else 1
    bad = [_pick(w) for _ in range(n)]
    a, b = w.idx(t_ev), w.idx(last) + 1
    for h in bad:
        nic = int(w.rng.integers(0, w.arr["retx_inc"].shape[1]))
        if w.spec.variant == "acktimeout":
            w.arr["ack_inc"][h, nic, a:b] += w.rng.integers(20, 80, b - a)
            w.arr["retx_inc"][h, nic, a:b] += w.rng.integers(200, 800, b - a)
            w.arr["port_state"][h, nic, b : b + 2] = 1.0
        else:
            w.arr["retx_inc"][h, nic, a:b] += w.rng.integers(2000, 9000, b - a)
            w.arr["ack_inc"][h, nic, a:b] += w.rng.integers(1, 10, b - a)
    w.culprits = [(w.spec.hosts[h], None) for h in sorted(set(bad))]
    w.onset = float(w.t[a])
    w.log.update(end=how, end_t=until, nccl_warn=bad)
    w.story = f"{w.spec.variant} burst on {len(set(bad))} host(s), hang {lag:.0f} s later, ended by {how}"


def node_death(w: World) -> None:
    """A host stops (silent, GPUs at 0 W, after Xid 79 or climbing ECC); the others hang."""
    t_d = _frac_time(w, 0.4, 0.65)
    last = _stop(w, t_d)
    until, how = _end_of_hang(w, t_d)
    if w.spec.variant == "slurm":
        until, how = t_d + float(w.rng.uniform(60, 300)), "node-failure"
    w.crash_t = until
    d = _pick(w, tuple(w.writers[:1]))
    mode = _hang_modes(w, last, until)
    a = w.idx(t_d)
    sim.fill(w, mode)
    onset = float(w.t[a])
    gpu = None
    if w.spec.variant == "zero":
        w.arr["power"][d, :, a:] = 0.0
        w.arr["util"][d, :, a:] = 0.0
        w.arr["clock"][d, :, a:] = 0.0
    else:
        w.node_ok[d, a:] = False
        w.gpu_ok[d, a:] = False
    if w.spec.variant == "xid79":
        g = int(w.rng.integers(0, w.G))
        x = w.idx(t_d - float(w.rng.uniform(60, 200)))
        w.arr["xid"][d, g, x:] = 79
        w.arr["power"][d, g, x:a] = 0.0
        w.arr["util"][d, g, x:a] = 0.0
        onset, gpu = float(w.t[x]), str(g)
    if w.spec.variant == "slurm":
        g = int(w.rng.integers(0, w.G))
        x = w.idx(t_d - float(w.rng.uniform(180, 400)))
        w.arr["sbe"][d, g, x:a] += np.cumsum(w.rng.integers(3, 30, a - x))
        w.arr["remap_c"][d, g, x:a] += np.arange(a - x) // 3
        onset = float(w.t[x])
    w.culprits = [(w.spec.hosts[d], gpu)]
    w.onset = onset
    w.log.update(end=how, end_t=until, dead=d)
    w.story = f"{w.spec.variant} node death of {w.spec.hosts[d]}, others hang, ended by {how}"


def heartbeat_fp(w: World) -> None:
    """The coordinator kills the job for missed heartbeats while every host trained normally."""
    w.hb_timeout = float(w.rng.choice([100, 300, 600]))
    crash = max(_frac_time(w, 0.5, 0.8), w.t_train + w.hb_timeout + 900)
    w.stop_t = crash
    w.crash_t = crash
    sim.run_steps(w)
    sim.fill(w)
    accused = sorted({_pick(w) for _ in range(int(w.rng.integers(1, 4)))})
    w.onset = crash - w.hb_timeout
    w.log.update(end="heartbeat", end_t=crash, accused=accused)
    w.story = f"heartbeat false positive: {len(accused)} task(s) accused, timeout {w.hb_timeout:.0f} s"


def _step_memory(w: World, hosts: list[int], fatal: int, killed: list[int]) -> float:
    """Memory of the writer hosts: each save leaves some retained; the fatal save reaches the limit."""
    total = float(w.arr["mem_total"][0])
    used = w.arr["mem_used"]
    saves = w.saves[: fatal + 1]
    t_kill = saves[-1][0] + 0.6 * (saves[-1][1] - saves[-1][0])
    for h in hosts:
        base = float(np.median(used[h, : w.idx(w.t_train)])) + 0.06 * total
        peak = (1.0 if h in killed else float(w.rng.uniform(0.9, 0.95))) * total
        bump = 0.25 * total
        step = (peak - base - bump) / max(1, len(saves) - 1)
        level = np.full(w.T, base)
        for k, (t0, t1, _) in enumerate(saves):
            a, b = w.idx(t0), w.idx(t1)
            ramp = np.linspace(0, bump, max(1, b - a))
            level[a:b] = base + k * step + ramp
            level[b:] = base + (k + 1) * step
        if h in killed:
            level[w.idx(t_kill) :] = base * 0.5
        used[h] = level + w.rng.normal(0, 1e8, w.T)
    return t_kill


def host_oom(w: World) -> None:
    """Replica-0 memory climbs save after save; the last save hits the limit and the kernel kills."""
    n_steps = (w.end_t - w.t_train) / (w.spec.step_s + w.save_s / 50)
    w.ckpt_period = max(10, int(n_steps / w.rng.uniform(6, 9)) // 10 * 10)
    sim.run_steps(w)
    w.writers = w.writers or [0]
    if len(w.saves) < 3:
        raise ValueError("too few saves for a staircase")
    fatal = int(w.rng.integers(2, len(w.saves)))
    t_fatal = w.saves[fatal][0]
    n_kill = 2 if w.spec.variant == "two" and len(w.writers) > 1 else 1
    killed = sorted(int(h) for h in w.rng.choice(w.writers, size=n_kill, replace=False))
    w.stop_t = w.saves[fatal][1]
    w.steps = [s for s in w.steps if s[1] <= t_fatal + 1]
    w.saves = w.saves[: fatal + 1]
    sim.fill(w)
    t_kill = _step_memory(w, w.writers, fatal, killed)
    k = w.idx(t_kill)
    for h in killed:
        w.arr["oom"][h, k:] += 1
    w.crash_t = t_kill + 30
    mode = sim._mode(w)
    mode[:, :, w.idx(w.crash_t) :] = IDLE
    _refill_gpu(w, mode)
    w.culprits = [(w.spec.hosts[h], None) for h in killed]
    w.onset = t_fatal
    w.log.update(end="oom", end_t=t_kill, killed=killed)
    w.story = f"host OOM on {len(killed)} replica-0 host(s) at save {fatal + 1} of a memory staircase"


def _refill_gpu(w: World, mode: np.ndarray) -> None:
    keep = {k: w.arr[k] for k in ("xid", "sbe", "dbe", "remap_c", "remap_u", "remap_fail", "pcie_replay")}
    sim._fill_gpu(w, mode)
    w.arr.update(keep)
    w.arr["mode"] = mode


def thermal(w: World) -> None:
    """One GPU heats up, its clock drops and the whole job slows."""
    t_h = _frac_time(w, 0.3, 0.55)
    ramp = float(w.rng.uniform(300, 600))
    a, b = w.idx(t_h), w.idx(t_h + ramp)
    w.slow[b:] = float(w.rng.uniform(1.15, 1.35))
    sim.run_steps(w)
    sim.fill(w)
    h, g = _pick(w), int(w.rng.integers(0, w.G))
    rise = float(w.rng.uniform(22, 30))
    extra = np.concatenate([np.linspace(0, rise, b - a), np.full(w.T - b, rise)])
    mode = w.arr["mode"][h, g, a:]
    w.arr["temp"][h, g, a:] += np.where(mode == sim.TRAIN, extra, extra * 0.5).round()
    hot = np.zeros(w.T, bool)
    hot[a:] = (extra >= 0.7 * rise) & (mode == sim.TRAIN)
    clk = sim.GPU_KIND[w.spec.gpu_model][2]
    w.arr["clock"][h, g, hot] = (clk * w.rng.uniform(0.55, 0.7, int(hot.sum()))).round()
    w.arr["power"][h, g, hot] *= 0.75
    others = w.arr["mode"] == sim.TRAIN
    others[:, :, :b] = False
    w.arr["util"][others] -= 8
    w.culprits = [(w.spec.hosts[h], str(g))]
    w.onset = float(w.t[a])
    w.story = f"GPU {g} of {w.spec.hosts[h]} heats by {rise:.0f} C, clock down, job x{w.slow[-1]:.2f}"


def rdma(w: World) -> None:
    """Sustained retransmits and ACK timeouts on one or two hosts; the job slows, no hang."""
    t_r = _frac_time(w, 0.25, 0.5)
    a = w.idx(t_r)
    w.slow[a:] = float(w.rng.uniform(1.2, 1.4))
    sim.run_steps(w)
    sim.fill(w)
    n = 2 if w.spec.variant == "two" else 1
    bad = sorted({_pick(w) for _ in range(n)})
    end = w.idx(w.steps[-1][1])
    for h in bad:
        nics = w.rng.choice(w.arr["retx_inc"].shape[1], size=int(w.rng.integers(1, 3)), replace=False)
        for nic in nics:
            w.arr["retx_inc"][h, nic, a:end] += w.rng.integers(150, 600, end - a) * w.iv
            w.arr["ack_inc"][h, nic, a:end] += w.rng.integers(0, 3, end - a) * w.iv / 5
    w.culprits = [(w.spec.hosts[h], None) for h in bad]
    w.onset = float(w.t[a])
    w.story = f"sustained RDMA retransmits on {len(bad)} host(s), job x{w.slow[-1]:.2f}"


def ghost(w: World) -> None:
    """One host's exporter keeps serving frozen values while the job trains on."""
    sim.run_steps(w)
    sim.fill(w)
    h = _pick(w)
    t_g = _frac_time(w, 0.3, 0.6)
    kind = "gpu" if w.spec.variant == "gpu" else "node"
    w.frozen[f"{kind}:{h}"] = w.idx(t_g)
    w.culprits = [(w.spec.hosts[h], None)]
    w.onset = float(w.t[w.idx(t_g)])
    w.story = f"{kind} exporter of {w.spec.hosts[h]} frozen"


def driver_fault(w: World) -> None:
    """Driver errors on one host: the GPU exporter times out now and then; training unaffected."""
    sim.run_steps(w)
    sim.fill(w)
    h, g = _pick(w), int(w.rng.integers(0, w.G))
    a = w.idx(_frac_time(w, 0.25, 0.55))
    miss = w.rng.random(w.T - a) < 0.3
    miss[0] = True
    w.gpu_ok[h, a:] &= ~miss
    w.arr["xid"][h, g, a:] = float(w.rng.choice([119, 120, 62]))
    w.culprits = [(w.spec.hosts[h], None)]
    w.onset = float(w.t[a])
    w.log.update(scrape_timeouts=h)
    w.story = f"driver fault on {w.spec.hosts[h]}: GSP/driver Xid and scrape timeouts"


def hardware(w: World) -> None:
    """An uncorrectable error on one GPU, then the job crashes; the host keeps reporting."""
    t_e = _frac_time(w, 0.35, 0.65)
    crash = t_e + float(w.rng.uniform(30, 240))
    w.stop_t = crash
    w.crash_t = crash
    sim.run_steps(w)
    sim.fill(w)
    h, g = _pick(w), int(w.rng.integers(0, w.G))
    a = w.idx(t_e)
    v = w.spec.variant
    if v == "xid":
        w.arr["xid"][h, g, a:] = float(w.rng.choice([48, 94, 95]))
    if v in ("ecc", "xid"):
        w.arr["dbe"][h, g, a:] += w.rng.integers(1, 4)
    w.arr["remap_u"][h, g, a:] += 1
    if v == "remap":
        w.arr["remap_fail"][h, g, w.idx(crash) :] = 1
    w.culprits = [(w.spec.hosts[h], str(g))]
    w.onset = float(w.t[a])
    w.log.update(end="gpu-error", end_t=crash, bad=h)
    w.story = f"uncorrectable error ({v}) on {w.spec.hosts[h]} GPU {g}, crash"


def instability(w: World) -> None:
    """Loss (or grad norm) moves first; throughput and GPU power follow; NaN then a crash."""
    t0 = _frac_time(w, 0.35, 0.6)
    follow = float(w.rng.uniform(300, 900))
    w.slow[w.idx(t0 + follow) :] = 1.25
    w.stop_t = min(w.end_t - 400, t0 + follow + float(w.rng.uniform(300, 900)))
    w.crash_t = w.stop_t
    sim.run_steps(w)
    s0 = next((s for s, t, _, _ in w.steps if t >= t0), w.steps[-1][0])
    grad = 1.0 if w.spec.variant == "gradnorm" else 0.0
    lag_steps = int(w.rng.integers(5, 20)) if grad else 0
    steps = []
    for s, t, secs, ls in w.steps:
        k = s - s0
        if k >= lag_steps:
            ls += 0.03 * (k - lag_steps) ** 1.3
        steps.append((s, t, secs, ls))
    steps[-1] = (steps[-1][0], steps[-1][1], steps[-1][2], float("nan"))
    w.steps = steps
    w.log.update(end="nan", end_t=w.crash_t, s0=s0, grad=grad)
    sim.fill(w)
    a = w.idx(t0 + follow)
    mode = w.arr["mode"]
    dip = (mode == sim.TRAIN) & (np.arange(w.T) >= a)
    w.arr["util"][dip] -= 20
    w.arr["power"][dip] *= 0.8
    w.onset = float(next(t for s, t, _, _ in w.steps if s == s0))
    w.story = f"{w.spec.variant}: training metric moves at step {s0}, system follows {follow:.0f} s later"


def healthy(w: World) -> None:
    sim.run_steps(w)
    sim.fill(w)
    w.story = "healthy run"


SCENARIOS = {
    "healthy": healthy,
    "collective-hang": hang,
    "network-hang": network_hang,
    "node-death": node_death,
    "heartbeat-false-positive": heartbeat_fp,
    "host-oom": host_oom,
    "thermal-straggler": thermal,
    "rdma-degradation": rdma,
    "monitoring-ghost-data": ghost,
    "gpu-driver-fault": driver_fault,
    "gpu-hardware-fault": hardware,
    "training-instability": instability,
}


def build(w: World) -> None:
    """Run the scenario of the world's class (the pre-step hang is a variant of the hang)."""
    if w.spec.cls == "collective-hang" and w.spec.variant == "prestep":
        prestep(w)
    else:
        SCENARIOS[w.spec.cls](w)
