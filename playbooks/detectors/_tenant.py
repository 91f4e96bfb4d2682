"""Which GPUs are the job's, on nodes it shares with another tenant: the one place that decides (#10).

A node's GPUs may be split between jobs (Slurm's gres, a Kubernetes device plugin): the exporter reports
every GPU of the node under the same host, with nothing in its labels saying whose work runs on it. A
diagnostician compares the job's GPUs with each other, never with another tenant's, whose temperature,
clock and power follow another job's phases. The job's GPUs are told apart by:

1. the log, when it prints which GPUs the job holds (`SLURM_STEP_GPUS`, `CUDA_VISIBLE_DEVICES`, ... read
   by the triage as `details.job_gpus`), unless the data contradicts it (indices in another numbering);
2. the data: the job's GPUs follow the job's phases, their power rising when training starts and falling
   at each synchronous checkpoint and when the steps stop, as much as the job's busiest GPUs do; another
   tenant's go their own way. Where no such change of phase is seen, a GPU that stood well below the job's
   training power all through its steady training (under `trained_ratio` of its busiest GPUs) did not run
   its steps.

The phases are the log's: a log whose times are misplaced (undated steps dated from the last stamp before
them, a clock in another zone) puts them where the GPUs did something else. A host the job runs on holds
some of its GPUs: where the phases find none on a host the log names whose GPUs stood at the job's training
power, its GPUs are judged by their power over the job's whole training instead (the level rule); where
that is so of most hosts, the phases are wrong, not the hosts, and the data tells no GPU apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from playbooks.anomaly import Grid, nan_median
from playbooks.context import Context, Timeline, triage_get

from ._base import _gkey, _match_host

__all__ = ["job_gpus", "job_gpus_before_steps", "job_rows", "local_ordinals"]

#: A change of the job's phase tells whose a GPU is when the job's busiest GPUs moved by at least this
#: share of their training power across it (an asynchronous checkpoint moves nobody's).
PHASE_MOVE = 0.3
#: A GPU follows the job when it moves, across the job's changes of phase, by at least this share of the
#: busiest GPUs' move (a typical change: the median over the changes seen).
FOLLOW = 0.5
#: Points on each side of a change of phase judged (the one next to the change is left out: a grid point
#: may straddle it).
SIDE = 4

Key = tuple[str, str]


def job_gpus(
    ctx: Context, power: Grid | None, keys: Sequence[Key] = (), *, trained_ratio: float = 0.75
) -> set[Key] | None:
    """Return the job's GPUs as (host, gpu) among those of `power` (per GPU) and `keys`, or None when every
    GPU is the job's as far as the log and the data tell (no other tenant to leave out)."""
    keys = list(dict.fromkeys([*keys, *(_key(lab) for lab in power.labels)] if power else keys))
    if not keys:
        return None
    from_data = _phases(ctx, power, trained_ratio) if power is not None else {}
    from_log = _from_log(ctx.triage, keys)
    # a host where the data's phases clearly say otherwise: the log's indices are in another numbering
    # there (a container's or a cgroup's, counted from 0)
    for h in [h for h, idx in from_log.items() if _contradicted(h, idx, from_data)]:
        del from_log[h]
    mine: set[Key] = set()
    for k in keys:
        logged = from_log.get(k[0])
        if k[1] in logged if logged is not None else from_data.get(k, (True, False))[0]:
            mine.add(k)
    return None if len(mine) == len(keys) else mine


def _phases(ctx: Context, power: Grid, trained_ratio: float) -> Mapping[Key, tuple[bool, bool]]:
    """Return what the data tells of each GPU of `power` (`_from_data`, then every host holding some), worked
    out once for a context: each peer rule and the hang's asks it of the same per-GPU power (1,024 GPUs:
    0.1 s of the decision each time). The grid is kept with the answer, so that another one at the same
    address is never taken for it."""
    key = ("tenant", id(power), trained_ratio)
    seen = ctx.memo.get(key)
    if seen is not None and seen[0] is power:
        told: Mapping[Key, tuple[bool, bool]] = seen[1]
        return told
    from_data = _every_host_holds_some(
        ctx, power, _from_data(ctx.timeline, power, trained_ratio), trained_ratio
    )
    ctx.memo[key] = (power, from_data)
    return from_data


def job_rows(ctx: Context, g: Grid, power_query: str, *, trained_ratio: float = 0.75) -> np.ndarray | None:
    """Return which rows of a per-GPU grid are the job's GPUs (`power_query`: the per-GPU power the decision
    reads), or None when all are (or the grid has no GPU label)."""
    if not g.labels or any("gpu" not in lab for lab in g.labels):
        return None
    keys = [_key(lab) for lab in g.labels]
    mine = job_gpus(ctx, ctx.grid(power_query), keys, trained_ratio=trained_ratio)
    if mine is None:
        return None
    return np.array([k in mine for k in keys], bool)


