"""Outside corpus F (#10): each class's story — the timeline, what happened to which host, and the truth.

The truth follows the diagnosis contract: culprits are what people would drain, onset is the first
anomaly of the causal chain (a hang without trigger: when the step counter stopped advancing).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from bench.outside._f_plan import FAMILY, SKUS, Case
from bench.outside._f_time import Effects, Step, Timeline, build, truncate
from bench.outside._f_values import GIB, Fleet


@dataclass
class Story:
    """A built case: its fleet (timeline + effects + herrings), how the log ends, and the truth."""

    fleet: Fleet
    ending: str  # completed | nccl-timeout | node-lost | heartbeat | oom | cuda-ecc | nan
    culprits: list[tuple[str, int | None]]
    onset: float | None
    text: str
    hb_timeout: int = 0
    accused: list[str] = field(default_factory=list)
    first_step: int = 0

    def truth(self) -> dict[str, object]:
        case = self.fleet.case
        cls = "healthy" if case.cls == "healthy-pair" else case.cls
        return {
            "class": cls,
            "family": FAMILY[cls],
            "culprits": [{"host": h, "gpu": None if g is None else str(g)} for h, g in self.culprits],
            "onset": None if self.onset is None else round(self.onset, 3),
            "scrape_s": case.scrape,
            "story": self.text,
        }


def _pick(rng: random.Random, case: Case, avoid: set[str], k: int = 1) -> list[str]:
    common = max(set(case.sku), key=case.sku.count)
    pool = [h for i, h in enumerate(case.hosts) if h not in avoid and case.sku[i] == common]
    return rng.sample(pool, min(k, len(pool)))


def _fleet(case: Case, tl: Timeline, eff: Effects, rng: random.Random) -> Fleet:
    """Herrings every case carries: a slow-but-fine host, an old benign Xid, an exporter restart."""
    n = len(case.hosts)
    replica0 = case.hosts[: max(1, n // rng.choice((2, 4, 8)))]
    busy = (
        set(eff.dead)
        | set(eff.oom)
        | {h for h, _ in eff.hot}
        | set(eff.rdma)
        | set(eff.ghost)
        | set(eff.driver)
    )
    busy |= {h for h, *_ in eff.xid} | {h for h, *_ in eff.ecc_ue}
    spare = [h for h in case.hosts if h not in busy and h not in replica0[:1]]
    slow_host = rng.choice(spare) if spare and rng.random() < 0.5 else None
    old_xid = (
        (rng.choice(spare), rng.randrange(case.gpus), rng.choice((13, 31)))
        if spare and rng.random() < 0.6
        else None
    )
    if spare and rng.random() < 0.4 and case.cls != "monitoring-ghost-data":
        eff.exporter_restart[rng.choice(spare)] = rng.uniform(tl.begin, tl.end)
    mem_total = rng.choice((1.0, 2.0)) * 1024 * GIB
    model_bytes = rng.uniform(0.08, 0.2) * mem_total
    return Fleet(case, tl, eff, slow_host, replica0, mem_total, model_bytes, old_xid)


def make(case: Case, launch: float, first_step: int = 0, extra_procs: float = 0.0) -> Story:
    """The class's story on this case."""
    rng = case.rng
    step_s = rng.uniform(2.5, 9.0) if len(case.hosts) < 64 else rng.uniform(6.0, 12.0)
    setup = rng.uniform(150, 420)
    if case.small:
        step_s, setup = max(step_s, 6.0), 120.0
    eff = Effects(extra_procs=extra_procs)
    cls = case.cls
    if cls in ("collective-hang", "network-hang", "node-death"):
        return _hang(case, rng, launch, setup, step_s, eff, first_step)
    if cls == "training-instability":
        return _nan(case, rng, launch, setup, step_s, eff)
    if cls in ("host-oom", "heartbeat-false-positive", "gpu-hardware-fault"):
        return _crash(case, rng, launch, setup, step_s, eff)
    return _runs_on(case, rng, launch, setup, step_s, eff, first_step)


