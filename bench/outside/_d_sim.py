"""Corpus D: the state of every host and GPU at each scrape, and the GPU exporter's series.

`Sim` starts from the job-wide timeline (every host in the same phase); stories then change a host's
phase, which GPUs spin in a hang, add heat, errors, retransmits, memory, freezes and missing scrapes.
`gpu_series` renders dcgm-exporter's families from that state.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from bench.outside._d_fleet import dcgm_gpu_labels, dcgm_target, k8s_workload_labels, stable
from bench.outside._d_timeline import BUSY, EVAL, GONE, IDLE, SAVE, TRAIN, Plan, Timeline


@dataclass
class Series:
    """One series: its name, label text, values and the scrape times it has a sample at."""

    name: str
    labels: dict[str, str]
    values: np.ndarray
    times: np.ndarray  # unix seconds (NaN: no sample)
    fmt: str = ".6g"


class Sim:
    """Per-host/per-GPU state of one case; stories edit it, renderers read it."""

    def __init__(self, plan: Plan, tl: Timeline) -> None:
        self.plan, self.tl = plan, tl
        self.ticks = plan.ticks
        h, g, t = len(plan.hosts), plan.gpus, len(self.ticks)
        self.H, self.G, self.T = h, g, t
        self.np = np.random.default_rng(stable(plan.name, plan.rng.random()))
        self.code = np.tile(tl.phase, (h, 1))
        self.spin = np.ones((h, g), dtype=bool)  # GPUs that spin in a collective wait
        self.temp_add = np.zeros((h, g, t))
        self.clock_mul = np.ones((h, g, t))
        self.xid = np.zeros((h, g, t))
        self.unc_rows = np.zeros((h, g, t))  # increments
        self.corr_rows = np.zeros((h, g, t))
        self.pcie = np.zeros((h, g, t))
        self.dcgm_present = np.ones((h, t), dtype=bool)
        self.dcgm_up = np.ones((h, t))
        self.dcgm_dur = 0.02 + 0.03 * self.np.random((h, t))
        self.node_present = np.ones((h, t), dtype=bool)
        self.node_up = np.ones((h, t))
        self.train_present = np.ones(t, dtype=bool)
        self.frozen: dict[tuple[str, int], int] = {}  # (exporter, host) -> first frozen tick
        self.dcgm_epoch_at: dict[int, int] = {}  # host -> tick its DCGM pod restarted
        n = len(plan.hosts[0].nics)
        self.retx = np.zeros((h, n, t))
        self.acktmo = np.zeros((h, n, t))
        self.mem_add = np.zeros((h, t))  # bytes above the host's base
        self.procs_add = np.zeros((h, t))
        self.oom = np.zeros((h, t))  # increments
        self.tcp_add = np.zeros((h, t))  # retransmitted segments per second
        self.offsets: dict[str, np.ndarray] = {}

    def tick(self, offset: float) -> int:
        """The first tick at or after an offset."""
        return int(min(self.T - 1, max(0, np.searchsorted(self.ticks, offset - 1e-6))))

    def times(self, key: str, present: np.ndarray) -> np.ndarray:
        """Scrape times of one target: the grid plus the target's fixed offset and a little jitter."""
        if key not in self.offsets:
            off = (stable(self.plan.name, key) % 997) / 997 * min(self.plan.scrape, 15) * 0.9
            jit = self.np.integers(0, 4, self.T) / 1000.0
            self.offsets[key] = self.plan.t0 + self.ticks + off + jit
        return np.where(present, self.offsets[key], np.nan)

    # -- GPU state -------------------------------------------------------------------------------
    def gpu_state(self) -> dict[str, np.ndarray]:
        """Power, utilisation, clocks, temperatures and memory of every GPU at every tick."""
        p, m, r = self.plan, self.plan.model, self.np
        code = np.repeat(self.code[:, None, :], self.G, axis=1)
        spin = np.broadcast_to(self.spin[:, :, None], code.shape)
        busy = (code == BUSY) & spin
        idle = (code == IDLE) | (code == GONE) | ((code == BUSY) & ~spin)
        gf = 0.96 + 0.08 * r.random((self.H, self.G, 1))
        cap = np.ones((self.H, 1, 1))
        cap[p.capped] = 0.78
        noise = 1 + 0.03 * r.standard_normal(code.shape)
        power = np.select(
            [code == TRAIN, code == SAVE, code == EVAL, busy],
            [
                m.train_w * gf * cap * noise,
                0.33 * m.train_w * noise,
                0.42 * m.train_w * noise,
                m.idle_w + 42 + 4 * noise,
            ],
            m.idle_w * (1 + 0.04 * r.standard_normal(code.shape)),
        )
        util = np.select(
            [code == TRAIN, code == SAVE, code == EVAL, busy],
            [
                np.minimum(100, 97 + 3 * r.random(code.shape)),
                10 + 20 * r.random(code.shape),
                25 + 20 * r.random(code.shape),
                100.0,
            ],
            0.0,
        )
        clock = np.where(idle, m.idle_clock, m.max_clock * np.where(cap < 1, 0.84, 1.0))
        clock = np.round(clock * self.clock_mul - 15 * r.random(code.shape) * (~idle))
        temp = np.empty(code.shape)
        amb = 28 + 6 * r.random((self.H, self.G))
        cur = amb + 0.065 * power[:, :, 0]
        for k in range(self.T):
            cur = cur + 0.45 * (amb + 0.065 * power[:, :, k] - cur)
            temp[:, :, k] = cur
        temp = np.round(temp + self.temp_add + 0.5 * r.standard_normal(code.shape))
        fb = np.where(idle & (code != BUSY), 0.0, p.model.fb_mib * (0.72 + 0.1 * gf))
        fb = np.where(np.arange(self.T) < self.tick(p.setup_s - 30), 0.0, fb)
        gr = np.select(
            [code == TRAIN, busy, code == EVAL, code == SAVE],
            [0.88 + 0.06 * r.random(code.shape), 0.99, 0.3, 0.1],
            0.0,
        )
        tensor = np.select([code == TRAIN, code == EVAL], [0.42 + 0.08 * r.random(code.shape), 0.1], 0.0)
        return {
            "power": power,
            "util": util,
            "clock": clock,
            "temp": temp,
            "fb": fb,
            "gr": gr,
            "tensor": tensor,
        }

    def freeze(self, exporter: str, host: int, arr: np.ndarray) -> np.ndarray:
        """Hold a frozen exporter's values at what it served when it stuck."""
        k = self.frozen.get((exporter, host))
        if k is not None:
            arr[..., k:] = arr[..., k - 1 : k]
        return arr