def job_gpus_before_steps(
    ctx: Context, g: Grid, spinning: Sequence[int], final: np.ndarray, idle_util: float
) -> set[Key] | None:
    """Return the job's GPUs of a per-GPU utilisation grid before its first step (None: every GPU): those the
    log names, less the `spinning` rows that never sat idle (under `idle_util`) before the `final` spin
    while other spinning rows did. Before the first step no training level nor change of phase tells them
    apart; but the job's GPUs idle before it starts: one busy all along was busy before the job began."""
    keys = [_key(lab) for lab in g.labels]
    job = job_gpus(ctx, None, keys)
    first = int(np.argmax(final))
    with np.errstate(all="ignore"):
        idled = [bool((g.values[r, :first] < idle_util).any()) for r in spinning]
    if any(idled) and not all(idled):
        never = {keys[r] for r, x in zip(spinning, idled, strict=True) if not x}
        job = (set(keys) if job is None else job) - never
    return job


def local_ordinals(gpus: set[Key]) -> dict[Key, str]:
    """Return each (host, gpu)'s place among its host's GPUs of `gpus`, in index order: the local rank it
    runs, as the job numbers its devices (the job may hold other indices on each host)."""
    by_host: dict[str, list[str]] = {}
    for h, gpu in gpus:
        by_host.setdefault(h, []).append(gpu)
    return {(h, gpu): str(i) for h, gs in by_host.items() for i, gpu in enumerate(sorted(gs, key=_gkey))}


def _key(lab: Mapping[str, str]) -> Key:
    return lab.get("host", ""), lab.get("gpu", "")


def _from_log(triage: Mapping[str, Any] | None, keys: Sequence[Key]) -> dict[str, frozenset[str]]:
    """Return, per host of `keys`, the GPU indices the job's log says it holds (hosts it says nothing of
    are left out)."""
    info = triage_get(triage, "details", "job_gpus")
    if not isinstance(info, Mapping):
        return {}
    hosts = sorted({h for h, _ in keys})
    every = info.get("all")
    out = {h: frozenset(str(i) for i in every) for h in hosts} if every else {}
    for name, idx in (info.get("hosts") or {}).items():
        h = _match_host(str(name), hosts)
        if h is not None and idx:
            out[h] = frozenset(str(i) for i in idx)
    return out


def _contradicted(host: str, logged: frozenset[str], from_data: Mapping[Key, tuple[bool, bool]]) -> bool:
    """Whether the data's phases (two changes or more) clearly tell otherwise than the log for a GPU of
    `host`."""
    return any(strong and mine != (k[1] in logged) for k, (mine, strong) in from_data.items() if k[0] == host)


def _from_data(tl: Timeline, g: Grid, trained_ratio: float) -> dict[Key, tuple[bool, bool]]:
    """Return, per GPU of the per-GPU power `g`, (whether it ran the job's work, whether the phases tell
    it clearly): it follows the job's phases across two changes or more (clearly); across one, it follows
    and stood at the job's training power during the steady training (one change may meet another job's
    own step); across none, it stood there.

    The job may run on GPUs of several models (an H200 host among A100s), each drawing its own power in
    every phase; a host holds one model. So a GPU's moves are read against its host's busiest GPUs' training
    power, and its level against the training power of its host's GPUs that followed a change of phase
    (the job's busiest GPUs' where none did)."""
    m = tl.steady_mask(g.t)
    if not m.any():
        m = tl.valid_training(g.t)
    if not m.any() or not g.labels:
        return {}
    meds = np.array([nan_median(v[m]) for v in g.values])
    ok = np.isfinite(meds)
    if not ok.any():
        return {}
    level = float(np.percentile(meds[ok], 90))
    ratios = _moves(tl, g, level, _host_levels(g, meds, ok, level))
    seen = np.isfinite(ratios).sum(axis=1)
    with np.errstate(all="ignore"):
        follows = (seen == 0) | (np.nanmedian(ratios, axis=1) >= FOLLOW) if ratios.shape[1] else seen == 0
    at_level = ~ok | (meds >= trained_ratio * _host_levels(g, meds, ok & follows & (seen > 0), level))
    strong = seen >= 2
    mine = np.where(strong, follows, follows & at_level)
    return {_key(lab): (bool(mine[r]), bool(strong[r])) for r, lab in enumerate(g.labels)}


def _host_levels(g: Grid, meds: np.ndarray, among: np.ndarray, level: float) -> np.ndarray:
    """Return, per row, the training power on its host: the busiest (90th percentile) of the host's GPUs
    `among` (by their steady medians `meds`), else `level` (the job's busiest GPUs')."""
    by_host: dict[str, list[int]] = {}
    for r, lab in enumerate(g.labels):
        by_host.setdefault(lab.get("host", ""), []).append(r)
    out = np.full(len(g.labels), level)
    for rows in by_host.values():
        idx = np.array(rows)
        mine = idx[among[idx]]
        if len(mine):
            out[idx] = float(np.percentile(meds[mine], 90))
    return out