def _hang(
    case: Case, rng: random.Random, launch: float, setup: float, step_s: float, eff: Effects, first_step: int
) -> Story:
    budget = rng.uniform(700, 1500) if not case.small else 500.0
    pre_step = case.cls == "collective-hang" and rng.random() < 0.2
    tl = build(rng, launch, setup, step_s, None, False, 0, first_step=first_step)
    nccl = rng.choice((600, 600, 1200, 1800)) if not case.small else 300
    stop = tl.begin + (0.0 if pre_step else budget)
    tl = truncate(tl, stop, True, nccl)
    last = tl.steps[-1].t if tl.steps else tl.begin
    culprits: list[tuple[str, int | None]] = []
    onset: float | None = last
    if case.cls == "collective-hang":
        text = "all ranks stopped in the same collective"
        if rng.random() < 0.5:
            host = _pick(rng, case, set())[0]
            gpus = rng.sample(range(case.gpus), rng.choice((1, 1, 2)))
            eff.idle_in_hang |= {(host, g) for g in gpus}
            culprits = [(host, gpus[0] if len(gpus) == 1 else None)]
            text += f"; {host} GPU(s) {sorted(gpus)} never entered it (idle while the others busy-wait)"
        if pre_step:
            text = "hang in the first collective, before step 0; " + text
            onset = tl.begin
    elif case.cls == "network-hang":
        hosts = _pick(rng, case, set(), rng.choice((1, 1, 2)))
        start = last - rng.uniform(60, 240)
        for h in hosts:
            eff.rdma[h] = (start, tl.end + 60, rng.uniform(300, 2500))
        culprits = [(h, None) for h in hosts]
        onset = start
        text = f"RDMA retransmits and ACK timeouts burst on {', '.join(hosts)}, then the job hung"
    else:
        host = _pick(rng, case, set())[0]
        dead = tl.stop if tl.stop is not None else last
        eff.dead[host] = dead
        culprits = [(host, None)]
        onset = dead
        text = f"{host} went silent (exporters gone), the other ranks hung in NCCL"
        if rng.random() < 0.35:
            eff.back[host] = dead + rng.uniform(180, 420)
            text += "; it came back from a reboot minutes later, idle"
        if rng.random() < 0.5:
            g = rng.randrange(case.gpus)
            first = dead - rng.uniform(90, 300)
            eff.xid.append((host, g, first, 79))
            eff.ecc_ue.append((host, g, first + 10))
            onset = first
            text += f"; GPU {g} reported Xid 79 and uncorrectable ECC first"
    fl = _fleet(case, tl, eff, rng)
    ending = "node-lost" if case.cls == "node-death" else "nccl-timeout"
    return Story(fl, ending, culprits, onset, text, first_step=first_step)