def _collect(sim: Sim, series: np.ndarray) -> np.ndarray:
    """DCGM's 30 s collection under a faster scrape: a value repeats until the next collection."""
    every = sim.plan.layout.dcgm_collect_s
    if not every or every <= sim.plan.scrape:
        return series
    k = np.floor(sim.ticks / every) * every
    idx = np.searchsorted(sim.ticks, k)
    return series[..., idx]


def gpu_series(sim: Sim) -> Iterator[Series]:
    """dcgm-exporter's families for every GPU, with its release's labels and the cluster's layout."""
    p, lay = sim.plan, sim.plan.layout
    st = sim.gpu_state()
    energy = np.cumsum(st["power"] * p.scrape * 1000.0, axis=2) + 1e9 * (1 + sim.np.random((sim.H, sim.G, 1)))
    fams = {
        "DCGM_FI_DEV_POWER_USAGE": (st["power"], ".3f"),
        "DCGM_FI_DEV_GPU_TEMP": (st["temp"], ".0f"),
        "DCGM_FI_DEV_MEMORY_TEMP": (st["temp"] + 6, ".0f"),
        "DCGM_FI_DEV_SM_CLOCK": (st["clock"], ".0f"),
        "DCGM_FI_DEV_MEM_CLOCK": (np.full(st["clock"].shape, 2619.0), ".0f"),
        "DCGM_FI_DEV_FB_USED": (np.round(st["fb"]), ".0f"),
        "DCGM_FI_DEV_FB_FREE": (np.round(p.model.fb_mib - st["fb"] - 520), ".0f"),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (np.round(energy), ".0f"),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": (np.cumsum(sim.pcie, axis=2), ".0f"),
        "DCGM_FI_DEV_XID_ERRORS": (sim.xid, ".0f"),
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": (np.cumsum(sim.unc_rows, axis=2), ".0f"),
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": (np.cumsum(sim.corr_rows, axis=2), ".0f"),
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": (np.zeros(st["temp"].shape), ".0f"),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": (st["gr"], ".6f"),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (st["tensor"], ".6f"),
    }
    if lay.gpu_util:
        fams["DCGM_FI_DEV_GPU_UTIL"] = (np.round(st["util"]), ".0f")
    if lay.ecc_fields:
        fams["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] = (np.cumsum(sim.unc_rows, axis=2), ".0f")
        fams["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] = (np.cumsum(sim.corr_rows, axis=2), ".0f")
    for name, (arr, fmt) in fams.items():
        arr = _collect(sim, arr)
        for h, host in enumerate(p.hosts):
            vals = sim.freeze("dcgm", h, arr[h].copy())
            for epoch, present in _epochs(sim, h):
                base = dcgm_target(lay, host, epoch)
                tkey = f"dcgm/{host.name}/{epoch}"
                times = sim.times(tkey, present)
                for g in range(sim.G):
                    labels = dcgm_gpu_labels(lay, host, g, p.model, stable(p.name)) | base
                    if lay.style == "k8s" and p.extra.get("k8s_workload", True):
                        labels |= k8s_workload_labels(h)
                    yield Series(name, labels, vals[g], times, fmt)


def _epochs(sim: Sim, h: int) -> list[tuple[int, np.ndarray]]:
    """A host's DCGM target per pod epoch (a restarted pod is a new target) with its samples."""
    present = sim.dcgm_present[h] & (sim.dcgm_up[h] > 0)
    k = sim.dcgm_epoch_at.get(h)
    if k is None:
        return [(0, present)]
    before = present.copy()
    before[k:] = False
    after = present.copy()
    after[: k + 1] = False
    return [(0, before), (1, after)]


def dcgm_meta(sim: Sim) -> Iterator[Series]:
    """Prometheus's own series for each DCGM target: up, scrape duration, samples scraped."""
    p = sim.plan
    for h, host in enumerate(p.hosts):
        epochs = _epochs(sim, h)
        for epoch, present in epochs:
            base = dcgm_target(p.layout, host, epoch)
            seen = sim.dcgm_present[h].copy()
            if len(epochs) > 1:
                k = sim.dcgm_epoch_at[h]
                seen[k:] = False if epoch == 0 else seen[k:]
                if epoch == 1:
                    seen[: k + 1] = False
            times = sim.times(f"dcgm/{host.name}/{epoch}", seen)
            up = np.where(present, 1.0, 0.0)
            yield Series("up", dict(base), up, times, ".0f")
            yield Series(
                "scrape_duration_seconds", dict(base), np.where(present, sim.dcgm_dur[h], 10.0), times, ".6f"
            )
            yield Series(
                "scrape_samples_scraped", dict(base), np.where(present, 15.0 * sim.G + 40, 0.0), times, ".0f"
            )