def _every_host_holds_some(
    ctx: Context, g: Grid, from_data: dict[Key, tuple[bool, bool]], trained_ratio: float
) -> dict[Key, tuple[bool, bool]]:
    """Return `from_data` with a job's GPU on every host the job runs on: one the log names (any host when
    it names none) where GPUs stood at the job's training power, for a quarter of its training or more,
    though the phases found none of its GPUs to be the job's. There those GPUs are the job's (the level
    rule) unless the phases were seen there, clearly; when such hosts are most of the job's, the phases are
    misplaced and tell nothing apart (an empty answer). A host whose GPUs never stood there keeps the
    phases' answer (they never ran the job's steps)."""
    hosts = sorted({h for h, _ in from_data})
    named = [str(n) for n in triage_get(ctx.triage, "nodes") or []]
    ours = {h for h in hosts if not named or any(_match_host(n, [h]) for n in named)}
    lost = ours - {h for (h, _), (mine, _) in from_data.items() if mine}
    if not lost:
        return from_data
    m = ctx.timeline.training_mask(g.t)
    with np.errstate(all="ignore"):
        high = np.array(
            [np.nanpercentile(v[m], 75) if m.any() and np.isfinite(v[m]).any() else np.nan for v in g.values]
        )
    ok = np.isfinite(high)
    if not ok.any():
        return from_data
    level = float(np.percentile(high[ok], 90))
    at_level = {_key(lab): bool(high[r] >= trained_ratio * level) for r, lab in enumerate(g.labels)}
    trained = {h for (h, _), x in at_level.items() if x and h in lost}
    if 2 * len(trained) > len(ours):
        return {}
    # a host whose GPUs clearly did not follow the phases (two changes or more) stopped following them
    # (its exporter froze, say): the phases, seen there, decide
    trained -= {h for (h, _), (_, strong) in from_data.items() if strong}
    out = dict(from_data)
    out.update({k: (at_level.get(k, False), False) for k in from_data if k[0] in trained})
    return out


def _moves(tl: Timeline, g: Grid, level: float, own: np.ndarray) -> np.ndarray:
    """Return (rows x changes) each row's power move across each change of the job's phase (training
    starts, a synchronous checkpoint, the steps stop) as a share of the job's busiest GPUs' move (NaN where
    the row has no data); only changes where those moved by PHASE_MOVE of the training power count.

    Each move is read against `own`, the training power of the row's host (`_host_levels`): on a host of
    another GPU model every phase draws its own power, and its GPUs that follow the job drop by the same
    share of that power as the others'. A level under PHASE_MOVE of the job's busiest GPUs' counts as that
    much (a host idling at a few watts moves by its noise)."""
    cols: list[np.ndarray] = []
    scale = np.fmax(own, PHASE_MOVE * level)
    hosts = np.array([str(lab.get("host", "")) for lab in g.labels])
    for on, off in _changes(tl, g.t) if level > 0 else []:
        with np.errstate(all="ignore"):
            move = np.nanmedian(g.values[:, on], axis=1) - np.nanmedian(g.values[:, off], axis=1)
        fin = np.isfinite(move)
        if fin.sum() < 2 or float(np.percentile(move[fin], 90)) < PHASE_MOVE * level:
            continue
        share = move / scale
        if not _most_hosts_moved(hosts[fin], share[fin], PHASE_MOVE):
            continue
        ref = float(np.percentile(share[fin], 90))
        if ref > 0:
            cols.append(share / ref)
    return np.column_stack(cols) if cols else np.full((len(g.labels), 0), np.nan)


def _most_hosts_moved(hosts: np.ndarray, move: np.ndarray, least: float) -> bool:
    """Return True if on half the hosts at least some GPU moved by `least` (of its host's training power):
    a change of a synchronous job's phase moves its GPUs on every host at once (another tenant shares a
    host's GPUs, not its hosts), while a move on a few hosts alone is theirs (an exporter that reads a
    scrape late, a grid point that caught their GPUs still in a checkpoint's wait the others had left)."""
    names = np.unique(hosts)
    moved = sum(bool((move[hosts == h] >= least).any()) for h in names)
    return 2 * moved >= len(names)


def _changes(tl: Timeline, t: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Return (training side, idle side) index arrays around each change of the job's phase on grid `t`:
    training (after warm-up, outside checkpoints) against setup, a checkpoint save, or after the last step."""
    state = np.full(len(t), -1)
    state[~tl.training_mask(t) | tl.in_checkpoint(t)] = 0
    state[tl.valid_training(t)] = 1
    idx = np.nonzero(state >= 0)[0]
    runs: list[np.ndarray] = []
    for i in idx:
        if runs and state[runs[-1][-1]] == state[i] and i == runs[-1][-1] + 1:
            runs[-1] = np.append(runs[-1], i)
        else:
            runs.append(np.array([i]))
    out = []
    for a, b in zip(runs[:-1], runs[1:], strict=True):
        if state[a[0]] == state[b[0]]:
            continue
        near_a = a[-SIDE - 1 : -1] if len(a) > 2 else a[-SIDE:]
        near_b = b[1 : SIDE + 1] if len(b) > 2 else b[:SIDE]
        on, off = (near_a, near_b) if state[a[0]] == 1 else (near_b, near_a)
        out.append((on, off))
    return out
