"""Diagnosis step one: discover what a Prometheus source holds (profile, hosts, GPUs, range, GPU model)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import cast

from ._diagnose_types import DiagnosisError, SourceInfo
from .discovery import gpus_per_host, source_hosts, typical_count
from .gpus import GpuModel, choose_gpu_model, gpu_model_named
from .profiles import Profile, ProfileError, resolve_profile
from .prometheus import PrometheusClient, PrometheusError


def discover_source(
    client: PrometheusClient,
    *,
    profile: str = "auto",
    time_range: tuple[float, float] | None = None,
    gpu_model: str | None = None,
) -> SourceInfo:
    """Return what the source holds: metric names, profile, hosts, GPUs per host, time range, GPU model.

    `time_range` skips the search for the data's first and last samples when the caller knows them (a
    served TSDB copy reads them from its blocks). `gpu_model` (a name of `playbooks.gpus.GPU_MODELS`; None
    or "auto": chosen from the data) is the user's word when the labels do not name the GPUs. Raises
    DiagnosisError when the TSDB is empty, no known profile matches or the GPU model is unknown;
    PrometheusError when the server cannot be reached.
    """
    chosen = _user_gpu_model(gpu_model)
    names = tuple(sorted(client.label_values("__name__")))
    try:
        prof = resolve_profile(client, names, prefer=profile)
    except ProfileError as exc:
        raise DiagnosisError(str(exc)) from None
    tr = time_range or client.data_time_range()
    if tr is None:
        raise DiagnosisError("the TSDB holds no samples")
    start, end = float(tr[0]), float(tr[1])
    span = f"{max(60, int(end - start) + 60)}s"
    avail = prof.available(names)

    def q_hosts() -> list[str]:
        return sorted(source_hosts(client, prof, span, end))

    def q_gpus() -> int | None:
        return typical_count(list(gpus_per_host(client, prof, span, end).values()))

    def q_interval() -> float:
        return _scrape_interval(client, prof, avail, start, end)

    def q_model() -> tuple[list[str], float | None, float | None]:
        return _model_evidence(client, prof, avail, span, end)

    results = client.run_parallel([q_hosts, q_gpus, q_interval, q_model], max_concurrency=4)
    for r in results[:3]:
        if isinstance(r, PrometheusError):
            raise r
    # run_parallel returns each function's value in order (or its PrometheusError, raised above).
    hosts = cast(list[str], results[0])
    gpus = cast("int | None", results[1])
    interval = cast(float, results[2])
    # The GPU model is a nicety: a query of it that failed leaves the model to the user's choice or unknown.
    model_info = results[3]
    mnames, vram, power = (
        ([], None, None)
        if isinstance(model_info, PrometheusError)
        else cast(tuple[list[str], float | None, float | None], model_info)
    )
    model = chosen or choose_gpu_model(names=mnames, vendor=prof.vendor, vram_bytes=vram, max_power_w=power)
    return SourceInfo(
        url=client.base_url,
        profile=prof.name,
        metric_names=names,
        hosts=tuple(hosts),
        gpus_per_host=gpus,
        time_range=(start, end),
        gpu_model=model.name if model else None,
        interval=float(interval),
    )


def _user_gpu_model(gpu_model: str | None) -> GpuModel | None:
    """The GPU model the user named (None or "auto": chosen from the data); DiagnosisError if unknown."""
    if not gpu_model or gpu_model.strip().lower() == "auto":
        return None
    try:
        return gpu_model_named(gpu_model)
    except ValueError as exc:
        raise DiagnosisError(str(exc)) from None


def _scrape_interval(
    client: PrometheusClient, prof: Profile, avail: Mapping[str, object], start: float, end: float
) -> float:
    """The scrape interval: a window's length over the most samples a host's series holds in it (15 s if unknown).

    The most over a few windows across the data, not one: a monitoring outage (Prometheus restarting: no
    sample of anyone for minutes) in the one window read would lengthen the interval and coarsen every grid.
    """
    sig = "up" if avail.get("up") else next((s for s in ("gpu_power", "procs_running") if avail.get(s)), None)
    if sig is None:
        return 15.0
    w = min(1800.0, max(120.0, (end - start) / 2))
    expr = prof.expr(sig, "count_over_time", window=f"{int(w)}s", by=("host",), agg="max")
    rest = end - start - w
    ats = [start + w + f * rest for f in (0.0, 0.25, 0.5, 0.75, 1.0)] if rest > 0 else [start + w + rest / 2]
    n = 0.0
    for at in ats:
        res = client.query(f"max({expr})", at=at)
        n = max([n] + [s.value for s in res if math.isfinite(s.value)])
    return float(w / n) if n > 1 else 15.0


def _model_evidence(
    client: PrometheusClient, prof: Profile, avail: Mapping[str, object], span: str, end: float
) -> tuple[list[str], float | None, float | None]:
    """What names the GPU model: the model label's values, the largest VRAM total and the highest power."""
    model_names: list[str] = []
    if prof.gpu_model_label and prof.gpu_model_metric:
        model_names += client.label_values(prof.gpu_model_label, [prof.gpu_model_metric])
    for sig in ("gpu_temp", "gpu_util", "gpu_power"):
        if prof.gpu_model_label and not prof.gpu_model_metric and avail.get(sig):
            model_names += client.label_values(prof.gpu_model_label, [prof.signal(sig).metrics[0]])
    vram = power = None
    if avail.get("gpu_vram_total"):
        r = client.query(f"max({prof.expr('gpu_vram_total', 'max_over_time', window=span)})", at=end)
        vram = r[0].value if r else None
    if avail.get("gpu_power"):
        r = client.query(f"max({prof.expr('gpu_power', 'max_over_time', window=span)})", at=end)
        power = r[0].value if r else None
    return model_names, vram, power
