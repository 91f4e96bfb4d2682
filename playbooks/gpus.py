"""GPU models: typical power levels, thermal limits and the names exporters give them.

These numbers are PRIORS. The diagnosis judges a job against its own steady state and its peers first;
a model's wattages only help to word a finding ("near the idle level of an H100") or to break a tie when
the job has no history of its own (it hung before reaching steady state).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["GPU_MODELS", "GpuModel", "choose_gpu_model", "gpu_model_named"]

GIB = 1024.0**3


@dataclass(frozen=True)
class GpuModel:
    """Operating points of one GPU model (priors, not rules).

    Attributes:
        name: short name (MI355X, H100, ...).
        vendor: "amd" or "nvidia".
        active_w: typical board power while training.
        busy_wait_w: power while spinning in a collective (NCCL/RCCL busy-wait): high utilisation, low power.
        idle_w: power with nothing running.
        slowdown_c: temperature at which the GPU starts to throttle its clocks.
        shutdown_c: temperature at which it shuts down.
        tdp_w: board power limit.
        vram_bytes: memory per GPU.
        names: substrings exporters use for it (DCGM `modelName`, Ray `GpuDeviceName`), lower case.
    """

    name: str
    vendor: str
    active_w: float
    busy_wait_w: float
    idle_w: float
    slowdown_c: float
    shutdown_c: float
    tdp_w: float
    vram_bytes: float
    names: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "vendor": self.vendor,
            "active_w": self.active_w,
            "busy_wait_w": self.busy_wait_w,
            "idle_w": self.idle_w,
            "slowdown_c": self.slowdown_c,
            "shutdown_c": self.shutdown_c,
            "tdp_w": self.tdp_w,
            "vram_bytes": self.vram_bytes,
        }


GPU_MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        GpuModel("MI355X", "amd", 900.0, 300.0, 260.0, 95.0, 105.0, 1400.0, 288 * GIB, ("mi355",)),
        GpuModel("MI300X", "amd", 650.0, 180.0, 130.0, 95.0, 105.0, 750.0, 192 * GIB, ("mi300x", "mi300")),
        GpuModel("H100", "nvidia", 600.0, 120.0, 70.0, 87.0, 92.0, 700.0, 80 * GIB, ("h100",)),
        GpuModel("H200", "nvidia", 630.0, 125.0, 75.0, 87.0, 92.0, 700.0, 141 * GIB, ("h200",)),
        GpuModel("A100", "nvidia", 330.0, 90.0, 55.0, 85.0, 92.0, 400.0, 80 * GIB, ("a100",)),
        GpuModel("B200", "nvidia", 900.0, 240.0, 140.0, 87.0, 95.0, 1000.0, 180 * GIB, ("b200",)),
    )
}


def choose_gpu_model(
    *,
    names: Iterable[str] = (),
    vendor: str | None = None,
    vram_bytes: float | None = None,
    max_power_w: float | None = None,
    prefer: str | None = None,
) -> GpuModel | None:
    """Return the GPU model the data points at, or None when nothing identifies one.

    1. `prefer` (set by the user) wins when it names a model.
    2. A model name reported by an exporter (DCGM `modelName`, Ray `GpuDeviceName`).
    3. Otherwise the model of the vendor whose VRAM is closest to `vram_bytes` (within 15 %), with the
       highest observed power as a tie-breaker (it cannot exceed the board limit by much).
    """
    if prefer:
        for m in GPU_MODELS.values():
            if m.name.lower() == prefer.lower():
                return m
    for raw in names:
        low = raw.lower()
        for m in GPU_MODELS.values():
            if any(n in low for n in m.names):
                return m
    candidates = [m for m in GPU_MODELS.values() if vendor in (None, m.vendor)]
    if vram_bytes:
        near = [m for m in candidates if abs(m.vram_bytes - vram_bytes) <= 0.15 * m.vram_bytes]
        if max_power_w:
            fits = [m for m in near if max_power_w <= 1.15 * m.tdp_w]
            near = fits or near
        if near:
            return min(near, key=lambda m: abs(m.vram_bytes - vram_bytes))
    return None


def gpu_model_named(name: str) -> GpuModel:
    """Return the GPU model a user named (any case: "h100", "MI355X"); ValueError names the known ones."""
    for m in GPU_MODELS.values():
        if m.name.lower() == name.strip().lower():
            return m
    raise ValueError(f"unknown GPU model {name!r}; use auto or one of {', '.join(GPU_MODELS)}")
