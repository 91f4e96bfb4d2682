"""Corpus G's stories (#10): one per class, each a fleet, a timeline, effects, log events and the truth.

The truth follows the diagnosis contract: culprits are the hosts (and GPU) a careful operator would
drain, onset the first moment the data shows the root cause (for a hang without trigger, the last step
advance; for a heartbeat false positive, the crash minus the heartbeat timeout; for a host OOM, the start
of the fatal save's rise). Red herrings that a healthy job shows are drawn for every story.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench.outside._g_fleet import Fleet, make_fleet
from bench.outside._g_time import CKPT, Effects, Timeline, add_stall, build, losses

FAMILY = {
    "healthy": "none",
    "collective-hang": "collective",
    "network-hang": "network-rdma",
    "node-death": "node",
    "heartbeat-false-positive": "heartbeat",
    "host-oom": "host-memory",
    "thermal-straggler": "thermal",
    "rdma-degradation": "network-rdma",
    "restore-resource-leak": "cpu-contention",
    "monitoring-ghost-data": "monitoring",
    "gpu-driver-fault": "gpu-driver",
    "gpu-hardware-fault": "gpu-hardware",
    "training-instability": "training",
}
RDMA_CLASSES = {"network-hang", "rdma-degradation"}
SIZES = {"nodes": [8, 8, 12, 16, 16, 24, 32, 48], "max_minutes": 120.0}  # tests shrink these


@dataclass
class Story:
    """One job: what happened, what the log says and the truth.

    Attributes:
        events: (t, host index or None, kind, details) the log writer renders.
        end: completed | crashed | cancelled (how the job's log ends).
        culprits: (host index, GPU or None); onset: unix s or None; text: the truth's story.
        nccl_timeout_ms: the ProcessGroupNCCL watchdog timeout; restored_from: checkpoint step or None.
    """

    cls: str
    fleet: Fleet
    tl: Timeline
    eff: Effects
    events: list[tuple[float, int | None, str, dict]] = field(default_factory=list)
    end: str = "completed"
    culprits: list[tuple[int, int | None]] = field(default_factory=list)
    onset: float | None = None
    text: str = ""
    nccl_timeout_ms: int = 600_000
    restored_from: int | None = None
    hb_timeout_s: float = 0.0
    tokens_per_step: float = 0.0
    extra: dict = field(default_factory=dict)

    def truth(self) -> dict:
        names = self.fleet.names
        return {
            "class": self.cls,
            "family": FAMILY[self.cls],
            "culprits": [{"host": names[h], "gpu": None if g is None else str(g)} for h, g in self.culprits],
            "onset": None if self.onset is None else round(self.onset, 3),
            "scrape_s": self.fleet.scrape_s,
            "story": self.text,
        }


def _size(rng: random.Random, fl_series: int, scrape: float) -> tuple[float, float]:
    """(minutes, step seconds) that keep the TSDB near 1.2 M samples."""
    budget_min = 1.2e6 * scrape / max(fl_series, 1) / 60.0 - 12
    minutes = max(30.0, min(rng.uniform(35, SIZES["max_minutes"]), budget_min))
    return minutes, rng.choice([1.6, 2.4, 3.5, 5.0, 7.5, 11.0])


def _series_estimate(fl: Fleet) -> int:
    per_gpu = 16 + (1 if fl.dcgm_new else 0) + (5 if fl.dcp else 0)
    per_node = 40 + len(fl.nics) * (13 if fl.rdma == "roce" else 10)
    return len(fl.hosts) * (fl.gpu.per_host * per_gpu + per_node)


def _herrings(st: Story, rng: random.Random, heavy: bool) -> list[str]:
    """Normal things a real job shows; `heavy` draws more of them. Returns their descriptions."""
    fl, eff, tl = st.fleet, st.eff, st.tl
    n = len(fl.hosts)
    said = []
    if fl.rdma != "none":
        eff.trickle = rng.uniform(0.02, 0.4)
        said.append("an RDMA retransmit trickle on every host")
    if heavy or rng.random() < 0.4:
        rack = rng.randrange(max(1, fl.hosts[-1].rack + 1))
        for i, h in enumerate(fl.hosts):
            if h.rack == rack:
                eff.warm[i] = rng.uniform(3, 6)
        said.append(f"a warm rack (rack {rack}, +3-6 °C)")
    if heavy or rng.random() < 0.3:
        eff.old_xids[(rng.randrange(n), rng.randrange(fl.gpu.per_host))] = rng.choice([13, 31, 43])
        said.append("an old Xid from before the job")
    if heavy or rng.random() < 0.3:
        eff.util_off[rng.randrange(n)] = rng.uniform(1.5, 3.0)
        said.append("a host a little less busy, within noise")
    if fl.dcp and (heavy or rng.random() < 0.3):
        eff.sbe_tick[(rng.randrange(n), rng.randrange(fl.gpu.per_host))] = rng.uniform(2, 8)
        said.append("correctable ECC ticking on one GPU")
    if heavy or rng.random() < 0.25:
        add_stall(tl, rng)
        said.append("a data-loader stall that recovers")
    return said


def _culprit_hosts(rng: random.Random, n: int, k: int) -> list[int]:
    return sorted(rng.sample(range(n), k))


def _truncate(tl: Timeline, t: float) -> None:
    keep = tl.step_t <= t
    tl.step_no, tl.step_t = tl.step_no[keep], tl.step_t[keep]
    tl.pauses = [(a, min(b, t), c) for a, b, c in tl.pauses if a < t]


def _base(
    cls: str,
    rng: random.Random,
    launch: float,
    *,
    site: str | None = None,
    hang_at_frac: float | None = None,
    first_step: int = 0,
    cotenant: bool = False,
) -> Story:
    needs = cls in RDMA_CLASSES
    n = rng.choice(SIZES["nodes"])
    if cls == "heartbeat-false-positive":
        site = site or rng.choice(["aws", "cray"])
    if cotenant:
        site = "gcp"
    fl = make_fleet(rng, n, needs_rdma=needs, site=site)
    if cls == "heartbeat-false-positive":
        fl.log = "raytrain"
    if cotenant:
        fl.owned = list(range(fl.gpu.per_host // 2))
    if cls == "training-instability":
        fl.train_gauges = fl.train_gauges or fl.log == "composer"
    while fl.scrape_s < 30 and 1.2e6 * fl.scrape_s / _series_estimate(fl) / 60.0 < 45:
        fl.scrape_s += 10.0  # big fleets are scraped less often (as sites do), keeping the TSDB small
        fl.timeout_s = min(fl.scrape_s, max(fl.timeout_s, 10.0))
    minutes, step_s = _size(rng, _series_estimate(fl), fl.scrape_s)
    eff = Effects()
    if cotenant:
        for i in range(n):
            eff.cotenant[i] = list(range(fl.gpu.per_host // 2, fl.gpu.per_host))
    hang_at = launch + minutes * 60 * hang_at_frac if hang_at_frac else None
    tl = build(rng, launch, minutes, step_s, eff, first_step=first_step, hang_at=hang_at)
    st = Story(cls, fl, tl, eff)
    st.tokens_per_step = rng.choice([2, 4, 8]) * 1024 * 1024.0
    st.nccl_timeout_ms = rng.choice([600_000, 600_000, 1_800_000, 900_000])
    return st


def _finish_hang(st: Story, rng: random.Random) -> None:
    """After a hang: the NCCL watchdog fires (crash) or the user cancels the job."""
    tl = st.tl
    t_h = tl.hang[0] if tl.hang else tl.t_train
    if rng.random() < 0.7:
        t_end = t_h + st.nccl_timeout_ms / 1000.0 + rng.uniform(1, 8)
        st.events.append((t_end, None, "nccl_watchdog", {"since": t_h}))
        st.end = "crashed"
    else:
        t_end = t_h + rng.uniform(900, 1500)
        st.events.append((t_end, None, "cancel", {}))
        st.end = "cancelled"
    tl.hang = (t_h, t_end)
    tl.t_stop = t_end
    tl.t1 = t_end + rng.uniform(240, 500)


def healthy(rng: random.Random, launch: float, variant: int) -> Story:
    st = _base("healthy", rng, launch, cotenant=variant == 3)
    said = _herrings(st, rng, heavy=variant in (1, 2))
    eff, tl, n = st.eff, st.tl, len(st.fleet.hosts)
    if variant == 2:
        a = rng.uniform(tl.t_train + 300, tl.t_stop - 600)
        eff.prom_gap = (a, a + rng.uniform(60, 200))
        eff.exporter_restart[rng.randrange(n)] = rng.uniform(tl.t_train + 120, tl.t_stop - 300)
        h = rng.randrange(n)
        b = rng.uniform(tl.t_train, tl.t_stop - 900)
        eff.outage[(h, rng.choice(["node", "dcgm"]))] = (b, b + rng.uniform(240, 600))
        said += [
            "a Prometheus restart (a gap on every target)",
            "an exporter restart (counter reset)",
            "a monitoring outage of one exporter",
        ]
    if variant == 3:
        said.append("half of every node's GPUs serve another job (a busy co-tenant)")
    losses(tl, rng)
    st.text = "a healthy job" + (": " + ", ".join(said) if said else "")
    return st


def collective_hang(rng: random.Random, launch: float, variant: int) -> Story:
    before = variant == 1
    st = _base("collective-hang", rng, launch, hang_at_frac=None if before else rng.uniform(0.45, 0.7))
    tl, eff, fl = st.tl, st.eff, st.fleet
    said = _herrings(st, rng, heavy=False)
    if before:
        tl.step_no, tl.step_t = tl.step_no[:0], tl.step_t[:0]
        tl.pauses = []
        tl.hang = (tl.t_train + rng.uniform(5, 20), tl.t_stop)
        st.onset = tl.hang[0]
        st.text = "the job hangs in its first collective (no step completes); every GPU busy-waits"
    else:
        st.onset = float(tl.step_t[-1])
        st.text = f"steps stop after step {tl.step_no[-1]} with no network or node trigger"
    _finish_hang(st, rng)
    if not before and rng.random() < 0.7:
        h = rng.randrange(len(fl.hosts))
        g = rng.choice(fl.owned)
        eff.hang_sets[h] = [x for x in fl.owned if x != g]
        st.culprits = [(h, None)]
        st.events.append((st.onset + 30, h, "py_stack", {"gpu": g}))
        st.text += f"; on {fl.names[h]} GPU {g} is not in the collective (idle) while all others busy-wait"
    else:
        st.text += "; the stuck-GPU pattern is the same on every host"
    losses(tl, rng)
    st.text += ("; herrings: " + ", ".join(said)) if said else ""
    return st


def network_hang(rng: random.Random, launch: float, variant: int) -> Story:
    st = _base("network-hang", rng, launch, hang_at_frac=rng.uniform(0.5, 0.75))
    tl, eff, fl = st.tl, st.eff, st.fleet
    _herrings(st, rng, heavy=False)
    eff.trickle = max(eff.trickle, rng.uniform(0.05, 0.3))
    k = 1 if variant == 0 or len(fl.hosts) < 12 else 2
    hosts = _culprit_hosts(rng, len(fl.hosts), k)
    t_last = float(tl.step_t[-1])
    lead = rng.uniform(30, 120)
    t_net = t_last - lead
    _truncate(tl, t_last)
    _finish_hang(st, rng)
    for h in hosts:
        eff.retx[h] = (t_net, tl.t_stop, rng.uniform(300, 2500))
        st.events.append((t_net + rng.uniform(5, 25), h, "nccl_ib_error", {}))
    st.culprits = [(h, None) for h in hosts]
    st.onset = t_net
    names = ", ".join(fl.names[h] for h in hosts)
    st.text = (
        f"RDMA ACK timeouts and retransmits burst on {names} {lead:.0f} s before the steps stop; "
        "every GPU then busy-waits until the NCCL watchdog (or the user) ends the job"
    )
    losses(tl, rng)
    return st


def node_death(rng: random.Random, launch: float, variant: int) -> Story:
    st = _base("node-death", rng, launch, hang_at_frac=rng.uniform(0.45, 0.75))
    tl, eff, fl = st.tl, st.eff, st.fleet
    _herrings(st, rng, heavy=False)
    h = rng.randrange(len(fl.hosts))
    t_last = float(tl.step_t[-1])
    if variant == 1:
        g = rng.choice(fl.owned)
        t_x = t_last + rng.uniform(1, min(6.0, tl.step_s * 0.8))
        eff.xids.append((h, g, t_x, 79))
        eff.gpu_gone[(h, g)] = t_x + fl.scrape_s * rng.uniform(1.6, 2.6)  # one or two scrapes show the Xid
        t_dead = t_x + rng.uniform(90, 240)
        st.events.append((t_x, h, "xid", {"gpu": g, "xid": 79}))
        st.onset = t_x
        st.text = (
            f"GPU {g} of {fl.names[h]} falls off the bus (Xid 79), then the host goes silent "
            f"{t_dead - t_x:.0f} s later; the other hosts hang"
        )
    else:
        t_dead = t_last + rng.uniform(1, tl.step_s * 0.9)
        st.onset = t_dead
        st.text = f"{fl.names[h]} dies (both exporters stop answering); the other hosts hang"
    eff.dead[h] = t_dead
    _finish_hang(st, rng)
    st.events.append((t_dead + rng.uniform(20, 90), h, "node_fail", {}))
    eff.hang_sets[h] = []
    st.culprits = [(h, None)]
    losses(tl, rng)
    return st


def heartbeat_fp(rng: random.Random, launch: float, variant: int) -> Story:
    st = _base("heartbeat-false-positive", rng, launch)
    tl, fl = st.tl, st.fleet
    _herrings(st, rng, heavy=False)
    period = rng.choice([3000, 5000, 10000])
    thresh = rng.choice([5, 10, 12, 30])
    st.hb_timeout_s = period * thresh / 1000.0
    t_c = float(tl.step_t[int(len(tl.step_t) * rng.uniform(0.5, 0.8))]) + rng.uniform(0.5, tl.step_s * 0.8)
    _truncate(tl, t_c)
    tl.t_stop = t_c + rng.uniform(3, 12)
    tl.t1 = tl.t_stop + rng.uniform(240, 500)
    k = 1 if variant == 0 else min(2, len(fl.hosts) - 1)
    accused = _culprit_hosts(rng, len(fl.hosts), k)
    for h in accused:
        st.events.append((t_c, h, "hb_dead", {"period": period, "thresh": thresh}))
    st.events.append((tl.t_stop, None, "ray_fail", {"accused": accused}))
    st.end = "crashed"
    st.onset = t_c - st.hb_timeout_s
    st.extra.update(period=period, thresh=thresh)
    st.text = (
        f"Ray's GCS marks {', '.join(fl.names[h] for h in accused)} dead for missed heartbeats "
        f"({period} ms x {thresh}) while they were training normally; the run is torn down"
    )
    losses(tl, rng)
    return st


def host_oom(rng: random.Random, launch: float, variant: int) -> Story:
    st = _base("host-oom", rng, launch)
    tl, eff, fl = st.tl, st.eff, st.fleet
    _herrings(st, rng, heavy=False)
    ck = [(a, b) for a, b, c in tl.pauses if c == CKPT]
    if len(ck) < 2:
        tl.ckpt_every = max(5, int(len(tl.step_no) / 4))
        st2 = _rebuild_ckpts(st, rng)
        ck = [(a, b) for a, b, c in st2.pauses if c == CKPT]
    n = len(fl.hosts)
    reps = list(range(0, n, max(1, n // rng.choice([2, 4]))))[:4]
    total_gib = 884.0 if fl.gpu.per_host == 4 else 2000.0
    fatal = ck[min(len(ck) - 1, rng.choice([1, 2]))]
    earlier = [c for c in ck if c[0] < fatal[0]]
    victims = reps[:1] if variant == 0 else reps[:2]
    for h in reps:
        for a, b in earlier:
            eff.mem_rises.setdefault(h, []).append((a, b, total_gib * 0.3, total_gib * 0.12))
    t_kill = fatal[0] + (fatal[1] - fatal[0]) * rng.uniform(0.55, 0.85)
    floor = 0.2 + 0.12 * len(earlier)
    for h in victims:
        eff.oom_kill[h] = t_kill + rng.uniform(0, 4)
        st.events.append((eff.oom_kill[h], h, "oom_kill", {}))
    for h in reps:
        # the victims' save would need 1.4x what is left: memory sits at the limit for the last part of the rise
        gib = (0.985 - floor) * total_gib * (1.4 if h in victims else 0.8)
        eff.mem_rises.setdefault(h, []).append((fatal[0], eff.oom_kill.get(h, t_kill), gib, 0.0))
    _truncate(tl, fatal[0])
    tl.pauses.append((fatal[0], t_kill, CKPT))
    tl.t_stop = max(eff.oom_kill.values()) + rng.uniform(10, 40)
    tl.t1 = tl.t_stop + rng.uniform(240, 500)
    st.end = "crashed"
    st.culprits = [(h, None) for h in victims]
    st.onset = fatal[0]
    st.text = (
        f"host memory on the replica-0 hosts climbs during the checkpoint save after step "
        f"{tl.step_no[-1]}; the kernel OOM-kills the trainer on {', '.join(fl.names[h] for h in victims)}"
        + (f" (an earlier save raised the floor by {0.12 * total_gib:.0f} GiB)" if earlier else "")
    )
    losses(tl, rng)
    return st


def _rebuild_ckpts(st: Story, rng: random.Random) -> Timeline:
    """Insert checkpoint pauses every `ckpt_every` steps into an existing timeline (shifting later steps)."""
    tl = st.tl
    tl.pauses = []
    shift = 0.0
    times = tl.step_t.copy()
    for i, k in enumerate(tl.step_no):
        times[i] += shift
        if k > tl.first_step and k % tl.ckpt_every == 0:
            p = tl.ckpt_s * rng.uniform(0.85, 1.2)
            tl.pauses.append((times[i], times[i] + p, CKPT))
            shift += p
    keep = times < tl.t_stop
    tl.step_no, tl.step_t = tl.step_no[keep], times[keep]
    tl.pauses = [p for p in tl.pauses if p[0] < tl.t_stop]
    return tl
