"""Corpus C: red herrings, normal things that look odd (on healthy jobs and, sometimes, on the others).

`before(w)` runs before the steps and values exist (evaluation phases, a warmer host); `after(w)`
edits the values (a slow disk during saves, one correctable-ECC burst, a few RDMA retransmits, a loss
spike that recovers, exporters restarting with a gap and counter resets).
"""

from __future__ import annotations

import numpy as np

from bench.outside._c_sim import World


def before(w: World) -> None:
    if "eval_phase" in w.spec.herrings:
        w.eval_every = int(w.rng.choice([150, 250, 400]))
    if "warm_host" in w.spec.herrings:
        off = np.zeros((w.H, 1, 1))
        off[int(w.rng.integers(0, w.H))] = float(w.rng.uniform(4, 6))
        w.arr["host_temp_off"] = off


def after(w: World) -> None:
    for name in w.spec.herrings:
        fn = _AFTER.get(name)
        if fn is not None:
            fn(w)


def _slow_disk(w: World) -> None:
    if not w.saves:
        return
    h = int(w.rng.choice(w.writers))
    for t0, t1, _ in w.saves:
        a, b = w.idx(t0), w.idx(t1 + 2 * (t1 - t0))
        w.arr["io_rate"][h, a:b] = 0.85
        w.arr["blocked"][h, a:b] += w.rng.integers(15, 30)


def _ce_burst(w: World) -> None:
    h, g = int(w.rng.integers(0, w.H)), int(w.rng.integers(0, w.G))
    k = int(w.rng.integers(w.T // 4, 3 * w.T // 4))
    w.arr["sbe"][h, g, k:] += float(w.rng.integers(4, 25))
    w.arr["remap_c"][h, g, k:] += 1


def _retx_few(w: World) -> None:
    h = int(w.rng.integers(0, w.H))
    nic = int(w.rng.integers(0, w.arr["retx_inc"].shape[1]))
    k = int(w.rng.integers(w.T // 4, 3 * w.T // 4))
    n = int(w.rng.integers(2, 4))
    w.arr["retx_inc"][h, nic, k : k + n] += w.rng.integers(20, 120, len(range(k, min(w.T, k + n))))


def _loss_spike(w: World) -> None:
    if len(w.steps) < 50:
        return
    i = int(w.rng.integers(len(w.steps) // 4, 3 * len(w.steps) // 4))
    bump = float(w.rng.uniform(0.8, 2.0))
    for j in range(i, min(len(w.steps), i + int(w.rng.integers(2, 4)))):
        s, t, secs, loss = w.steps[j]
        w.steps[j] = (s, t, secs, loss + bump * (0.5 ** (j - i)))


def _exporter_restart(w: World) -> None:
    """One host's GPU exporter restarts (gap, counters from zero); later the whole DaemonSet rolls."""
    h = int(w.rng.integers(0, w.H))
    k = int(w.rng.integers(w.T // 5, w.T // 2))
    gap = int(w.rng.integers(1, 4))
    w.gpu_ok[h, k : k + gap] = False
    w.resets.append(("gpu", h, k + gap))
    roll = int(w.rng.integers(w.T // 2, 4 * w.T // 5))
    for host in range(w.H):
        s = roll + int(w.rng.integers(0, 3))
        w.gpu_ok[host, s : s + int(w.rng.integers(1, 4))] = False
    if w.rng.random() < 0.5:
        n = int(w.rng.integers(0, w.H))
        m = int(w.rng.integers(w.T // 5, 4 * w.T // 5))
        w.node_ok[n, m : m + int(w.rng.integers(1, 4))] = False


_AFTER = {
    "slow_disk": _slow_disk,
    "ce_burst": _ce_burst,
    "retx_few": _retx_few,
    "loss_spike": _loss_spike,
    "exporter_restart": _exporter_restart,
}