def _nan(case: Case, rng: random.Random, launch: float, setup: float, step_s: float, eff: Effects) -> Story:
    k = rng.randrange(150, 260) if not case.small else 60
    m = rng.randrange(6, 30)
    base = random.Random(rng.random())

    def loss_fn(n: int) -> tuple[float, float] | None:
        if n < k:
            return None
        if n >= k + m:
            return math.nan, math.inf
        d = n - k + 1
        return 2.4 + 0.35 * d * d + base.gauss(0, 0.1), 8.0 * math.exp(0.45 * d)

    tl = build(rng, launch, setup, step_s, None, False, 0, loss_fn=loss_fn)
    while not any(s.n == k for s in tl.steps):  # slow steps: the budget ended before the blow-up began
        k = max(1, tl.steps[-1].n // 2)
        tl = build(rng, launch, setup, step_s, None, False, 0, loss_fn=loss_fn)
    last = tl.steps[-1]
    tl = truncate(tl, last.t, False, rng.uniform(15, 40))
    onset = next(s.t for s in tl.steps if s.n == k)
    fl = _fleet(case, tl, eff, rng)
    return Story(
        fl,
        "nan",
        [],
        onset,
        f"loss and grad norm diverged from step {k}, NaN at step {k + m}; the job exited",
    )


def _crash(case: Case, rng: random.Random, launch: float, setup: float, step_s: float, eff: Effects) -> Story:
    ckpt = max(10, int(1400 / step_s / 4)) if case.cls == "host-oom" else None
    tl = build(rng, launch, setup, step_s, None, False, 0, ckpt_every=ckpt)
    culprits: list[tuple[str, int | None]] = []
    hb, accused = 0, []
    if case.cls == "host-oom" and len(tl.saves) >= 2:
        fatal = tl.saves[rng.randrange(1, len(tl.saves))]
        kill = fatal[0] + (fatal[1] - fatal[0]) * rng.uniform(0.5, 0.9)  # killed mid-save
        tl = truncate(tl, kill, False, rng.uniform(20, 60))
        fl = _fleet(case, tl, eff, rng)
        k = 2 if len(fl.replica0) > 2 and rng.random() < 0.3 else 1
        victims = fl.replica0[:k]
        for h in victims:
            eff.oom[h] = (fatal[0], kill)
        if len(fl.replica0) > k:
            eff.near_limit.add(fl.replica0[k])
        culprits = [(h, None) for h in victims]
        text = f"host memory ran out during the step-{fatal[2]} checkpoint save on {', '.join(victims)}: OOM kill"
        return Story(fl, "oom", culprits, fatal[0], text)
    if case.cls == "heartbeat-false-positive":
        hb = rng.choice((300, 600, 900))
        crash = tl.begin + rng.uniform(max(hb + 200, 700), max(hb + 300, 1400))
        tl = truncate(tl, min(crash, tl.steps[-1].t), False, 20)
        crash = tl.stop or crash
        accused = _pick(rng, case, set(), rng.choice((1, 2)))
        fl = _fleet(case, tl, eff, rng)
        text = f"the coordinator marked {', '.join(accused)} dead for missed heartbeats ({hb} s) while they trained"
        return Story(fl, "heartbeat", [], crash - hb, text, hb_timeout=hb, accused=accused)
    host = _pick(rng, case, set())[0]
    g = rng.randrange(case.gpus)
    t_err = tl.begin + rng.uniform(500, 1300)
    tl = truncate(tl, t_err + rng.uniform(20, 120), False, rng.uniform(30, 90))
    code = rng.choice((48, 48, 79)) if case.gpu_exp == "dcgm" else 48
    eff.xid.append((host, g, t_err, code))
    eff.ecc_ue.append((host, g, t_err))
    fl = _fleet(case, tl, eff, rng)
    text = f"GPU {g} on {host}: uncorrectable ECC (Xid {code}), the job crashed; the host kept reporting"
    return Story(fl, "cuda-ecc", [(host, g)], t_err, text)


def _runs_on(
    case: Case, rng: random.Random, launch: float, setup: float, step_s: float, eff: Effects, first_step: int
) -> Story:
    """Classes where the job runs to the end: healthy, thermal, RDMA, ghost, driver, restore."""
    cls = case.cls
    pre = build(rng, launch, setup, step_s, None, False, 30, first_step=first_step)
    t_ev = pre.begin + (pre.steps[-1].t - pre.begin) * rng.uniform(0.25, 0.55)
    culprits: list[tuple[str, int | None]] = []
    onset: float | None = None
    text = "a normal run (checkpoint saves, evaluations, warm-up)"
    slow = None
    if cls == "thermal-straggler":
        host, g = _pick(rng, case, set())[0], rng.randrange(case.gpus)
        eff.hot[(host, g)] = t_ev
        slow = (t_ev + 150, rng.uniform(1.15, 1.3))
        culprits, onset = [(host, g)], t_ev
        text = f"GPU {g} on {host} overheated and throttled its clock; every step slowed"
    elif cls == "rdma-degradation":
        hosts = _pick(rng, case, set(), rng.choice((1, 2, 3)) if len(case.hosts) > 8 else 1)
        for h in hosts:
            eff.rdma[h] = (t_ev, pre.t1 + 3600, rng.uniform(40, 250))
        slow = (t_ev, rng.uniform(1.18, 1.35))
        culprits, onset = [(h, None) for h in hosts], t_ev
        text = f"sustained RDMA retransmits on {', '.join(hosts)}; the whole job ran slower, no hang"
    elif cls == "monitoring-ghost-data":
        host = _pick(rng, case, set())[0]
        which = rng.choice(("gpu", "node"))
        eff.ghost[host] = (t_ev, which)
        culprits, onset = [(host, None)], t_ev
        text = f"the {which} exporter on {host} froze (values and scrape duration flat); training was fine"
    elif cls == "gpu-driver-fault":
        host, g = _pick(rng, case, set())[0], rng.randrange(case.gpus)
        eff.driver[host] = t_ev
        eff.xid.append((host, g, t_ev, 119))
        culprits, onset = [(host, g)], t_ev
        text = f"GPU driver trouble on {host} (Xid 119 GSP timeouts on GPU {g}, scrapes timing out); training unaffected"
    tl = (
        build(
            random.Random(rng.random()),
            launch,
            setup,
            step_s,
            None,
            False,
            30,
            first_step=first_step,
            slow=slow,
        )
        if slow
        else pre
    )
    fl = _fleet(case, tl, eff, rng)
    return Story(fl, "completed", culprits, onset, text, first_step=first_step)


def tokens_per_step(case: Case) -> float:
    """Tokens each GPU processes per step (for the throughput the log prints)."""
    return 8192.0 * (2 if SKUS[case.sku[0]][2] > 500 else 1)


def last_step(tl: Timeline) -> Step | None:
    return tl.steps[-1] if tl.steps else None
